// The Loader's vocabulary: what a training process asks of a Loader (LoaderOptions: the output format, the device,
// the collectives) and what it reads back (BatchView, LoaderStats). stoker/loader.h is the Loader itself; the
// client's internals (client/src/, cuda/, nccl/) speak these types without including it.
//
// Thread safety: plain values.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/client_types.h"
#include "stoker/status.h"

namespace stoker {

enum class DType : uint8_t { kUInt8, kFloat32, kFloat16, kBFloat16 };
enum class Layout : uint8_t { kNCHW, kNHWC };

const char* DTypeName(DType d);
const char* LayoutName(Layout l);
size_t DTypeSize(DType d);

// What the model reads. uint8 keeps the pixels as they are (only the layout may change); the float types are
// (pixel - mean[c]) / std[c], computed in float32 as (pixel - mean[c]) * (1 / std[c]) and rounded to nearest even.
struct OutputFormat {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  std::array<float, 3> mean = {123.675f, 116.28f, 103.53f};  // ImageNet's, in pixel units (0-255)
  std::array<float, 3> std = {58.395f, 57.12f, 57.375f};

  Status Validate() const;
  // True when the output is the received pixels byte for byte (uint8, NHWC): nothing to convert.
  bool IsIdentity() const { return dtype == DType::kUInt8 && layout == Layout::kNHWC; }
};

// A 128-byte NCCL unique id as 256 hex digits: made by one member (NcclUniqueIdHex) and given to all.
struct CollectiveOptions {
  std::string nccl_id;    // hex; required when size > 1
  uint32_t size = 1;      // 1: off
  uint32_t rank = 0;      // 0 .. size-1
  std::chrono::milliseconds timeout{300000};  // a member that never arrives: the others fail after this
};

struct LoaderOptions {
  ClientOptions client;   // the stoker rank; client.prefetch is the host window
  int device = -1;        // CUDA ordinal; -1: host batches
  uint32_t depth = 4;     // pinned + device slots (1 .. client.prefetch)
  OutputFormat output;
  CollectiveOptions tensor_parallel;  // a group sharing one stoker rank (member 0 fetches)
  CollectiveOptions agreement;        // the data-parallel ranks, one member each (the group's member 0 under TP)
};

// Where one batch is, in the model's terms. Logical shape is always (N, C, H, W); strides (in elements) say the
// memory order: NCHW is contiguous, NHWC is PyTorch's channels_last.
struct BatchView {
  int device = -1;                 // CUDA ordinal, -1: host memory
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  void* data = nullptr;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
  const int64_t* labels = nullptr;       // on the same device as data: -1 for quarantined samples
  const uint64_t* sample_ids = nullptr;  // on the same device as data
  uint64_t bytes() const;
};

struct LoaderStats {
  ClientStats client;          // the tensor-parallel leader's; followers report zeros there
  int device = -1;
  uint32_t depth = 0;
  uint64_t pinned_bytes = 0;   // slot bytes x depth, plus x (prefetch - depth + 1) spares that sealed batches
                               // are opened into (none with insecure); 0 on the host path
  uint64_t device_bytes = 0;
  uint64_t slot_bytes = 0;     // pixels + labels + sample ids of one batch
  uint64_t batches = 0;        // batches Next() returned
  double wait_seconds = 0;     // time Next() blocked (a follower: waiting for the leader's broadcast too)
  double agreement_seconds = 0;  // time spent in the agreement step
  uint64_t agreements = 0;
  uint64_t broadcast_bytes = 0;  // tensor parallel: bytes sent (leader) or received (follower)
};

}  // namespace stoker
