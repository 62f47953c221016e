// Lifeline (lifeline.h): a pipe whose end-of-file tells a child that its parent is gone.
#include "base/lifeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "base/logging.h"

namespace stoker {

StatusOr<Lifeline> Lifeline::Make() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ResourceExhaustedError(std::string("pipe: ") + std::strerror(errno));
  Lifeline l;
  l.read_ = fds[0];
  l.write_ = fds[1];
  return l;
}

Lifeline::~Lifeline() {
  Cut();
  if (read_ >= 0) ::close(read_);
}

Lifeline::Lifeline(Lifeline&& other) noexcept
    : read_(std::exchange(other.read_, -1)), write_(std::exchange(other.write_, -1)) {}

Lifeline& Lifeline::operator=(Lifeline&& other) noexcept {
  if (this != &other) {
    Cut();
    if (read_ >= 0) ::close(read_);
    read_ = std::exchange(other.read_, -1);
    write_ = std::exchange(other.write_, -1);
  }
  return *this;
}

void Lifeline::Cut() {
  if (write_ >= 0) ::close(write_);
  write_ = -1;
}

Status WatchLifeline(int fd) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    return InvalidArgumentError("--lifeline-fd " + std::to_string(fd) + " is not an open pipe");
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // nothing this process starts inherits it
  std::thread([fd] {
    char byte;
    while (true) {
      const ssize_t n = ::read(fd, &byte, 1);  // blocks until the last write end closes
      if (n > 0 || (n < 0 && errno == EINTR)) continue;  // the parent writes nothing; a stray byte is not its end
      break;
    }
    STOKER_LOG(kWarning) << "the process that started this one is gone (its lifeline closed): exiting";
    ::_exit(0);
  }).detach();
  return Status::Ok();
}

}  // namespace stoker
