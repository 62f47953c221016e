# The coordinator's journal: the durable record of everything it must not forget across a restart. Each update of
# coordinator::CoordinatorState (coordinator/state.h) is a JournalRecord; replaying them in order rebuilds the state.
#
# On disk (format 2): the 8 bytes "STKJRN02", then one framed record per sync, each
#     [payload length: u32][header check: u32][checksum of header and payload: u64][payload]
# where the payload is one Cap'n Proto message (standard unpacked serialization) holding a JournalGroup: the
# updates of that sync. coordinator/journal_format.h has the exact framing and what recovery promises: only the
# physically last record may be dropped as torn; damage with a valid record after it refuses the start, naming
# the byte. Format 1 ("STKJRN01", one JournalRecord per record, the length outside the checksum) is still read and
# rewritten as format 2.
@0xd1bed5a0d24536d6;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

using Job = import "job.capnp";

struct JournalGroup {
  updates @0 :List(JournalRecord);  # in the order they were applied
}

struct JournalRecord {
  union {
    jobCreated @0 :JobCreated;
    rankSession @1 :RankSession;
    rankProgress @2 :RankProgress;
    attemptsReserved @3 :AttemptsReserved;
    workerJoined @4 :WorkerJoined;
    workerLeft @5 :Text;          # worker id
    jobRemoved @6 :Text;          # job name: finished, its clients gone, kept no longer
    jobReshaped @7 :JobReshaped;
  }
}

struct JobReshaped {
  # A checkpoint resumed the job on another shape: from here its spec is `spec` (the new world and batch size, and
  # the origin its plan starts from), and its ranks start afresh, their attempts at attemptsFloor or above (every
  # lease of the old shape is fenced). A coordinator older than this update refuses the journal instead of
  # dropping the origin it could not read.
  spec @0 :Job.JobSpec;
  attemptsFloor @1 :UInt64;
  shapeChanges @2 :UInt32;        # how many times the job has changed shape, this one included
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
  sessionCheck @6 :Data;          # BLAKE2b of the session's secret (RegisterClient.session); empty: not bound
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
  dataSealed @5 :Bool;            # its data port checks data tickets and seals batches (auth/seal.h)
  sessionCheck @6 :Data;          # SessionCheck of its registration's secret (auth/data_tickets.h); empty: bound to
                                  # its key only (a worker that sent none, or a journal older than worker sessions)
}
