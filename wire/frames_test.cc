// Schema round trips (every control message, the batch header) and the parsing limits on untrusted frames.
#include "wire/frames.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "stoker/schema/control.capnp.h"
#include "wire/control_codec.h"

namespace stoker {
namespace {

zmq::message_t Build(const std::function<void(wire::Request::Builder)>& fill) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<wire::Request>();
  request.setProtocolVersion(wire::PROTOCOL_VERSION);
  request.setRequestId(77);
  request.setSenderId("w-0123456789abcdef");
  fill(request);
  return ToFrame(message);
}

wire::Request::Reader ParseRequest(zmq::message_t frame, std::unique_ptr<ParsedFrame>* holder) {
  auto parsed = ParsedFrame::Parse(std::move(frame), ControlReaderOptions());
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  *holder = std::move(*parsed);
  auto r = (*holder)->Root<wire::Request>();
  EXPECT_EQ(r.getProtocolVersion(), wire::PROTOCOL_VERSION);
  EXPECT_EQ(r.getRequestId(), 77u);
  EXPECT_EQ(std::string(r.getSenderId().cStr()), "w-0123456789abcdef");
  return r;
}

TEST(Schema, EveryControlRequestRoundTrips) {
  std::unique_ptr<ParsedFrame> h;
  auto reg = ParseRequest(Build([](auto r) {
    auto w = r.initRegisterWorker();
    w.setDataEndpoint("tcp://10.0.0.1:7401");
    w.setThreads(8);
  }), &h);
  ASSERT_EQ(reg.which(), wire::Request::REGISTER_WORKER);
  EXPECT_EQ(std::string(reg.getRegisterWorker().getDataEndpoint().cStr()), "tcp://10.0.0.1:7401");
  EXPECT_EQ(reg.getRegisterWorker().getThreads(), 8u);

  auto hb = ParseRequest(Build([](auto r) {
    auto leases = r.initWorkerHeartbeat().initLeases(2);
    leases[1].setJob("j");
    leases[1].setUnit(12);
    leases[1].setAttempt(3);
  }), &h);
  ASSERT_EQ(hb.which(), wire::Request::WORKER_HEARTBEAT);
  EXPECT_EQ(hb.getWorkerHeartbeat().getLeases()[1].getAttempt(), 3u);

  auto lease = ParseRequest(Build([](auto r) {
    auto l = r.initLeaseRequest();
    l.setJob("j");
    l.setRank(2);
    l.setMaxBatches(4);
    l.setWaitMs(250);
  }), &h);
  ASSERT_EQ(lease.which(), wire::Request::LEASE_REQUEST);
  EXPECT_EQ(lease.getLeaseRequest().getRank(), 2u);
  EXPECT_EQ(lease.getLeaseRequest().getWaitMs(), 250u);

  auto done = ParseRequest(Build([](auto r) {
    auto d = r.initUnitDone();
    d.setOutcome(wire::UnitOutcome::UNDELIVERABLE);
    auto q = d.initQuarantined(1);
    q[0].setSampleId(99);
    q[0].setReason("decode_error");
  }), &h);
  ASSERT_EQ(done.which(), wire::Request::UNIT_DONE);
  EXPECT_EQ(done.getUnitDone().getOutcome(), wire::UnitOutcome::UNDELIVERABLE);
  EXPECT_EQ(done.getUnitDone().getQuarantined()[0].getSampleId(), 99u);

  auto client = ParseRequest(Build([](auto r) {
    auto c = r.initRegisterClient();
    c.setJob("j");
    c.setRank(1);
    c.setHasSpec(true);
    c.initSpec().setBatchSize(32);
    c.setWindow(16);
  }), &h);
  ASSERT_EQ(client.which(), wire::Request::REGISTER_CLIENT);
  EXPECT_EQ(client.getRegisterClient().getSpec().getBatchSize(), 32u);

  auto ack = ParseRequest(Build([](auto r) {
    auto a = r.initClientHeartbeat();
    a.setConsumed(10);
    a.setReceivedWatermark(12);
    auto above = a.initReceivedAbove(2);
    above.set(0, 14);
    above.set(1, 15);
  }), &h);
  ASSERT_EQ(ack.which(), wire::Request::CLIENT_HEARTBEAT);
  EXPECT_EQ(ack.getClientHeartbeat().getReceivedAbove()[1], 15u);

  auto get = ParseRequest(Build([](auto r) { r.initGetJob().setJob("x"); }), &h);
  EXPECT_EQ(get.which(), wire::Request::GET_JOB);
  auto dereg = ParseRequest(Build([](auto r) { r.initDeregister().setRank(3); }), &h);
  EXPECT_EQ(dereg.which(), wire::Request::DEREGISTER);
}

// What a unit cost its worker, in all and by stage, travels with its report; a figure that is not a finite positive number reads as
// none, so a peer cannot hand the fair share a NaN.
TEST(Schema, AUnitsCostTravelsAndNonsenseReadsAsNone) {
  for (const auto& [sent, read] : std::vector<std::pair<double, double>>{
           {0.25, 0.25}, {-1, 0}, {std::nan(""), 0}, {std::numeric_limits<double>::infinity(), 0}}) {
    UnitDoneRequest done{"w-1", "job", 2, 3, 4, UnitOutcome::kSent, 5, {}, sent, sent, 2 * sent, 3 * sent, 4 * sent};
    uint64_t id = 0;
    auto decoded = DecodeRequest(EncodeRequest(9, done), &id);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    const auto* back = std::get_if<UnitDoneRequest>(&decoded->body);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->batches_sent, 5u);
    EXPECT_EQ(back->busy_seconds, read) << sent;
    EXPECT_EQ(back->read_seconds, read) << "and by stage: " << sent;
    EXPECT_EQ(back->decode_seconds, 2 * read) << sent;
    EXPECT_EQ(back->augment_seconds, 3 * read) << sent;
    EXPECT_EQ(back->seal_seconds, 4 * read) << sent;
  }
}

// A client's stages travel with its heartbeat, read the same way.
TEST(Schema, AClientsStagesTravelAndNonsenseReadsAsNone) {
  for (const auto& [sent, read] : std::vector<std::pair<double, double>>{
           {0.5, 0.5}, {-1, 0}, {std::nan(""), 0}, {std::numeric_limits<double>::infinity(), 0}}) {
    ClientHeartbeatRequest heartbeat{.client_id = "c-1", .job = "job", .receive_seconds = sent, .h2d_seconds = 2 * sent};
    uint64_t id = 0;
    auto decoded = DecodeRequest(EncodeRequest(9, heartbeat), &id);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    const auto* back = std::get_if<ClientHeartbeatRequest>(&decoded->body);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->receive_seconds, read) << sent;
    EXPECT_EQ(back->h2d_seconds, 2 * read) << sent;
  }
}

TEST(Schema, ReplyStatusRoundTrips) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<wire::Reply>();
  reply.setRequestId(5);
  ToWire(AlreadyExistsError("rank 1 is held"), reply.initStatus());
  auto frame = ToFrame(message);
  auto parsed = ParsedFrame::Parse(std::move(frame), ControlReaderOptions());
  ASSERT_TRUE(parsed.ok());
  Status back = FromWire((*parsed)->Root<wire::Reply>().getStatus());
  EXPECT_EQ(back, AlreadyExistsError("rank 1 is held"));
}

TEST(ParsedFrame, RejectsGarbageAndLies) {
  // Not a whole number of words.
  EXPECT_FALSE(ParsedFrame::Parse(zmq::message_t("abc", 3), ControlReaderOptions()).ok());
  // A segment table claiming 2^31 segments.
  uint32_t lie[4] = {0x7fffffffu, 1, 0, 0};
  auto p = ParsedFrame::Parse(zmq::message_t(lie, sizeof(lie)), ControlReaderOptions());
  if (p.ok()) {
    Status s = CatchWireErrors("request", [&]() {
      (*p)->Root<wire::Request>().getSenderId();
      return Status::Ok();
    });
    EXPECT_FALSE(s.ok());
  }
  // A list claiming 2^29 elements: reading it fails inside the traversal limit, without allocating.
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<wire::Request>();
  request.initClientHeartbeat().initReceivedAbove(1000);
  auto frame = ToFrame(message);
  capnp::ReaderOptions tight;
  tight.traversalLimitInWords = 64;
  auto parsed = ParsedFrame::Parse(std::move(frame), tight);
  ASSERT_TRUE(parsed.ok());
  Status s = CatchWireErrors("heartbeat", [&]() {
    uint64_t sum = 0;
    for (auto v : (*parsed)->Root<wire::Request>().getClientHeartbeat().getReceivedAbove()) sum += v;
    return sum == UINT64_MAX ? InternalError("unreachable") : Status::Ok();  // the reads are what is tested
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(ParsedFrame, AcceptsUnalignedBuffers) {
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::Request>().setSenderId("c-1");
  auto frame = ToFrame(message);
  std::vector<char> shifted(frame.size() + 1);
  std::memcpy(shifted.data() + 1, frame.data(), frame.size());
  zmq::message_t unaligned(shifted.data() + 1, frame.size());
  auto parsed = ParsedFrame::Parse(std::move(unaligned), ControlReaderOptions());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(std::string((*parsed)->Root<wire::Request>().getSenderId().cStr()), "c-1");
}

TEST(Endpoints, EphemeralBindAndAdvertise) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  auto bound = BindSocket(s, "tcp://127.0.0.1:0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(bound->rfind("tcp://127.0.0.1:", 0), 0u);
  EXPECT_NE(*bound, "tcp://127.0.0.1:0");
  EXPECT_FALSE(BindSocket(s, "nonsense://x").ok());
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:7401", "10.1.2.3"), "tcp://10.1.2.3:7401");
  EXPECT_EQ(AdvertisedEndpoint("tcp://192.168.0.5:7401", "10.1.2.3"), "tcp://192.168.0.5:7401");
  EXPECT_EQ(NewPeerId("w").size(), 18u);
  EXPECT_NE(NewPeerId("w"), NewPeerId("w"));
}

}  // namespace
}  // namespace stoker
