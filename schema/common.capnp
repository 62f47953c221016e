# Types shared by every stoker message: the protocol version and the status every reply carries.
#
# Versioning: every top-level message (control Request/Reply, data-plane DataMessage) starts with
# protocolVersion. A peer that receives a version it does not speak answers UNIMPLEMENTED with a message naming
# both versions and drops nothing else. Fields are only ever added (Cap'n Proto keeps old readers working); a
# change of meaning bumps the version.
@0xc65caa94b005a653;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

const protocolVersion :UInt16 = 1;

enum StatusCode {
  # The same codes as stoker::StatusCode (stoker/status.h) and, for familiarity, gRPC/absl.
  ok @0;
  cancelled @1;
  unknown @2;
  invalidArgument @3;     # the request is wrong whatever the state: fix the caller
  deadlineExceeded @4;
  notFound @5;            # e.g. an unknown job
  alreadyExists @6;       # e.g. a rank already held by another live client
  permissionDenied @7;
  resourceExhausted @8;   # overloaded: retry later, not at once
  failedPrecondition @9;  # the state forbids it: e.g. a job spec that differs from the registered one
  aborted @10;            # fenced: the lease or session this refers to is no longer current
  outOfRange @11;
  unimplemented @12;      # e.g. a protocol version this peer does not speak
  internal @13;
  unavailable @14;        # transient: retry with backoff
  dataLoss @15;           # unreadable input (corrupt sample, truncated shard)
}

struct Status {
  code @0 :StatusCode;
  message @1 :Text;       # for people: says what was wrong and, where it can, what to do
}
