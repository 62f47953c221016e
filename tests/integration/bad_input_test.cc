// Bad input end to end: damaged samples are quarantined and reported by id (and counted by reason where the user
// looks) while everything else, CMYK and YCCK JPEGs included, is delivered exactly once; unknown jobs, held ranks, mismatched specs, missing paths and garbage frames get clear errors.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "wire/control_codec.h"
#include "wire/frames.h"
#include "stoker/schema/control.capnp.h"
#include "wire/data_codec.h"
#include "tests/support/curve_peer.h"
#include "tests/support/sealed_peer.h"
#include "tests/support/http_client.h"
#include "dataset/tar.h"
#include "datagen/synthetic_dataset.h"
#include "tests/support/checker.h"
#include "tests/support/cluster_test.h"
#include "tests/support/fixtures.h"
#include "tests/support/test_cluster.h"
#include "tests/support/temp_dir.h"
#include "tools/delivery_log.h"

namespace stoker::testing {
namespace {

class BadInput : public ClusterTest {};

// Runs a command to completion; returns its exit code and what it printed.
std::pair<int, std::string> RunCommand(const std::vector<std::string>& argv, const TempDir& dir, const std::string& name) {
  std::string log = dir.Join(name + ".out");
  auto p = Subprocess::Start(argv, log);
  if (!p.ok()) return {-1, p.status().ToString()};
  auto code = p->Wait(std::chrono::seconds(60));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {code.value_or(-2), text.str()};
}

JobSpec SpecFor(const std::string& name, const TestDataset& data, uint32_t ranks, uint32_t batch) {
  JobSpec spec;
  spec.name = name;
  spec.manifest_path = data.manifest;
  spec.world_size = ranks;
  spec.batch_size = batch;
  spec.epochs = 1;
  spec.remainder = Remainder::kPad;
  return spec;
}

TEST_F(BadInput, DamagedSamplesAreQuarantinedByIdAndNothingElseIsLost) {
  TempDir dir;
  auto data = MakeDamagedDataset(dir.path(), 30);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  tools::LocalCluster cluster(ClusterIn(dir));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker(2).ok());
  JobSpec spec = SpecFor("damaged", *data, 1, 6);
  auto consumer = cluster.StartConsumer("damaged", spec, 0);
  ASSERT_TRUE(consumer.ok());
  auto codes = cluster.WaitForConsumers(std::chrono::seconds(120));
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  ASSERT_EQ((*codes)[0], 0) << cluster.ReadLog("consumer-damaged.stderr");

  auto verdict = CheckLogs(spec, data->samples, {cluster.ConsumerLog(0)});
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  ASSERT_TRUE(verdict->ok()) << verdict->Describe();  // nothing lost, duplicated or corrupt
  const tools::EpochVerdict& e = verdict->epochs[0];
  std::vector<uint64_t> expected;
  for (const char* key : {"bad/corrupt", "bad/truncated", "bad/nolabel", "bad/notimage", "bad/cut"}) {
    ASSERT_TRUE(data->id_by_key.count(key)) << key;
    expected.push_back(data->id_by_key.at(key));
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(e.quarantined_ids, expected);
  EXPECT_EQ(e.delivered, data->samples - expected.size());
  // Quarantined samples reach the consumer flagged, with label -1 and zero pixels; the coordinator reports
  // each one by id with its reason.
  std::string log = cluster.ReadLog("coordinator");
  auto reported = [&](const char* key, const char* reason) {
    std::string needle = "sample " + std::to_string(data->id_by_key.at(key)) + " quarantined (" + reason + ")";
    EXPECT_NE(log.find(needle), std::string::npos) << needle << "\n" << log;
  };
  reported("bad/corrupt", "decode_error");
  reported("bad/truncated", "decode_error");
  reported("bad/nolabel", "missing_label");
  reported("bad/notimage", "unsupported_format");  // text under a .jpg name: no image format's signature
  reported("bad/cut", "truncated");
  // The consumer says why, where its user looks: the summary line and the JSON summary count by reason, each
  // delivery of a quarantined sample (padding repeats some) under its sample's reason.
  const std::map<std::string, std::string> reason_of = {{"bad/corrupt", "decode_error"},
      {"bad/truncated", "decode_error"}, {"bad/nolabel", "missing_label"}, {"bad/notimage", "unsupported_format"},
      {"bad/cut", "truncated"}};
  PosixEnv env;
  auto delivered = tools::ReadDeliveryLog(env, cluster.ConsumerLog(0));
  ASSERT_TRUE(delivered.ok());
  std::map<std::string, uint64_t> by_reason;
  uint64_t quarantined = 0;
  for (const tools::LoggedBatch& b : *delivered) {
    for (uint64_t id : b.batch.sample_ids) {
      for (const auto& [key, reason] : reason_of) {
        const bool hit = data->id_by_key.at(key) == id;
        quarantined += hit;
        by_reason[reason] += hit;
      }
    }
  }
  std::string line = std::to_string(quarantined) + " quarantined (", json = R"("quarantined_by_reason": {)";
  for (const auto& [reason, n] : by_reason) {
    line += reason + ": " + std::to_string(n) + (reason == by_reason.rbegin()->first ? ")" : ", ");
    json += "\"" + reason + "\": " + std::to_string(n) + (reason == by_reason.rbegin()->first ? "}" : ", ");
  }
  const std::string said = cluster.ReadLog("consumer-damaged.stderr");
  EXPECT_NE(said.find(line), std::string::npos) << line << "\n" << said;
  std::ifstream in(cluster.dir() + "/consumer-damaged.json");
  const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find(json), std::string::npos) << json << "\n" << summary;
}

// One bomb among 15 good JPEGs, fed to one rank by one single-thread worker for `epochs` epochs: every epoch must
// be exact with the bomb (its key "bad/bomb", its file `bomb_name`) quarantined, and the coordinator must report
// it with one of `reasons`. The cluster stays up for the caller's further checks.
void ExpectBombQuarantined(const TempDir& dir, tools::LocalCluster& cluster, const std::string& bomb_name,
                           const std::string& bomb, uint32_t epochs, const std::vector<std::string>& reasons) {
  TarWriter tar;
  for (int i = 0; i < 15; ++i) {
    auto jpeg = datagen::SyntheticJpeg(i);
    ASSERT_TRUE(jpeg.ok());
    tar.Add("good/" + std::to_string(i) + ".jpg", *jpeg);
    tar.Add("good/" + std::to_string(i) + ".cls", std::to_string(i % 3) + "\n");
  }
  tar.Add("bad/" + bomb_name, bomb);
  tar.Add("bad/bomb.cls", "1\n");
  dir.Write("bomb/shard-0.tar", tar.Finish());
  auto data = IndexForTest(dir.Join("bomb"), dir.Join("bomb.stoker"));
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const uint64_t bomb_id = data->id_by_key.at("bad/bomb");
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker(1).ok());
  JobSpec spec = SpecFor("bomb", *data, 1, 4);
  spec.epochs = epochs;
  ASSERT_TRUE(cluster.StartConsumer("bomb", spec, 0).ok());
  auto codes = cluster.WaitForConsumers(std::chrono::seconds(120));
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  ASSERT_EQ((*codes)[0], 0) << cluster.ReadLog("consumer-bomb.stderr");
  auto verdict = CheckLogs(spec, data->samples, {cluster.ConsumerLog(0)});
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  ASSERT_TRUE(verdict->ok()) << verdict->Describe();
  for (const tools::EpochVerdict& e : verdict->epochs) EXPECT_EQ(e.quarantined_ids, std::vector<uint64_t>{bomb_id});
  const std::string log = cluster.ReadLog("coordinator");
  bool reported = false;
  for (const std::string& reason : reasons) {
    reported |= log.find("sample " + std::to_string(bomb_id) + " quarantined (" + reason + ")") != std::string::npos;
  }
  EXPECT_TRUE(reported) << log;
}

// Regression: a scan-bomb JPEG held a worker thread for 101 s and was decoded again every epoch. Now it is refused
// at the scan limit (decode_limit), reported by id in every epoch, and decoded only once: the worker remembers it.
TEST_F(BadInput, AScanBombIsQuarantinedEveryEpochAndDecodedOnce) {
  TempDir dir;
  int w = 0, h = 0;
  std::vector<uint8_t> rgb = datagen::SyntheticImage(99, &w, &h);
  auto bomb = datagen::EncodeJpeg(rgb.data(), w, h, {90, true, datagen::JpegEncodeOptions::Progression::kEveryBit});
  ASSERT_TRUE(bomb.ok()) << bomb.status().ToString();
  tools::LocalCluster cluster(ClusterIn(dir));
  ExpectBombQuarantined(dir, cluster, "bomb.jpg", *bomb, 3, {"decode_limit"});
  auto remembered = ScrapeMetric(cluster.worker_metrics(0), "stoker_worker_quarantined_remembered_total");
  ASSERT_TRUE(remembered.ok()) << remembered.status().ToString();
  EXPECT_EQ(*remembered, 2.0) << "the bomb was decoded again in a later epoch";
}

// Regression (the jpeg fuzz target's pipeline route, one-CPU-hour run): a PBM of a few bytes claiming 30000 x
// 30000 pixels made OpenCV allocate 2.7 GB, because the worker's OPENCV_IO_MAX_IMAGE_PIXELS was set in main,
// after OpenCV had read it. The worker now starts itself again with it set; the bomb is quarantined as a limit (a
// build without OpenCV imgcodecs never decodes it: unsupported_format).
TEST_F(BadInput, APixelBombInAnotherFormatIsAQuarantinedLimit) {
  TempDir dir;
  tools::LocalCluster cluster(ClusterIn(dir));
  ExpectBombQuarantined(dir, cluster, "bomb.pbm", std::string("P4\n30000 30000\n") + std::string(64, '\xff'), 1,
                        {"decode_limit", "unsupported_format"});
}

TEST_F(BadInput, ShardMissingAtRunTimeIsQuarantinedNotFatal) {
  TempDir dir;
  auto data = MakeJpegDataset(dir.path(), "jpegs", 40, 20);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  std::filesystem::remove(dir.Join("jpegs/shard-000001.tar"));  // samples 20..39 are gone after indexing
  tools::LocalCluster cluster(ClusterIn(dir));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker(2).ok());
  JobSpec spec = SpecFor("missing", *data, 2, 5);
  ASSERT_TRUE(cluster.StartConsumer("m0", spec, 0).ok());
  ASSERT_TRUE(cluster.StartConsumer("m1", spec, 1).ok());
  auto codes = cluster.WaitForConsumers(std::chrono::seconds(120));
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  auto verdict = CheckLogs(spec, data->samples, {cluster.ConsumerLog(0), cluster.ConsumerLog(1)});
  ASSERT_TRUE(verdict.ok());
  ASSERT_TRUE(verdict->ok()) << verdict->Describe();
  EXPECT_EQ(verdict->epochs[0].quarantined, 20u);
  EXPECT_EQ(verdict->epochs[0].delivered, 20u);
  EXPECT_EQ(verdict->epochs[0].quarantined_ids.front(), 20u);
  EXPECT_NE(cluster.ReadLog("coordinator").find("(read_error)"), std::string::npos);
}

TEST_F(BadInput, UnknownJobHeldRankAndMismatchedSpecAreRefusedClearly) {
  ASSERT_NO_FATAL_FAILURE(Start(40, 40, /*workers=*/1));
  std::string stoker = BinaryDirectory() + "/stoker";
  std::string ep = cluster_->coordinator_endpoint();

  auto [unknown_code, unknown_out] =
      RunCommand({stoker, "consume", "--coordinator", ep, "--job", "nope", "--attach", "--rank", "0", "--key-file",
                  cluster_->keyring().client_key, "--trust-file", cluster_->keyring().trust},
                 dir_, "unknown");
  EXPECT_EQ(unknown_code, 1);
  EXPECT_NE(unknown_out.find("NOT_FOUND: unknown job 'nope'"), std::string::npos) << unknown_out;

  // A consumer that takes rank 0 and keeps it (it "trains" slowly).
  JobSpec spec = SpecFor("held", data_, 2, 4);
  auto holder = cluster_->StartConsumer("holder", spec, 0, {"--hold-ms", "60000", "--max-batches", "1"});
  ASSERT_TRUE(holder.ok());
  // Once the holder has logged a batch it certainly holds the rank.
  ASSERT_TRUE(
      WaitForFile(cluster_->ConsumerLog(*holder), std::chrono::seconds(60), &cluster_->consumer(*holder)).ok())
      << cluster_->ReadLog("consumer-holder.stderr");
  // `stoker consume` of `job`'s `rank` with the client key, run to its end: its exit code and output.
  auto consume = [&](const JobSpec& job, const char* rank, const std::string& tag) {
    std::vector<std::string> command = {stoker, "consume", "--coordinator", ep, "--rank", rank};
    for (const auto& f : tools::JobFlags(job)) command.push_back(f);
    for (const auto& f : cluster_->SecurityFlags(Role::kClient)) command.push_back(f);
    return RunCommand(command, dir_, tag);
  };
  auto held = consume(spec, "0", "second");
  EXPECT_EQ(held.first, 1);
  EXPECT_NE(held.second.find("ALREADY_EXISTS: rank 0 of job 'held' is held by a live client (c-"), std::string::npos)
      << held.second;

  JobSpec different = spec;
  different.batch_size = 5;
  auto [mismatch_code, mismatch_out] = consume(different, "1", "mismatch");
  EXPECT_EQ(mismatch_code, 1);
  EXPECT_NE(mismatch_out.find("FAILED_PRECONDITION"), std::string::npos) << mismatch_out;
  EXPECT_NE(mismatch_out.find("batch_size: 5 here, 4 registered"), std::string::npos) << mismatch_out;

  JobSpec nomanifest = spec;
  nomanifest.name = "nomanifest";
  nomanifest.manifest_path = dir_.Join("absent.stoker");
  auto [missing_code, missing_out] = consume(nomanifest, "0", "missing");
  EXPECT_EQ(missing_code, 1);
  EXPECT_NE(missing_out.find("absent.stoker"), std::string::npos) << missing_out;
}

TEST_F(BadInput, IndexRefusesMissingAndUnrecognisedPaths) {
  TempDir dir;
  std::string stoker = BinaryDirectory() + "/stoker";
  auto [code, out] = RunCommand({stoker, "index", dir.Join("nope"), "-o", dir.Join("m.stoker")}, dir, "index-missing");
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  std::filesystem::create_directories(dir.Join("empty"));
  auto [empty_code, empty_out] = RunCommand({stoker, "index", dir.Join("empty"), "-o", dir.Join("m.stoker")}, dir, "empty");
  EXPECT_EQ(empty_code, 2);
  EXPECT_NE(empty_out.find("no .tar shards and no class folders"), std::string::npos) << empty_out;
  auto [usage_code, usage_out] = RunCommand({stoker, "index", dir.Join("empty")}, dir, "usage");
  EXPECT_EQ(usage_code, 2);
  EXPECT_NE(usage_out.find("-o MANIFEST"), std::string::npos) << usage_out;
}

// Raw sockets against the real servers, authenticated with the cluster's keys (what a holder of a key could send):
// malformed frames are answered or dropped, counted, and nothing breaks.
TEST_F(BadInput, ServersRejectGarbageAndUnknownJobsOnTheWire) {
  TempDir dir;
  tools::LocalCluster cluster(ClusterIn(dir));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker().ok());
  zmq::context_t context;
  auto worker_key = ReadKey(cluster.keyring().worker_key);
  auto client_key = ReadKey(cluster.keyring().client_key);
  auto coordinator_key = ReadKey(cluster.keyring().coordinator_key);
  ASSERT_TRUE(worker_key.ok() && client_key.ok() && coordinator_key.ok());
  auto worker_state = HttpGet(cluster.worker_metrics(0), "/state");
  ASSERT_TRUE(worker_state.ok());
  const std::string worker_id = JsonField(worker_state->body, "id");
  ASSERT_FALSE(worker_id.empty()) << worker_state->body;
  auto receive = [](zmq::socket_t& s, std::chrono::milliseconds timeout) -> std::optional<zmq::message_t> {
    zmq::pollitem_t items[] = {{s.handle(), 0, ZMQ_POLLIN, 0}};
    (void)PollOnce(items, timeout);  // a failed poll shows as nothing received
    if (!(items[0].revents & ZMQ_POLLIN)) return std::nullopt;
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
    return m;
  };

  zmq::socket_t control = Dealer(context, cluster.coordinator_endpoint(), *worker_key, coordinator_key->public_z85);
  control.send(zmq::str_buffer("definitely not capnp!!"), zmq::send_flags::none);  // 22 bytes: not whole words
  auto garbage_reply = receive(control, std::chrono::seconds(10));
  ASSERT_TRUE(garbage_reply.has_value());
  auto decoded = DecodeReply(std::move(*garbage_reply));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->status.code(), StatusCode::kInvalidArgument);

  capnp::MallocMessageBuilder future;
  auto request = future.initRoot<wire::Request>();
  request.setProtocolVersion(99);
  request.setRequestId(5);
  request.setSenderId("t-1");
  request.initGetJob().setJob("x");
  zmq::message_t future_frame = ToFrame(future);
  control.send(future_frame, zmq::send_flags::none);
  auto version_reply = DecodeReply(std::move(*receive(control, std::chrono::seconds(10))));
  ASSERT_TRUE(version_reply.ok());
  EXPECT_EQ(version_reply->request_id, 5u);
  EXPECT_EQ(version_reply->status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(version_reply->status.message().find("version 99"), std::string::npos);

  zmq::message_t get = EncodeRequest(6, GetJobRequest{"t-1", "nope"});
  control.send(get, zmq::send_flags::none);
  auto get_reply = DecodeReply(std::move(*receive(control, std::chrono::seconds(10))));
  ASSERT_TRUE(get_reply.ok());
  EXPECT_EQ(get_reply->status.code(), StatusCode::kNotFound);  // and the coordinator is still serving

  auto dataset = MakeJpegDataset(dir.path(), "listed", 4, 4);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  auto listed = ListedCredentials(context, cluster.coordinator_endpoint(), *coordinator_key, *client_key,
                                  SpecFor("listed", *dataset, 1, 2), worker_id);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  SealedPeer data(context, cluster.worker_endpoint(0), client_key->identity(), worker_id, *listed);
  data.socket().send(zmq::str_buffer("garbage!"), zmq::send_flags::none);
  ASSERT_TRUE(data.Handshake()) << "the garbage before it left the connection usable";
  ASSERT_TRUE(data.SendCredit(Credit{"nope", 0, "c-test", 2, 0}));
  auto error = receive(data.socket(), std::chrono::seconds(10));
  ASSERT_TRUE(error.has_value()) << cluster.ReadLog("worker-0");
  auto reply = DecodeDataMessage(std::move(*error), ControlReaderOptions());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(std::holds_alternative<DataError>(*reply));
  Status status = std::get<DataError>(*reply).status;
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("unknown job 'nope'"), std::string::npos) << status.message();
  EXPECT_TRUE(cluster.worker(0).running());
  EXPECT_TRUE(cluster.coordinator().running());
}

}  // namespace
}  // namespace stoker::testing
