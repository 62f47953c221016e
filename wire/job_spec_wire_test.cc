// The job spec through schema/job.capnp: every field round-trips, and a spec from before the resize kernel existed
// keeps the kernel it was made with.
#include "wire/job_spec_wire.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

namespace stoker {
namespace {

// Every field away from its default, so a field the conversion forgot cannot round-trip by accident.
JobSpec EveryFieldSet() {
  JobSpec spec;
  spec.name = "rn50.eval-2";
  spec.manifest_path = "/data/val.stoker";
  spec.manifest_fingerprint = 0xabcdef;
  spec.batch_size = 48;
  spec.world_size = 3;
  spec.epochs = 5;
  spec.seed = 11;
  spec.shuffle = false;
  spec.remainder = Remainder::kPad;
  spec.batches_per_unit = 2;
  PipelineSpec& p = spec.pipeline;
  p.mode = PipelineMode::kEval;
  p.output_height = 160;
  p.output_width = 192;
  p.scale_min = 0.25f;
  p.scale_max = 0.9f;
  p.ratio_min = 0.5f;
  p.ratio_max = 2.0f;
  p.flip_probability = 0.25f;
  p.resize_shorter = 200;
  p.antialias = false;
  return spec;
}

TEST(JobSpec, RoundTripsThroughTheWire) {
  JobSpec spec = EveryFieldSet();
  capnp::MallocMessageBuilder message;
  ToWire(spec, message.initRoot<wire::JobSpec>());
  auto back = FromWire(message.getRoot<wire::JobSpec>().asReader());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, spec);
  EXPECT_TRUE(back->Differences(spec).empty());
}

TEST(JobSpec, ASpecWithoutAResizeKernelIsOneFromBeforeItAndKeepsOpenCv) {
  // New jobs resize with the Pillow kernel; a spec written before the field existed (a journal, an older client)
  // reads as the OpenCV kernel it was made with, so its bytes do not change under it.
  JobSpec spec = EveryFieldSet();
  EXPECT_EQ(spec.pipeline.resize_kernel, ResizeKernel::kPillow);
  capnp::MallocMessageBuilder message;
  ToWire(spec, message.initRoot<wire::JobSpec>());
  auto pillow = FromWire(message.getRoot<wire::JobSpec>().asReader());
  ASSERT_TRUE(pillow.ok());
  EXPECT_EQ(pillow->pipeline.resize_kernel, ResizeKernel::kPillow);
  capnp::MallocMessageBuilder old;
  auto builder = old.initRoot<wire::JobSpec>();
  ToWire(spec, builder);
  builder.getPipeline().setResizeKernel(wire::ResizeKernel::OPENCV);  // the field's zero: absent on the wire
  auto back = FromWire(old.getRoot<wire::JobSpec>().asReader());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->pipeline.resize_kernel, ResizeKernel::kOpenCv);
  EXPECT_EQ(spec.Differences(*back), std::vector<std::string>{"resize_kernel: pillow here, opencv registered"});
}

}  // namespace
}  // namespace stoker
