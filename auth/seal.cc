// Sealed batches (seal.h): X25519 from libsodium, HKDF-SHA256 from OpenSSL's EVP interface, and AES-256-GCM from
// intel-ipsec-mb where the build has it (its AVX-512/VAES code seals about four times as fast per core as OpenSSL
// 3.0's on the machines we measured: bench/RESULTS.md section 18), else from OpenSSL's EVP interface; each used as
// its documentation shows, nothing below them ours. Both compute the same function (the known-answer tests hold
// for whichever is built in).
#include "auth/seal.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <sodium.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if STOKER_WITH_IPSEC_MB
#include <emmintrin.h>
#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>
#endif

#include "stoker/check.h"

namespace stoker {
namespace {

constexpr char kLabel[] = "stoker seal v1";  // a constant, not a string destroyed at exit

// HKDF (RFC 5869) with SHA-256 through EVP_KDF: extract-and-expand, extract only or expand only.
void Hkdf(int mode, std::span<const uint8_t> key, std::span<const uint8_t> salt, std::span<const uint8_t> info,
          std::span<uint8_t> out) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  STOKER_CHECK(kdf != nullptr, "OpenSSL has no HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  STOKER_CHECK(ctx != nullptr, "EVP_KDF_CTX_new failed");
  char digest[] = "SHA256";
  OSSL_PARAM params[6];
  OSSL_PARAM* p = params;
  *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  *p++ = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key.data()), key.size());
  if (!salt.empty()) {
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<uint8_t*>(salt.data()), salt.size());
  }
  if (!info.empty()) {
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info.data()), info.size());
  }
  *p = OSSL_PARAM_construct_end();
  const int ok = EVP_KDF_derive(ctx, out.data(), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  STOKER_CHECK(ok == 1, "HKDF failed");
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A length-prefixed field of the transcript, so no two transcripts read the same.
void Append(std::string& out, const std::string& field) {
  const uint32_t n = static_cast<uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += field;
}

#if STOKER_WITH_IPSEC_MB
// intel-ipsec-mb: one manager per thread (its state is not shared), set up for the best code path this CPU has.
IMB_MGR* ThreadManager() {
  struct Owned {
    IMB_MGR* manager = nullptr;
    ~Owned() { free_mb_mgr(manager); }
  };
  thread_local Owned owned{[] {
    IMB_MGR* m = alloc_mb_mgr(0);
    STOKER_CHECK(m != nullptr, "intel-ipsec-mb: no manager");
    // $STOKER_SEAL_ISA=avx2 keeps to 256-bit code, =avx and =sse to 128-bit code (benchmarks: what AVX-512 costs
    // the other work on the core).
    const char* env = std::getenv("STOKER_SEAL_ISA");
    const std::string isa = env != nullptr ? env : "";
    if (isa == "avx2") {
      init_mb_mgr_avx2(m);
    } else if (isa == "avx") {
      init_mb_mgr_avx(m);
    } else if (isa == "sse") {
      init_mb_mgr_sse(m);
    } else {
      init_mb_mgr_auto(m, nullptr);
    }
    STOKER_CHECK(imb_get_errno(m) == 0, "intel-ipsec-mb: the manager did not initialise");
    return m;
  }()};
  return owned.manager;
}

// The associated data in one piece, as the one-shot calls take it (a thread's buffer, reused).
std::span<const uint8_t> Joined(std::span<const std::span<const uint8_t>> parts) {
  thread_local std::vector<uint8_t> joined;
  joined.clear();
  for (std::span<const uint8_t> part : parts) joined.insert(joined.end(), part.begin(), part.end());
  return joined;
}

// Where a length of zero still needs a pointer.
uint8_t kNothing = 0;
uint8_t* OrNothing(uint8_t* p) { return p != nullptr ? p : &kNothing; }
const uint8_t* OrNothing(const uint8_t* p) { return p != nullptr ? p : &kNothing; }

// Opening a large frame into another buffer may go through a chunk that stays in this core's L1 cache, streamed
// on to `out` with non-temporal stores: `out` is a pinned slot the GPU reads next and this core never reads, so its
// lines need not be read in before they are written, a third less memory traffic than decrypting into it directly.
// Where one core's memory bandwidth is what bounds opening, that is what it saves; where it is not, the extra pass
// over the chunk costs. Measured (bench/RESULTS.md section 27): the GPU machines' Intel Xeon cores open 5.7 GB/s
// directly into rotating slots and 1.10x that streamed; an AMD EPYC core 10.1 GB/s directly and 0.77x streamed. So
// it is on for Intel CPUs, off for others; $STOKER_OPEN_STREAM=1 or =0 decides instead.
constexpr size_t kStreamChunk = 16 << 10;
constexpr size_t kStreamAbove = 128 << 10;

std::atomic<int> stream_opens{-1};  // -1: not decided yet (SealOpenStreaming)

// memcpy with non-temporal stores for the cache-line-aligned middle.
void StreamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64);  // whole lines streamed
  std::memcpy(dst, src, head);
  size_t at = head;
  for (; at + 64 <= n; at += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at + 48), d);
  }
  std::memcpy(dst + at, src + at, n - at);
}

// GCM's decryption of `in` into `out` through the cached chunk; `computed` gets the tag. The fence puts the
// streamed bytes in memory before anything this thread writes after (the batch's hand-off) can be seen.
void StreamedOpen(IMB_MGR* m, const gcm_key_data& expanded, const uint8_t* iv, std::span<const uint8_t> aad,
                  std::span<const uint8_t> in, std::span<uint8_t> out, uint8_t* computed) {
  alignas(64) thread_local uint8_t chunk[kStreamChunk];
  gcm_context_data context;
  IMB_AES256_GCM_INIT(m, &expanded, &context, iv, OrNothing(aad.data()), aad.size());
  for (size_t at = 0; at < in.size(); at += kStreamChunk) {
    const size_t n = std::min(kStreamChunk, in.size() - at);
    IMB_AES256_GCM_DEC_UPDATE(m, &expanded, &context, chunk, in.data() + at, n);
    StreamCopy(out.data() + at, chunk, n);
  }
  _mm_sfence();
  IMB_AES256_GCM_DEC_FINALIZE(m, &expanded, &context, computed, kSealTagBytes);
  sodium_memzero(chunk, sizeof(chunk));
  sodium_memzero(&context, sizeof(context));  // its keystream for a last partial block, its GHASH state
}

// AES-256-GCM over `in` into `out` (the same size; may be `in`). Encrypting writes `tag`; decrypting checks it and
// says whether it held.
bool Gcm(bool encrypt, std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
         std::span<const std::span<const uint8_t>> associated, std::span<const uint8_t> in, std::span<uint8_t> out,
         uint8_t* tag) {
  IMB_MGR* m = ThreadManager();
  alignas(64) gcm_key_data expanded;
  IMB_AES256_GCM_PRE(m, key.data(), &expanded);
  gcm_context_data context;
  const std::span<const uint8_t> aad = Joined(associated);
  uint8_t computed[kSealTagBytes];
  if (!encrypt && in.data() != out.data() && in.size() >= kStreamAbove && SealOpenStreaming()) {
    StreamedOpen(m, expanded, iv.data(), aad, in, out, computed);
  } else if (encrypt) {
    IMB_AES256_GCM_ENC(m, &expanded, &context, OrNothing(out.data()), OrNothing(in.data()), in.size(), iv.data(),
                       OrNothing(aad.data()), aad.size(), computed, kSealTagBytes);
  } else {
    IMB_AES256_GCM_DEC(m, &expanded, &context, OrNothing(out.data()), OrNothing(in.data()), in.size(), iv.data(),
                       OrNothing(aad.data()), aad.size(), computed, kSealTagBytes);
  }
  sodium_memzero(&expanded, sizeof(expanded));
  sodium_memzero(&context, sizeof(context));
  STOKER_CHECK(imb_get_errno(m) == 0, "intel-ipsec-mb: GCM failed");
  if (encrypt) {
    std::memcpy(tag, computed, kSealTagBytes);
    return true;
  }
  // The library returns the tag it computed and leaves the comparison to its caller: made in constant time.
  return CRYPTO_memcmp(computed, tag, kSealTagBytes) == 0;
}
#else
struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter>;

// One cipher context per thread, reused: creating one per frame costs more than a small frame's sealing.
EVP_CIPHER_CTX* ThreadCipher() {
  thread_local CipherCtx ctx(EVP_CIPHER_CTX_new());
  STOKER_CHECK(ctx != nullptr, "EVP_CIPHER_CTX_new failed");
  return ctx.get();
}

const EVP_CIPHER* Aes256Gcm() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  STOKER_CHECK(cipher != nullptr, "OpenSSL has no AES-256-GCM");
  return cipher;
}

void AddAssociated(EVP_CIPHER_CTX* ctx, std::span<const std::span<const uint8_t>> associated, bool encrypt) {
  for (std::span<const uint8_t> part : associated) {
    if (part.empty()) continue;
    int n = 0;
    const int ok = encrypt ? EVP_EncryptUpdate(ctx, nullptr, &n, part.data(), static_cast<int>(part.size()))
                           : EVP_DecryptUpdate(ctx, nullptr, &n, part.data(), static_cast<int>(part.size()));
    STOKER_CHECK(ok == 1, "GCM associated data failed");
  }
}

// EVP's update lengths are ints: a frame above 1 GiB goes in pieces.
constexpr size_t kChunk = size_t{1} << 30;

bool Gcm(bool encrypt, std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
         std::span<const std::span<const uint8_t>> associated, std::span<const uint8_t> in, std::span<uint8_t> out,
         uint8_t* tag) {
  EVP_CIPHER_CTX* ctx = ThreadCipher();
  STOKER_CHECK(EVP_CipherInit_ex2(ctx, Aes256Gcm(), key.data(), iv.data(), encrypt ? 1 : 0, nullptr) == 1,
               "GCM init failed");
  AddAssociated(ctx, associated, encrypt);
  for (size_t at = 0; at < in.size(); at += kChunk) {
    const int n_in = static_cast<int>(std::min(kChunk, in.size() - at));
    int n = 0;
    STOKER_CHECK(EVP_CipherUpdate(ctx, out.data() + at, &n, in.data() + at, n_in) == 1 && n == n_in, "GCM failed");
  }
  int n = 0;
  if (encrypt) {
    STOKER_CHECK(EVP_CipherFinal_ex(ctx, nullptr, &n) == 1, "GCM final failed");
    STOKER_CHECK(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, kSealTagBytes, tag) == 1, "GCM tag failed");
    return true;
  }
  STOKER_CHECK(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, kSealTagBytes, tag) == 1, "GCM set tag failed");
  return EVP_CipherFinal_ex(ctx, nullptr, &n) == 1;
}
#endif

}  // namespace

SealOffer SealOffer::Make() {
  static const int initialised = sodium_init();  // as libsodium's documentation asks, once, before its first use
  STOKER_CHECK(initialised >= 0, "libsodium failed to initialise");
  std::string random(kSealRandomBytes, '\0'), secret(crypto_scalarmult_SCALARBYTES, '\0');
  randombytes_buf(random.data(), random.size());
  randombytes_buf(secret.data(), secret.size());
  return FromParts(std::move(random), std::move(secret));
}

SealOffer SealOffer::FromParts(std::string random, std::string secret) {
  STOKER_CHECK(random.size() == kSealRandomBytes && secret.size() == crypto_scalarmult_SCALARBYTES,
               "a seal offer of the wrong size");
  SealOffer offer;
  offer.random_ = std::move(random);
  offer.secret_ = std::move(secret);
  offer.public_.assign(crypto_scalarmult_BYTES, '\0');
  crypto_scalarmult_base(reinterpret_cast<unsigned char*>(offer.public_.data()),
                         reinterpret_cast<const unsigned char*>(offer.secret_.data()));
  return offer;
}

SealOffer::~SealOffer() {
  if (!secret_.empty()) sodium_memzero(secret_.data(), secret_.size());
}
SealOffer::SealOffer(SealOffer&&) noexcept = default;
SealOffer& SealOffer::operator=(SealOffer&& other) noexcept {
  if (this != &other) {
    if (!secret_.empty()) sodium_memzero(secret_.data(), secret_.size());  // the replaced secret goes now
    random_ = std::move(other.random_);
    public_ = std::move(other.public_);
    secret_ = std::move(other.secret_);
  }
  return *this;
}

StatusOr<std::shared_ptr<SealSession>> SealSession::Derive(const std::string& pair_key,
                                                           const SealTranscript& t, const SealOffer& own,
                                                           SealDirection sends) {
  if (pair_key.size() != kSealKeyBytes) return InvalidArgumentError("a seal key must be 32 bytes");
  if (t.client_random.size() != kSealRandomBytes || t.worker_random.size() != kSealRandomBytes ||
      t.client_public.size() != kSealPublicBytes || t.worker_public.size() != kSealPublicBytes) {
    return InvalidArgumentError("a seal handshake part has the wrong size");
  }
  const bool client = sends == SealDirection::kClientToWorker;
  if ((client ? t.client_public : t.worker_public) != own.public_key()) {
    return InvalidArgumentError("the transcript does not hold this side's offer");
  }
  const std::string& peer = client ? t.worker_public : t.client_public;
  // Input keying material: the pair's key, then the ephemeral X25519 secret (libsodium refuses a peer key that
  // gives an all-zero one).
  std::array<uint8_t, kSealKeyBytes + crypto_scalarmult_BYTES> ikm{};
  std::memcpy(ikm.data(), pair_key.data(), kSealKeyBytes);
  if (crypto_scalarmult(ikm.data() + kSealKeyBytes, reinterpret_cast<const unsigned char*>(own.secret_key().data()),
                        reinterpret_cast<const unsigned char*>(peer.data())) != 0) {
    sodium_memzero(ikm.data(), ikm.size());
    return InvalidArgumentError("the peer's seal key gives no shared secret");
  }
  const std::string salt = t.client_random + t.worker_random;
  std::string info = kLabel;
  for (const std::string* f : {&t.client_identity, &t.worker_id, &t.client_public, &t.worker_public}) Append(info, *f);
  std::array<uint8_t, kSealKeyBytes> secret{};
  Hkdf(EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, ikm, Bytes(salt), Bytes(info), secret);
  sodium_memzero(ikm.data(), ikm.size());
  auto session = std::shared_ptr<SealSession>(new SealSession(secret, sends));
  sodium_memzero(secret.data(), secret.size());
  return session;
}

SealSession::SealSession(const std::array<uint8_t, kSealKeyBytes>& secret, SealDirection sends)
    : secret_(secret), sends_(sends) {}

SealSession::~SealSession() {
  sodium_memzero(secret_.data(), secret_.size());
  MutexLock lock(mu_);
  for (auto& [at, key] : keys_) sodium_memzero(key.data(), key.size());
}

std::array<uint8_t, kSealKeyBytes> SealSession::KeyFor(SealDirection direction, uint64_t generation) {
  const std::pair<int, uint64_t> at{static_cast<int>(direction), generation};
  MutexLock lock(mu_);
  if (auto it = keys_.find(at); it != keys_.end()) return it->second;
  std::string info = std::string(kLabel) +
                     (direction == SealDirection::kWorkerToClient ? " worker->client " : " client->worker ");
  for (int i = 7; i >= 0; --i) info.push_back(static_cast<char>(generation >> (8 * i)));
  std::array<uint8_t, kSealKeyBytes> key{};
  Hkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, secret_, {}, Bytes(info), key);
  // A few generations are kept: frames sealed in parallel straddle a generation's end.
  if (keys_.size() >= 8) {
    sodium_memzero(keys_.begin()->second.data(), kSealKeyBytes);
    keys_.erase(keys_.begin());
  }
  keys_[at] = key;
  return key;
}

void SealSession::Seal(uint64_t counter, std::span<const std::span<const uint8_t>> associated,
                       std::span<uint8_t> data, std::span<uint8_t, kSealTagBytes> tag) {
  std::array<uint8_t, kSealKeyBytes> key = KeyFor(sends_, counter / kSealFramesPerKey);
  AesGcmSeal(key, SealNonce(counter), associated, data, tag);
  sodium_memzero(key.data(), key.size());
}

Status SealSession::Open(uint64_t counter, std::span<const std::span<const uint8_t>> associated,
                         std::span<const uint8_t> in, std::span<uint8_t> out,
                         std::span<const uint8_t, kSealTagBytes> tag) {
  const SealDirection receives =
      sends_ == SealDirection::kWorkerToClient ? SealDirection::kClientToWorker : SealDirection::kWorkerToClient;
  std::array<uint8_t, kSealKeyBytes> key = KeyFor(receives, counter / kSealFramesPerKey);
  Status opened = AesGcmOpen(key, SealNonce(counter), associated, in, out, tag);
  sodium_memzero(key.data(), key.size());
  return opened;
}

std::array<uint8_t, 4> SealFrameIndex(uint32_t frame) {
  return {static_cast<uint8_t>(frame), static_cast<uint8_t>(frame >> 8), static_cast<uint8_t>(frame >> 16),
          static_cast<uint8_t>(frame >> 24)};
}

bool SealOpenStreaming() {
#if STOKER_WITH_IPSEC_MB
  int on = stream_opens.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* env = std::getenv("STOKER_OPEN_STREAM");
    int decided = 0;
    if (env != nullptr && (std::string(env) == "0" || std::string(env) == "1")) {
      decided = std::string(env) == "1" ? 1 : 0;
    } else {
      __builtin_cpu_init();
      decided = __builtin_cpu_is("intel") ? 1 : 0;
    }
    // Unless SetSealOpenStreaming decided meanwhile: then its choice stands.
    on = stream_opens.compare_exchange_strong(on, decided, std::memory_order_relaxed) ? decided : on;
  }
  return on == 1;
#else
  return false;
#endif
}

void SetSealOpenStreaming(bool on) {
#if STOKER_WITH_IPSEC_MB
  stream_opens.store(on ? 1 : 0, std::memory_order_relaxed);
#else
  (void)on;
#endif
}

const char* SealCipherName() {
#if STOKER_WITH_IPSEC_MB
  return "ipsec-mb";
#else
  return "openssl";
#endif
}

std::array<uint8_t, 12> SealNonce(uint64_t counter) {
  std::array<uint8_t, 12> iv{};
  for (int i = 0; i < 8; ++i) iv[11 - i] = static_cast<uint8_t>(counter >> (8 * i));
  return iv;
}

void HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                std::span<uint8_t> out) {
  Hkdf(EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, ikm, salt, info, out);
}

void AesGcmSeal(std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
                std::span<const std::span<const uint8_t>> associated, std::span<uint8_t> data,
                std::span<uint8_t, kSealTagBytes> tag) {
  Gcm(/*encrypt=*/true, key, iv, associated, data, data, tag.data());
}

Status AesGcmOpen(std::span<const uint8_t, kSealKeyBytes> key, std::span<const uint8_t, 12> iv,
                  std::span<const std::span<const uint8_t>> associated, std::span<const uint8_t> in,
                  std::span<uint8_t> out, std::span<const uint8_t, kSealTagBytes> tag) {
  STOKER_CHECK(in.size() == out.size(), "opening into a buffer of another size");
  uint8_t expected[kSealTagBytes];
  std::memcpy(expected, tag.data(), kSealTagBytes);
  if (!Gcm(/*encrypt=*/false, key, iv, associated, in, out, expected)) {
    if (!out.empty()) std::memset(out.data(), 0, out.size());  // nothing unauthenticated stays readable
    return DataLossError("a sealed frame failed its tag");
  }
  return Status::Ok();
}

bool ReplayWindow::Accept(uint64_t counter) {
  if (!any_ || counter > highest_) {
    // Slide: the counters between the old highest and the new one are unseen.
    const uint64_t shift = any_ ? counter - highest_ : kWindow;
    if (shift >= kWindow) {
      std::fill(bits_.begin(), bits_.end(), 0);
    } else {
      for (uint64_t c = highest_ + 1; c < counter; ++c) bits_[(c % kWindow) / 64] &= ~(uint64_t{1} << (c % 64));
    }
    highest_ = counter;
    any_ = true;
  } else if (highest_ - counter >= kWindow) {
    return false;  // too old to tell: refused
  } else if (bits_[(counter % kWindow) / 64] & (uint64_t{1} << (counter % 64))) {
    return false;  // seen
  }
  bits_[(counter % kWindow) / 64] |= uint64_t{1} << (counter % 64);
  return true;
}

std::vector<uint8_t> EncodeSealTrailer(const SealTrailer& trailer) {
  std::vector<uint8_t> out(8 + trailer.tags.size() * kSealTagBytes);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(trailer.first_counter >> (8 * i));
  for (size_t f = 0; f < trailer.tags.size(); ++f) {
    std::memcpy(out.data() + 8 + f * kSealTagBytes, trailer.tags[f].data(), kSealTagBytes);
  }
  return out;
}

StatusOr<SealTrailer> DecodeSealTrailer(std::span<const uint8_t> bytes, size_t frames) {
  if (frames == 0 || frames > (bytes.size() / kSealTagBytes) || bytes.size() != 8 + frames * kSealTagBytes) {
    return InvalidArgumentError("a seal trailer of " + std::to_string(bytes.size()) + " bytes for " +
                                std::to_string(frames) + " payload frames");
  }
  SealTrailer t;
  for (int i = 0; i < 8; ++i) t.first_counter |= uint64_t{bytes[i]} << (8 * i);
  if (t.first_counter > UINT64_MAX - frames) return InvalidArgumentError("a seal trailer's counter overflows");
  t.tags.resize(frames);
  for (size_t f = 0; f < frames; ++f) std::memcpy(t.tags[f].data(), bytes.data() + 8 + f * kSealTagBytes, kSealTagBytes);
  return t;
}

}  // namespace stoker
