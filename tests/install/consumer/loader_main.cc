// A second C++ program against an installed stoker, built with `pkg-config --cflags --libs stoker` rather than
// CMake (tests/install/install_test.py): the Loader's host path over a one-rank job of a real coordinator.
//   loader_consumer ENDPOINT MANIFEST JOB BATCH     prints one line starting "ok"; else says what and exits 1
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "stoker/loader.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: loader_consumer ENDPOINT MANIFEST JOB BATCH_SIZE\n");
    return 2;
  }
  const uint32_t batch_size = std::stoul(argv[4]);
  stoker::LoaderOptions options;
  options.client.coordinator = argv[1];
  options.client.job = argv[3];
  options.client.insecure = true;
  options.client.connect_timeout = std::chrono::seconds(30);
  stoker::JobSpec spec;
  spec.name = argv[3];
  spec.manifest_path = argv[2];
  spec.batch_size = batch_size;
  spec.pipeline.mode = stoker::PipelineMode::kEval;
  spec.pipeline.output_height = spec.pipeline.output_width = spec.pipeline.resize_shorter = 24;
  options.client.spec = spec;
  options.device = -1;  // host batches
  options.output.dtype = stoker::DType::kFloat32;
  options.output.layout = stoker::Layout::kNCHW;
  auto loader = stoker::Loader::Open(options);
  if (!loader.ok()) {
    std::fprintf(stderr, "loader_consumer: Open(): %s\n", loader.status().ToString().c_str());
    return 1;
  }
  uint64_t batches = 0;
  for (;;) {
    auto d = (*loader)->Next(nullptr, std::chrono::seconds(30));
    if (!d.ok()) {
      std::fprintf(stderr, "loader_consumer: Next(): %s\n", d.status().ToString().c_str());
      return 1;
    }
    if (d->kind == stoker::LoaderDelivery::Kind::kEndOfJob) break;
    if (d->kind != stoker::LoaderDelivery::Kind::kBatch) continue;
    const stoker::BatchView& v = d->batch.view();
    if (v.device != -1 || v.shape != std::array<int64_t, 4>{batch_size, 3, 24, 24} ||
        v.bytes() != uint64_t{batch_size} * 3 * 24 * 24 * stoker::DTypeSize(v.dtype)) {
      std::fprintf(stderr, "loader_consumer: batch %llu is not %u host 3x24x24 images\n",
                   static_cast<unsigned long long>(d->batch.index()), batch_size);
      return 1;
    }
    ++batches;
  }
  if (batches != (*loader)->steps_per_epoch()) {
    std::fprintf(stderr, "loader_consumer: %llu batches, the plan has %llu\n", static_cast<unsigned long long>(batches),
                 static_cast<unsigned long long>((*loader)->steps_per_epoch()));
    return 1;
  }
  std::printf("ok loaded %llu batches of %s %s\n", static_cast<unsigned long long>(batches),
              stoker::DTypeName(options.output.dtype), stoker::LayoutName(options.output.layout));
  return 0;
}
