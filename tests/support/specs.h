// The job spec the coordinator's unit tests record in journals: two ranks of batch 4 over a manifest never opened,
// its fingerprint filled in as the coordinator would.
#pragma once

#include "stoker/job_spec.h"

namespace stoker::testing {

inline JobSpec SmallJobSpec() {
  return {.name = "j", .manifest_path = "/m", .manifest_fingerprint = 42, .batch_size = 4, .world_size = 2};
}

}  // namespace stoker::testing
