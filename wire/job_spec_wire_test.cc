// The job spec through schema/job.capnp: every field round-trips, and a spec from before the resize kernel existed
// keeps the kernel it was made with.
#include "wire/job_spec_wire.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

namespace stoker {
namespace {

// Every field away from its default, so a field the conversion forgot cannot round-trip by accident.
JobSpec EveryFieldSet() {
  return {.name = "rn50.eval-2",
          .manifest_path = "/data/val.stoker",
          .manifest_fingerprint = 0xabcdef,
          .pipeline = {.mode = PipelineMode::kEval,
                       .output_height = 160,
                       .output_width = 192,
                       .scale_min = 0.25f,
                       .scale_max = 0.9f,
                       .ratio_min = 0.5f,
                       .ratio_max = 2.0f,
                       .flip_probability = 0.25f,
                       .resize_shorter = 200,
                       .antialias = false,
                       .gpu_decode = GpuDecode::kCut},
          .batch_size = 48,
          .world_size = 3,
          .epochs = 5,
          .seed = 11,
          .shuffle = false,
          .remainder = Remainder::kPad,
          .batches_per_unit = 2};
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
  spec.pipeline.gpu_decode = GpuDecode::kOff;  // which needs the Pillow kernel
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
