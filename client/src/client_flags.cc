// The client's and the Loader's options as flags (client_flags.h).
#include "client/src/client_flags.h"

#include <array>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "base/flags.h"
#include "dataset/job_spec_flags.h"

namespace stoker::client {

void AddClientSecurityFlags(FlagSet& flags, ClientOptions* options) {
  flags.AddString("key-file", &options->key_file,
                  "this client's CURVE key pair (stoker keygen --role client); or $STOKER_KEY_FILE / $STOKER_KEY");
  flags.AddString("trust-file", &options->trust_file,
                  "public keys, the coordinator's among them; or $STOKER_TRUST_FILE / $STOKER_TRUST");
  flags.AddBool("insecure", &options->insecure, "no CURVE (only on a network you trust)");
  flags.AddBool("allow-readable-key", &options->allow_readable_key,
                "use a key file that other users can read or write, or a trust file they can write (refused "
                "otherwise; also $STOKER_ALLOW_READABLE_KEY=1)");
}

void AddLocalModeFlags(FlagSet& flags, ClientOptions* options) {
  flags.AddUint32("local-workers", &options->local_workers,
                  "worker processes to start on this machine: with --coordinator local all of them (0: the cores "
                  "this process may use, less two); with a cluster's coordinator, node-local workers beside the "
                  "pool, which serve this client first (0: none)");
  flags.AddString("local-dir", &options->local_dir,
                  "with a cluster's coordinator: use the node-local workers in this directory (stoker-worker "
                  "--local-dir, e.g. a sidecar sharing an emptyDir) instead of starting any");
  flags.AddString("local-bin-dir", &options->local_bin_dir,
                  "with --coordinator local: where stoker-coordinator and stoker-worker are (default: "
                  "$STOKER_BIN_DIR, ../bin beside the stoker library, $PATH)");
}

namespace {

StatusOr<std::array<float, 3>> ParseTriple(const std::string& text, const char* flag) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) parts.push_back(part);
  if (parts.size() != 3) {
    return InvalidArgumentError(std::string("--") + flag + " takes three numbers, R,G,B (pixel units, 0-255)");
  }
  std::array<float, 3> v{};
  for (size_t i = 0; i < 3; ++i) {
    try {
      size_t used = 0;
      v[i] = std::stof(parts[i], &used);
      if (used != parts[i].size()) throw std::invalid_argument(parts[i]);
    } catch (const std::exception&) {
      return InvalidArgumentError(std::string("--") + flag + ": '" + parts[i] + "' is not a number");
    }
  }
  return v;
}

}  // namespace

LoaderFlags::LoaderFlags(FlagSet& flags) {
  ClientOptions& c = options_.client;
  flags.AddString("coordinator", &c.coordinator,
                  "coordinator control endpoint, or 'local': start a coordinator and workers on this machine");
  AddLocalModeFlags(flags, &c);
  AddJobSpecFlags(flags, &spec_);
  flags.AddUint32("rank", &c.rank, "rank to claim");
  flags.AddBool("attach", &attach_, "join an existing job without sending its spec");
  flags.AddUint32("prefetch", &c.prefetch, "host window: batches workers may send ahead");
  flags.AddUint32("credits", &c.credits_per_worker, "batches one worker may prepare for this rank at a time");
  flags.AddUint32("max-worker-connections", &c.max_workers,
                  "worker connections held at once (each is a file descriptor)");
  flags.AddString("client-id", &c.client_id,
                  "client id (default: random c-...); one per process: a live client's id is refused to another "
                  "process until that client leaves or its session times out");
  flags.AddString("resume-token", &c.resume_token, "a checkpoint token to resume from");
  flags.AddBool("resume-live", &c.resume_live,
                "with resume-token: a live shape change; the old shape's training ranks (of this team) end now");
  flags.AddString("metrics-listen", &c.metrics_listen, "serve /metrics etc. on this host:port (default: none)");
  flags.AddString("connect-timeout", &connect_timeout_, "how long to retry an unreachable coordinator");
  flags.AddInt("device", &device_, "CUDA device to deliver batches on (-1: host memory)");
  flags.AddUint32("depth", &options_.depth, "pinned + device slots per device (1 .. prefetch)");
  flags.AddChoice("dtype", {"uint8", "float32", "float16", "bfloat16"}, dtype_,
                  [this](const std::string& v) {
                    if (v != "uint8" && v != "float32" && v != "float16" && v != "bfloat16") return false;
                    dtype_ = v;
                    return true;
                  }, "output element type");
  flags.AddChoice("layout", {"nchw", "nhwc"}, layout_, [this](const std::string& v) {
                    if (v != "nchw" && v != "nhwc") return false;
                    layout_ = v;
                    return true;
                  },
                  "output memory order (nhwc: PyTorch's channels_last)");
  flags.AddString("mean", &mean_, "per-channel mean R,G,B in pixel units (default ImageNet's 123.675,116.28,103.53)");
  flags.AddString("std", &std_, "per-channel std R,G,B in pixel units (default ImageNet's 58.395,57.12,57.375)");
  flags.AddString("tp-id", &options_.tensor_parallel.nccl_id, "tensor-parallel group: NCCL id (hex)");
  flags.AddUint32("tp-size", &options_.tensor_parallel.size, "tensor-parallel group size (1: off)");
  flags.AddUint32("tp-rank", &options_.tensor_parallel.rank, "this member of the group (0 fetches)");
  flags.AddString("agree-id", &options_.agreement.nccl_id, "agreement among data-parallel ranks: NCCL id (hex)");
  flags.AddUint32("agree-size", &options_.agreement.size, "data-parallel ranks that agree (1: off)");
  flags.AddUint32("agree-rank", &options_.agreement.rank, "this rank among them");
  AddClientSecurityFlags(flags, &c);
  flags.AddString("collective-timeout", &collective_timeout_, "a collective member that never arrives: fail after");
}

StatusOr<LoaderOptions> LoaderFlags::Finish() const {
  LoaderOptions o = options_;
  if (spec_.name.empty()) return InvalidArgumentError("--job is required");
  o.client.job = spec_.name;
  if (!attach_) o.client.spec = spec_;
  STOKER_ASSIGN_OR_RETURN(int64_t connect_ms, ParseDurationMs(connect_timeout_));
  o.client.connect_timeout = std::chrono::milliseconds(connect_ms);
  STOKER_ASSIGN_OR_RETURN(int64_t collective_ms, ParseDurationMs(collective_timeout_));
  o.tensor_parallel.timeout = o.agreement.timeout = std::chrono::milliseconds(collective_ms);
  if (device_ < -1 || device_ > 1024) return InvalidArgumentError("--device must be -1 or a CUDA ordinal");
  o.device = static_cast<int>(device_);
  o.client.gpu = o.device;
  if (dtype_ == "uint8") o.output.dtype = DType::kUInt8;
  if (dtype_ == "float32") o.output.dtype = DType::kFloat32;
  if (dtype_ == "float16") o.output.dtype = DType::kFloat16;
  if (dtype_ == "bfloat16") o.output.dtype = DType::kBFloat16;
  o.output.layout = layout_ == "nhwc" ? Layout::kNHWC : Layout::kNCHW;
  if (!mean_.empty()) {
    STOKER_ASSIGN_OR_RETURN(o.output.mean, ParseTriple(mean_, "mean"));
  }
  if (!std_.empty()) {
    STOKER_ASSIGN_OR_RETURN(o.output.std, ParseTriple(std_, "std"));
  }
  STOKER_RETURN_IF_ERROR(o.output.Validate());
  return o;
}

}  // namespace stoker::client
