// Kernels the client's GPU tests run on a consumer stream: a spin that makes the stream slower than the copies,
// and a checksum of a batch as the device holds it, to compare with the host's view of the same batch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::cuda::testing {

// Keeps `stream` busy for about `microseconds`. Returns a cudaError_t.
int LaunchSpin(void* stream, uint32_t microseconds);
// out[0] = sum of bytes[i] * (i % 251 + 1), out[1] = sum of labels, out[2] = sum of sample ids (device memory).
int LaunchChecksum(const uint8_t* bytes, size_t count, const int64_t* labels, const uint64_t* ids, uint32_t n,
                   unsigned long long* out, void* stream);
// The same checksum of bytes, on the host.
uint64_t HostChecksum(const uint8_t* bytes, size_t count);

}  // namespace stoker::cuda::testing
