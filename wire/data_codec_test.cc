// The data plane's codec: every message round-trips, and the receivers' decoders refuse, with a reason, every way a
// frame can disagree with what the receiver expects.
#include "wire/data_codec.h"

#include <gtest/gtest.h>

#include "wire/frames.h"
#include "stoker/schema/data.capnp.h"

namespace stoker {
namespace {

BatchExpectation Expected() {
  return {.job = "j", .rank = 1, .epochs = 2, .steps_per_epoch = 5, .batch_size = 3, .height = 4, .width = 4};
}

BatchHeader GoodHeader() {
  return {.job = "j",
          .epoch = 1,
          .rank = 1,
          .index = 4,
          .unit = 9,
          .attempt = 7,
          .worker_id = "w-1",
          .count = 3,
          .height = 4,
          .width = 4,
          .channels = 3,
          .labels = {5, -1, 6},
          .sample_ids = {11, 12, 1234567},
          .flags = {0, kSampleFlagQuarantined, kSampleFlagPadding},
          .payload_bytes = 3 * 4 * 4 * 3,
          .payload_frames = 1,
          .quarantine_reasons = {"unsupported_format"}};
}

TEST(DataCodec, EveryMessageRoundTrips) {
  Credit credit{"j", 3, "c-1", 4, 8 << 20, std::string(32, '\x7f')};
  auto c = DecodeDataMessage(EncodeCredit(credit), ControlReaderOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(std::get<Credit>(*c), credit);

  BatchHeader header = GoodHeader();
  auto h = DecodeDataMessage(EncodeBatchHeader(header), BatchHeaderReaderOptions(3));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(std::get<BatchHeader>(*h), header);

  DataError error{"j", 2, NotFoundError("unknown job 'j'")};
  auto e = DecodeDataMessage(EncodeDataError(error), ControlReaderOptions());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(std::get<DataError>(*e), error);
}

TEST(DataCodec, AWorkerAcceptsOnlyCreditsOfItsVersionFromANamedClientAndWholeSealOffers) {
  auto credit = DecodeClientMessage(EncodeCredit({"j", 0, "c-1", 2, 0}));
  ASSERT_TRUE(credit.ok());
  EXPECT_EQ(std::get<Credit>(*credit).client_id, "c-1");
  EXPECT_EQ(DecodeClientMessage(EncodeCredit({"j", 0, "", 2, 0})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeClientMessage(EncodeBatchHeader(GoodHeader())).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeClientMessage(zmq::message_t("garbage!", 8)).status().code(), StatusCode::kInvalidArgument);
  const SealHello hello{std::string(32, 'r'), std::string(32, 'p')};
  auto offer = DecodeClientMessage(EncodeSealHello(hello));
  ASSERT_TRUE(offer.ok());
  EXPECT_EQ(std::get<SealHello>(*offer), hello);
  EXPECT_EQ(DecodeClientMessage(EncodeSealHello({std::string(31, 'r'), std::string(32, 'p')})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeClientMessage(EncodeSealWelcome({hello.random, hello.public_key})).status().code(),
            StatusCode::kInvalidArgument);
  capnp::MallocMessageBuilder future;
  auto msg = future.initRoot<wire::DataMessage>();
  msg.setProtocolVersion(99);
  msg.initCredit().setClientId("c-1");
  auto refused = DecodeClientMessage(ToFrame(future));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("version 99"), std::string::npos) << refused.status().message();
}

TEST(DataCodec, AClientAcceptsOnlyBatchesOfItsJobWithTheirAnnouncedPayload) {
  const BatchExpectation e = Expected();
  const size_t whole[] = {144};
  auto ok = DecodeWorkerMessage(EncodeBatchHeader(GoodHeader()), whole, e);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::get<BatchHeader>(*ok).sample_ids[2], 1234567u);

  auto refused = [&](BatchHeader h, std::vector<size_t> sizes, const BatchExpectation& expected) {
    auto r = DecodeWorkerMessage(EncodeBatchHeader(h), sizes, expected);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.ok() ? std::string() : r.status().message();
  };
  // The header's own fields against the job: a change to a good header each, and why it is refused.
  const std::pair<void (*)(BatchHeader&), const char*> wrong_fields[] = {
      {[](BatchHeader& h) { h.job = "other"; }, "batch for another job or rank"},
      {[](BatchHeader& h) { h.rank = 0; }, "batch for another job or rank"},
      {[](BatchHeader& h) { h.epoch = 2; }, "index out of range"},
      {[](BatchHeader& h) { h.index = 5; }, "index out of range"},
      {[](BatchHeader& h) { h.width = 5; }, "shape differs from the job's"},
      {[](BatchHeader& h) { h.sample_ids.pop_back(); }, "list lengths differ from the batch size"},
      {[](BatchHeader& h) { h.sealed = true; }, "a sealed batch on a plain connection"}};
  for (const auto& [change, why] : wrong_fields) {
    BatchHeader wrong = GoodHeader();
    change(wrong);
    EXPECT_EQ(refused(wrong, {144}, e), why);
  }
  BatchHeader h;
  EXPECT_NE(refused(GoodHeader(), {}, e).find("announces 1 payload frames, 0 came"), std::string::npos);
  EXPECT_NE(refused(GoodHeader(), {140}, e).find("payload length"), std::string::npos);
  h = GoodHeader();
  h.payload_bytes = 47;
  EXPECT_NE(refused(h, {144}, e).find("payload length"), std::string::npos);
  // Several frames only when the client asked for them, and none larger than it asked for.
  h = GoodHeader();
  h.payload_frames = 2;
  EXPECT_NE(refused(h, {72, 72}, e).find("larger than this client asked for"), std::string::npos);
  BatchExpectation framed = e;
  framed.max_frame_bytes = 80;
  EXPECT_TRUE(DecodeWorkerMessage(EncodeBatchHeader(h), std::vector<size_t>{72, 72}, framed).ok());
  EXPECT_NE(refused(h, {100, 44}, framed).find("larger than this client asked for"), std::string::npos);
  EXPECT_NE(refused(h, {48, 48, 48}, framed).find("announces 2"), std::string::npos);
  // Quarantine reasons: none (an older worker), or one short word per quarantined sample.
  h = GoodHeader();
  h.quarantine_reasons.clear();
  EXPECT_TRUE(DecodeWorkerMessage(EncodeBatchHeader(h), whole, e).ok());
  h.quarantine_reasons = {"decode_error", "decode_error"};
  EXPECT_EQ(refused(h, {144}, e), "quarantine reasons differ in number from the quarantined samples");
  for (const std::string& bad : {std::string(), std::string(49, 'a'), std::string("Decode error"),
                                std::string("\x1b[2Jdecode")}) {
    h.quarantine_reasons = {bad};
    EXPECT_EQ(refused(h, {144}, e), "a quarantine reason that is not a short word of [a-z0-9_]") << bad;
  }
  h.quarantine_reasons = {std::string(48, 'a')};
  EXPECT_TRUE(DecodeWorkerMessage(EncodeBatchHeader(h), whole, e).ok());
  // A sealed connection takes only sealed batches: a header without the flag would skip the opening.
  BatchExpectation sealed = e;
  sealed.sealed = true;
  EXPECT_EQ(refused(GoodHeader(), {144}, sealed), "an unsealed batch on a sealed connection");
  h = GoodHeader();
  h.sealed = true;
  EXPECT_TRUE(DecodeWorkerMessage(EncodeBatchHeader(h), whole, sealed).ok());
  // A seal welcome passes through whole, or not at all.
  auto welcome = DecodeWorkerMessage(EncodeSealWelcome({std::string(32, 'r'), std::string(32, 'p')}), {}, e);
  ASSERT_TRUE(welcome.ok());
  EXPECT_EQ(std::get<SealWelcome>(*welcome).random, std::string(32, 'r'));
  EXPECT_FALSE(DecodeWorkerMessage(EncodeSealWelcome({std::string(32, 'r'), ""}), {}, e).ok());
  // Not a batch at all.
  EXPECT_EQ(DecodeWorkerMessage(EncodeCredit({"j", 1, "c", 1, 0}), whole, e).status().message(), "not a batch");
  EXPECT_FALSE(DecodeWorkerMessage(zmq::message_t("not capnp", 9), whole, e).ok());
}

// A gpu_decode job's batch: sample 0 a cut JPEG, 1 quarantined (no bytes), 2 pixels (48 bytes: 4 x 4 x 3).
BatchHeader CroppedHeader() {
  BatchHeader h = GoodHeader();
  h.crops = {{30, true, true, -3, 2, 400, 300}, {}, {48, false, false, 0, 0, 0, 0}};
  h.payload_bytes = 78;
  return h;
}

TEST(DataCodec, AGpuDecodeBatchCarriesOneCropPerSampleAndTheirBytes) {
  BatchExpectation e = Expected();
  e.gpu_decode = true;
  const size_t whole[] = {78};
  auto ok = DecodeWorkerMessage(EncodeBatchHeader(CroppedHeader()), whole, e);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::get<BatchHeader>(*ok), CroppedHeader());
  // Every sample quarantined: one empty payload frame.
  BatchHeader empty = CroppedHeader();
  empty.flags = {2, 2, 2};
  empty.quarantine_reasons = {"decode_error", "decode_error", "decode_error"};
  empty.crops = {{}, {}, {}};
  empty.payload_bytes = 0;
  EXPECT_TRUE(DecodeWorkerMessage(EncodeBatchHeader(empty), std::vector<size_t>{0}, e).ok());

  auto refused = [&](const BatchHeader& h, const BatchExpectation& expected, size_t frame = 78) {
    auto r = DecodeWorkerMessage(EncodeBatchHeader(h), std::vector<size_t>{frame}, expected);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(refused(CroppedHeader(), Expected()), "encoded crops in a batch of a job that decodes on the CPU");
  EXPECT_EQ(refused(GoodHeader(), e, 144), "encoded crops differ in number from the batch size");
  const std::pair<void (*)(BatchHeader&), const char*> wrong[] = {
      {[](BatchHeader& h) { h.crops[2].bytes = 47; }, "a sample sent as pixels with another length than the output's, or a flip"},
      {[](BatchHeader& h) { h.crops[2].flip = true; }, "a sample sent as pixels with another length than the output's, or a flip"},
      {[](BatchHeader& h) { h.crops[1].bytes = 48; }, "a sample sent as pixels with another length than the output's, or a flip"},
      {[](BatchHeader& h) { h.crops[1].encoded = true; }, "an encoded sample that is quarantined, empty, or larger than the output's pixels"},
      {[](BatchHeader& h) { h.crops[0].bytes = 49; }, "an encoded sample that is quarantined, empty, or larger than the output's pixels"},
      {[](BatchHeader& h) { h.crops[0].bytes = 0; }, "an encoded sample that is quarantined, empty, or larger than the output's pixels"},
      {[](BatchHeader& h) { h.crops[0].width = 0; }, "an encoded sample's box is empty or larger than a JPEG can be"},
      {[](BatchHeader& h) { h.crops[0].height = 65536; }, "an encoded sample's box is empty or larger than a JPEG can be"},
      {[](BatchHeader& h) { h.crops[0].x = -65536; }, "an encoded sample's box is empty or larger than a JPEG can be"},
      {[](BatchHeader& h) { h.crops[0].y = INT32_MIN; }, "an encoded sample's box is empty or larger than a JPEG can be"},
      {[](BatchHeader& h) { h.payload_bytes = 144; }, "payload length differs from the sum of the samples' bytes"}};
  for (const auto& [change, why] : wrong) {
    BatchHeader h = CroppedHeader();
    change(h);
    EXPECT_EQ(refused(h, e), why);
  }
  EXPECT_EQ(refused(CroppedHeader(), e, 77), "payload length differs from the sum of the samples' bytes");
}

TEST(DataCodec, AWorkersErrorReachesTheClientAsAValue) {
  auto m = DecodeWorkerMessage(EncodeDataError({"j", 1, FailedPreconditionError("manifest differs")}), {},
                               Expected());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(std::get<DataError>(*m).status.code(), StatusCode::kFailedPrecondition);
}

TEST(DataCodec, HugeListsAreRefusedWithinTheReadersLimits) {
  BatchHeader h = GoodHeader();
  h.count = 3;
  h.sample_ids.assign(200000, 1);  // far beyond a 3-sample batch's traversal limit
  auto m = DecodeWorkerMessage(EncodeBatchHeader(h), std::vector<size_t>{144}, Expected());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
