// The client against a real in-process coordinator and a scripted worker that sends exactly the frames a test
// wants: out of order, twice, malformed, outside the window. The client must deliver each batch once, in plan
// order, and count (never deliver) everything else.
#include "stoker/client.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "wire/control_codec.h"
#include "wire/data_codec.h"
#include "client/src/client_metrics.h"
#include "tests/support/http_client.h"
#include "dataset/manifest.h"
#include "wire/frames.h"
#include "coordinator/impl.h"
#include "coordinator/service.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"

namespace stoker {
namespace {

using testing::TempDir;

class ScriptedWorker {
 public:
  ScriptedWorker(zmq::context_t& context, const std::string& coordinator, const JobSpec& spec)
      : spec_(spec),
        plan_(*Plan::Make(spec, 12)),
        control_(context, zmq::socket_type::dealer),
        data_(context, zmq::socket_type::router) {
    control_.set(zmq::sockopt::linger, 0);
    data_.set(zmq::sockopt::linger, 0);
    endpoint_ = *BindSocket(data_, "tcp://127.0.0.1:0");
    control_.connect(coordinator);
    Call(RegisterWorkerRequest{"w-scripted", endpoint_, 1, "test"});
  }

  DecodedReply Call(const RequestBody& body) {
    control_.send(EncodeRequest(++request_id_, body), zmq::send_flags::none);
    zmq::pollitem_t items[] = {{control_.handle(), 0, ZMQ_POLLIN, 0}};
    (void)PollOnce(items, std::chrono::seconds(10));  // a failed poll shows as nothing received
    zmq::message_t frame;
    EXPECT_TRUE(control_.recv(frame, zmq::recv_flags::dontwait));
    return *DecodeReply(std::move(frame));
  }

  // Waits for the client's credit and remembers its routing id.
  void AwaitClient() {
    zmq::pollitem_t items[] = {{data_.handle(), 0, ZMQ_POLLIN, 0}};
    (void)PollOnce(items, std::chrono::seconds(10));  // a failed poll shows as nothing received
    zmq::message_t id, credit;
    ASSERT_TRUE(data_.recv(id, zmq::recv_flags::dontwait));
    ASSERT_TRUE(data_.recv(credit, zmq::recv_flags::dontwait));
    client_ = id.to_string();
    auto decoded = DecodeClientMessage(std::move(credit));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_TRUE(std::holds_alternative<Credit>(*decoded)) << "an insecure client sends no seal offer";
    asked_frame_bytes = std::get<Credit>(*decoded).max_frame_bytes;
  }

  // With wait_ms the coordinator parks the request until work is leasable (or the wait runs out).
  std::vector<LeaseGrant> Lease(uint32_t max, uint32_t wait_ms = 0) {
    DecodedReply r = Call(LeaseRequest{"w-scripted", spec_.name, 0, max, wait_ms});
    return std::get<LeaseResponse>(r.body).leases;
  }

  zmq::message_t Header(uint64_t index, uint64_t attempt, uint32_t count_override = 0, uint32_t frames = 1) {
    BatchHeader h;
    h.job = spec_.name;
    h.epoch = static_cast<uint32_t>(index / steps);
    h.rank = 0;
    h.index = index % steps;
    h.unit = index;
    h.attempt = attempt;
    h.worker_id = "w-scripted";
    h.count = count_override ? count_override : spec_.batch_size;
    h.height = spec_.pipeline.output_height;
    h.width = spec_.pipeline.output_width;
    h.channels = 3;
    // The plan's samples, as an honest worker computes them (a client checks them against its own plan).
    std::vector<PlannedSample> planned(spec_.batch_size);
    plan_.BatchSamples(h.epoch, 0, h.index, planned);
    for (uint32_t i = 0; i < h.count; ++i) h.sample_ids.push_back(i < planned.size() ? planned[i].sample_id : 0);
    h.labels.assign(h.count, 0);
    h.flags.assign(h.count, 0);
    h.payload_bytes = spec_.BatchBytes();
    h.payload_frames = frames;
    return EncodeBatchHeader(h);
  }

  void SendFrames(std::vector<zmq::message_t> frames) {
    zmq::message_t id(client_.data(), client_.size());
    data_.send(id, zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      data_.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  void SendBatch(uint64_t index, uint64_t attempt, uint8_t fill) {
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(index, attempt));
    zmq::message_t payload(spec_.BatchBytes());
    std::memset(payload.data(), fill, payload.size());
    frames.push_back(std::move(payload));
    SendFrames(std::move(frames));
  }

  // Batch `index` with its payload cut into frames of the given sizes (the header announces `announced`, or
  // as many as there are); byte i of the payload is (i * 7 + index) mod 256.
  void SendFramedBatch(uint64_t index, uint64_t attempt, const std::vector<size_t>& sizes, uint32_t announced = 0) {
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(index, attempt, 0, announced ? announced : static_cast<uint32_t>(sizes.size())));
    size_t offset = 0;
    for (size_t n : sizes) {
      zmq::message_t f(n);
      auto* p = static_cast<uint8_t*>(f.data());
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((offset + i) * 7 + index);
      offset += n;
      frames.push_back(std::move(f));
    }
    SendFrames(std::move(frames));
  }

  uint64_t steps = 0;
  uint64_t asked_frame_bytes = 0;  // what the client's credit asked for
  const Plan& plan() const { return plan_; }

 private:
  JobSpec spec_;
  Plan plan_;
  zmq::socket_t control_;
  zmq::socket_t data_;
  std::string endpoint_;
  std::string client_;
  uint64_t request_id_ = 0;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ManifestWriter writer(dir_.path(), SourceKind::kTarShards);
    uint32_t shard = writer.AddShard("s.tar", 1 << 20, 0);
    for (int i = 0; i < 12; ++i) writer.AddSample(shard, 512 * i, 100, i, ImageFormat::kJpeg, "k");
    PosixEnv env;
    ASSERT_TRUE(writer.Write(env, dir_.Join("m.stoker"), "test").ok());
    spec_.name = "client-test";
    spec_.manifest_path = dir_.Join("m.stoker");
    spec_.batch_size = 2;
    spec_.epochs = 2;
    spec_.pipeline.output_height = spec_.pipeline.output_width = 8;  // 6 steps per epoch, tiny batches
    coordinator::CoordinatorOptions coordinator_options;
    coordinator_options.worker_queue_batches = 1000;  // the scripted worker takes a whole epoch's units at once
    impl_ = std::make_unique<coordinator::CoordinatorImpl>(coordinator_options, clock_, env_);
    coordinator::ServiceOptions options;
    options.listen = "tcp://127.0.0.1:0";
    service_ = std::make_unique<coordinator::CoordinatorService>(*impl_, nullptr, context_, options, clock_);
    endpoint_ = *service_->Bind();
    server_ = std::thread([this] { (void)service_->Run(stop_); });
  }
  void TearDown() override { StopCoordinator(); }
  void StopCoordinator() {
    stop_ = true;
    if (server_.joinable()) server_.join();
  }

  // Options for the in-process coordinator (which runs without CURVE) and the fixture's job.
  ClientOptions Options(ClientOptions options = {}) const {
    options.coordinator = endpoint_;
    options.insecure = true;
    options.job = spec_.name;
    options.spec = spec_;
    return options;
  }

  std::unique_ptr<Client> Connect(uint32_t prefetch, ClientOptions options = {}) {
    options = Options(options);
    options.prefetch = prefetch;
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return std::move(*client);
  }

  // A scripted worker of the fixture's job, registered, with `client`'s epoch length, once the client's credit came.
  ScriptedWorker WorkerFor(const Client& client) {
    ScriptedWorker worker(context_, endpoint_, spec_);
    worker.steps = client.steps_per_epoch();
    worker.AwaitClient();
    return worker;
  }

  TempDir dir_;
  JobSpec spec_;
  RealClock clock_;
  PosixEnv env_;
  zmq::context_t context_;
  std::unique_ptr<coordinator::CoordinatorImpl> impl_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread server_;
};

TEST_F(ClientTest, DeliversInPlanOrderOnceAndCountsEverythingElse) {
  auto client = Connect(/*prefetch=*/3);
  ScriptedWorker worker = WorkerFor(*client);
  ASSERT_EQ(worker.steps, 6u);
  std::vector<LeaseGrant> leases = worker.Lease(3);
  ASSERT_EQ(leases.size(), 3u);
  worker.SendBatch(2, leases[2].attempt, 0x22);  // out of order
  worker.SendBatch(0, leases[0].attempt, 0x00);
  worker.SendBatch(0, leases[0].attempt, 0x00);  // duplicate
  worker.SendBatch(3, 99, 0x33);                 // beyond the window of 3
  std::vector<zmq::message_t> bad;
  bad.push_back(worker.Header(1, leases[1].attempt, /*count_override=*/3));  // wrong batch size
  bad.push_back(zmq::message_t(spec_.BatchBytes()));
  worker.SendFrames(std::move(bad));
  std::vector<zmq::message_t> short_payload;
  short_payload.push_back(worker.Header(1, leases[1].attempt));
  short_payload.push_back(zmq::message_t(10));
  worker.SendFrames(std::move(short_payload));
  std::vector<zmq::message_t> garbage;
  garbage.push_back(zmq::message_t("not capnp", 9));
  worker.SendFrames(std::move(garbage));
  worker.SendBatch(1, leases[1].attempt, 0x11);

  // Keep every batch: the window stays [0, 3), so batch 3 is outside it whenever it is processed. Frames from
  // one worker are processed in order, so once batch 1 (sent last) is delivered, every counter is final.
  std::vector<Batch> kept;
  for (uint64_t index = 0; index < 3; ++index) {
    auto d = client->Next(std::chrono::seconds(10));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_EQ(d->kind, Delivery::Kind::kBatch);
    EXPECT_EQ(d->batch.index(), index);
    EXPECT_EQ(d->batch.pixels()[0], static_cast<uint8_t>(0x11 * index));
    std::vector<PlannedSample> planned(spec_.batch_size);
    worker.plan().BatchSamples(0, 0, index, planned);
    EXPECT_EQ(d->batch.sample_ids()[1], planned[1].sample_id);
    kept.push_back(std::move(d->batch));
  }
  ClientStats s = client->Stats();
  EXPECT_EQ(s.batches_delivered, 3u);
  EXPECT_EQ(s.dropped_duplicate, 1u);
  EXPECT_EQ(s.dropped_out_of_window, 1u);
  EXPECT_EQ(s.dropped_bad_frame, 3u);
  // Nothing else is pending: the next batch is not there.
  auto none = client->Next(std::chrono::milliseconds(50));
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
}

// A client that asks for payload frames (ClientOptions::payload_frame_bytes) says so in its credit, joins the
// frames of a batch in order, still takes a batch in one frame, and drops (and counts) any batch whose framing
// is not what the header announced or uses frames larger than it asked for.
TEST_F(ClientTest, PayloadFramesAreJoinedInOrderAndBadFramingIsDropped) {
  spec_.pipeline.output_height = spec_.pipeline.output_width = 128;  // 2 x 128 x 128 x 3 = 98,304 bytes
  ClientOptions options;
  options.payload_frame_bytes = 64 << 10;
  auto client = Connect(/*prefetch=*/4, options);
  ScriptedWorker worker = WorkerFor(*client);
  EXPECT_EQ(worker.asked_frame_bytes, 64u << 10);
  std::vector<LeaseGrant> leases = worker.Lease(3);
  ASSERT_EQ(leases.size(), 3u);
  const size_t total = spec_.BatchBytes();
  worker.SendFramedBatch(0, leases[0].attempt, {65536, total - 65536});
  worker.SendFramedBatch(1, leases[1].attempt, {40000, 40000, total - 80000}, /*announced=*/2);  // 3 came
  worker.SendFramedBatch(1, leases[1].attempt, {90000, total - 90000});  // a frame above 64 KiB
  worker.SendFramedBatch(1, leases[1].attempt, {40000, total - 50000});  // 10,000 bytes short
  worker.SendFramedBatch(1, leases[1].attempt, {30000, 30000, total - 60000});
  worker.SendFramedBatch(2, leases[2].attempt, {total});  // one frame is always fine
  for (uint64_t index = 0; index < 3; ++index) {
    auto d = client->Next(std::chrono::seconds(10));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_EQ(d->kind, Delivery::Kind::kBatch);
    ASSERT_EQ(d->batch.index(), index);
    ASSERT_EQ(d->batch.pixel_bytes(), total);
    const uint8_t* p = d->batch.pixels();
    size_t wrong = 0;
    for (size_t i = 0; i < total; ++i) wrong += p[i] != static_cast<uint8_t>(i * 7 + index);
    EXPECT_EQ(wrong, 0u) << "batch " << index << ": bytes out of place after joining its frames";
  }
  EXPECT_EQ(client->Stats().dropped_bad_frame, 3u);
}

TEST_F(ClientTest, PayloadFramesBelowTheMinimumAreRefused) {
  ClientOptions options = Options();
  options.payload_frame_bytes = 1000;
  auto client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument) << client.status().ToString();
}

// Found by the hostile-peer tests: a process out of file descriptors (1,100 fake workers did it) must get an error
// from Connect, never an exception thrown out of it (before the fix, the coordinator socket's zmq::error_t escaped
// Client::Connect). Every soft limit from "no descriptor left" upwards, until Connect succeeds.
TEST_F(ClientTest, RunningOutOfFileDescriptorsIsAnErrorNotACrash) {
  // The sanitizers' own runtime needs descriptors (UBSan checks a vtable's memory through a pipe and, without one,
  // reports every virtual call as one on an invalid object).
  if (testing::kAddressSanitizer || testing::kThreadSanitizer) {
    GTEST_SKIP() << "a sanitizer's runtime cannot run out of descriptors";
  }
  ClientOptions options = Options();
  options.connect_timeout = std::chrono::milliseconds(500);
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  // The soft limit under which exactly `spare` descriptor numbers are free (new descriptors take the lowest free
  // number; EMFILE is a number at or past the limit).
  auto limit_leaving = [](rlim_t spare) {
    auto open = [](rlim_t fd) { return ::fcntl(static_cast<int>(fd), F_GETFD) != -1; };
    rlim_t limit = 0;
    for (rlim_t free = 0; free < spare || open(limit); ++limit) {
      if (!open(limit)) ++free;
    }
    return limit;
  };
  {  // The process's ZeroMQ context starts its I/O threads with the first socket; libzmq aborts if it cannot
     // (epoll_create under EMFILE). A trainer's context is started long before its descriptors run out.
    auto warm = Client::Connect(options);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  }
  // An attempt that claimed the rank and then failed leaves it held until the coordinator's client timeout, so
  // later attempts may be refused for that instead: what is asserted is that none throws, and that running out
  // of descriptors was met and reported.
  int out_of_descriptors = 0;
  for (rlim_t extra = 0; extra < 48; ++extra) {
    rlimit low = original;
    low.rlim_cur = limit_leaving(extra);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    StatusOr<std::unique_ptr<Client>> client = InvalidArgumentError("not run");
    try {
      client = Client::Connect(options);
    } catch (const std::exception& e) {
      ::setrlimit(RLIMIT_NOFILE, &original);
      FAIL() << "Connect threw with " << extra << " descriptors to spare: " << e.what();
    }
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &original), 0);
    if (client.ok()) break;
    const std::string message = client.status().ToString();
    if (message.find("Too many open files") != std::string::npos || message.find("eventfd") != std::string::npos) {
      ++out_of_descriptors;
    }
  }
  EXPECT_GT(out_of_descriptors, 0);
}

// Found by the hostile-peer tests: 1,100 self-registered workers made every client open 1,100 connections and run
// out of descriptors. A client connects to at most ClientOptions.max_workers of the listed workers and says how
// many it left out.
TEST_F(ClientTest, AClientConnectsToNoMoreWorkersThanItsCap) {
  zmq::socket_t registrar(context_, zmq::socket_type::dealer);
  registrar.set(zmq::sockopt::linger, 0);
  registrar.connect(endpoint_);
  for (int i = 0; i < 12; ++i) {  // listed, never answering: the client's connections to them just wait
    RegisterWorkerRequest r{"w-fake-" + std::to_string(i), "tcp://127.0.0.1:" + std::to_string(9 + i), 1, "test"};
    registrar.send(EncodeRequest(100 + i, r), zmq::send_flags::none);
    zmq::pollitem_t items[] = {{registrar.handle(), 0, ZMQ_POLLIN, 0}};
    ASSERT_TRUE(PollOnce(items, std::chrono::seconds(10)).ok());
    zmq::message_t reply;
    ASSERT_TRUE(registrar.recv(reply, zmq::recv_flags::dontwait)) << "worker " << i << " was not registered";
  }
  ClientOptions options;
  options.max_workers = 4;
  auto client = Connect(/*prefetch=*/2, options);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client->Stats().connected_workers < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // membership arrives with a heartbeat reply
  }
  EXPECT_EQ(client->Stats().connected_workers, 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // two more heartbeats' memberships: still the cap
  EXPECT_EQ(client->Stats().connected_workers, 4u);
}

TEST_F(ClientTest, EndOfEpochIsReportedBetweenEpochsAndEndOfJobAfterTheLast) {
  auto client = Connect(/*prefetch=*/12);
  ScriptedWorker worker = WorkerFor(*client);
  std::vector<LeaseGrant> leases = worker.Lease(12);
  ASSERT_EQ(leases.size(), 12u);
  for (uint64_t g = 0; g < 12; ++g) worker.SendBatch(g, leases[g].attempt, static_cast<uint8_t>(g));
  std::vector<std::string> seen;
  while (true) {
    auto d = client->Next(std::chrono::seconds(10));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (d->kind == Delivery::Kind::kEndOfJob) break;
    if (d->kind == Delivery::Kind::kEndOfEpoch) {
      seen.push_back("end" + std::to_string(d->epoch));
    } else {
      seen.push_back(std::to_string(d->batch.epoch()) + ":" + std::to_string(d->batch.index()));
    }
  }
  std::vector<std::string> expected = {"0:0", "0:1", "0:2", "0:3", "0:4", "0:5", "end0",
                                       "1:0", "1:1", "1:2", "1:3", "1:4", "1:5", "end1"};
  EXPECT_EQ(seen, expected);
  auto again = client->Next(std::chrono::milliseconds(10));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->kind, Delivery::Kind::kEndOfJob);
}

TEST_F(ClientTest, ABatchKeptByTheApplicationHoldsItsSlot) {
  auto client = Connect(/*prefetch=*/2);
  ScriptedWorker worker = WorkerFor(*client);
  std::vector<LeaseGrant> leases = worker.Lease(2);
  worker.SendBatch(0, leases[0].attempt, 1);
  worker.SendBatch(1, leases[1].attempt, 2);
  auto first = client->Next(std::chrono::seconds(10));
  ASSERT_TRUE(first.ok());
  Batch held = std::move(first->batch);  // the application keeps batch 0
  auto second = client->Next(std::chrono::seconds(10));
  ASSERT_TRUE(second.ok());
  second->batch.Release();
  // The coordinator can lease batch 2 only once batch 0's slot is free: consumed is still 0.
  EXPECT_TRUE(worker.Lease(2).empty());
  held.Release();
  // Parked until the client's ack of the release reaches the coordinator.
  std::vector<LeaseGrant> more = worker.Lease(2, /*wait_ms=*/5000);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].first_batch, 2u);
}

// A consumer that reports half of every wait as stalled (as a GPU probe would when its stream drained midway).
class HalfProbe : public StallProbe {
 public:
  double StalledSeconds(std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point end) override {
    ++calls;
    return std::chrono::duration<double>(end - start).count() / 2;
  }
  std::atomic<int> calls{0};
};

// Every series a client on GPU 1 (its UUID `uuid`) serves after two batches, one wait of which was judged stalled.
void ExpectStarvationSeries(const std::string& text, const std::string& uuid) {
  const bool fake = uuid == "GPU-0fa4e000-0000-4000-8000-000000000001";
  const std::string labels = R"({pipeline="client-test",rank="0",gpu="1",gpu_uuid=")" + uuid + R"("})";
  for (const std::string& series :
       {"stoker_client_batches_total" + labels + " 2", "stoker_client_input_stall_seconds_total" + labels,
        "stoker_client_step_seconds_count" + labels + " 1", "stoker_client_input_wait_seconds_count" + labels + " 1",
        "stoker_client_prefetch_capacity_batches" + labels + " 2", "stoker_client_h2d_bytes_total" + labels + " 0",
        "stoker_client_receive_seconds_total" + labels + " 0",
        R"(stoker_client_dropped_batches_total{pipeline="client-test",rank="0",gpu="1",gpu_uuid=")" + uuid +
            R"(",reason="duplicate"} 0)",
        fake ? std::string(R"(stoker_gpu_utilization_ratio{gpu="1",gpu_uuid=")") + uuid + R"("} 0.62)"
             : std::string("stoker_gpu_utilization_ratio{gpu=\"1\""),
        std::string(R"(stoker_build_info{component="client")"), std::string("process_cpu_seconds_total")}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
}

// Polls /readyz at `address` until it answers 503 for want of the coordinator, for at most `timeout`.
void ExpectNotReadyWithin(const std::string& address, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = HttpGet(address, "/readyz");
    ASSERT_TRUE(r.ok());
    status = r->status;
    if (status == 503) {
      EXPECT_NE(r->body.find("no reply from the coordinator"), std::string::npos) << r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling a condition, with a deadline
  }
  EXPECT_EQ(status, 503);
}

// One test owns the process's metrics endpoint (ClientProcess is per process, and gtest runs tests in one).
TEST_F(ClientTest, ServesStarvationMetricsPerGpuAndHealth) {
  // Before the first NVML use in this process; $STOKER_TEST_FAKE_NVML where the tests run away from their build.
  const char* fake_nvml = std::getenv("STOKER_TEST_FAKE_NVML");
  ::setenv("STOKER_NVML_LIBRARY", fake_nvml != nullptr ? fake_nvml : STOKER_FAKE_NVML, 1);
  auto probe = std::make_shared<HalfProbe>();
  ClientOptions options;
  options.metrics_listen = "127.0.0.1:0";
  options.gpu = 1;
  options.stall_probe = probe;
  auto client = Connect(/*prefetch=*/2, options);
  const std::string address = client->Stats().metrics_address;
  ASSERT_FALSE(address.empty());
  // Connected to the coordinator (no worker needed): ready.
  auto connected = HttpGet(address, "/readyz");
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  EXPECT_EQ(connected->status, 200) << connected->body;

  ScriptedWorker worker = WorkerFor(*client);
  std::vector<LeaseGrant> leases = worker.Lease(2);
  ASSERT_EQ(leases.size(), 2u);
  // Batch 0 comes after a startup wait; batch 1 only after Next() has been waiting for it for a while, so both
  // waits are real. The delay makes a wait to measure; nothing synchronises on it.
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    worker.SendBatch(0, leases[0].attempt, 0);
  });
  auto first = client->Next(std::chrono::seconds(10));
  sender.join();
  ASSERT_TRUE(first.ok());
  first->batch.Release();
  sender = std::thread([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    worker.SendBatch(1, leases[1].attempt, 1);
  });
  auto second = client->Next(std::chrono::seconds(10));
  sender.join();
  ASSERT_TRUE(second.ok());

  ClientStats s = client->Stats();
  const double after_first = s.wait_seconds - s.startup_seconds;
  EXPECT_GT(after_first, 0.0);  // Next() was blocked while the sender slept (300 ms to get there)
  EXPECT_NEAR(s.stall_seconds, after_first / 2, 1e-9);  // the probe decides, not the wait
  EXPECT_EQ(probe->calls.load(), after_first > 0 ? 1 : 0);  // the startup wait is not the probe's to judge
  EXPECT_GE(s.step_seconds, after_first);

  auto metrics = HttpGet(address, "/metrics");
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->status, 200);
  // The UUID comes from CUDA where it lists GPUs (a machine with two), else from the fake NVML.
  const std::string uuid = client::GpuUuidForOrdinal(1);
  ExpectStarvationSeries(metrics->body, uuid);
  auto ready = HttpGet(address, "/readyz");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 200) << ready->body;
  auto state = HttpGet(address, "/state");
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->body.find("\"client_id\": \"" + client->client_id() + "\""), std::string::npos) << state->body;
  EXPECT_NE(state->body.find(R"("gpu_uuid": ")" + uuid + "\""), std::string::npos);

  second->batch.Release();
  // The coordinator goes away: within a few heartbeats the client says it is not connected.
  StopCoordinator();
  ExpectNotReadyWithin(address, std::chrono::seconds(15));
  client.reset();  // leaves the endpoint: no client, not ready, no client series
  auto gone = HttpGet(address, "/readyz");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->status, 503);
  auto empty = HttpGet(address, "/metrics");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->body.find("stoker_client_batches_total"), std::string::npos);
  EXPECT_EQ(empty->body.find("stoker_gpu_utilization_ratio"), std::string::npos);
}

}  // namespace
}  // namespace stoker
