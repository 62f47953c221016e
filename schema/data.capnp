# The data plane: batches from workers to clients, credits from clients to workers.
#
# Transport: ZeroMQ. Each worker binds a ROUTER socket (default tcp://*:7401) and advertises it to the
# coordinator; each client connects one DEALER socket to every worker it learns of from the coordinator.
#
# client -> worker: one frame, a DataMessage holding a Credit. Credits are state, not deltas: each Credit says
#   how many batches of (job, rank) the worker may have leased and unsent at once, and re-sending it is harmless.
#   Clients refresh credits periodically; a worker forgets a credit not refreshed for a few intervals, and a
#   Credit of 0 withdraws it. A credit returns to the worker when the batch leaves it, so worker memory stays
#   below (sum of credits) x batch bytes.
# worker -> client: frame 1 is a DataMessage holding a BatchHeader; the frames after it are the pixel payload,
#   exactly header.payloadBytes = count * height * width * channels bytes of uint8, NHWC, RGB, in
#   header.payloadFrames frames (one unless the client's Credit asked for frames of at most maxFrameBytes). The
#   payload is sent from the worker's batch buffer without a copy and received without one (host path), or
#   copied once, frame by frame, into a pinned slot (GPU path). Why frames: glibc serves allocations above 32 MiB
#   with a fresh mmap, so a receiver of one 38.5 MB frame per batch (256 x 224 x 224 x 3) pays a page fault for
#   every 4 KiB of it, about a core at 1.7 GB/s; frames of 8 MiB come from reused heap memory.
#   A DataError is one frame.
# A client rejects (and counts) any frame that does not parse, whose header disagrees with the job (shape, count,
# list lengths, payload length), whose index is outside its window, or whose attempt is stale.
@0x9709c01544d6cf7d;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

using Common = import "common.capnp";

struct Credit {
  job @0 :Text;
  rank @1 :UInt32;
  clientId @2 :Text;
  credits @3 :UInt32;           # batches this worker may hold leased and unsent for (job, rank); 0 withdraws
  maxFrameBytes @4 :UInt64;     # 0: each payload in one frame; else frames of at most this (at least 64 KiB)
  session @5 :Data;             # the check of the client's session secret (control.capnp Lease.sessionCheck): a
                                # worker sends a lease's batches only to the stream whose credits carry its check, so
                                # another process of the same key cannot take them. Empty: a session with no secret
}

const sampleFlagPadding :UInt8 = 1;      # a repeated sample filling the last global batch (remainder = pad)
const sampleFlagQuarantined :UInt8 = 2;  # unreadable input: pixels are zero, label is -1; reported by id

struct BatchHeader {
  job @0 :Text;
  epoch @1 :UInt32;
  rank @2 :UInt32;
  index @3 :UInt64;             # batch index within the epoch
  unit @4 :UInt64;              # global unit index of the lease that made it
  attempt @5 :UInt64;           # the lease's attempt (fencing token)
  workerId @6 :Text;
  count @7 :UInt32;             # samples in the batch (= the job's batchSize)
  height @8 :UInt32;
  width @9 :UInt32;
  channels @10 :UInt32;         # 3
  labels @11 :List(Int64);      # count entries; -1 for quarantined samples
  sampleIds @12 :List(UInt64);  # count entries: index in the manifest
  flags @13 :List(UInt8);       # count entries: sampleFlag* bits
  payloadBytes @14 :UInt64;
  payloadFrames @15 :UInt32;    # frames of payload after this header; 0 reads as 1 (older workers)
  quarantineReasons @16 :List(Text);  # one per sample flagged quarantined, in slot order: why, in the quarantine
                                      # vocabulary (unsupported_format, decode_error, ...: [a-z0-9_], at most 48
                                      # bytes); empty from older workers
  sealed @17 :Bool;             # the payload frames are sealed and a seal trailer follows them (see SealOffer)
  crops @18 :List(EncodedCrop); # a gpuDecode job's batch (job.capnp): count entries, and the payload is their bytes
                                # one after another in slot order (payloadBytes = their sum); empty otherwise
}

# One sample of a gpuDecode job's batch. An encoded sample is a baseline JPEG cut losslessly, on MCU boundaries,
# to the smallest region holding what the resize reads; the client decodes it, resizes the box to the output with
# the job's Pillow kernel, and mirrors it when flip is set. A sample the worker could not cut (another format, CMYK,
# a transform the library refused, a cut larger than the output's pixels) is its output pixels, made the CPU way
# and already flipped; a quarantined one has no bytes.
struct EncodedCrop {
  bytes @0 :UInt32;             # encoded: 1 .. height * width * channels; else that exactly, or 0 if quarantined
  encoded @1 :Bool;
  flip @2 :Bool;                # encoded samples only
  x @3 :Int32;                  # train: the crop in the sent JPEG's pixels; eval: the whole source image in them
  y @4 :Int32;                  # (x, y may be negative: a cut starts where the resize's taps do), which the client
  width @5 :UInt32;             # resizes to Resize(resizeShorter)'s size and keeps the centre of, as the CPU does
  height @6 :UInt32;
}

# A sealed data port (every secure one): the client's first message on a connection is `hello`, the worker answers
# `welcome`; both derive the connection's keys from them (auth/seal.h). After that a client's credit is two frames,
# the Credit and a seal trailer with one tag over no payload (the Credit's bytes are its associated data), and a
# batch is the header (sealed = true), its payload frames, each sealed under its own counter with the header's
# bytes and the frame's index (4 bytes, little-endian) as associated data, then the trailer: the first frame's
# counter (8 bytes, little-endian) and one 16-byte tag per payload frame.
struct SealOffer {
  random @0 :Data;              # 32 fresh random bytes
  publicKey @1 :Data;           # a fresh X25519 public key (32 bytes)
}

struct DataError {
  job @0 :Text;
  rank @1 :UInt32;
  status @2 :Common.Status;     # e.g. NOT_FOUND for a credit naming a job the coordinator does not know
}

struct DataMessage {
  protocolVersion @0 :UInt16;
  union {
    credit @1 :Credit;
    batch @2 :BatchHeader;
    error @3 :DataError;
    hello @4 :SealOffer;        # client -> worker, first on a sealed connection
    welcome @5 :SealOffer;      # worker -> client, the answer
  }
}
