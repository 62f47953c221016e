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

#include "common/status.h"

namespace stoker {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into out; returns how many were read (fewer only at end of file).
  virtual StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const = 0;
  virtual uint64_t Size() const = 0;
  virtual const std::string& path() const = 0;
};

// A file written by appending (the coordinator's journal).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t size) = 0;
  // Makes everything appended so far durable (fdatasync).
  virtual Status Sync() = 0;
  virtual uint64_t Size() const = 0;
};

struct FileInfo {
  bool exists = false;
  bool is_directory = false;
  uint64_t size = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // NotFound when the file does not exist; other errors carry strerror.
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) = 0;
  virtual StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // Names in a directory (no "." or ".."), sorted.
  virtual StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  // Writes to path.tmp, fsyncs, renames over path: readers see the old file or the whole new one.
  virtual Status WriteFileAtomically(const std::string& path, const void* data, size_t size) = 0;
  virtual Status CreateDirectories(const std::string& path) = 0;
  // Opens `path` for appending, creating it if absent.
  virtual StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) = 0;
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
};

// The real file system (POSIX).
class PosixEnv final : public Env {
 public:
  StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) override;
  StatusOr<FileInfo> Stat(const std::string& path) override;
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  Status WriteFileAtomically(const std::string& path, const void* data, size_t size) override;
  Status CreateDirectories(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status Rename(const std::string& from, const std::string& to) override;
};

// Reads a whole file into memory (small files: labels, endpoint files).
StatusOr<std::string> ReadWholeFile(Env& env, const std::string& path);

// "a/b" + "c" -> "a/b/c"; an absolute `relative` is returned unchanged.
std::string JoinPath(const std::string& dir, const std::string& relative);

}  // namespace stoker
