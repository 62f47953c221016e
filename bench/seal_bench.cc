// AES-256-GCM per core as sealing uses it, against memcpy of the same bytes on the same core, in the same run: the
// build's sealing path (auth/seal.h: intel-ipsec-mb where built in, else OpenSSL) and OpenSSL's EVP directly (the
// libcrypto this process loaded), over frames of 8 MiB (a GPU client's) with 4 KiB of associated data.
//
//   seal_bench [--seconds 1.5]
//
// Prints GB/s for each, in place and from one buffer into another, and each one's ratio to memcpy; and opening
// into 32 rotating slots (a client's pinned buffers) directly and streamed (auth/seal.h, SealOpenStreaming).
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "auth/seal.h"
#include "bench/bench_main.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.seconds = 1.5} {}
};

// GB/s of `step` over `bytes` per call, run for `seconds`.
double Rate(double seconds, size_t bytes, const std::function<void()>& step) {
  const auto start = Clock::now();
  uint64_t calls = 0;
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    step();
    ++calls;
  }
  return double(calls) * double(bytes) / std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
}

// OpenSSL's EVP AES-256-GCM, one frame: `in` to `out` (which may be `in`).
void OpenSslSeal(EVP_CIPHER_CTX* ctx, const EVP_CIPHER* gcm, const uint8_t* key, const uint8_t* iv,
                 const std::vector<uint8_t>& aad, const uint8_t* in, uint8_t* out, size_t n, uint8_t* tag) {
  int len = 0;
  if (EVP_EncryptInit_ex2(ctx, gcm, key, iv, nullptr) != 1 ||
      EVP_EncryptUpdate(ctx, nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx, out, &len, in, static_cast<int>(n)) != 1 || EVP_EncryptFinal_ex(ctx, nullptr, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1) {
    std::abort();
  }
}

struct Figures {
  double memcpy_gbps = 0, build_in_place = 0, build_copying = 0, openssl_in_place = 0, openssl_copying = 0;
  double build_rotating = 0, build_streamed = 0;  // into rotating slots: directly, streamed
};

bench::Outcome RunBench(const Options& o) {
  const size_t n = size_t{8} << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  const std::vector<uint8_t> aad(4096, 3);
  const std::span<const uint8_t> associated[] = {aad};
  std::array<uint8_t, kSealKeyBytes> key{};
  key.fill(7);
  const std::array<uint8_t, 12> iv = SealNonce(1);
  std::array<uint8_t, kSealTagBytes> tag{};
  Figures f;
  f.memcpy_gbps = Rate(o.seconds, n, [&] { std::memcpy(b.data(), a.data(), n); });
  f.build_in_place = Rate(o.seconds, n, [&] { AesGcmSeal(key, iv, associated, a, tag); });
  // Opening into another buffer (as a client opening into a pinned slot would): seal once, open again and again.
  AesGcmSeal(key, iv, associated, a, tag);
  f.build_copying = Rate(o.seconds, n, [&] {
    if (!AesGcmOpen(key, iv, associated, a, b, tag).ok()) std::abort();
  });
  // Into a client's many pinned slots, each written once before it comes round again (32 x 8 MiB, beyond the
  // caches): directly, then streamed (SealOpenStreaming), then directly again; the two direct runs averaged.
  std::vector<std::vector<uint8_t>> slots(32, std::vector<uint8_t>(n, 1));
  size_t next = 0;
  const bool streaming = SealOpenStreaming();
  auto rotating = [&](bool stream) {
    SetSealOpenStreaming(stream);
    return Rate(o.seconds, n, [&] {
      if (!AesGcmOpen(key, iv, associated, a, slots[next++ % slots.size()], tag).ok()) std::abort();
    });
  };
  const double direct1 = rotating(false);
  f.build_streamed = rotating(true);
  f.build_rotating = (direct1 + rotating(false)) / 2;
  SetSealOpenStreaming(streaming);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_CIPHER* gcm = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (ctx == nullptr || gcm == nullptr) std::abort();
  f.openssl_in_place = Rate(o.seconds, n, [&] {
    OpenSslSeal(ctx, gcm, key.data(), iv.data(), aad, a.data(), a.data(), n, tag.data());
  });
  f.openssl_copying = Rate(o.seconds, n, [&] {
    OpenSslSeal(ctx, gcm, key.data(), iv.data(), aad, a.data(), b.data(), n, tag.data());
  });
  EVP_CIPHER_free(gcm);
  EVP_CIPHER_CTX_free(ctx);
  std::printf("one core, frames of 8 MiB                     GB/s    / memcpy\n");
  std::printf("memcpy (baseline)                         %9.2f    1.00\n", f.memcpy_gbps);
  std::printf("sealing as built (%-8s), in place     %9.2f    %.2f\n", SealCipherName(), f.build_in_place,
              f.build_in_place / f.memcpy_gbps);
  std::printf("opening as built, into another buffer    %9.2f    %.2f\n", f.build_copying,
              f.build_copying / f.memcpy_gbps);
  std::printf("opening into 32 rotating slots, directly  %9.2f    %.2f\n", f.build_rotating,
              f.build_rotating / f.memcpy_gbps);
  std::printf("... streamed (non-temporal stores)        %9.2f    %.2f   (streamed / directly %.3f)\n",
              f.build_streamed, f.build_streamed / f.memcpy_gbps, f.build_streamed / f.build_rotating);
  std::printf("OpenSSL EVP, in place                     %9.2f    %.2f   (libcrypto %s)\n", f.openssl_in_place,
              f.openssl_in_place / f.memcpy_gbps, OpenSSL_version(OPENSSL_VERSION_STRING));
  std::printf("OpenSSL EVP, into another buffer          %9.2f    %.2f\n", f.openssl_copying,
              f.openssl_copying / f.memcpy_gbps);
  std::ostringstream j;
  j << "{\"cipher\": \"" << SealCipherName() << "\", \"openssl\": \"" << OpenSSL_version(OPENSSL_VERSION_STRING)
    << "\", \"memcpy_gbps\": " << f.memcpy_gbps << ", \"sealed_in_place_gbps\": " << f.build_in_place
    << ", \"opened_copying_gbps\": " << f.build_copying << ", \"openssl_in_place_gbps\": " << f.openssl_in_place
    << ", \"openssl_copying_gbps\": " << f.openssl_copying << ", \"opened_rotating_gbps\": " << f.build_rotating
    << ", \"opened_streamed_gbps\": " << f.build_streamed << "}";
  return {0, j.str()};
}

void AddFlags(FlagSet& flags, Options& o) { bench::AddCommonFlags(flags, o, "timed seconds per measurement", {}); }

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("seal_bench",
                  "AES-256-GCM per core as sealing uses it (the build's cipher and OpenSSL's EVP) against memcpy, "
                  "frames of 8 MiB.");
