// TransportErrors (transport_errors.h): each site's first failure logged, all of them counted.
#include "wire/transport_errors.h"

#include "base/logging.h"

namespace stoker {

void TransportErrors::Note(const char* site, const zmq::error_t& error) {
  uint64_t seen;
  {
    MutexLock lock(mu_);
    seen = ++counts_[site];
  }
  if (seen == 1) {
    STOKER_LOG(kWarning) << "transport error at " << site << ": " << error.what()
                         << " (counted; later ones at this site are logged at debug level)";
  } else {
    STOKER_LOG(kDebug) << "transport error at " << site << ": " << error.what();
  }
}

std::map<std::string, uint64_t> TransportErrors::Counts() const {
  MutexLock lock(mu_);
  return counts_;
}

uint64_t TransportErrors::Total() const {
  MutexLock lock(mu_);
  uint64_t total = 0;
  for (const auto& [site, n] : counts_) total += n;
  return total;
}

}  // namespace stoker
