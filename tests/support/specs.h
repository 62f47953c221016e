// The job specs unit tests use: the coordinator's, recorded in journals (two ranks of batch 4 over a manifest never
// opened, its fingerprint filled in as the coordinator would); the client's socket-free tests' (a tiny one rank job).
#pragma once

#include "stoker/job_spec.h"

namespace stoker::testing {

inline JobSpec SmallJobSpec() {
  return {.name = "j", .manifest_path = "/m", .manifest_fingerprint = 42, .batch_size = 4, .world_size = 2};
}

// Job "j" over /m.stoker (never opened): two epochs of batches of 2 images of 2x2.
inline JobSpec TinyJobSpec() {
  JobSpec spec{.name = "j", .manifest_path = "/m.stoker", .batch_size = 2, .epochs = 2};
  spec.pipeline.output_height = spec.pipeline.output_width = 2;
  return spec;
}

}  // namespace stoker::testing
