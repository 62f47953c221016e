// libFuzzer target: a sealed batch's trailer (auth/seal.h) as a client decodes it, then a payload from the input
// opened under each of its tags with a fixed session: refused with its output zeroed, or (only for a frame the fixed
// worker really sealed, as the seeds hold) opened to a plaintext that seals back to the same bytes; never a crash.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "auth/seal.h"

namespace {

// The fixed handshake; tests/fuzz/make_seeds.cc seals its seeds with the same one.
struct Sessions {
  std::shared_ptr<stoker::SealSession> client, worker;
};

Sessions Derive() {
  const stoker::SealOffer client = stoker::SealOffer::FromParts(std::string(32, 'c'), std::string(32, '\x01'));
  const stoker::SealOffer worker = stoker::SealOffer::FromParts(std::string(32, 'w'), std::string(32, '\x02'));
  const stoker::SealTranscript t{"client:fuzz", "w-1", client.random(), client.public_key(), worker.random(),
                                 worker.public_key()};
  const std::string pair_key(32, 'k');
  auto c = stoker::SealSession::Derive(pair_key, t, client, stoker::SealDirection::kClientToWorker);
  auto w = stoker::SealSession::Derive(pair_key, t, worker, stoker::SealDirection::kWorkerToClient);
  if (!c.ok() || !w.ok()) std::abort();
  return {*c, *w};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Sessions sessions = Derive();
  // The integers come from the input's last bytes (the last is the frame count), the byte strings from its front.
  FuzzedDataProvider in(data, size);
  const size_t frames = in.ConsumeIntegralInRange<size_t>(0, 63);
  const size_t payload_size = in.ConsumeIntegralInRange<size_t>(0, 255);
  const size_t associated_size = in.ConsumeIntegralInRange<size_t>(0, 63);
  const std::vector<uint8_t> payload = in.ConsumeBytes<uint8_t>(payload_size);
  const std::vector<uint8_t> associated = in.ConsumeBytes<uint8_t>(associated_size);
  const std::vector<uint8_t> bytes = in.ConsumeRemainingBytes<uint8_t>();

  auto trailer = stoker::DecodeSealTrailer(bytes, frames);
  if (!trailer.ok()) return 0;
  if (trailer->tags.size() != frames || stoker::EncodeSealTrailer(*trailer) != bytes) std::abort();
  const std::array<std::span<const uint8_t>, 1> parts = {associated};
  std::vector<uint8_t> out(payload.size());
  for (size_t f = 0; f < frames; ++f) {
    const uint64_t counter = trailer->first_counter + f;
    std::fill(out.begin(), out.end(), 0xaa);
    if (!sessions.client->Open(counter, parts, payload, out, trailer->tags[f]).ok()) {
      if (std::any_of(out.begin(), out.end(), [](uint8_t b) { return b != 0; })) std::abort();  // left readable
      continue;
    }
    std::array<uint8_t, stoker::kSealTagBytes> tag{};
    sessions.worker->Seal(counter, parts, out, tag);
    if (out != payload || tag != trailer->tags[f]) std::abort();  // opened, yet not what the worker sealed
  }
  return 0;
}
