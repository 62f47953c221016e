// The job spec (stoker/job_spec.h) as Cap'n Proto (wire::JobSpec, schema/job.capnp): the control plane's
// registrations and the coordinator's journal carry it so.
#pragma once

#include "stoker/job_spec.h"
#include "stoker/schema/job.capnp.h"
#include "stoker/status.h"

namespace stoker {

void ToWire(const JobSpec& spec, wire::JobSpec::Builder out);
// InvalidArgument for an unknown enum value (a newer peer) or a spec that fails Validate().
StatusOr<JobSpec> FromWire(wire::JobSpec::Reader in);

}  // namespace stoker
