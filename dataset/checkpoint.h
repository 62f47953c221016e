// Checkpoint tokens: what a training process saves with its model so that, restarted, it receives exactly the
// batches it had not consumed. A token names the job, the rank, the position (the global index of the first batch
// not yet handed to the training loop) and the fingerprint of the job spec (which includes the manifest's
// fingerprint), so resuming against another dataset or another spec is refused instead of silently delivering
// different data. Text, short, with a check digest against typos and truncation:
//
//   stoker-ckpt1:<job>:<rank>:<position>:<spec fingerprint, 16 hex>:<check, 8 hex>
#pragma once

#include <cstdint>
#include <string>

#include "stoker/job_spec.h"
#include "stoker/status.h"

namespace stoker {

struct CheckpointToken {
  std::string job;
  uint32_t rank = 0;
  uint64_t position = 0;
  uint64_t spec_fingerprint = 0;
  bool operator==(const CheckpointToken&) const = default;
};

std::string EncodeCheckpointToken(const CheckpointToken& token);
// InvalidArgument for anything that is not a well-formed, intact token.
StatusOr<CheckpointToken> DecodeCheckpointToken(const std::string& text);

}  // namespace stoker
