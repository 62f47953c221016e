// Writes the fuzz targets' seed corpora (committed in tests/fuzz/corpus/<target>/): real frames, journals, tar
// shards, JPEGs, request heads, checkpoint tokens and seal trailers, made by stoker's own encoders, so each fuzzer
// starts from inputs that reach deep into its parser. Regenerate after a format changes:
//
//   build/bin/fuzz_seeds tests/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "auth/seal.h"
#include "dataset/checkpoint.h"
#include "wire/control_codec.h"
#include "wire/data_codec.h"
#include "base/env.h"
#include "dataset/manifest.h"
#include "dataset/tar.h"
#include "coordinator/journal.h"
#include "coordinator/journal_format.h"
#include "datagen/synthetic_dataset.h"

namespace stoker {
namespace {

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string Bytes(const zmq::message_t& m) { return m.to_string(); }

JobSpec Spec() {
  return {.name = "job", .manifest_path = "/data/train.stoker", .manifest_fingerprint = 0x1234, .batch_size = 4,
          .world_size = 2, .epochs = 2};
}

// A registration's resume point of a live shape change: a real version 2 token of Spec()'s job.
ResumePoint LiveResume() {
  const JobSpec spec = Spec();
  auto plan = Plan::Make(spec, 96);
  return ResumePoint{0, 0, EncodeCheckpointToken(MakeCheckpointToken(spec, *plan, 0, 2)), true};
}

void ControlFrames(const std::string& dir) {
  const std::vector<RequestBody> requests = {
      RegisterWorkerRequest{"w-1", "tcp://10.0.0.1:7401", 4, "0.1.0", std::string(40, 'k'), false, "",
                            std::string(32, 's')},
      WorkerHeartbeatRequest{"w-1", {{"job", 0, 3, 7}}, false, 1.5, 100, std::string(32, 's')},
      LeaseRequest{"w-1", "job", 1, 4, 1000, std::string(32, 's')},
      UnitDoneRequest{"w-1", "job", 0, 3, 7, UnitOutcome::kSent, 1, {{17, "decode_error", "bad"}}, 0.5, 0.1, 0.2, 0.15, 0.05,
                      std::string(32, 's')},
      RegisterClientRequest{"c-1", "job", 0, Spec(), 8, ResumePoint{5, 99}},
      ClientHeartbeatRequest{.client_id = "c-1", .job = "job", .consumed = 4, .received_watermark = 6,
                             .received_above = {8, 9}, .membership_version = 2, .rejected_workers = {"w-2"},
                             .session = std::string(32, 's'), .receive_seconds = 0.25, .h2d_seconds = 0.125},
      GetJobRequest{"w-1", "job"},
      DeregisterRequest{"c-1", "job", 0, std::string(32, 's')},
      // A live shape change: a version 2 token (resumeToken) with resumeLive, after every earlier request's seed.
      RegisterClientRequest{"c-2", "job", 1, Spec(), 8, LiveResume(), false, "", std::string(32, 's')}};
  for (size_t i = 0; i < requests.size(); ++i) Write(dir, "request-" + std::to_string(i), Bytes(EncodeRequest(i + 1, requests[i])));
  const std::vector<ReplyBody> replies = {
      RegisterWorkerResponse{250, 1500, std::string(32, 't')},
      LeaseResponse{{}, true},
      RegisterClientResponse{Spec(), 12, 96, 0, 250, {{"w-1", "tcp://10.0.0.1:7401", "", std::string(64, 'a')}}, 3},
      ClientHeartbeatResponse{4, true, {{"w-2", "tcp://10.0.0.2:7401", std::string(40, 'k'), ""}}, {{"job", 0, 1, 2}}},
      Spec()};
  for (size_t i = 0; i < replies.size(); ++i) {
    Write(dir, "reply-" + std::to_string(i), Bytes(EncodeReply(i + 1, Status::Ok(), replies[i])));
  }
  Write(dir, "reply-error", Bytes(EncodeReply(9, PermissionDeniedError("no"), std::monostate{})));
}

void DataFrames(const std::string& dir) {
  // FuzzedDataProvider takes its integers from the end: a byte of frame count and sizes after the frame.
  const std::string sizes("\x01\x00\x02\x00\x00\x01", 6);
  Write(dir, "credit", Bytes(EncodeCredit(Credit{"job", 0, "c-1", 4, 8 << 20, std::string(32, 's')})) + sizes);
  BatchHeader h;
  h.job = "job";
  h.index = 3;
  h.worker_id = "w-1";
  h.count = 4;
  h.height = h.width = 8;
  h.channels = 3;
  h.labels = {1, 2, 3, -1};
  h.sample_ids = {5, 6, 7, 8};
  h.flags = {0, 0, 0, 1};
  Write(dir, "batch", Bytes(EncodeBatchHeader(h)) + sizes);
  h.flags = {0, 2, 0, 3};  // two quarantined samples, with their reasons
  h.quarantine_reasons = {"unsupported_format", "decode_error"};
  Write(dir, "batch-quarantined", Bytes(EncodeBatchHeader(h)) + sizes);
  Write(dir, "error", Bytes(EncodeDataError(DataError{"job", 0, NotFoundError("no such job")})) + sizes);
  h.sealed = true;
  Write(dir, "batch-sealed", Bytes(EncodeBatchHeader(h)) + sizes);
  Write(dir, "seal-hello", Bytes(EncodeSealHello(SealHello{std::string(32, 'r'), std::string(32, 'p')})) + sizes);
  Write(dir, "seal-welcome", Bytes(EncodeSealWelcome(SealWelcome{std::string(32, 'R'), std::string(32, 'P')})) + sizes);
  // A gpu_decode job's batch: two cut JPEGs (one flipped, one an eval box starting left of and above the cut), a
  // sample sent as pixels, a quarantined one.
  h.sealed = false;
  h.flags = {0, 0, 0, 2};
  h.quarantine_reasons = {"decode_error"};
  h.crops = {{100, true, true, 3, 5, 60, 50}, {90, true, false, -4, -7, 500, 375}, {192, false, false, 0, 0, 0, 0}, {}};
  h.payload_bytes = 382;
  Write(dir, "batch-crops", Bytes(EncodeBatchHeader(h)) + std::string("\x00\x00\x7e\x01\x00\x01", 6));
}

void Journals(const std::string& dir) {
  using namespace coordinator;
  JobSpec reshaped = Spec();
  reshaped.world_size = 3;
  reshaped.origin_epoch = 0;
  reshaped.origin_offset = 48;
  const std::vector<Update> updates = {JobCreated{Spec(), 96},
                                       RankSessionStarted{"job", 0, "c-1", 0, 8, "client:a", std::string(32, 'h')},
                                       RankProgress{"job", 0, 6, 4},
                                       AttemptsReserved{"job", 0, 1024},
                                       WorkerJoined{"w-1", "tcp://10.0.0.1:7401", 2, "", "worker:w", true, std::string(32, 'c')},
                                       WorkerLeft{"w-1"},
                                       JobReshaped{reshaped, 1025, 1},
                                       JobRemoved{"job"}};
  std::string v2(kJournalMagicV2, sizeof(kJournalMagicV2));
  for (size_t i = 0; i < updates.size(); ++i) {
    for (const EncodedJournalRecord& r : EncodeJournalGroups(std::span(updates).subspan(i, 1))) v2 += r.bytes;
  }
  Write(dir, "journal-v2", v2);
  std::string grouped(kJournalMagicV2, sizeof(kJournalMagicV2));
  for (const EncodedJournalRecord& r : EncodeJournalGroups(updates)) grouped += r.bytes;
  Write(dir, "journal-v2-one-group", grouped + std::string(37, '\0'));
  Write(dir, "update", EncodeJournalUpdate(updates[0]));
}

void Tars(const std::string& dir) {
  TarWriter w;
  w.Add("n01440764/a.jpg", "jpegbytes");
  w.Add("n01440764/a.cls", "7\n");
  w.Add(std::string(150, 'd') + "/long.jpg", std::string(700, 'x'));
  Write(dir, "shard.tar", w.Finish());
  TarWriter cut;
  cut.Add("a.jpg", std::string(3000, 'a'));
  Write(dir, "cut.tar", cut.Finish().substr(0, 2000));
}

void Jpegs(const std::string& dir) {
  // Trailing (libFuzzer's data provider takes integers from the end): the route (0: the region decoder; odd: the
  // whole pipeline, bit 1 eval, bit 2 the OpenCV kernel), then the output size and the crop.
  const std::string crop("\x10\x00\x10\x00\x40\x00\x40\x00\x20", 9);
  for (int i = 0; i < 3; ++i) {
    int w = 0, h = 0;
    std::vector<uint8_t> rgb = datagen::SyntheticImage(i, &w, &h);
    // Small seeds keep the fuzzer fast: a 64x48 corner of the synthetic image.
    std::vector<uint8_t> small;
    for (int y = 0; y < 48; ++y) small.insert(small.end(), rgb.begin() + y * w * 3, rgb.begin() + y * w * 3 + 64 * 3);
    auto jpeg = datagen::EncodeJpeg(small.data(), 64, 48, datagen::JpegEncodeOptions{90, i != 1});
    if (!jpeg.ok()) continue;
    Write(dir, "image-" + std::to_string(i) + ".jpg", *jpeg + '\x00' + crop);
    Write(dir, "pipeline-" + std::to_string(i) + ".jpg", *jpeg + static_cast<char>(1 | (i << 1)) + crop);
  }
  // CMYK and YCCK (print workflows' JPEGs), through the region decoder and the pipeline: their own branch.
  int w = 0, h = 0;
  std::vector<uint8_t> rgb = datagen::SyntheticImage(3, &w, &h);
  std::vector<uint8_t> small;
  for (int y = 0; y < 48; ++y) small.insert(small.end(), rgb.begin() + y * w * 3, rgb.begin() + y * w * 3 + 64 * 3);
  for (auto [name, space, full_chroma] :
       {std::tuple{"cmyk", datagen::JpegEncodeOptions::ColourSpace::kCmyk, true},
        std::tuple{"ycck", datagen::JpegEncodeOptions::ColourSpace::kYcck, false}}) {
    auto jpeg = datagen::EncodeJpeg(small.data(), 64, 48, {.quality = 90, .chroma_444 = full_chroma, .colour_space = space});
    if (!jpeg.ok()) continue;
    Write(dir, std::string("image-") + name + ".jpg", *jpeg + '\x00' + crop);
    Write(dir, std::string("pipeline-") + name + ".jpg", *jpeg + '\x01' + crop);
  }
  // A job that decodes on the GPU (route bit 4): the lossless cut, train and eval, of baseline, progressive,
  // arithmetic and greyscale JPEGs; and the file as it is (bit 5).
  using Options = datagen::JpegEncodeOptions;
  for (auto [name, options, route] :
       {std::tuple{"cut-train", Options{.quality = 90}, '\x11'}, std::tuple{"cut-eval", Options{.quality = 90}, '\x13'},
        std::tuple{"cut-progressive", Options{.quality = 90, .progression = Options::Progression::kProgressive}, '\x11'},
        std::tuple{"cut-arithmetic", Options{.quality = 90, .arithmetic = true}, '\x11'},
        std::tuple{"cut-grey", Options{.quality = 90, .colour_space = Options::ColourSpace::kGrey}, '\x11'},
        std::tuple{"file-train", Options{.quality = 90}, '\x31'}}) {
    auto jpeg = datagen::EncodeJpeg(small.data(), 64, 48, options);
    if (jpeg.ok()) Write(dir, std::string(name) + ".jpg", *jpeg + route + crop);
  }
}

void Requests(const std::string& dir) {
  Write(dir, "get", "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9400\r\nAccept: */*\r\n\r\n");
  Write(dir, "head", "HEAD /readyz?verbose=1 HTTP/1.0\n\n");
  Write(dir, "bad", "GET /state\r\n\r\n");
}

void Manifests(const std::string& dir) {
  PosixEnv env;
  const std::string scratch = std::filesystem::temp_directory_path() / "stoker-fuzz-seeds.stoker";
  ManifestWriter local("/data/imagenet", SourceKind::kTarShards);
  local.SetClasses({"n01440764", "n01443537"});
  uint32_t shard = local.AddShard("train/shard-0000.tar", 1 << 20, 0x1234);
  local.AddSample(shard, 512, 1000, 0, ImageFormat::kJpeg, "n01440764_10026");
  local.AddSample(shard, 2048, 900, -1, ImageFormat::kPng, "n01443537_1", "missing_label");
  ManifestWriter remote("s3://bucket/imagenet", SourceKind::kTarShards);
  shard = remote.AddShard("shard-0000.tar", 1 << 20, 0, "\"0123456789abcdef\"");
  remote.AddSample(shard, 512, 1000, 7, ImageFormat::kJpeg, "k", "", 0xfeed);
  for (auto [name, writer] : {std::pair{"local", &local}, std::pair{"remote", &remote}}) {
    if (writer->Write(env, scratch, "fuzz_seeds").ok()) {
      std::ifstream in(scratch, std::ios::binary);
      Write(dir, name, std::string(std::istreambuf_iterator<char>(in), {}));
    }
  }
  std::filesystem::remove(scratch);
}

void ObjectListings(const std::string& dir) {
  Write(dir, "list", "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/"
                     "doc/2006-03-01/\"><Name>bucket</Name><Prefix>imagenet/</Prefix><KeyCount>2</KeyCount>"
                     "<IsTruncated>true</IsTruncated><NextContinuationToken>abc&amp;def</NextContinuationToken>"
                     "<Contents><Key>imagenet/shard-0000.tar</Key><Size>1048576</Size><ETag>&quot;0123&quot;</ETag>"
                     "</Contents><Contents><Key>imagenet/shard-0001.tar</Key><Size>42</Size><ETag>\"77\"</ETag>"
                     "</Contents></ListBucketResult>");
  Write(dir, "error", "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>no &#x41;</Message>"
                      "</Error>");
  Write(dir, "credentials", "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = secret\n"
                            "[other]\naws_session_token=t\n");
  Write(dir, "url", "s3://bucket/prefix/shard-0000.tar");
}

void MetricsTexts(const std::string& dir) {
  Write(dir, "coordinator",
        "# HELP stoker_coordinator_workers Registered workers by state.\n"
        "# TYPE stoker_coordinator_workers gauge\n"
        "stoker_coordinator_workers{state=\"active\"} 4\n"
        "stoker_coordinator_job_samples_leased_total{pipeline=\"resnet\",team=\"client:team-a\"} 1.2345e+06\n"
        "stoker_coordinator_input_stall_ratio{pipeline=\"a \\\"quoted\\\" \\\\ name\\n\"} NaN 1700000000000\n"
        "stoker_client_wait_seconds_bucket{rank=\"0\",le=\"+Inf\",} +Inf\n"
        "process_start_time_seconds -Inf\n");
}

void Checkpoints(const std::string& dir) {
  Write(dir, "token", EncodeCheckpointToken(MakeCheckpointTokenV1("resnet50", 3, 12345, 0xfeedface12345678ull)));
  JobSpec spec;
  spec.name = "resnet50";
  spec.manifest_path = "/data/imagenet.stoker";
  spec.world_size = 4;
  spec.batch_size = 8;
  spec.epochs = 3;
  spec.manifest_fingerprint = 0xfeedface12345678ull;
  auto plan = Plan::Make(spec, 1000);
  Write(dir, "token2", EncodeCheckpointToken(MakeCheckpointToken(spec, *plan, 1, 40)));
}

void SealTrailers(const std::string& dir) {
  // The fixed handshake of fuzz_seal_trailer.cc: the worker's session seals, as a worker seals a batch's frames.
  const SealOffer client = SealOffer::FromParts(std::string(32, 'c'), std::string(32, '\x01'));
  const SealOffer worker = SealOffer::FromParts(std::string(32, 'w'), std::string(32, '\x02'));
  const SealTranscript t{"client:fuzz", "w-1", client.random(), client.public_key(), worker.random(),
                         worker.public_key()};
  auto session = SealSession::Derive(std::string(32, 'k'), t, worker, SealDirection::kWorkerToClient);
  if (!session.ok()) return;
  // Input: the payload, the associated data, the trailer, then (FuzzedDataProvider reads integers from the end) the
  // associated data's size, the payload's and the trailer's frame count.
  const auto seed = [&](const std::string& name, const std::string& payload, const std::string& associated,
                        size_t frames, uint64_t first, bool genuine) {
    SealTrailer trailer;
    trailer.first_counter = first;
    trailer.tags.resize(frames);
    std::string sealed = payload;
    const std::span<const uint8_t> parts[] = {
        {reinterpret_cast<const uint8_t*>(associated.data()), associated.size()}};
    (*session)->Seal(first, parts, {reinterpret_cast<uint8_t*>(sealed.data()), sealed.size()}, trailer.tags[0]);
    if (!genuine) trailer.tags[0][3] ^= 0x40;
    for (size_t f = 1; f < frames; ++f) trailer.tags[f].fill(static_cast<uint8_t>(f));
    const std::vector<uint8_t> bytes = EncodeSealTrailer(trailer);
    Write(dir, name, sealed + associated + std::string(bytes.begin(), bytes.end()) +
                         static_cast<char>(associated.size()) + static_cast<char>(payload.size()) +
                         static_cast<char>(frames));
  };
  seed("sealed", "pixels of one batch", "batch header", 1, 5, true);
  seed("sealed-next-generation", std::string(200, 'p'), "", 1, kSealFramesPerKey + 7, true);
  seed("three-frames", "labels", "header", 3, 4095, true);
  seed("forged-tag", "pixels of one batch", "batch header", 1, 5, false);
  seed("counter-overflows", "x", "h", 2, UINT64_MAX - 1, true);
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds CORPUS_DIR   (writes CORPUS_DIR/<target>/...)\n");
    return 2;
  }
  const std::string root = argv[1];
  stoker::ControlFrames(root + "/control_frame");
  stoker::DataFrames(root + "/data_frame");
  stoker::Journals(root + "/journal");
  stoker::Tars(root + "/tar");
  stoker::Jpegs(root + "/jpeg");
  stoker::Requests(root + "/http_request");
  stoker::Checkpoints(root + "/checkpoint");
  stoker::Manifests(root + "/manifest");
  stoker::ObjectListings(root + "/object_listing");
  stoker::SealTrailers(root + "/seal_trailer");
  stoker::MetricsTexts(root + "/metrics_text");
  return 0;
}
