// Test datasets: small real datasets on disk (synthetic ImageNet-like JPEGs in tar shards), with the damaged
// inputs the bad-input tests need, indexed into a manifest.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stoker/job_spec.h"
#include "stoker/status.h"

namespace stoker::testing {

struct TestDataset {
  std::string manifest;
  uint64_t samples = 0;
  std::map<std::string, uint64_t> id_by_key;  // tar member key -> sample id
};

// Indexes the dataset at `data` (tar shards or an ImageFolder tree, as `stoker index` does) into manifest_path.
StatusOr<TestDataset> IndexForTest(const std::string& data, const std::string& manifest_path);

// `images` good JPEG samples in shards of `per_shard` under dir/name, indexed to dir/name.stoker.
// A job spec over `data`: `ranks` x `batch`, `epochs`, padding the last batch.
JobSpec SpecOver(const std::string& name, const TestDataset& data, uint32_t ranks, uint32_t batch, uint32_t epochs);

StatusOr<TestDataset> MakeJpegDataset(const std::string& dir, const std::string& name, uint64_t images,
                                      uint32_t per_shard);

// A dataset mixing good samples with every kind of bad input a worker must quarantine, by key:
//   "bad/corrupt"     JPEG whose entropy-coded data is overwritten with garbage
//   "bad/truncated"   JPEG cut to 40% of its length
//   "bad/nolabel"     JPEG without a .cls member
//   "bad/notimage"    a .jpg member holding text
//   "bad/cut"         the last member of a tar shard that ends inside it (truncated tar)
// Everything else is a good JPEG: "good/NNN", and "good/cmyk" and "good/ycck" in those colour spaces.
StatusOr<TestDataset> MakeDamagedDataset(const std::string& dir, uint64_t good_images);

}  // namespace stoker::testing
