// The admin HTTP server against real sockets: routes, methods, limits, and that a stalled client cannot hold up
// anyone else.
#include "base/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "base/admin_server.h"
#include "tests/support/http_client.h"

namespace stoker {
namespace {

std::unique_ptr<HttpServer> StartServer(HttpServerOptions options = {}) {
  options.listen = "127.0.0.1:0";
  auto server = HttpServer::Start(options, {{"/hello", [] { return HttpResponse{200, "text/plain", "hi\n"}; }},
                                            {"/boom", []() -> HttpResponse { throw std::runtime_error("kaput"); }}});
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(*server);
}

TEST(HttpServer, ServesRoutesAndAnswersHeadWithoutBody) {
  auto server = StartServer();
  auto get = HttpGet(server->address(), "/hello?x=1");
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, "hi\n");
  EXPECT_EQ(get->headers["content-length"], "3");
  auto head = HttpExchange(server->address(), "HEAD /hello HTTP/1.1\r\n\r\n", Millis(5000));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-length"], "3");
  EXPECT_EQ(head->body, "");
}

TEST(HttpServer, RefusesWhatItDoesNotServe) {
  auto server = StartServer();
  auto missing = HttpGet(server->address(), "/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("/hello"), std::string::npos) << "a 404 lists the paths there are";
  auto post = HttpExchange(server->address(), "POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n", Millis(5000));
  ASSERT_TRUE(post.ok());
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->headers["allow"], "GET, HEAD");
  auto garbage = HttpExchange(server->address(), "\x16\x03\x01 hello\r\n\r\n", Millis(5000));
  ASSERT_TRUE(garbage.ok());
  EXPECT_EQ(garbage->status, 400);
  auto huge = HttpExchange(server->address(), "GET /hello HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n",
                           Millis(5000));
  ASSERT_TRUE(huge.ok()) << huge.status().ToString();
  EXPECT_EQ(huge->status, 431);
  auto boom = HttpGet(server->address(), "/boom");
  ASSERT_TRUE(boom.ok());
  EXPECT_EQ(boom->status, 500);
  EXPECT_NE(boom->body.find("kaput"), std::string::npos);
  EXPECT_GE(server->Stats().rejected, 4u);
  // Still serving after all that.
  EXPECT_EQ(HttpGet(server->address(), "/hello")->status, 200);
}

TEST(HttpServer, AStalledClientDoesNotHoldUpOthersAndIsCutOff) {
  HttpServerOptions options;
  options.io_timeout = Millis(300);
  auto server = StartServer(options);
  int idle = OpenIdleConnection(server->port());
  ASSERT_GE(idle, 0);
  ASSERT_EQ(::send(idle, "GET /hel", 8, 0), 8);  // half a request, then nothing
  auto start = std::chrono::steady_clock::now();
  auto get = HttpGet(server->address(), "/hello", Millis(2000));
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(250)) << "served while the stalled one waits";
  // The stalled connection is closed by the server at its deadline: recv sees EOF, not a response.
  timeval tv{5, 0};
  ::setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[64];
  EXPECT_EQ(::recv(idle, buf, sizeof(buf), 0), 0);
  ::close(idle);
}

// Regression (found by the hostile-peer tests): 64 connections held open used to fill every slot, so the kubelet's probes were refused
// and the pod restarted. Now the oldest silent connection makes room for a new one.
TEST(HttpServer, IdleConnectionsHeldOpenCannotLockRequestsOut) {
  HttpServerOptions options;
  options.max_connections = 4;
  options.io_timeout = Millis(30000);  // far longer than the test: only eviction can free a slot
  auto server = StartServer(options);
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(OpenIdleConnection(server->port()));
  for (int round = 0; round < 3; ++round) {
    auto get = HttpGet(server->address(), "/hello", Millis(2000));
    ASSERT_TRUE(get.ok()) << get.status().ToString();
    EXPECT_EQ(get->status, 200);
  }
  // The oldest idle connections were closed by the server to make room: the first one reads EOF.
  timeval tv{5, 0};
  ::setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[16];
  EXPECT_EQ(::recv(idle[0], buf, sizeof(buf), 0), 0);
  EXPECT_GE(server->Stats().rejected, 8u);
  for (int fd : idle) ::close(fd);
}

TEST(HttpServer, BadAddressesAndBusyPortsAreClearErrors) {
  EXPECT_EQ(ParseHostPort("9400").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort(":99999").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("[::1]:80").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort(":9400")->first, "0.0.0.0");
  EXPECT_EQ(ParseHostPort("*:9400")->second, 9400);
  auto first = StartServer();
  HttpServerOptions options;
  options.listen = first->address();
  auto second = HttpServer::Start(options, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(first->address()), std::string::npos) << second.status().ToString();
}

TEST(AdminServer, ProbesReportLivenessReadinessAndState) {
  MetricsHub hub("test");
  FakeClock clock;
  LoopWatch watch(clock);
  std::atomic<bool> ready{false};
  auto admin = AdminServer::Start(
      "127.0.0.1:0", hub,
      {[&] { return watch.Check(Millis(200)); },
       [&] { return ready.load() ? Status::Ok() : UnavailableError("journal not replayed yet"); },
       [] { return std::string("{\"jobs\": []}"); }});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  const std::string address = (*admin)->address();
  watch.Beat();
  EXPECT_EQ(HttpGet(address, "/healthz")->status, 200);
  auto not_ready = HttpGet(address, "/readyz");
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_EQ(not_ready->body, "journal not replayed yet\n");
  ready = true;
  EXPECT_EQ(HttpGet(address, "/readyz")->status, 200);
  auto state = HttpGet(address, "/state");
  EXPECT_EQ(state->headers["content-type"], "application/json");
  EXPECT_EQ(state->body, "{\"jobs\": []}\n");
  auto metrics = HttpGet(address, "/metrics");
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("stoker_build_info{component=\"test\""), std::string::npos) << metrics->body;
  // A loop that stops turning fails the liveness probe.
  clock.Advance(Millis(250));
  auto stuck = HttpGet(address, "/healthz");
  EXPECT_EQ(stuck->status, 503);
  EXPECT_NE(stuck->body.find("silent for"), std::string::npos);
}

}  // namespace
}  // namespace stoker
