// Real storage servers on loopback, for the object-storage tests and benchmarks: an S3-compatible server (s3rver,
// which checks SigV4 signatures: tests/objectstore/s3_server.js, installed by scripts/install-test-servers.sh) and
// nginx (Debian's) serving a directory with byte ranges and ETags. Each runs as a child process on an ephemeral
// port, is restarted on the same port (data kept) to stand for a server restart, and is killed with its object.
// nginx can be told to answer every request with a 500 or a 503 (a file its configuration tests for).
//
// Thread safety: none; one owner.
#pragma once

#include <memory>
#include <string>

#include "stoker/status.h"
#include "base/subprocess.h"

namespace stoker::testing {

// Where the S3 server's node script and its node_modules are (tests/objectstore in the source tree, or
// $STOKER_S3_SERVER_DIR), and whether they are installed.
std::string S3ServerDirectory();
bool S3ServerInstalled();
bool NginxInstalled();

class S3Server {
 public:
  // `dir`: its data and log; the key pair is what the server accepts (given to it through its environment).
  // check_signatures = false: requests with a known key are served whatever their signature (s3rver verifies
  // virtual-host requests against the path-style resource, so virtual-host addressing can only be tested so).
  static StatusOr<std::unique_ptr<S3Server>> Start(const std::string& dir, const std::string& bucket,
                                                   const std::string& access_key, const std::string& secret,
                                                   bool check_signatures = true);
  // http://127.0.0.1:PORT (path-style) and http://s3.localhost:PORT (virtual-host: BUCKET.s3.localhost).
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string virtual_host_endpoint() const { return "http://s3.localhost:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  // kill -9, then start again on the same port and data.
  Status Restart();
  void Kill() { process_.Kill(); }
  Status StartAgain() { return Launch(port_); }

 private:
  Status Launch(int port);
  std::string dir_, bucket_, key_, secret_;
  bool check_signatures_ = true;
  int port_ = 0;
  Subprocess process_;
};

class WebServer {
 public:
  // Serves dir/www (put files there: www()).
  static StatusOr<std::unique_ptr<WebServer>> Start(const std::string& dir);
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  std::string www() const { return dir_ + "/www"; }
  int port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  // Every request answered with `status` (500 or 503) until Heal().
  void FailWith(int status);
  void Heal();
  Status Restart();

 private:
  Status Launch();
  std::string dir_;
  int port_ = 0;
  Subprocess process_;
};

}  // namespace stoker::testing
