# A job: one training run's view of a dataset. The first client to register a rank of a job creates the job from
# its JobSpec; every later registration must carry an identical spec (or none, to attach to an existing job).
#
# Everything that decides which bytes a batch holds is in here, so that the bytes of batch (job, epoch, rank,
# index) are a pure function of (manifest, JobSpec): no worker state, worker count or retry changes them.
@0xcb33519fa5f19369;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

enum Remainder {
  drop @0;   # steps per epoch = floor(samples / (worldSize * batchSize)); the last partial global batch is skipped
  pad @1;    # steps per epoch = ceil(...); the last global batch is filled with repeated samples flagged padding
}

enum PipelineMode {
  train @0;  # RandomResizedCrop(output, scale, ratio) + horizontal flip with flipProbability
  eval @1;   # resize the shorter side to resizeShorter, then center crop to the output size
}

struct PipelineSpec {
  # The transforms a worker applies to each sample: data, not code. Output is uint8 RGB, NHWC.
  mode @0 :PipelineMode;
  outputHeight @1 :UInt32;
  outputWidth @2 :UInt32;
  scaleMin @3 :Float32;        # RandomResizedCrop: crop area as a fraction of the image area
  scaleMax @4 :Float32;
  ratioMin @5 :Float32;        # RandomResizedCrop: crop aspect ratio (width / height), sampled log-uniformly
  ratioMax @6 :Float32;
  flipProbability @7 :Float32;
  resizeShorter @8 :UInt32;    # eval: the shorter side is resized to this before the center crop
  antialias @9 :Bool;          # shrink with a filter as wide as the reduction (torchvision's antialias=True)
  resizeKernel @10 :ResizeKernel;  # how a crop becomes the output; absent (jobs before it existed): opencv
  gpuDecode @11 :GpuDecode;    # workers send JPEGs (data.capnp EncodedCrop) that the client decodes, resizes and
                               # flips on its GPU. Needs the pillow kernel
}

enum GpuDecode {
  off @0;    # workers decode: batches of pixels
  file @1;   # each JPEG as its file where the GPU can take it as it is, else cut, else pixels
  cut @2;    # each JPEG cut losslessly to what its resize reads, else pixels
}

enum ResizeKernel {
  opencv @0;  # OpenCV: area interpolation when shrinking both sides (antialias), bilinear otherwise
  pillow @1;  # Pillow's bilinear resize, byte for byte (torchvision on PIL images); the default for new jobs
}

struct JobSpec {
  name @0 :Text;               # [A-Za-z0-9._-]{1,64}; also the metrics' pipeline label
  manifestPath @1 :Text;       # as the coordinator and workers see it (a shared volume in Kubernetes)
  manifestFingerprint @2 :UInt64;  # XXH64 of the manifest file; 0 in a request = "whatever is at manifestPath"
  pipeline @3 :PipelineSpec;
  batchSize @4 :UInt32;        # per rank
  worldSize @5 :UInt32;        # number of ranks
  epochs @6 :UInt32;
  seed @7 :UInt64;
  shuffle @8 :Bool;
  remainder @9 :Remainder;
  batchesPerUnit @10 :UInt32;  # consecutive batches of one rank leased together (the unit of work and of retry)
  originEpoch @11 :UInt32;     # set by the coordinator for a job resumed on another shape: the plan deals epoch
  originOffset @12 :UInt64;    # originEpoch from this position of its order on (0, 0: from the beginning)
}
