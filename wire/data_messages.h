// The data plane's messages (schema/data.capnp) as plain C++ values: credits from a client to a worker, batch
// headers and errors from a worker to a client. common/data_codec.h turns them into and out of frames; worker,
// client and tests never build these Cap'n Proto messages by hand. Field meanings are documented once, in
// schema/data.capnp.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "stoker/status.h"

namespace stoker {

// Bits of BatchHeader::flags (schema/data.capnp: sampleFlag*).
constexpr uint8_t kSampleFlagPadding = 1;      // a repeated sample filling the last global batch
constexpr uint8_t kSampleFlagQuarantined = 2;  // unreadable input: zero pixels, label -1, reported by id
// The longest quarantine reason a batch header may carry (schema/data.capnp: quarantineReasons).
constexpr size_t kMaxQuarantineReasonBytes = 48;

struct Credit {
  std::string job;
  uint32_t rank = 0;
  std::string client_id;
  uint32_t credits = 0;          // 0 withdraws
  uint64_t max_frame_bytes = 0;  // 0: each payload in one frame
  std::string session;           // SessionCheck of the client's session secret (auth/data_tickets.h); empty: none
  bool operator==(const Credit&) const = default;
};

// One sample of a gpu_decode job's batch (schema/data.capnp EncodedCrop).
struct EncodedCrop {
  uint32_t bytes = 0;
  bool encoded = false;
  bool flip = false;
  int32_t x = 0;
  int32_t y = 0;
  uint32_t width = 0;
  uint32_t height = 0;
  bool operator==(const EncodedCrop&) const = default;
};

struct BatchHeader {
  std::string job;
  uint32_t epoch = 0;
  uint32_t rank = 0;
  uint64_t index = 0;    // within the epoch
  uint64_t unit = 0;     // global unit of the lease that made it
  uint64_t attempt = 0;  // the lease's attempt (fencing token)
  std::string worker_id;
  uint32_t count = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
  std::vector<int64_t> labels;
  std::vector<uint64_t> sample_ids;
  std::vector<uint8_t> flags;
  uint64_t payload_bytes = 0;
  uint32_t payload_frames = 1;
  std::vector<std::string> quarantine_reasons;  // one per quarantined sample, in slot order (empty: not told)
  bool sealed = false;  // sealed payload frames, then a seal trailer (auth/seal.h)
  std::vector<EncodedCrop> crops;  // a gpu_decode job's: one per sample, the payload their bytes in slot order
  bool operator==(const BatchHeader&) const = default;
};

// A DataError about the connection rather than a job has an empty job. With FAILED_PRECONDITION it says the
// connection has no sealed session (the worker restarted its sessions, or evicted this one): the client offers
// again (schema/data.capnp: SealOffer).
constexpr const char* kNoSealSession = "no sealed session on this connection: offer again";

struct DataError {
  std::string job;
  uint32_t rank = 0;
  Status status;
  bool operator==(const DataError&) const = default;
};

// A sealed connection's handshake (auth/seal.h): the client's offer, then the worker's.
struct SealHello {
  std::string random;      // 32 bytes
  std::string public_key;  // 32 bytes, X25519
  bool operator==(const SealHello&) const = default;
};
struct SealWelcome {
  std::string random;
  std::string public_key;
  bool operator==(const SealWelcome&) const = default;
};

using DataBody = std::variant<Credit, BatchHeader, DataError, SealHello, SealWelcome>;

}  // namespace stoker
