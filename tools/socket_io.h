// Small socket helpers the test proxies, the chaos schedule and the test servers share (tools/tcp_proxy.h,
// tools/chaos.h, tests/support/fault_proxy.h, tests/support/object_servers.h): loopback listening and connecting,
// abrupt closes, and writes that wait out a full buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/status.h"

namespace stoker::tools {

// A TCP socket listening on 127.0.0.1 at an ephemeral port, which goes to *port. Unavailable with the OS's words.
StatusOr<int> ListenOnLoopback(int backlog, uint16_t* port);

// A port free right now on 127.0.0.1 (bound, read, released): for a server that must listen where something else
// already points. Another process may take it before the server binds it; a clash makes that start fail loudly.
StatusOr<uint16_t> FreeLoopbackPort();

// Connects to a numeric IPv4 `host`:`port`, with TCP_NODELAY; -1 if nothing accepts.
int ConnectTcp(const std::string& host, uint16_t port);

// Closes `fd` with a RST instead of a FIN (SO_LINGER 0), as a crashed peer or a middlebox would. -1 is ignored.
void CloseAbruptly(int fd);

// Sends all of `n` bytes, waiting (a poll at a time) while the socket's buffer is full; false once the peer is gone.
// MSG_NOSIGNAL: a peer gone must not SIGPIPE the process hosting the proxy.
bool WriteAll(int fd, const char* data, size_t n);

}  // namespace stoker::tools
