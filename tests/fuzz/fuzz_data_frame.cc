// libFuzzer target: one data-plane frame, as a worker decodes a credit and a client decodes a batch header or an
// error (wire/data_codec.h), for a job decoded on the CPU and one decoded on the GPU, with the payload frame sizes taken from the input's last bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <vector>
#include <zmq.hpp>

#include "wire/data_codec.h"
#include "wire/frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<size_t> frames(in.ConsumeIntegralInRange<size_t>(0, 4));
  for (size_t& f : frames) f = in.ConsumeIntegralInRange<size_t>(0, 1 << 20);
  const std::vector<uint8_t> frame = in.ConsumeRemainingBytes<uint8_t>();
  stoker::BatchExpectation expected;
  expected.job = "job";
  expected.epochs = 2;
  expected.steps_per_epoch = 10;
  expected.batch_size = 4;
  expected.height = expected.width = 8;
  (void)stoker::DecodeDataMessage(zmq::message_t(frame.data(), frame.size()), stoker::ControlReaderOptions());
  (void)stoker::DecodeClientMessage(zmq::message_t(frame.data(), frame.size()));
  (void)stoker::DecodeWorkerMessage(zmq::message_t(frame.data(), frame.size()), frames, expected);
  expected.gpu_decode = true;  // a job whose samples come as cut JPEGs (BatchHeader::crops)
  (void)stoker::DecodeWorkerMessage(zmq::message_t(frame.data(), frame.size()), frames, expected);
  return 0;
}
