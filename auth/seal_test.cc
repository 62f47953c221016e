// Sealed batches: known answers for X25519, HKDF-SHA256, AES-256-GCM and the handshake; counters, replay, trailers.
#include "auth/seal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace stoker {
namespace {

using Bytes = std::vector<uint8_t>;
using Parts = std::vector<std::span<const uint8_t>>;

Bytes Unhex(std::string_view hex) {
  Bytes out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}
std::string UnhexString(std::string_view hex) {
  const Bytes b = Unhex(hex);
  return std::string(b.begin(), b.end());
}
std::string Hex(std::span<const uint8_t> bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {kDigits[b >> 4], kDigits[b & 15]};
  return out;
}
std::string Hex(const std::string& s) { return Hex({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
std::span<const uint8_t> U8(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
template <size_t N>
std::span<const uint8_t, N> Sized(const Bytes& b) {
  EXPECT_EQ(b.size(), N);
  return std::span<const uint8_t, N>(b.data(), N);
}

// NIST GCM specification, test case 16 (AES-256, 96-bit IV, 20 bytes of associated data, 60 of plaintext).
const Bytes kGcmKey = Unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
const Bytes kGcmIv = Unhex("cafebabefacedbaddecaf888");
const Bytes kGcmAad = Unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
const Bytes kGcmPlain = Unhex(
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
// Checked with Python's cryptography (AESGCM(key).encrypt(iv, plaintext, aad)); the GCM spec prints the same.
const std::string kGcmCipherHex =
    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662";
const std::string kGcmTagHex = "76fc6ece0f4e1768cddf8853bb2d551b";

// Opens `sealed` with `tag` and `aad` into a buffer filled with 0xaa first, so that a zeroed output shows.
std::pair<Status, Bytes> GcmOpen(const Bytes& sealed, const Bytes& tag, const Parts& aad) {
  Bytes out(sealed.size(), 0xaa);
  Status s = AesGcmOpen(Sized<32>(kGcmKey), Sized<12>(kGcmIv), aad, sealed, out, Sized<16>(tag));
  return {s, out};
}

TEST(SealPrimitives, AesGcmMatchesTheGcmSpecsTestCase16) {
  Bytes data = kGcmPlain;
  std::array<uint8_t, kSealTagBytes> tag{};
  AesGcmSeal(Sized<32>(kGcmKey), Sized<12>(kGcmIv), Parts{kGcmAad}, data, tag);
  EXPECT_EQ(Hex(data), kGcmCipherHex);
  EXPECT_EQ(Hex(tag), kGcmTagHex);
  // The associated data in parts (an empty one among them) authenticates as the whole.
  const std::span<const uint8_t> aad(kGcmAad);
  Bytes split = kGcmPlain;
  std::array<uint8_t, kSealTagBytes> split_tag{};
  AesGcmSeal(Sized<32>(kGcmKey), Sized<12>(kGcmIv), Parts{aad.first(7), {}, aad.subspan(7)}, split, split_tag);
  EXPECT_EQ(Hex(split), kGcmCipherHex);
  EXPECT_EQ(Hex(split_tag), kGcmTagHex);
  const Bytes sealed = Unhex(kGcmCipherHex), good_tag = Unhex(kGcmTagHex);
  auto [opened, plain] = GcmOpen(sealed, good_tag, Parts{kGcmAad});
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_EQ(plain, kGcmPlain);
  auto [opened_split, plain_split] = GcmOpen(sealed, good_tag, Parts{aad.first(13), aad.subspan(13)});
  ASSERT_TRUE(opened_split.ok()) << opened_split.ToString();
  EXPECT_EQ(plain_split, kGcmPlain);
  Bytes in_place = sealed;  // `out` may be `in`
  ASSERT_TRUE(AesGcmOpen(Sized<32>(kGcmKey), Sized<12>(kGcmIv), Parts{kGcmAad}, in_place, in_place,
                         Sized<16>(good_tag)).ok());
  EXPECT_EQ(in_place, kGcmPlain);
}

TEST(SealPrimitives, AesGcmRefusesAnyFlippedByteAndZeroesTheOutput) {
  const Bytes sealed = Unhex(kGcmCipherHex), tag = Unhex(kGcmTagHex);
  const auto refused = [&](const Bytes& in, const Bytes& t, const Parts& aad, const std::string& what) {
    auto [s, out] = GcmOpen(in, t, aad);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << what;
    EXPECT_EQ(out, Bytes(in.size(), 0)) << what << ": the output is zeroed";
  };
  const auto flipped = [](Bytes b, size_t at) { b[at] ^= 0x01; return b; };
  for (size_t at : {0, 31, 59}) refused(flipped(sealed, at), tag, {kGcmAad}, "ciphertext " + std::to_string(at));
  for (size_t at : {0, 15}) refused(sealed, flipped(tag, at), {kGcmAad}, "tag " + std::to_string(at));
  for (size_t at : {0, 19}) refused(sealed, tag, {flipped(kGcmAad, at)}, "associated " + std::to_string(at));
  refused(sealed, tag, {std::span(kGcmAad).first(19)}, "the associated data one byte short");
  refused(sealed, tag, {}, "no associated data");
  refused({}, flipped(tag, 0), {kGcmAad}, "an empty frame");  // its output is empty (data() may be null)
}

// A frame large enough to be streamed (128 KiB or more, where the build can), into a destination at a line-aligned and an odd
// offset: the same plaintext streamed or not, and a flipped byte of the frame, its associated data or its tag
// refused either way with the whole output zeroed.
TEST(SealPrimitives, ALargeFrameOpensTheSameStreamedOrNot) {
  const Bytes key(32, 7);
  Bytes aad(100, 3);
  const std::array<uint8_t, 12> iv = SealNonce(9);
  Bytes plain(3 * (1 << 20) + 77);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  Bytes sealed = plain;
  std::array<uint8_t, 16> tag{};
  AesGcmSeal(Sized<32>(key), iv, Parts{aad}, sealed, tag);
  struct Restore {
    bool was = SealOpenStreaming();
    ~Restore() { SetSealOpenStreaming(was); }
  } restore;
  const bool can_stream = std::string(SealCipherName()) == "ipsec-mb";
  for (bool stream : {false, true}) {
    SetSealOpenStreaming(stream);
    EXPECT_EQ(SealOpenStreaming(), stream && can_stream);
    for (size_t offset : {0, 5}) {
      Bytes buffer(plain.size() + 64 + offset, 0);
      // (a 64-byte-aligned start, then `offset` past it)
      const size_t align = (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
      const std::span<uint8_t> out = std::span(buffer).subspan(align + offset, plain.size());
      const std::string what = std::string(stream ? "streamed" : "directly") + " at +" + std::to_string(offset);
      ASSERT_TRUE(AesGcmOpen(Sized<32>(key), iv, Parts{aad}, sealed, out, tag).ok()) << what;
      EXPECT_TRUE(std::equal(out.begin(), out.end(), plain.begin())) << what;
      const auto refused = [&](const Bytes& frame, const Bytes& associated, std::array<uint8_t, 16> t,
                               const std::string& flip) {
        EXPECT_EQ(AesGcmOpen(Sized<32>(key), iv, Parts{associated}, frame, out, t).code(), StatusCode::kDataLoss)
            << what << ", " << flip;
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; })) << what << ", " << flip;
      };
      Bytes flipped = sealed;
      flipped[2 * (1 << 20) + 1] ^= 0x10;
      refused(flipped, aad, tag, "the frame");
      Bytes other_aad = aad;
      other_aad[99] ^= 1;
      refused(sealed, other_aad, tag, "the associated data");
      std::array<uint8_t, 16> other_tag = tag;
      other_tag[15] ^= 1;
      refused(sealed, aad, other_tag, "the tag");
    }
  }
}

// RFC 5869, appendix A; the outputs checked with Python's cryptography (HKDF(SHA256(), 42, salt, info).derive).
TEST(SealPrimitives, HkdfMatchesRfc5869) {
  const Bytes ikm(22, 0x0b);
  Bytes okm(42);
  HkdfSha256(ikm, Unhex("000102030405060708090a0b0c"), Unhex("f0f1f2f3f4f5f6f7f8f9"), okm);
  EXPECT_EQ(Hex(okm), "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
      << "test case 1";
  HkdfSha256(ikm, {}, {}, okm);
  EXPECT_EQ(Hex(okm), "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
      << "test case 3: empty salt and info";
}

// RFC 7748, section 6.1; the public keys checked with Python's cryptography (X25519PrivateKey).
const std::string kAliceSecret = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
const std::string kBobSecret = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb";

TEST(SealPrimitives, X25519MatchesRfc7748) {
  const SealOffer alice = SealOffer::FromParts(std::string(32, 'a'), UnhexString(kAliceSecret));
  const SealOffer bob = SealOffer::FromParts(std::string(32, 'b'), UnhexString(kBobSecret));
  EXPECT_EQ(Hex(alice.public_key()), "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  EXPECT_EQ(Hex(bob.public_key()), "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  const SealOffer made = SealOffer::Make(), again = SealOffer::Make();
  EXPECT_EQ(made.random().size(), kSealRandomBytes);
  EXPECT_EQ(made.public_key().size(), kSealPublicBytes);
  EXPECT_NE(made.random(), again.random());
  EXPECT_NE(made.public_key(), again.public_key());
  EXPECT_EQ(SealOffer::FromParts(made.random(), made.secret_key()).public_key(), made.public_key());
}

TEST(SealPrimitives, TheNonceIsFourZeroBytesThenTheCounterBigEndian) {
  EXPECT_EQ(Hex(SealNonce(0)), "000000000000000000000000");
  EXPECT_EQ(Hex(SealNonce(0x0102030405060708)), "000000000102030405060708");
  EXPECT_EQ(Hex(SealNonce(std::numeric_limits<uint64_t>::max())), "00000000ffffffffffffffff");
}

// A fixed handshake: the client's offer is RFC 7748's Alice, the worker's Bob.
struct Handshake {
  std::string pair_key;
  SealOffer client, worker;
  SealTranscript transcript;
};

const std::string kPairKey = UnhexString("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");

Handshake Fixed(std::string pair_key = kPairKey, std::string client_random = std::string(32, '\x11'),
                std::string worker_random = std::string(32, '\x22')) {
  Handshake h{std::move(pair_key), SealOffer::FromParts(std::move(client_random), UnhexString(kAliceSecret)),
              SealOffer::FromParts(std::move(worker_random), UnhexString(kBobSecret)), {}};
  h.transcript = {"client:alice", "w-1", h.client.random(), h.client.public_key(), h.worker.random(),
                  h.worker.public_key()};
  return h;
}

// The session of the side that sends `sends`, or null (and a failure) if it does not derive.
std::shared_ptr<SealSession> SideOf(const Handshake& h, SealDirection sends) {
  const SealOffer& own = sends == SealDirection::kClientToWorker ? h.client : h.worker;
  auto s = SealSession::Derive(h.pair_key, h.transcript, own, sends);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}
std::shared_ptr<SealSession> ClientOf(const Handshake& h) { return SideOf(h, SealDirection::kClientToWorker); }
std::shared_ptr<SealSession> WorkerOf(const Handshake& h) { return SideOf(h, SealDirection::kWorkerToClient); }

// A frame sealed by `from` at `counter`, as ciphertext and tag.
struct Frame {
  Bytes data;
  std::array<uint8_t, kSealTagBytes> tag{};
};
Frame SealFrame(SealSession& from, uint64_t counter, const std::string& plain, const std::string& aad) {
  Frame f{Bytes(plain.begin(), plain.end())};
  from.Seal(counter, Parts{U8(aad)}, f.data, f.tag);
  return f;
}
// True if `to` opens `f` at `counter` with `aad` to `plain`; on failure the output must be zeroed.
bool Opens(SealSession& to, const Frame& f, uint64_t counter, const std::string& aad, const std::string& plain) {
  Bytes out(f.data.size(), 0xaa);
  const bool opened = to.Open(counter, Parts{U8(aad)}, f.data, out, f.tag).ok();
  EXPECT_TRUE(opened || out == Bytes(out.size(), 0)) << "a refused frame's output is zeroed";
  return opened && out == Bytes(plain.begin(), plain.end());
}

// Expected values from the construction as seal.cc writes it, computed in Python with the cryptography package:
//   shared = X25519(alice, bob_public); ikm = pair_key (00 01 .. 1f) || shared
//   salt = client_random (32 x 0x11) || worker_random (32 x 0x22)
//   info = b"stoker seal v1" + for f in (b"client:alice", b"w-1", client_public, worker_public):
//          struct.pack("<I", len(f)) + f
//   secret = HKDF(SHA256(), 32, salt, info).derive(ikm)
//   key(direction, g) = HKDFExpand(SHA256(), 32, b"stoker seal v1 worker->client " (or "client->worker ")
//                       + struct.pack(">Q", g)).derive(secret)
//   frame = AESGCM(key(w2c, 0)).encrypt(b"\0" * 4 + struct.pack(">Q", 7), b"stoker frame", b"batch-7")
//   credit = AESGCM(key(c2w, 5)).encrypt(b"\0" * 4 + struct.pack(">Q", 5 * 4096 + 3), b"credit", b"")
constexpr std::string_view kW2C0 = "16b72b7b312cecc6fbf649052d750a4cfead3a3769c0e108891c21b9ce559d77";
constexpr std::string_view kW2C1 = "3e6e65ebc8c1bc87ccf539c771a085b3aa7b29db19b6f08a97dcae7339db58dd";
constexpr std::string_view kC2W5 = "665d6ab9687755741756ab7ccdc7dc2a95e55a9833467dbc81231f7bbc76eee3";

TEST(SealSession, BothSidesDeriveThePythonComputedKeys) {
  const Handshake h = Fixed();
  auto client = ClientOf(h), worker = WorkerOf(h);
  ASSERT_TRUE(client && worker);
  for (SealSession* s : {client.get(), worker.get()}) {
    EXPECT_EQ(Hex(s->KeyFor(SealDirection::kWorkerToClient, 0)), kW2C0);
    EXPECT_EQ(Hex(s->KeyFor(SealDirection::kWorkerToClient, 1)), kW2C1);
    EXPECT_EQ(Hex(s->KeyFor(SealDirection::kClientToWorker, 5)), kC2W5);
  }
  // Past the key cache (8 keys) and back: the same keys.
  for (uint64_t g = 0; g < 20; ++g) {
    EXPECT_EQ(client->KeyFor(SealDirection::kClientToWorker, g), worker->KeyFor(SealDirection::kClientToWorker, g));
  }
  EXPECT_EQ(Hex(client->KeyFor(SealDirection::kWorkerToClient, 0)), kW2C0);
  const Frame frame = SealFrame(*worker, 7, "stoker frame", "batch-7");
  EXPECT_EQ(Hex(frame.data), "b2cc6015c22d645715979910");
  EXPECT_EQ(Hex(frame.tag), "178b18924b80663f0d07f1aa52c7d41c");
  EXPECT_TRUE(Opens(*client, frame, 7, "batch-7", "stoker frame"));
  const Frame credit = SealFrame(*client, 5 * kSealFramesPerKey + 3, "credit", "");  // an empty part: none
  EXPECT_EQ(Hex(credit.data), "169ccce2df15");
  EXPECT_EQ(Hex(credit.tag), "ae39bf6c7501997fff79ab90935443e1");
  EXPECT_TRUE(Opens(*worker, credit, 5 * kSealFramesPerKey + 3, "", "credit"));
}

TEST(SealSession, AFrameOpensOnlyOnThePeerWithItsCounterAndAssociatedData) {
  const Handshake h = Fixed();
  auto client = ClientOf(h), worker = WorkerOf(h);
  ASSERT_TRUE(client && worker);
  const Frame batch = SealFrame(*worker, 42, "pixels", "header");
  EXPECT_TRUE(Opens(*client, batch, 42, "header", "pixels"));
  EXPECT_FALSE(Opens(*client, batch, 41, "header", "pixels")) << "another counter";
  EXPECT_FALSE(Opens(*client, batch, 42, "header!", "pixels")) << "other associated data";
  EXPECT_FALSE(Opens(*worker, batch, 42, "header", "pixels")) << "reflected to its sender";
  const Frame credit = SealFrame(*client, 42, "credit", "c");
  EXPECT_TRUE(Opens(*worker, credit, 42, "c", "credit"));
  EXPECT_FALSE(Opens(*worker, credit, 43, "c", "credit"));
  EXPECT_FALSE(Opens(*client, credit, 42, "c", "credit")) << "reflected to its sender";
  EXPECT_NE(credit.data, SealFrame(*worker, 42, "credit", "c").data) << "each direction has its own key";
  const Handshake other_key = Fixed(std::string(32, 'k'));
  Handshake other_identity = Fixed();
  other_identity.transcript.client_identity = "client:mallory";
  Handshake other_worker = Fixed();
  other_worker.transcript.worker_id = "w-2";
  const Handshake other_client_random = Fixed(kPairKey, std::string(32, '\x12'));
  const Handshake other_worker_random = Fixed(kPairKey, std::string(32, '\x11'), std::string(32, '\x23'));
  for (const Handshake* o : std::initializer_list<const Handshake*>{&other_key, &other_identity, &other_worker,
                                                                    &other_client_random, &other_worker_random}) {
    auto c = ClientOf(*o);
    ASSERT_TRUE(c);
    EXPECT_FALSE(Opens(*c, batch, 42, "header", "pixels"));
    EXPECT_NE(c->KeyFor(SealDirection::kWorkerToClient, 0), client->KeyFor(SealDirection::kWorkerToClient, 0));
  }
}

TEST(SealSession, ReserveHandsOutDisjointRangesAlsoAcrossThreads) {
  auto one = ClientOf(Fixed()), s = WorkerOf(Fixed());
  ASSERT_TRUE(one && s);
  EXPECT_EQ(one->Reserve(1), 0u);
  EXPECT_EQ(one->Reserve(10), 1u);
  EXPECT_EQ(one->Reserve(3), 11u);
  EXPECT_EQ(one->Reserve(0), 14u);
  EXPECT_EQ(one->Reserve(1), 14u);
  constexpr int kThreads = 8, kEach = 10000;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < kEach; ++i) {
        const uint64_t n = 1 + rng() % 64;
        got[t].emplace_back(s->Reserve(n), n);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::pair<uint64_t, uint64_t>> all;  // (first, frames), from every thread
  for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t{kThreads} * kEach);
  EXPECT_EQ(all.front().first, 0u);
  for (size_t i = 1; i < all.size(); ++i) {
    ASSERT_EQ(all[i - 1].first + all[i - 1].second, all[i].first) << "ranges overlap or leave a gap at " << i;
  }
  EXPECT_EQ(s->Reserve(1), all.back().first + all.back().second);
}

TEST(SealSession, EachGenerationHasItsOwnKey) {
  const Handshake h = Fixed();
  auto client = ClientOf(h), worker = WorkerOf(h);
  ASSERT_TRUE(client && worker);
  for (SealDirection d : {SealDirection::kWorkerToClient, SealDirection::kClientToWorker}) {
    for (uint64_t g : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 40}) {
      EXPECT_NE(worker->KeyFor(d, g), worker->KeyFor(d, g + 1)) << g;
    }
  }
  EXPECT_NE(worker->KeyFor(SealDirection::kWorkerToClient, 0), worker->KeyFor(SealDirection::kClientToWorker, 0));
  const uint64_t last = kSealFramesPerKey - 1;
  const Frame f = SealFrame(*worker, last, "the last frame of generation 0", "aad");
  EXPECT_TRUE(Opens(*client, f, last, "aad", "the last frame of generation 0"));
  EXPECT_FALSE(Opens(*client, f, kSealFramesPerKey, "aad", "the last frame of generation 0"));
  // Seal uses the key of the counter's generation, and no other: the frame opens with that key at its nonce only.
  for (uint64_t counter : {last, kSealFramesPerKey, 3 * kSealFramesPerKey + 17}) {
    const Frame g = SealFrame(*worker, counter, "payload", "aad");
    const uint64_t gen = counter / kSealFramesPerKey;
    for (uint64_t key_gen : {gen, gen + 1}) {
      const std::array<uint8_t, kSealKeyBytes> key = client->KeyFor(SealDirection::kWorkerToClient, key_gen);
      const std::array<uint8_t, 12> iv = SealNonce(counter);
      Bytes out(g.data.size());
      const std::string aad = "aad";
      EXPECT_EQ(AesGcmOpen(key, iv, Parts{U8(aad)}, g.data, out, g.tag).ok(), key_gen == gen)
          << "counter " << counter << ", key of generation " << key_gen;
    }
  }
}

TEST(SealSession, TheSamePlaintextAtTwoCountersSealsDifferently) {
  auto s = WorkerOf(Fixed());
  ASSERT_TRUE(s);
  const Frame a = SealFrame(*s, 0, std::string(64, 'x'), "h"), b = SealFrame(*s, 1, std::string(64, 'x'), "h");
  EXPECT_NE(a.data, b.data);
  EXPECT_NE(a.tag, b.tag);
  const Frame again = SealFrame(*s, 0, std::string(64, 'x'), "h");
  EXPECT_EQ(a.data, again.data) << "sealing is deterministic in (key, counter)";
}

// The fixed handshake with one side's offer made afresh (SealOffer::Make), as a reconnect or a restart makes it.
Handshake Refreshed(bool client_side) {
  Handshake h = Fixed();
  SealOffer& offer = client_side ? h.client : h.worker;
  offer = SealOffer::Make();
  (client_side ? h.transcript.client_random : h.transcript.worker_random) = offer.random();
  (client_side ? h.transcript.client_public : h.transcript.worker_public) = offer.public_key();
  return h;
}

TEST(SealSession, AFreshOfferOnEitherSideGivesFreshKeys) {
  auto base = ClientOf(Fixed());
  ASSERT_TRUE(base);
  const auto key = [](SealSession& s) { return s.KeyFor(SealDirection::kWorkerToClient, 0); };
  for (bool client_side : {false, true}) {
    const Handshake fresh = Refreshed(client_side), again = Refreshed(client_side);
    auto client = ClientOf(fresh), worker = WorkerOf(fresh), other = ClientOf(again);
    ASSERT_TRUE(client && worker && other);
    EXPECT_EQ(key(*client), key(*worker)) << "both sides still agree";
    EXPECT_NE(key(*client), key(*base)) << (client_side ? "the client's" : "the worker's") << " offer fresh";
    EXPECT_NE(key(*client), key(*other)) << "two fresh offers, two sets of keys";
  }
  // Only the randomness fresh (the same X25519 keys): still other keys.
  auto same_x25519 = ClientOf(Fixed(kPairKey, std::string(32, '\x33')));
  ASSERT_TRUE(same_x25519);
  EXPECT_NE(key(*same_x25519), key(*base));
}

TEST(SealSession, DeriveRefusesWrongSizesAForeignTranscriptAndLowOrderPoints) {
  const Handshake h = Fixed();
  const auto refused = [](const std::string& pair_key, const SealTranscript& t, const SealOffer& own,
                          SealDirection d) { return SealSession::Derive(pair_key, t, own, d).status().code(); };
  constexpr auto kC = SealDirection::kClientToWorker, kW = SealDirection::kWorkerToClient;
  EXPECT_EQ(refused(h.pair_key.substr(1), h.transcript, h.client, kC), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused(h.pair_key + "x", h.transcript, h.client, kC), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused("", h.transcript, h.worker, kW), StatusCode::kInvalidArgument);
  std::vector<SealTranscript> bad(4, h.transcript);
  bad[0].client_random.pop_back();
  bad[1].worker_random += "x";
  bad[2].client_public.pop_back();
  bad[3].worker_public.clear();
  for (const SealTranscript& t : bad) {
    EXPECT_EQ(refused(h.pair_key, t, h.client, kC), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused(h.pair_key, t, h.worker, kW), StatusCode::kInvalidArgument);
  }
  SealTranscript foreign = h.transcript;
  foreign.client_public = h.worker.public_key();
  EXPECT_EQ(refused(h.pair_key, foreign, h.client, kC), StatusCode::kInvalidArgument) << "not the client's offer";
  foreign = h.transcript;
  foreign.worker_public = h.client.public_key();
  EXPECT_EQ(refused(h.pair_key, foreign, h.worker, kW), StatusCode::kInvalidArgument) << "not the worker's offer";
  EXPECT_EQ(refused(h.pair_key, h.transcript, h.worker, kC), StatusCode::kInvalidArgument) << "the other's offer";
  // Points of small order give an all-zero shared secret (Python's cryptography refuses each of these too).
  for (std::string_view point : {"0000000000000000000000000000000000000000000000000000000000000000",
                                 "0100000000000000000000000000000000000000000000000000000000000000",
                                 "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
                                 "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
                                 "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"}) {
    SealTranscript low = h.transcript;
    low.worker_public = UnhexString(point);
    EXPECT_EQ(refused(h.pair_key, low, h.client, kC), StatusCode::kInvalidArgument) << point;
    low = h.transcript;
    low.client_public = UnhexString(point);
    EXPECT_EQ(refused(h.pair_key, low, h.worker, kW), StatusCode::kInvalidArgument) << point;
  }
}

TEST(ReplayWindow, AcceptsEachCounterOnce) {
  ReplayWindow w;
  for (uint64_t c = 0; c < 3 * ReplayWindow::kWindow; ++c) ASSERT_TRUE(w.Accept(c)) << c;
  const uint64_t highest = 3 * ReplayWindow::kWindow - 1;
  for (uint64_t c = highest - ReplayWindow::kWindow + 1; c <= highest; ++c) ASSERT_FALSE(w.Accept(c)) << c;
  EXPECT_FALSE(w.Accept(0));
  ReplayWindow first;  // the first counter seen need not be 0
  EXPECT_TRUE(first.Accept(uint64_t{1} << 40));
  EXPECT_FALSE(first.Accept(uint64_t{1} << 40));
  EXPECT_TRUE(first.Accept((uint64_t{1} << 40) - 1));
  EXPECT_FALSE(first.Accept((uint64_t{1} << 40) - 1));
}

TEST(ReplayWindow, AcceptsOutOfOrderInsideTheWindowAndRefusesOlder) {
  ReplayWindow w;
  const uint64_t top = 10 * ReplayWindow::kWindow;
  EXPECT_TRUE(w.Accept(top));
  const std::vector<uint64_t> shuffled = {top - 1, top - 64, top - 65, top - 1000, top + 3, top + 1, top + 2};
  for (uint64_t c : shuffled) EXPECT_TRUE(w.Accept(c)) << c;
  for (uint64_t c : shuffled) EXPECT_FALSE(w.Accept(c)) << c << " again";
  const uint64_t highest = top + 3;
  EXPECT_FALSE(w.Accept(highest - ReplayWindow::kWindow)) << "kWindow behind";
  EXPECT_FALSE(w.Accept(highest - ReplayWindow::kWindow - 1));
  EXPECT_FALSE(w.Accept(0));
  EXPECT_TRUE(w.Accept(highest - ReplayWindow::kWindow + 1)) << "kWindow - 1 behind";
  EXPECT_FALSE(w.Accept(highest - ReplayWindow::kWindow + 1));
}

TEST(ReplayWindow, SlidingForgetsTheSlotsItReuses) {
  // Every counter of the window seen, then a slide of one: the slot of the counter that fell out is reused.
  constexpr uint64_t kW = ReplayWindow::kWindow;
  ReplayWindow w;
  for (uint64_t c = 0; c < kW; ++c) ASSERT_TRUE(w.Accept(c));
  EXPECT_TRUE(w.Accept(kW));
  EXPECT_FALSE(w.Accept(0)) << "fell out of the window";
  for (uint64_t c = 1; c < kW; ++c) ASSERT_FALSE(w.Accept(c)) << c;
  // A slide of 100: the counters skipped over are fresh although their slots held seen ones.
  EXPECT_TRUE(w.Accept(kW + 100));
  for (uint64_t c = kW + 1; c < kW + 100; ++c) ASSERT_TRUE(w.Accept(c)) << c;
  for (uint64_t c = 1; c <= 100; ++c) ASSERT_FALSE(w.Accept(c)) << c;
  for (uint64_t c = 101; c < kW; ++c) ASSERT_FALSE(w.Accept(c)) << c << " is seen and still in the window";
}

TEST(ReplayWindow, AfterAJumpPastTheWindowOldCountersAreRefusedAndFreshOnesAccepted) {
  constexpr uint64_t kW = ReplayWindow::kWindow;
  ReplayWindow w;
  for (uint64_t c = 0; c < 100; ++c) ASSERT_TRUE(w.Accept(c));
  const uint64_t jump = 99 + kW + 5;
  EXPECT_TRUE(w.Accept(jump));
  for (uint64_t c = 0; c < 100; ++c) ASSERT_FALSE(w.Accept(c)) << c;
  // The counters in the new window, including those whose slots held 0..99, are fresh.
  for (uint64_t c = jump - kW + 1; c < jump; ++c) ASSERT_TRUE(w.Accept(c)) << c;
  for (uint64_t c = jump - kW + 1; c <= jump; ++c) ASSERT_FALSE(w.Accept(c)) << c;
  EXPECT_TRUE(w.Accept(std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(w.Accept(std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(w.Accept(jump));
}

SealTrailer Trailer(uint64_t first, size_t frames) {
  SealTrailer t;
  t.first_counter = first;
  t.tags.resize(frames);
  for (size_t f = 0; f < frames; ++f) {
    for (size_t i = 0; i < kSealTagBytes; ++i) t.tags[f][i] = static_cast<uint8_t>(16 * f + i);
  }
  return t;
}

TEST(SealTrailer, RoundTrips) {
  const SealTrailer t = Trailer(0x0102030405060708, 3);
  const std::vector<uint8_t> bytes = EncodeSealTrailer(t);
  ASSERT_EQ(bytes.size(), 8 + 3 * kSealTagBytes);
  EXPECT_EQ(Hex(std::span(bytes).first(8)), "0807060504030201") << "the first counter, little-endian";
  EXPECT_EQ(Hex(std::span(bytes).subspan(8, 16)), Hex(t.tags[0]));
  EXPECT_EQ(Hex(std::span(bytes).subspan(40, 16)), Hex(t.tags[2]));
  auto decoded = DecodeSealTrailer(bytes, 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->first_counter, t.first_counter);
  EXPECT_EQ(decoded->tags, t.tags);
}

TEST(SealTrailer, DecodeRefusesWhatIsNotATrailerForItsFrames) {
  const std::vector<uint8_t> three = EncodeSealTrailer(Trailer(5, 3));
  const auto code = [](std::span<const uint8_t> b, size_t frames) {
    return DecodeSealTrailer(b, frames).status().code();
  };
  std::vector<uint8_t> longer = three;
  longer.push_back(0);
  const std::span<const uint8_t> all(three);
  constexpr size_t kHuge = std::numeric_limits<size_t>::max();  // 8 + frames * 16 must not wrap to the size
  for (auto [bytes, frames] : std::initializer_list<std::pair<std::span<const uint8_t>, size_t>>{
           {all, 2}, {all, 4}, {all.first(all.size() - 1), 3}, {longer, 3}, {{}, 0}, {{}, 1}, {all.first(8), 0},
           {all.first(7), 0}, {all, kHuge}, {all.first(8), kHuge / kSealTagBytes + 1},
           {all.first(24), kHuge / kSealTagBytes + 2}}) {
    EXPECT_EQ(code(bytes, frames), StatusCode::kInvalidArgument) << bytes.size() << " bytes, " << frames << " frames";
  }
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(code(EncodeSealTrailer(Trailer(max, 1)), 1), StatusCode::kInvalidArgument) << "the counter overflows";
  EXPECT_EQ(code(EncodeSealTrailer(Trailer(max - 1, 2)), 2), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(EncodeSealTrailer(Trailer(max - 5, 9)), 9), StatusCode::kInvalidArgument);
  EXPECT_TRUE(DecodeSealTrailer(EncodeSealTrailer(Trailer(max - 1, 1)), 1).ok()) << "the last counter is max - 1";
  EXPECT_TRUE(DecodeSealTrailer(EncodeSealTrailer(Trailer(max - 3, 2)), 2).ok());
}

}  // namespace
}  // namespace stoker
