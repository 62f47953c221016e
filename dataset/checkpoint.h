// Checkpoint tokens: what a training process saves with its model so that, restarted, it receives exactly the
// batches it had not consumed, on the same shape (ranks x batch size) or another. Text, short, with a check digest
// against typos and truncation:
//
//   stoker-ckpt2:<job>:<rank>:<position>:<epoch>:<offset>:<ranks>x<batch>:<epochs>:<manifest fp>:<seed>:
//                <order>:<pipeline fp>:<check>
//
// The resume point is (epoch, offset): the first `offset` positions of the epoch's order were trained on. It
// means the same under any shape (dataset/plan.h), so a coordinator can re-plan what is left for another shape.
// The rest says what decides which sample is where and what its bytes are (the dataset's manifest fingerprint, the
// seed, the order: shuffle s|n and remainder d|p, the pipeline's fingerprint, the epochs), carried field by field
// so that a resume against another one is refused naming the field. position (the writer's global batch index)
// and ranks x batch (the writer's shape) are for people and for a resume on the writer's own shape.
//
// Version 1 tokens (stoker-ckpt1:<job>:<rank>:<position>:<spec fingerprint>:<check>) still decode; they resume
// only on the spec they were written in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dataset/plan.h"
#include "stoker/job_spec.h"
#include "stoker/status.h"

namespace stoker {

struct CheckpointToken {
  uint32_t version = 2;
  std::string job;
  uint32_t rank = 0;
  uint64_t position = 0;
  uint64_t spec_fingerprint = 0;  // version 1 only
  // Version 2:
  Plan::Point point;
  uint32_t ranks = 0;
  uint32_t batch_size = 0;
  uint32_t epochs = 0;
  uint64_t manifest_fingerprint = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::kDrop;
  uint64_t pipeline_fingerprint = 0;
  bool operator==(const CheckpointToken&) const = default;
};

// The token of `rank` of a job of `spec` (manifest fingerprint filled in) planned by `plan`, whose first batch not
// handed to the training loop is global batch `position`.
CheckpointToken MakeCheckpointToken(const JobSpec& spec, const Plan& plan, uint32_t rank, uint64_t position);
// Version 1: {job, rank, position, spec fingerprint}.
CheckpointToken MakeCheckpointTokenV1(const std::string& job, uint32_t rank, uint64_t position,
                                      uint64_t spec_fingerprint);

std::string EncodeCheckpointToken(const CheckpointToken& token);
// InvalidArgument for anything that is not a well-formed, intact token.
StatusOr<CheckpointToken> DecodeCheckpointToken(const std::string& text);

// What differs between a version 2 token and `spec` among what decides a batch's samples and bytes, one line per
// field ("seed: 5 in the checkpoint, 7 in the job"). Empty: the token may resume a job of `spec`, on any shape.
std::vector<std::string> ContentDifferences(const CheckpointToken& token, const JobSpec& spec);

}  // namespace stoker
