// Sealed batches: the data plane's authenticated encryption (docs/design.md, "The data port", says why each piece
// is there). A client and a worker that meet on a data port already share a secret the coordinator gave them (the
// pair's seal key, auth/data_tickets.h). Each data connection then runs one handshake: both sides send 32 fresh
// random bytes and an ephemeral X25519 public key (libsodium), and both derive the session's keys with HKDF-SHA256
// (OpenSSL) from the pair's seal key, the X25519 shared secret, both nonces and both identities, as TLS 1.3's
// psk_dhe_ke does. Frames are sealed with AES-256-GCM (OpenSSL EVP) under a key per direction and generation:
// the nonce is the frame's 64-bit counter, a key seals kSealFramesPerKey frames and the next generation's key is
// derived from the session's secret, so no (key, nonce) pair ever repeats and every key stays far inside GCM's
// usage limits. A new connection, reconnect or restart runs a new handshake: new randomness, new keys.
//
// Thread safety: SealSession is immutable after Derive except for its key cache (locked) and its send counter
// (atomic): any thread may seal or open with it. ReplayWindow is one receiver's, unsynchronised.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/sync.h"
#include "stoker/status.h"

namespace stoker {

constexpr size_t kSealKeyBytes = 32;     // the pair's seal key, session secrets and AES-256 keys
constexpr size_t kSealRandomBytes = 32;  // each side's fresh randomness
constexpr size_t kSealPublicBytes = 32;  // an X25519 public key
constexpr size_t kSealTagBytes = 16;     // GCM's full tag
// Frames one key seals before the next generation's key takes over: 2^12 frames of at most 2 GiB (a whole batch of
// the largest a job may ask for; a GPU client's frames are 8 MiB) are at most 2^39 AES blocks, with a distinguishing
// advantage under (2^39)^2 / 2^128 = 2^-50; and 2^12 invocations are far below NIST SP 800-38D's 2^32 even for
// random nonces (ours are counters and cannot repeat).
constexpr uint64_t kSealFramesPerKey = uint64_t{1} << 12;

// One side's contribution to a handshake: fresh randomness and an ephemeral X25519 key pair, whose secret half is
// wiped when the offer goes.
class SealOffer {
 public:
  static SealOffer Make();
  // A fixed offer (known-answer tests): `secret` is the X25519 secret key.
  static SealOffer FromParts(std::string random, std::string secret);
  ~SealOffer();
  SealOffer(SealOffer&&) noexcept;
  SealOffer& operator=(SealOffer&&) noexcept;
  SealOffer(const SealOffer&) = delete;
  SealOffer& operator=(const SealOffer&) = delete;

  const std::string& random() const { return random_; }
  const std::string& public_key() const { return public_; }
  const std::string& secret_key() const { return secret_; }

 private:
  SealOffer() = default;
  std::string random_, public_, secret_;
};

// Which way a frame travels; each direction has its own keys.
enum class SealDirection { kWorkerToClient = 1, kClientToWorker = 2 };

// The public parts of one handshake, as both sides saw them.
struct SealTranscript {
  std::string client_identity;  // "<role>:<name>", the identity the client authenticated as
  std::string worker_id;
  std::string client_random, client_public;
  std::string worker_random, worker_public;
};

// The keys of one data connection.
class SealSession {
 public:
  // `pair_key`: the pair's seal key (kSealKeyBytes). `own`: this side's offer (its secret half is used once, here);
  // the transcript names both offers' public parts. InvalidArgument for parts of the wrong size or a peer key
  // that gives no shared secret (a low-order point).
  static StatusOr<std::shared_ptr<SealSession>> Derive(const std::string& pair_key, const SealTranscript& transcript,
                                                       const SealOffer& own, SealDirection sends);

  // `frames` consecutive counters for frames this side sends; the first is returned.
  uint64_t Reserve(uint64_t frames) { return next_counter_.fetch_add(frames); }

  // AES-256-GCM with the sending direction's key for `counter`'s generation: `data` encrypted in place, the
  // associated data (each part in order) authenticated with it, the tag written to `tag`.
  void Seal(uint64_t counter, std::span<const std::span<const uint8_t>> associated, std::span<uint8_t> data,
            std::span<uint8_t, kSealTagBytes> tag);
  // The receiving direction's: `in` decrypted to `out` (the same size; may be `in` itself). Unauthenticated if
  // the tag does not match, and then `out` is zeroed.
  Status Open(uint64_t counter, std::span<const std::span<const uint8_t>> associated, std::span<const uint8_t> in,
              std::span<uint8_t> out, std::span<const uint8_t, kSealTagBytes> tag);

  // The key for (direction, generation): exposed for the known-answer tests.
  std::array<uint8_t, kSealKeyBytes> KeyFor(SealDirection direction, uint64_t generation);

  ~SealSession();

 private:
  SealSession(const std::array<uint8_t, kSealKeyBytes>& secret, SealDirection sends);

  std::array<uint8_t, kSealKeyBytes> secret_;  // HKDF's pseudorandom key for this session
  const SealDirection sends_;
  std::atomic<uint64_t> next_counter_{0};
  Mutex mu_;
  std::map<std::pair<int, uint64_t>, std::array<uint8_t, kSealKeyBytes>> keys_ STOKER_GUARDED_BY(mu_);
};

// The counters a receiver has accepted: each once, and none more than kWindow behind the highest seen (batches are
// sealed in parallel, so they may arrive a little out of counter order).
class ReplayWindow {
 public:
  // Batches are sealed in parallel by a worker's pipeline threads, each taking its frames' counters when it
  // starts: a batch may arrive after others that took up to (threads - 1) x frames per batch counters after it.
  static constexpr uint64_t kWindow = uint64_t{1} << 16;
  // True (and remembered) for a counter not seen before and inside the window.
  bool Accept(uint64_t counter);

 private:
  uint64_t highest_ = 0;
  bool any_ = false;
  std::vector<uint64_t> bits_ = std::vector<uint64_t>(kWindow / 64, 0);
};

// The primitives as sealing uses them, for the known-answer tests: HKDF-SHA256 (RFC 5869) extract-and-expand
// (a non-empty `ikm`: OpenSSL refuses an empty key),
// and AES-256-GCM with a 96-bit IV, in place, with a 16-byte tag (DataLoss on a tag mismatch, `data` then zeroed).
void HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                std::span<uint8_t> out);
void AesGcmSeal(std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
                std::span<const std::span<const uint8_t>> associated, std::span<uint8_t> data,
                std::span<uint8_t, kSealTagBytes> tag);
Status AesGcmOpen(std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
                  std::span<const std::span<const uint8_t>> associated, std::span<const uint8_t> in,
                  std::span<uint8_t> out, std::span<const uint8_t, kSealTagBytes> tag);
// A sealed batch's payload frame's associated data after the header: its index, 4 bytes little-endian.
std::array<uint8_t, 4> SealFrameIndex(uint32_t frame);

// Which library's AES-256-GCM the build seals with: "ipsec-mb" or "openssl".
const char* SealCipherName();
// Whether AesGcmOpen streams a large frame's plaintext into another buffer with non-temporal stores (intel-ipsec-mb
// builds; seal.cc says when that pays): on Intel CPUs unless $STOKER_OPEN_STREAM=0 (=1: on anywhere), decided at
// first use, or as set here (tests, benchmarks).
bool SealOpenStreaming();
void SetSealOpenStreaming(bool on);
// GCM's IV for frame `counter`: four zero bytes, then the counter big-endian.
std::array<uint8_t, 12> SealNonce(uint64_t counter);

// The seal trailer: the last frame of a sealed batch, after its payload frames: the first frame's counter
// (8 bytes, little-endian) and one tag per payload frame, in order.
struct SealTrailer {
  uint64_t first_counter = 0;
  std::vector<std::array<uint8_t, kSealTagBytes>> tags;
};
std::vector<uint8_t> EncodeSealTrailer(const SealTrailer& trailer);
// InvalidArgument unless `bytes` is a trailer for exactly `frames` payload frames.
StatusOr<SealTrailer> DecodeSealTrailer(std::span<const uint8_t> bytes, size_t frames);

}  // namespace stoker
