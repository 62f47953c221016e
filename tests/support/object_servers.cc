// S3Server and WebServer (object_servers.h): child processes on ephemeral loopback ports.
#include "tests/support/object_servers.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tools/socket_io.h"

namespace stoker::testing {
namespace {

// Waits until something accepts connections on 127.0.0.1:port, or the process exits, or the deadline passes.
Status WaitForPort(int port, Subprocess& process, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = tools::ConnectTcp("127.0.0.1", static_cast<uint16_t>(port));
    if (fd >= 0) {
      ::close(fd);
      return Status::Ok();
    }
    if (auto code = process.Wait(std::chrono::milliseconds(20))) {
      return UnavailableError("server exited with code " + std::to_string(*code) + " before serving");
    }
  }
  return DeadlineExceededError("server did not listen on port " + std::to_string(port) + " in time");
}

}  // namespace

std::string S3ServerDirectory() {
  const char* dir = std::getenv("STOKER_S3_SERVER_DIR");
  return dir != nullptr ? dir : std::string(STOKER_SOURCE_DIR) + "/tests/objectstore";
}

bool S3ServerInstalled() {
  return std::filesystem::exists(S3ServerDirectory() + "/node_modules/@20minutes/s3rver/package.json");
}

bool NginxInstalled() { return std::filesystem::exists("/usr/sbin/nginx"); }

StatusOr<std::unique_ptr<S3Server>> S3Server::Start(const std::string& dir, const std::string& bucket,
                                                    const std::string& access_key, const std::string& secret,
                                                    bool check_signatures) {
  if (!S3ServerInstalled()) {
    return FailedPreconditionError("s3rver is not installed in " + S3ServerDirectory() +
                                   " (scripts/install-test-servers.sh)");
  }
  auto server = std::unique_ptr<S3Server>(new S3Server());
  server->dir_ = dir;
  server->bucket_ = bucket;
  server->key_ = access_key;
  server->secret_ = secret;
  server->check_signatures_ = check_signatures;
  std::filesystem::create_directories(dir + "/data");
  STOKER_RETURN_IF_ERROR(server->Launch(0));
  return server;
}

Status S3Server::Launch(int port) {
  const std::string port_file = dir_ + "/port";
  std::filesystem::remove(port_file);
  STOKER_ASSIGN_OR_RETURN(process_, Subprocess::Start({"/usr/bin/env", "node", S3ServerDirectory() + "/s3_server.js",
                                                       dir_ + "/data", port_file, bucket_, std::to_string(port)},
                                                      dir_ + "/s3_server.log",
                                                      {"STOKER_TEST_S3_KEY=" + key_, "STOKER_TEST_S3_SECRET=" + secret_,
                                                       std::string("STOKER_TEST_S3_UNCHECKED=") +
                                                           (check_signatures_ ? "0" : "1")}));
  STOKER_ASSIGN_OR_RETURN(std::string bound, WaitForFile(port_file, std::chrono::seconds(30), &process_));
  port_ = std::atoi(bound.c_str());
  return port_ > 0 ? Status::Ok() : InternalError("s3 server wrote port '" + bound + "'");
}

Status S3Server::Restart() {
  process_.Kill();
  return Launch(port_);
}

StatusOr<std::unique_ptr<WebServer>> WebServer::Start(const std::string& dir) {
  if (!NginxInstalled()) return FailedPreconditionError("nginx is not installed (scripts/install-deps.sh)");
  auto server = std::unique_ptr<WebServer>(new WebServer());
  server->dir_ = dir;
  std::filesystem::create_directories(dir + "/www");
  std::filesystem::create_directories(dir + "/tmp");
  Status launched;
  for (int attempt = 0; attempt < 3; ++attempt) {  // the free port may be taken before nginx binds it
    STOKER_ASSIGN_OR_RETURN(server->port_, tools::FreeLoopbackPort());
    launched = server->Launch();
    if (launched.ok()) return server;
  }
  return launched;
}

Status WebServer::Launch() {
  const std::string& d = dir_;
  std::ofstream conf(d + "/nginx.conf", std::ios::trunc);
  conf << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\nerror_log " << d
       << "/error.log;\nevents { worker_connections 512; }\nhttp {\n  access_log off;\n  sendfile on;\n"
       << "  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n  client_body_temp_path " << d << "/tmp;\n"
       << "  proxy_temp_path " << d << "/tmp;\n  fastcgi_temp_path " << d << "/tmp;\n  uwsgi_temp_path " << d
       << "/tmp;\n  scgi_temp_path " << d << "/tmp;\n  server {\n    listen 127.0.0.1:" << port_ << ";\n    root " << d
       << "/www;\n    location / {\n      if (-f " << d << "/fail-503) { return 503; }\n      if (-f " << d
       << "/fail-500) { return 500; }\n    }\n  }\n}\n";
  conf.close();
  STOKER_ASSIGN_OR_RETURN(process_, Subprocess::Start({"/usr/sbin/nginx", "-p", d, "-c", d + "/nginx.conf"},
                                                      d + "/nginx.log"));
  return WaitForPort(port_, process_, std::chrono::seconds(20));
}

void WebServer::FailWith(int status) { std::ofstream(dir_ + "/fail-" + std::to_string(status)) << "fail\n"; }

void WebServer::Heal() {
  std::filesystem::remove(dir_ + "/fail-500");
  std::filesystem::remove(dir_ + "/fail-503");
}

Status WebServer::Restart() {
  process_.Kill();
  return Launch();
}

}  // namespace stoker::testing
