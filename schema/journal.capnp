# The coordinator's journal: the durable record of everything it must not forget across a restart. One record
# per update of coordinator::CoordinatorState (coordinator/state.h); replaying them in order rebuilds the state.
#
# On disk: the 8 bytes "STKJRN01", then records, each
#     [payload length: u32 little-endian][reserved: u32 = 0][XXH64 of the payload: u64][payload]
# where the payload is one Cap'n Proto message (standard unpacked serialization) holding a JournalRecord.
# A record cut short at the end of the file (a crash mid-append) is a torn tail: it is dropped and the file is
# truncated to the last whole record. A record that fails its checksum with more data after it is corruption in
# the middle: the coordinator refuses to start rather than guess.
@0xd1bed5a0d24536d6;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

using Job = import "job.capnp";

struct JournalRecord {
  union {
    jobCreated @0 :JobCreated;
    rankSession @1 :RankSession;
    rankProgress @2 :RankProgress;
    attemptsReserved @3 :AttemptsReserved;
    workerJoined @4 :WorkerJoined;
    workerLeft @5 :Text;          # worker id
    jobRemoved @6 :Text;          # job name: finished, its clients gone, kept no longer
  }
}

struct JobCreated {
  spec @0 :Job.JobSpec;           # with the manifest fingerprint
  numSamples @1 :UInt64;
}

struct RankSession {
  # A client took a rank; its session starts at startBatch (global batch index).
  job @0 :Text;
  rank @1 :UInt32;
  clientId @2 :Text;
  startBatch @3 :UInt64;
  window @4 :UInt32;
  holder @5 :Text;                # the authenticated identity that took it ("client:<name>"; empty without CURVE)
}

struct RankProgress {
  # What the rank's client acknowledged: every global batch below `received` reached it (commits), every one
  # below `consumed` was handed to the training loop and released.
  job @0 :Text;
  rank @1 :UInt32;
  received @2 :UInt64;
  consumed @3 :UInt64;
}

struct AttemptsReserved {
  # Attempt numbers below upTo may have been handed out for this rank: after a restart, leasing continues above.
  job @0 :Text;
  rank @1 :UInt32;
  upTo @2 :UInt64;
}

struct WorkerJoined {
  workerId @0 :Text;
  dataEndpoint @1 :Text;
  threads @2 :UInt32;
  dataPublicKey @3 :Text;         # its data port's CURVE key, listed to clients (empty without CURVE)
  identity @4 :Text;              # the authenticated identity it registered as (empty without CURVE)
}
