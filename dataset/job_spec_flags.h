// A job spec's fields as command-line flags (and their STOKER_* environment twins), for every program that
// names a job: stoker consume, demo, soak, the Loader's option strings, the parity dump.
#pragma once

#include "base/flags.h"
#include "stoker/job_spec.h"

namespace stoker {

// Registers --job, --manifest, --batch-size, --ranks, --epochs, --seed, --shuffle, --remainder,
// --batches-per-unit, --pipeline, --image-size, --scale-min/max, --ratio-min/max, --flip, --resize-shorter,
// --antialias, --resize-kernel on `flags`, writing into `spec`.
void AddJobSpecFlags(FlagSet& flags, JobSpec* spec);

}  // namespace stoker
