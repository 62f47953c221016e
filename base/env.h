// Env: every file-system access stoker makes goes through this interface (reading shards and manifests, writing
// manifests, endpoint files and summaries), so tests can inject faults (short reads, missing files, I/O errors)
// the way leveldb's SpecialEnv does. PosixEnv is the real one; main() creates it and passes it down.
//
// Thread safety: Env and RandomAccessFile methods may be called concurrently (pread semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into out; returns how many were read (fewer only at end of file).
  virtual StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const = 0;
  virtual uint64_t Size() const = 0;
  virtual const std::string& path() const = 0;
};

// A RandomAccessFile over bytes in memory (fuzz targets, tests, small files read whole).
class StringFile final : public RandomAccessFile {
 public:
  StringFile(std::string path, std::string bytes) : path_(std::move(path)), bytes_(std::move(bytes)) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const override;
  uint64_t Size() const override { return bytes_.size(); }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::string bytes_;
};

// A file written by appending (the coordinator's journal). A failed Append may leave part of its bytes in the
// file: Size() counts what is really there, and Truncate cuts the file back.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Errors: ResourceExhausted when the volume is full (ENOSPC, EDQUOT), Unavailable for other I/O errors.
  virtual Status Append(const void* data, size_t size) = 0;
  // Makes everything appended so far durable (fdatasync).
  virtual Status Sync() = 0;
  virtual uint64_t Size() const = 0;
  // Cuts the file back to `size` bytes (further appends continue there).
  virtual Status Truncate(uint64_t size) = 0;
};

// What a file system has room for (statvfs): bytes in all, and bytes an unprivileged writer may still use.
struct VolumeSpace {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};

struct FileInfo {
  bool exists = false;
  bool is_directory = false;
  uint64_t size = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // NotFound when the file does not exist; InvalidArgument for anything but a regular file (a directory, a FIFO, a
  // device: never waited on); other errors carry strerror.
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) = 0;
  // The absolute path with every symbolic link, "." and ".." resolved (realpath); NotFound if it does not exist.
  virtual StatusOr<std::string> RealPath(const std::string& path) = 0;
  virtual StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // Names in a directory (no "." or ".."), sorted.
  virtual StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  // Writes to path.tmp, fsyncs, renames over path and fsyncs the directory: readers see the old file or the whole
  // new one, and after a crash the rename has happened or not (never a name pointing at nothing).
  virtual Status WriteFileAtomically(const std::string& path, const void* data, size_t size) = 0;
  virtual Status CreateDirectories(const std::string& path) = 0;
  // Opens `path` for appending, creating it if absent.
  virtual StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) = 0;
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // Writes `size` bytes at the start of `path` (created if absent), keeping any bytes after them; with `sync`,
  // fsyncs the file before returning. For small records rewritten in place (the journal's high-water mark).
  virtual Status Overwrite(const std::string& path, const void* data, size_t size, bool sync) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries durable (a file created, renamed or removed in it survives a crash).
  virtual Status SyncDirectory(const std::string& path) = 0;
  // The space of the file system holding `path`.
  virtual StatusOr<VolumeSpace> Space(const std::string& path) = 0;
};

// The real file system (POSIX).
class PosixEnv final : public Env {
 public:
  StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) override;
  StatusOr<std::string> RealPath(const std::string& path) override;
  StatusOr<FileInfo> Stat(const std::string& path) override;
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  Status WriteFileAtomically(const std::string& path, const void* data, size_t size) override;
  Status CreateDirectories(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status Overwrite(const std::string& path, const void* data, size_t size, bool sync) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDirectory(const std::string& path) override;
  StatusOr<VolumeSpace> Space(const std::string& path) override;
};

// Reads a whole file into memory (small files: labels, endpoint files).
StatusOr<std::string> ReadWholeFile(Env& env, const std::string& path);

// The directory part of a path ("a/b/c" -> "a/b", "c" -> ".").
std::string DirectoryOf(const std::string& path);

// "a/b" + "c" -> "a/b/c"; an absolute `relative` is returned unchanged.
std::string JoinPath(const std::string& dir, const std::string& relative);

}  // namespace stoker
