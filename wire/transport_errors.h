// TransportErrors: the ZeroMQ failures a component survives — a send to a peer that vanished, a receive on a
// connection that broke — counted by where they happened, never swallowed. The first failure at each site is
// logged at warning level (it names the site and ZeroMQ's words), later ones at debug level so a flapping peer
// cannot flood the log; every one is counted and exported as stoker_<component>_transport_errors_total{site}.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <zmq.hpp>

#include "base/sync.h"

namespace stoker {

class TransportErrors {
 public:
  // `site` names the call that failed ("send_batch", "recv_credit", ...): a fixed string, used as a metric label.
  void Note(const char* site, const zmq::error_t& error);
  std::map<std::string, uint64_t> Counts() const;
  uint64_t Total() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, uint64_t> counts_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker
