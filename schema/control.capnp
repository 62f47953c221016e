# The control protocol between the coordinator and its peers (workers and clients).
#
# Transport: ZeroMQ. The coordinator binds a ROUTER socket (default tcp://*:7400); each worker and each client
# connects one DEALER socket. Every ZeroMQ message is exactly one frame holding one Cap'n Proto message (standard
# unpacked serialization): a Request from a peer, a Reply from the coordinator. The coordinator answers every
# Request with exactly one Reply carrying the same requestId, possibly later (a LeaseRequest that finds no work
# is parked until work appears or its wait runs out).
#
# Idempotence: requestId is unique per sender (a counter). A sender that times out re-sends the same request with
# the same id; the coordinator applies each (senderId, requestId) at most once and answers a repeat with the
# original reply. Replies never carry exceptions: `status` says what happened.
#
# Ids: workers are "w-<16 hex>", clients "c-<16 hex>", tools "t-<16 hex>", chosen by the peer at start (random),
# so that a restarted process is a new peer. Jobs are named by their JobSpec.name.
#
# Identity: with CURVE (the default) every connection is authenticated by the key it presented, and the
# coordinator knows each request's sender as "<role>:<name>" of that key (auth/keys.h), never from a field of the
# message. A worker key may only make worker requests, a client key only client requests; a rank is held by the
# identity that registered it, and only that identity may acknowledge, continue or release it; a worker id is bound
# to the identity that registered it. senderId still tells sessions of one identity apart.
#
# Units and leases: for each job the coordinator numbers every rank's batches of all epochs in one sequence, the
# global batch index g = epoch * stepsPerEpoch + index. A unit is batchesPerUnit consecutive batches of one rank
# within one epoch; global unit index q = epoch * unitsPerEpoch + u. A lease hands unit q of rank r to one worker
# under an attempt number; attempts only grow (per rank), so a batch tagged with an older attempt than the unit's
# current lease is stale and is dropped by the client (fencing).
#
# Flow control: a client declares a window W (its prefetch slots). The coordinator leases a unit only when all of
# its batches fall in [consumed, consumed + W), where consumed is the client's last acknowledged count of batches
# it has handed to the application and released. So every batch a worker sends has a free slot waiting for it.
# Workers additionally lease only as far as a client's credits reach (data.capnp), which bounds worker memory.
@0xf3e05659b0bcd0e8;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

using Common = import "common.capnp";
using Job = import "job.capnp";

struct Request {
  protocolVersion @0 :UInt16;   # Common.protocolVersion of the sender
  requestId @1 :UInt64;         # unique per sender; a retry repeats it
  senderId @2 :Text;            # "w-…", "c-…" or "t-…"
  union {
    registerWorker @3 :RegisterWorker;
    workerHeartbeat @4 :WorkerHeartbeat;
    leaseRequest @5 :LeaseRequest;
    unitDone @6 :UnitDone;
    registerClient @7 :RegisterClient;
    clientHeartbeat @8 :ClientHeartbeat;
    getJob @9 :GetJob;
    deregister @10 :Deregister;
  }
}

struct Reply {
  protocolVersion @0 :UInt16;
  requestId @1 :UInt64;         # the request this answers
  status @2 :Common.Status;     # not ok: the union is `none`
  union {
    none @3 :Void;
    registerWorker @4 :RegisterWorkerReply;
    workerHeartbeat @5 :WorkerHeartbeatReply;
    lease @6 :LeaseReply;
    unitDone @7 :Void;
    registerClient @8 :RegisterClientReply;
    clientHeartbeat @9 :ClientHeartbeatReply;
    job @10 :Job.JobSpec;
  }
}

# --- workers -------------------------------------------------------------------------------------------------

struct RegisterWorker {
  # First message of a worker. Re-sent after the coordinator restarts or forgets the worker (NOT_FOUND replies).
  dataEndpoint @0 :Text;        # where clients connect to receive batches, e.g. tcp://10.0.0.7:7401 (tcp only,
                                # at most 256 bytes)
  threads @1 :UInt32;           # pipeline threads: the coordinator's capacity estimate
  version @2 :Text;             # build version, for /state
  dataPublicKey @3 :Text;       # z85 CURVE public key of the data port (made at the worker's start); clients
                                # learn it from the worker list and talk to no other. Empty without CURVE
  dataSealed @4 :Bool;          # the data port authenticates clients by data ticket (ZeroMQ PLAIN) and seals every
                                # batch (auth/data_tickets.h, auth/seal.h); required with CURVE on. dataPublicKey
                                # is then empty (it is left from data ports that were CURVE servers)
  localGroup @5 :Text;          # non-empty: a node-local worker (stoker-worker --local-dir). It serves only the
                                # client sessions registered with the same group, a secret (32 hex digits) that a
                                # training process and the workers beside it share through a file; its dataEndpoint
                                # is then an ipc:// socket on their host, unsealed (dataSealed false). It may
                                # authenticate with a client key: it then serves only ranks held under that key
  session @6 :Data;             # a secret the worker process drew (32 random bytes): the worker id is bound to it
                                # while registered, so its heartbeats, lease requests, unit reports and
                                # deregistration count only when they carry it (WorkerHeartbeat.session, ...), and
                                # a live id registered by another session is ALREADY_EXISTS until it is lost. Its
                                # data ticket key is derived from it. Empty (an older worker): bound to the key only
}

struct RegisterWorkerReply {
  heartbeatIntervalMs @0 :UInt32;  # send a WorkerHeartbeat at least this often
  leaseTtlMs @1 :UInt32;           # a lease not renewed for this long is revoked and re-leased
  dataTicketKey @2 :Data;          # for a dataSealed worker with CURVE on: the 32-byte key its data port checks
                                   # clients' tickets with and derives their seal keys from (it travels only over
                                   # the encrypted control plane)
}

struct LeaseRef {
  job @0 :Text;
  rank @1 :UInt32;
  unit @2 :UInt64;              # global unit index q
  attempt @3 :UInt64;
}

struct WorkerHeartbeat {
  # Liveness, and renewal of every lease the worker still works on.
  leases @0 :List(LeaseRef);
  draining @1 :Bool;            # SIGTERM received: lease nothing new to this worker
  # Telemetry for the coordinator's worker-count advice (recommended_workers), cumulative since the worker started:
  busySeconds @2 :Float64;      # pipeline-thread seconds spent making samples
  samplesMade @3 :UInt64;       # samples read, decoded and augmented
  session @4 :Data;             # its registration's secret (RegisterWorker.session)
}

struct WorkerHeartbeatReply {
  revoked @0 :List(LeaseRef);   # leases no longer this worker's: stop and send nothing more for them
}

struct LeaseRequest {
  # Ask for work on (job, rank), for which the worker holds client credit.
  job @0 :Text;
  rank @1 :UInt32;
  maxBatches @2 :UInt32;        # the worker's unused credit for that rank: leases never exceed it
  waitMs @3 :UInt32;            # if nothing can be leased now, park the request this long (0: answer at once)
  session @4 :Data;             # its registration's secret (RegisterWorker.session)
}

struct Lease {
  job @0 :Text;
  rank @1 :UInt32;
  unit @2 :UInt64;              # global unit index q
  epoch @3 :UInt32;
  firstBatch @4 :UInt64;        # index within the epoch of the unit's first batch
  batchCount @5 :UInt32;
  attempt @6 :UInt64;           # fencing token: tag every batch of this lease with it
  skip @7 :List(UInt64);        # batch indices (within the epoch) the client already has: do not make them again
  ttlMs @8 :UInt32;
  clientId @9 :Text;            # the client session holding the rank: send the batches to it and no other
  specFingerprint @10 :UInt64;  # of the job spec: a worker that knows the job under another spec reloads it
  clientIdentity @11 :Text;     # the authenticated identity holding the rank ("client:<name>"): the batches go
                                # only to a connection that authenticated as it. Empty without CURVE
  sessionCheck @12 :Data;       # the rank's session check (BLAKE2b of RegisterClient.session): the batches go only
                                # to credits carrying it (Credit.session). Empty: a session bound to no secret
}

struct LeaseReply {
  leases @0 :List(Lease);       # empty: nothing leasable within the wait (window full, epoch done, ...)
  jobDone @1 :Bool;             # every batch of every epoch of this rank is leased or delivered: stop asking
}

struct QuarantinedSample {
  sampleId @0 :UInt64;          # index in the manifest
  reason @1 :Text;              # short, bounded vocabulary: read_error, short_read, decode_error, truncated, ...
  detail @2 :Text;              # for people: the decoder's or the OS's own words, and the shard and key
}

enum UnitOutcome {
  sent @0;                      # every batch not in skip was handed to the client's connection
  undeliverable @1;             # the client's connection went away: re-lease at once
  abandoned @2;                 # draining or failing worker hands the unit back unfinished
}

struct UnitDone {
  job @0 :Text;
  rank @1 :UInt32;
  unit @2 :UInt64;
  attempt @3 :UInt64;
  outcome @4 :UnitOutcome;
  batchesSent @5 :UInt32;
  quarantined @6 :List(QuarantinedSample);
  busySeconds @7 :Float64;      # pipeline-thread seconds spent making the batches sent (read, decode, augment,
                                # seal): the coordinator's fair share charges a job by what its samples cost
  # Of busySeconds, by stage (the rest is time the stages do not account for, e.g. an injected delay): where the
  # job's time goes, per job (stoker_coordinator_job_stage_seconds_total).
  readSeconds @8 :Float64;
  decodeSeconds @9 :Float64;
  augmentSeconds @10 :Float64;
  sealSeconds @11 :Float64;
  session @12 :Data;            # its registration's secret (RegisterWorker.session)
}

# --- clients -------------------------------------------------------------------------------------------------

struct RegisterClient {
  # Claim one rank of a job. With a spec, creates the job if it does not exist, or checks the spec matches it.
  # Without one, the job must exist (NOT_FOUND otherwise). A rank held by another live client: ALREADY_EXISTS,
  # resume or not (a restarted training process takes its rank back once the crashed one's session has timed out).
  # Registering again with the same senderId, identity, window and session secret is a retry of the same process:
  # the session continues.
  job @0 :Text;
  rank @1 :UInt32;
  spec @2 :Job.JobSpec;
  hasSpec @3 :Bool;
  window @4 :UInt32;            # prefetch slots: batches the client can hold at once (>= batchesPerUnit)
  hasResume @5 :Bool;           # start at resumeFrom instead of where the rank's last client left off
  resumeFrom @6 :UInt64;        # global batch index: the first batch the training loop has not consumed
  resumeSpecFingerprint @7 :UInt64;  # the job spec's fingerprint in the checkpoint: must match the job's
  resumeToken @8 :Text;         # the checkpoint token itself (dataset/checkpoint.h): what the coordinator goes by
                                # when present. A version 2 token may resume the job on another shape (ranks, batch
                                # size): the coordinator re-plans what is left of the epoch for it.
  probe @9 :Bool;               # only describe the job as this registration's shape would have it (steps per
                                # epoch, samples): claims nothing and creates nothing (NOT_FOUND for a job that
                                # does not exist). What a framework's len() asks before it gives the checkpoint back.
  localGroup @10 :Text;         # the group of node-local workers beside this client (RegisterWorker.localGroup):
                                # they are listed to this session only and leased its units first. Empty: none
  session @11 :Data;            # a secret the client drew (32 random bytes, one per process): only a registration
                                # carrying it continues the rank's session, and its heartbeats and deregistration
                                # must carry it too. The coordinator keeps (and journals) only its hash.
  resumeLive @12 :Bool;         # with a version 2 token of another shape: a live shape change. The job is re-planned
                                # from the token's point although ranks of its old shape are training; their sessions
                                # end (they join the new shape from the same point). Only over ranks the caller's
                                # team holds (PERMISSION_DENIED otherwise).
}

struct WorkerInfo {
  workerId @0 :Text;
  dataEndpoint @1 :Text;
  dataPublicKey @2 :Text;       # the CURVE server key of its data port (empty without CURVE)
  dataTicket @3 :Text;          # the asking client's ticket for its data port (its PLAIN password, its identity
                                # the user name); empty without CURVE
  dataSealKey @4 :Data;         # the asking client's seal key for it (32 bytes, auth/data_tickets.h): what the
                                # connection's keys derive from; empty without CURVE
}

struct RegisterClientReply {
  spec @0 :Job.JobSpec;         # the job's spec as the coordinator holds it (fingerprint filled in)
  stepsPerEpoch @1 :UInt64;     # batches every rank receives per epoch
  samplesPerEpoch @2 :UInt64;   # samples in the manifest
  startBatch @3 :UInt64;        # global batch index the client starts at (0, or where the rank's last client was)
  heartbeatIntervalMs @4 :UInt32;
  workers @5 :List(WorkerInfo);
  membershipVersion @6 :UInt64;
}

struct ClientHeartbeat {
  # Liveness and the ack. Sent when something changed (coalesced) and at least every heartbeatIntervalMs.
  job @0 :Text;
  rank @1 :UInt32;
  consumed @2 :UInt64;          # global batches handed to the application and released (slots free below)
  receivedWatermark @3 :UInt64; # every global batch index below this has been received
  receivedAbove @4 :List(UInt64);  # received indices >= receivedWatermark (at most the window)
  membershipVersion @5 :UInt64; # the worker list version the client has
  # Telemetry for the worker-count advice, cumulative since this client started: what the training loop would
  # consume if input never stalled is samplesDelivered / (stepSeconds - stallSeconds).
  stepSeconds @6 :Float64;      # time between consecutive batches handed to the application
  stallSeconds @7 :Float64;     # part of that the consumer sat idle waiting for input
  samplesDelivered @8 :UInt64;
  localGroup @9 :Text;          # as in RegisterClient: a coordinator that restarted learns it again from here
  # Workers whose batches this client refused as not the plan's (another sample id or padding flag at a batch's
  # place): the coordinator leases this job nothing more from them. Every one so far, at most 64; sent each time.
  rejectedWorkers @10 :List(Text);
  session @11 :Data;            # the secret its registration carried (RegisterClient.session)
  # Where its batches' time went on this client, cumulative since it started (the stages after the workers'
  # UnitDone.readSeconds..sealSeconds): the seconds its threads spent taking batches in (opening sealed ones and
  # copying them into pinned memory) and the seconds their host-to-device copies took (CUDA events; 0 on the host).
  receiveSeconds @12 :Float64;
  h2dSeconds @13 :Float64;
}

struct ClientHeartbeatReply {
  membershipVersion @0 :UInt64;
  workers @1 :List(WorkerInfo); # present when membershipVersion differs from the client's
  workersChanged @2 :Bool;
  leases @3 :List(LeaseRef);    # live leases of this rank: the client drops batches of older attempts
}

struct GetJob {
  job @0 :Text;
}

struct Deregister {
  # A worker leaving (after draining) or a client closing. Held leases are re-leased; a client's rank is freed.
  job @0 :Text;                 # clients: the job and rank they held
  rank @1 :UInt32;
  session @2 :Data;             # their registration's secret (RegisterClient.session, RegisterWorker.session)
}
