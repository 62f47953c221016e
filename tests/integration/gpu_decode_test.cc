// A job that decodes on the GPU (PipelineSpec::gpu_decode), end to end as separate processes: a coordinator, two
// workers and `stoker consume` clients (stoker::Client hands the cut JPEGs over as they come). Every sample once,
// by the checker; every sample sent as a JPEG cut to its crop (under the pixels' bytes on the wire) or as its
// file; the same bytes from whichever workers make them.
#include <gtest/gtest.h>

#include "datagen/synthetic_dataset.h"
#include "tests/support/checker.h"
#include "tests/support/cluster_test.h"
#include "tests/support/fixtures.h"
#include "tests/support/http_client.h"
#include "tests/support/test_cluster.h"

namespace stoker::testing {
namespace {

class GpuDecoded : public ClusterTest {
 protected:
  // A metric summed over the cluster's workers.
  double WorkersSum(const std::string& series, uint32_t workers) {
    double sum = 0;
    for (uint32_t i = 0; i < workers; ++i) {
      auto v = ScrapeMetric(cluster_->worker_metrics(i), series);
      EXPECT_TRUE(v.ok()) << series << ": " << v.status().ToString();
      sum += v.ok() ? *v : 0;
    }
    return sum;
  }
};

TEST_F(GpuDecoded, EverySampleOnceAsACutJpegOrItsFileFromWhicheverWorker) {
  ASSERT_NO_FATAL_FAILURE(Start(96, 32, /*workers=*/2));
  JobSpec train = SpecOver("cut-train", data_, 2, 8, 2);
  train.seed = 5;
  train.pipeline.gpu_decode = GpuDecode::kCut;
  auto verdict = RunJobToEnd(*cluster_, train, data_.samples, "train", kRunTimeout);
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  ASSERT_TRUE(verdict->ok()) << verdict->Describe();
  for (const tools::EpochVerdict& e : verdict->epochs) {
    EXPECT_EQ(e.delivered, 96u);
    EXPECT_EQ(e.quarantined, 0u);
  }
  const double raw = 2.0 * 96 * train.SampleBytes();
  EXPECT_EQ(WorkersSum("stoker_worker_gpu_decode_samples_total{sent_as=\"cut\"}", 2), 2.0 * 96);
  EXPECT_EQ(WorkersSum("stoker_worker_gpu_decode_samples_total{sent_as=\"pixels\"}", 2), 0.0);
  const double sent = WorkersSum("stoker_worker_sent_bytes_total", 2);
  EXPECT_GT(sent, 0.1 * raw);
  EXPECT_LT(sent, 0.75 * raw) << "random crops of ~115 KB JPEGs, against 150,528 bytes of pixels each";

  // Eval with each JPEG sent as its file (the whole image's box, the centre kept).
  JobSpec eval = train;
  eval.name = "file-eval";
  eval.epochs = 1;
  eval.pipeline.mode = PipelineMode::kEval;
  eval.pipeline.gpu_decode = GpuDecode::kFile;
  auto evaluated = RunJobToEnd(*cluster_, eval, data_.samples, "eval", kRunTimeout);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status().ToString();
  ASSERT_TRUE(evaluated->ok()) << evaluated->Describe();
  EXPECT_EQ(WorkersSum("stoker_worker_gpu_decode_samples_total{sent_as=\"file\"}", 2), 96.0);
  double files = 0;  // the dataset's JPEGs, as MakeJpegDataset wrote them
  for (uint64_t i = 0; i < 96; ++i) files += static_cast<double>(datagen::SyntheticJpeg(i)->size());
  EXPECT_EQ(WorkersSum("stoker_worker_sent_bytes_total", 2) - sent, files) << "every file as it is";

  // Train again under another name, with a third worker: the same bytes.
  ASSERT_TRUE(cluster_->StartWorker(3).ok());  // and a third worker of three threads joins
  JobSpec again = train;
  again.name = "cut-again";
  auto repeated = RunJobToEnd(*cluster_, again, data_.samples, "again", kRunTimeout);
  ASSERT_TRUE(repeated.ok()) << repeated.status().ToString();
  ASSERT_TRUE(repeated->ok()) << repeated->Describe();
  ASSERT_EQ(verdict->pixel_hashes.size(), 2u * 2u * 6u);
  EXPECT_EQ(verdict->pixel_hashes, repeated->pixel_hashes);
}

}  // namespace
}  // namespace stoker::testing
