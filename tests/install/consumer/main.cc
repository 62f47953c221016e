// A C++ program built outside stoker's tree against an installed stoker (tests/install/install_test.py):
//   consumer unreachable ENDPOINT                   Connect() where nothing listens: DEADLINE_EXCEEDED or UNAVAILABLE
//   consumer consume ENDPOINT MANIFEST JOB BATCH    a one-rank, one-epoch job of a real coordinator (--insecure)
// Prints one line starting "ok" and exits 0 when it got what it expected; otherwise says what and exits 1.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "stoker/client.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

int Unreachable(const std::string& endpoint) {
  stoker::ClientOptions options;
  options.coordinator = endpoint;
  options.job = "nobody-listens";
  options.insecure = true;
  options.connect_timeout = std::chrono::milliseconds(500);
  auto client = stoker::Client::Connect(options);
  if (client.ok()) return Fail("Connect() to " + endpoint + " succeeded, with nothing listening there");
  stoker::StatusCode code = client.status().code();
  if (code != stoker::StatusCode::kDeadlineExceeded && code != stoker::StatusCode::kUnavailable) {
    return Fail("Connect() failed with " + client.status().ToString() + ", not DEADLINE_EXCEEDED or UNAVAILABLE");
  }
  std::printf("ok unreachable: %s\n", client.status().ToString().c_str());
  return 0;
}

int Consume(const std::string& endpoint, const std::string& manifest, const std::string& job, uint32_t batch_size) {
  stoker::JobSpec spec;
  spec.name = job;
  spec.manifest_path = manifest;
  spec.batch_size = batch_size;
  spec.pipeline.output_height = spec.pipeline.output_width = 32;
  if (stoker::Status valid = spec.Validate(); !valid.ok()) return Fail(valid.ToString());
  stoker::ClientOptions options;
  options.coordinator = endpoint;
  options.job = job;
  options.spec = spec;
  options.insecure = true;
  options.connect_timeout = std::chrono::seconds(30);
  auto client = stoker::Client::Connect(options);
  if (!client.ok()) return Fail("Connect(): " + client.status().ToString());
  uint64_t batches = 0, samples = 0;
  for (;;) {
    auto d = (*client)->Next(std::chrono::seconds(30));
    if (!d.ok()) return Fail("Next(): " + d.status().ToString());
    if (d->kind == stoker::Delivery::Kind::kEndOfJob) break;
    if (d->kind != stoker::Delivery::Kind::kBatch) continue;
    const stoker::Batch& b = d->batch;
    if (b.size() != batch_size || b.pixel_bytes() != uint64_t{b.size()} * 32 * 32 * 3 ||
        b.labels().size() != b.size()) {
      return Fail("batch " + std::to_string(b.index()) + " is not " + std::to_string(batch_size) + " 32x32 images");
    }
    ++batches;
    samples += b.size();
  }
  if (batches != (*client)->steps_per_epoch()) {
    return Fail(std::to_string(batches) + " batches, the plan has " + std::to_string((*client)->steps_per_epoch()));
  }
  std::printf("ok consumed %llu batches, %llu samples of job %s\n", static_cast<unsigned long long>(batches),
              static_cast<unsigned long long>(samples), job.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unreachable" && argc == 3) return Unreachable(argv[2]);
  if (mode == "consume" && argc == 6) return Consume(argv[2], argv[3], argv[4], std::stoul(argv[5]));
  return Fail("usage: consumer unreachable ENDPOINT | consume ENDPOINT MANIFEST JOB BATCH_SIZE");
}
