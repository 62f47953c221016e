// PosixEnv (env.h): files, directories and atomic writes on the real file system.
#include "base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace stoker {
namespace {

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(message);
  if (err == EACCES || err == EPERM) return Status(StatusCode::kPermissionDenied, message);
  if (err == ENOSPC || err == EDQUOT) return Status(StatusCode::kResourceExhausted, message);
  return Status(StatusCode::kUnavailable, message);
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const override {
    size_t done = 0;
    auto* dst = static_cast<char*>(out);
    while (done < n) {
      ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read", path_, errno);
      }
      if (got == 0) break;  // end of file
      done += static_cast<size_t>(got);
    }
    return done;
  }
  uint64_t Size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

// Writes all of `size` bytes to `fd`, going on after interruptions; *done says how many reached it. 0, or the errno
// of the write that failed.
int WriteAll(int fd, const void* data, size_t size, size_t* done) {
  const auto* src = static_cast<const char*>(data);
  while (*done < size) {
    ssize_t n = ::write(fd, src + *done, size - *done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    *done += static_cast<size_t>(n);
  }
  return 0;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixWritableFile() override { ::close(fd_); }

  Status Append(const void* data, size_t size) override {
    size_t done = 0;
    const int err = WriteAll(fd_, data, size, &done);
    size_ += done;  // what did reach the file
    return err == 0 ? Status::Ok() : ErrnoStatus("cannot append to", path_, err);
  }
  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return ErrnoStatus("cannot truncate", path_, errno);
    size_ = size;
    return Status::Ok();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("cannot sync", path_, errno);
    return Status::Ok();
  }
  uint64_t Size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

// Opens `path` with `flags` (creating it 0644) and says what it is in *st: the descriptor, or why not (`cannot_open`
// says what an open that fails could not do).
StatusOr<int> OpenAndStat(const std::string& path, int flags, const char* cannot_open, struct stat* st) {
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ErrnoStatus(cannot_open, path, errno);
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("cannot stat", path, err);
  }
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<WritableFile>> PosixEnv::OpenForAppend(const std::string& path) {
  struct stat st {};
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  STOKER_ASSIGN_OR_RETURN(int fd, OpenAndStat(path, flags, "cannot open for appending", &st));
  return std::unique_ptr<WritableFile>(
      std::make_unique<PosixWritableFile>(path, fd, static_cast<uint64_t>(st.st_size)));
}

Status PosixEnv::Truncate(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) return ErrnoStatus("cannot truncate", path, errno);
  return Status::Ok();
}

Status PosixEnv::Overwrite(const std::string& path, const void* data, size_t size, bool sync) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  size_t done = 0;
  int err = WriteAll(fd, data, size, &done);
  if (err == 0 && sync && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  return err == 0 ? Status::Ok() : ErrnoStatus("cannot write", path, err);
}

Status PosixEnv::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus("cannot rename " + from + " to", to, errno);
  return Status::Ok();
}

// Opened without blocking, and only a regular file is kept: opening a FIFO for reading would otherwise wait for a
// writer (a client-chosen manifest path froze the coordinator's main loop for 18 s), and a device or socket is no
// file to read at offsets.
StatusOr<std::unique_ptr<RandomAccessFile>> PosixEnv::OpenForRead(const std::string& path) {
  struct stat st {};
  STOKER_ASSIGN_OR_RETURN(int fd, OpenAndStat(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, "cannot open", &st));
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + (S_ISDIR(st.st_mode) ? " is a directory, not a file" : " is not a regular file"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("cannot set blocking reads on", path, err);
  }
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<PosixRandomAccessFile>(path, fd, static_cast<uint64_t>(st.st_size)));
}

StatusOr<std::string> PosixEnv::RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoStatus("cannot resolve", path, errno);
  std::string out(resolved);
  std::free(resolved);
  return out;
}

StatusOr<FileInfo> PosixEnv::Stat(const std::string& path) {
  struct stat st {};
  FileInfo info;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return info;
    return ErrnoStatus("cannot stat", path, errno);
  }
  info.exists = true;
  info.is_directory = S_ISDIR(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  return info;
}

StatusOr<std::vector<std::string>> PosixEnv::ListDirectory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus("cannot list directory", path, errno);
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

Status PosixEnv::WriteFileAtomically(const std::string& path, const void* data, size_t size) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", tmp, errno);
  size_t done = 0;
  if (int err = WriteAll(fd, data, size, &done); err != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("cannot write", tmp, err);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("cannot fsync", tmp, err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("cannot rename onto", path, err);
  }
  return SyncDirectory(DirectoryOf(path));
}

Status PosixEnv::SyncDirectory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open directory", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoStatus("cannot fsync directory", path, err);  // EINVAL: not syncable
  return Status::Ok();
}

StatusOr<VolumeSpace> PosixEnv::Space(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return ErrnoStatus("cannot statvfs", path, errno);
  return VolumeSpace{static_cast<uint64_t>(v.f_blocks) * v.f_frsize, static_cast<uint64_t>(v.f_bavail) * v.f_frsize};
}

StatusOr<size_t> StringFile::Read(uint64_t offset, size_t n, void* out) const {
  if (offset >= bytes_.size()) return size_t{0};
  const size_t take = static_cast<size_t>(std::min<uint64_t>(n, bytes_.size() - offset));
  if (take > 0) std::memcpy(out, bytes_.data() + offset, take);  // `out` may be null when nothing is asked for
  return take;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status PosixEnv::CreateDirectories(const std::string& path) {
  if (path.empty()) return Status::Ok();
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("cannot create directory", partial, errno);
    }
  }
  return Status::Ok();
}

StatusOr<std::string> ReadWholeFile(Env& env, const std::string& path) {
  STOKER_ASSIGN_OR_RETURN(auto file, env.OpenForRead(path));
  std::string data(file->Size(), '\0');
  STOKER_ASSIGN_OR_RETURN(size_t n, file->Read(0, data.size(), data.data()));
  data.resize(n);
  return data;
}

std::string JoinPath(const std::string& dir, const std::string& relative) {
  if (relative.empty()) return dir;
  if (relative[0] == '/' || dir.empty()) return relative;
  if (dir.back() == '/') return dir + relative;
  return dir + "/" + relative;
}

}  // namespace stoker
