// The real clock (stoker/clock.h).
#include "stoker/clock.h"

namespace stoker {

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace stoker
