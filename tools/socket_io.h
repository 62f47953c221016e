// Small socket helpers the test proxies share (tools/tcp_proxy.h, tools/fault_proxy.h).
#pragma once

#include <cstddef>

namespace stoker::tools {

// Closes `fd` with a RST instead of a FIN (SO_LINGER 0), as a crashed peer or a middlebox would. -1 is ignored.
void CloseAbruptly(int fd);

// Sends all of `n` bytes, waiting (a poll at a time) while the socket's buffer is full; false once the peer is gone.
// MSG_NOSIGNAL: a peer gone must not SIGPIPE the process hosting the proxy.
bool WriteAll(int fd, const char* data, size_t n);

}  // namespace stoker::tools
