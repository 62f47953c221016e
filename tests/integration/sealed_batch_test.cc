// Sealed batches between a worker's BatchSender and a client's SealedConnection, socket-free: what an attacker on
// the path can do to a batch in flight (flip a byte of its pixels, header or trailer, replay it, send it again
// under another rank or attempt, or seal it under another connection's keys), each refused by the client with its
// reason; and the nonces a worker uses, which never repeat under one key across reconnects, restarts and key
// generations.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "auth/data_tickets.h"
#include "client/src/sealed_connection.h"
#include "wire/data_codec.h"
#include "wire/frames.h"
#include "worker/batch_sender.h"
#include "worker/seal_sessions.h"

namespace stoker::worker {
namespace {

const std::string kClient = "client:alice";
const std::string kWorker = "w-1";
const std::string kTicketKey(32, 'T');

// A worker-side session table and a client connection that have done the handshake.
struct Pair {
  SealSessions sessions{kWorker, 16};
  client::SealedConnection client{kClient, kWorker, DataSealKey(kTicketKey, kClient)};

  explicit Pair(const std::string& peer = "peer-1") { Connect(peer); }
  void Connect(const std::string& peer) {
    sessions.SetTicketKey(kTicketKey);
    auto welcome = sessions.Offer(peer, kClient, client.Offer());
    EXPECT_TRUE(welcome.ok()) << welcome.status().ToString();
    EXPECT_TRUE(client.Welcome(*welcome).ok());
  }
};

// A finished batch of 4 samples of 8x8x3, with a recognisable pattern, split into frames of 100 bytes.
struct Batch {
  std::shared_ptr<BatchBufferPool> pool = std::make_shared<BatchBufferPool>();
  std::shared_ptr<const JobContext> job = MakeJob();
  BatchBuild build;

  static std::shared_ptr<const JobContext> MakeJob() {
    JobSpec spec;
    spec.name = "job";
    spec.manifest_path = "/nowhere/job.stoker";  // never read: only the header and the buffer matter here
    spec.batch_size = 4;
    spec.pipeline.output_height = spec.pipeline.output_width = 8;
    auto plan = Plan::Make(spec, 100);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return std::make_shared<const JobContext>(JobContext{spec, 0, std::move(*plan), nullptr, nullptr});
  }

  Batch(uint32_t rank, uint64_t attempt) {
    build.job = job;
    build.pool = pool;
    build.unit = {"job", rank, 7};
    build.attempt = attempt;
    build.index = 3;
    build.labels = {1, 2, 3, 4};
    build.flags = {0, 0, 0, 0};
    build.quarantine.resize(4);
    for (uint64_t i = 0; i < 4; ++i) build.samples.push_back(PlannedSample{10 + i, false});
    build.buffer = pool->Acquire(job->spec.BatchBytes());
    build.payload_bytes = job->spec.BatchBytes();
    for (size_t i = 0; i < build.buffer.size; ++i) build.buffer.data[i] = static_cast<uint8_t>(i * 7);
  }
};

// What went on the wire for a sealed batch: its header bytes, payload frames and trailer.
struct Wire {
  std::string header;
  std::vector<std::string> frames;
  std::vector<uint8_t> trailer;
};

Wire SealAndCapture(Batch& b, std::shared_ptr<SealSession> session, prometheus::Histogram& histogram,
                    TransportErrors& errors) {
  zmq::context_t context;
  zmq::socket_t unused(context, zmq::socket_type::router);
  auto h = std::shared_ptr<prometheus::Histogram>(&histogram, [](auto*) {});
  BatchSender sender(unused, b.pool, kWorker, h, h, errors);
  sender.Prepare(b.build, 100, /*sealed=*/true);
  BatchSender::Seal(b.build, std::move(session));
  Wire w{b.build.wire_header, {}, b.build.seal_trailer};
  for (uint32_t f = 0; f < b.build.frames; ++f) {
    const size_t at = size_t{f} * b.build.frame_bytes;
    const size_t n = std::min<size_t>(b.build.frame_bytes, b.build.buffer.size - at);
    w.frames.emplace_back(reinterpret_cast<const char*>(b.build.buffer.data) + at, n);
  }
  return w;
}

Status Open(client::SealedConnection& c, const Wire& w, std::vector<zmq::message_t>* out = nullptr) {
  std::vector<zmq::message_t> frames;
  for (const std::string& f : w.frames) frames.emplace_back(f.data(), f.size());
  Status s = c.Open({reinterpret_cast<const uint8_t*>(w.header.data()), w.header.size()}, frames, w.trailer);
  if (out != nullptr) *out = std::move(frames);
  return s;
}

class SealedBatch : public ::testing::Test {
 protected:
  prometheus::Histogram histogram_{std::vector<double>{1.0}};
  TransportErrors errors_;
};

TEST_F(SealedBatch, OpensToTheWorkersPixelsAndOnlyOnce) {
  Pair p;
  Batch b(0, 1);
  std::vector<uint8_t> pixels(b.build.buffer.data, b.build.buffer.data + b.build.buffer.size);
  const Wire w = SealAndCapture(b, p.sessions.Find("peer-1", kClient), histogram_, errors_);
  ASSERT_EQ(w.frames.size(), 8u);  // 4 x 8 x 8 x 3 = 768 bytes in frames of 100
  EXPECT_NE(w.frames[0], std::string(pixels.begin(), pixels.begin() + 100)) << "the pixels left in the clear";
  auto header = DecodeDataMessage(zmq::message_t(w.header.data(), w.header.size()), ControlReaderOptions());
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(std::get<BatchHeader>(*header).sealed);
  std::vector<zmq::message_t> opened;
  ASSERT_TRUE(Open(p.client, w, &opened).ok());
  std::string joined;
  for (const zmq::message_t& f : opened) joined += f.to_string();
  EXPECT_EQ(joined, std::string(pixels.begin(), pixels.end()));
  // The same bytes again (a replay on the wire): refused as such.
  EXPECT_EQ(Open(p.client, w).code(), StatusCode::kAlreadyExists);
}

TEST_F(SealedBatch, AnyChangedByteOfPixelsHeaderOrTrailerIsRefusedAndNothingReadable) {
  Pair p;
  Batch b(0, 1);
  const Wire w = SealAndCapture(b, p.sessions.Find("peer-1", kClient), histogram_, errors_);
  std::vector<Wire> changed(4, w);
  changed[0].frames[1][17] ^= 1;     // a pixel
  changed[1].header[w.header.size() / 2] ^= 1;  // the header (associated data)
  changed[2].trailer.back() ^= 1;    // a tag
  changed[3].trailer[0] ^= 1;        // the counter
  for (size_t i = 0; i < changed.size(); ++i) {
    std::vector<zmq::message_t> out;
    EXPECT_EQ(Open(p.client, changed[i], &out).code(), StatusCode::kDataLoss) << i;
    for (const zmq::message_t& f : out) {
      EXPECT_EQ(f.to_string(), std::string(f.size(), '\0')) << "unauthenticated bytes stayed readable: " << i;
    }
  }
  EXPECT_TRUE(Open(p.client, w).ok()) << "the refusals did not spoil the real batch";
}

TEST_F(SealedBatch, ABatchSentAgainUnderAnotherRankOrAttemptOrAnotherConnectionsKeysIsRefused) {
  Pair p;
  Batch original(0, 1);
  const Wire w = SealAndCapture(original, p.sessions.Find("peer-1", kClient), histogram_, errors_);
  // The same sealed pixels under the header of another rank, and of another attempt.
  for (auto [rank, attempt] : {std::pair<uint32_t, uint64_t>{1, 1}, {0, 2}}) {
    Batch other(rank, attempt);
    Wire moved = SealAndCapture(other, p.sessions.Find("peer-1", kClient), histogram_, errors_);
    moved.frames = w.frames;
    moved.trailer = w.trailer;
    EXPECT_EQ(Open(p.client, moved).code(), StatusCode::kDataLoss) << rank << " " << attempt;
  }
  // Sealed for another connection of the same client (another session): this one cannot open it.
  Pair other_connection;
  Batch b(0, 1);
  const Wire theirs = SealAndCapture(b, other_connection.sessions.Find("peer-1", kClient), histogram_, errors_);
  EXPECT_EQ(Open(p.client, theirs).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Open(other_connection.client, theirs).ok());
  EXPECT_TRUE(Open(p.client, w).ok());
}

TEST_F(SealedBatch, CreditsNeedTheirTagOnceAndTheConnectionsSession) {
  Pair p;
  const zmq::message_t credit = EncodeCredit(Credit{"job", 0, "c-1", 4, 0});
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(credit.data()), credit.size());
  std::vector<uint8_t> tag = p.client.SealCredit(bytes);
  std::string reason;
  EXPECT_TRUE(p.sessions.CheckCredit("peer-1", kClient, bytes, tag, &reason).ok());
  EXPECT_EQ(p.sessions.CheckCredit("peer-1", kClient, bytes, tag, &reason).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reason, "seal_replayed");
  EXPECT_FALSE(p.sessions.CheckCredit("peer-2", kClient, bytes, p.client.SealCredit(bytes), &reason).ok());
  EXPECT_EQ(reason, "seal_no_session");
  const zmq::message_t other = EncodeCredit(Credit{"job", 1, "c-1", 4, 0});
  EXPECT_FALSE(p.sessions.CheckCredit("peer-1", kClient, {static_cast<const uint8_t*>(other.data()), other.size()},
                                      p.client.SealCredit(bytes), &reason).ok());
  EXPECT_EQ(reason, "seal_bad_tag");
  EXPECT_EQ(p.sessions.refused().at("seal_bad_tag"), 1u);
}

// A routing id is the client's to choose: another identity that takes a connection's routing id over (and offers
// on it) gets a session of its own, never the first identity's batches, and its credits count only as its own.
TEST_F(SealedBatch, ASessionServesOnlyTheIdentityThatMadeIt) {
  Pair p;
  EXPECT_EQ(p.sessions.Find("peer-1", "client:mallory"), nullptr);
  client::SealedConnection mallory{"client:mallory", kWorker, DataSealKey(kTicketKey, "client:mallory")};
  auto welcome = p.sessions.Offer("peer-1", "client:mallory", mallory.Offer());
  ASSERT_TRUE(welcome.ok());
  ASSERT_TRUE(mallory.Welcome(*welcome).ok());
  EXPECT_EQ(p.sessions.Find("peer-1", kClient), nullptr) << "the victim's batches would be sealed for mallory";
  EXPECT_NE(p.sessions.Find("peer-1", "client:mallory"), nullptr);
  const zmq::message_t credit = EncodeCredit(Credit{"job", 0, "c-victim", 4, 0});
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(credit.data()), credit.size());
  std::string reason;
  EXPECT_FALSE(p.sessions.CheckCredit("peer-1", kClient, bytes, mallory.SealCredit(bytes), &reason).ok());
  EXPECT_EQ(reason, "seal_no_session");
}

// A client with a valid ticket that offers on connection after connection evicts only its own sessions once the
// table (16 here) is full: another identity's stay, and a newcomer's offer evicts from whoever holds the most.
TEST_F(SealedBatch, AnIdentityFloodingOffersEvictsOnlyItsOwnSessions) {
  Pair p("victim-1");
  p.Connect("victim-2");
  ASSERT_EQ(p.sessions.size_of(kClient), 2u);
  auto offer_as = [&](const std::string& identity, const std::string& peer) {
    client::SealedConnection c{identity, kWorker, DataSealKey(kTicketKey, identity)};
    ASSERT_TRUE(p.sessions.Offer(peer, identity, c.Offer()).ok());
  };
  for (int i = 0; i < 100; ++i) offer_as("client:mallory", "flood-" + std::to_string(i));
  EXPECT_EQ(p.sessions.size(), 16u);
  EXPECT_EQ(p.sessions.size_of("client:mallory"), 14u);
  EXPECT_NE(p.sessions.Find("victim-1", kClient), nullptr);
  EXPECT_NE(p.sessions.Find("victim-2", kClient), nullptr);
  EXPECT_NE(p.sessions.Find("flood-99", "client:mallory"), nullptr) << "the newest stays, the oldest went";
  EXPECT_EQ(p.sessions.Find("flood-0", "client:mallory"), nullptr);
  EXPECT_EQ(p.sessions.refused().at("seal_evicted"), 86u);
  // The victim's new connection and a third identity's take the flooder's oldest, never another's.
  offer_as(kClient, "victim-3");
  offer_as("client:carol", "carol-1");
  EXPECT_EQ(p.sessions.size_of(kClient), 3u);
  EXPECT_EQ(p.sessions.size_of("client:carol"), 1u);
  EXPECT_EQ(p.sessions.size_of("client:mallory"), 12u);
  // One key for every rank (the chart's default) may hold the whole table.
  SealSessions shared{kWorker, 16};
  shared.SetTicketKey(kTicketKey);
  for (int i = 0; i < 16; ++i) {
    client::SealedConnection c{kClient, kWorker, DataSealKey(kTicketKey, kClient)};
    ASSERT_TRUE(shared.Offer("rank-" + std::to_string(i), kClient, c.Offer()).ok());
  }
  EXPECT_EQ(shared.size_of(kClient), 16u);
  EXPECT_EQ(shared.refused().count("seal_evicted"), 0u);
}

// Every (key, nonce) a worker seals a frame under, across a client's reconnects (a new offer on the connection,
// and a new connection), a worker restart (a new session table) and key generations (counters past
// kSealFramesPerKey): none repeats.
TEST_F(SealedBatch, NoKeyAndNonceRepeatAcrossReconnectsRestartsAndGenerations) {
  std::set<std::pair<std::string, uint64_t>> used;
  size_t sealed = 0;
  auto seal_some = [&](Pair& p, const std::string& peer) {
    std::shared_ptr<SealSession> session = p.sessions.Find(peer, kClient);
    for (int round = 0; round < 3; ++round) {
      Batch b(0, 1);
      const Wire w = SealAndCapture(b, session, histogram_, errors_);
      auto trailer = DecodeSealTrailer(w.trailer, w.frames.size());
      ASSERT_TRUE(trailer.ok());
      for (uint64_t f = 0; f < w.frames.size(); ++f) {
        const uint64_t counter = trailer->first_counter + f;
        const auto key = session->KeyFor(SealDirection::kWorkerToClient, counter / kSealFramesPerKey);
        used.emplace(std::string(key.begin(), key.end()), counter);
        ++sealed;
      }
      ASSERT_TRUE(Open(p.client, w).ok());
      (void)session->Reserve(kSealFramesPerKey - 3);  // the next round crosses into the next generation
    }
  };
  for (int restart = 0; restart < 2; ++restart) {
    Pair p("peer-1");
    seal_some(p, "peer-1");
    p.Connect("peer-1");  // offered again on the same connection
    seal_some(p, "peer-1");
    p.Connect("peer-2");  // reconnected: a new connection
    seal_some(p, "peer-2");
  }
  EXPECT_EQ(used.size(), sealed) << "a (key, nonce) pair was used twice";
  EXPECT_EQ(sealed, 2u * 3 * 3 * 8);  // restarts x connections x rounds x frames
}

}  // namespace
}  // namespace stoker::worker
