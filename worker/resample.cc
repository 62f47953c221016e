// Resampler (resample.h): Pillow's bilinear resize in 22-bit fixed point, scalar and AVX2, byte for byte equal.
#include "worker/resample.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "stoker/status.h"

namespace stoker::worker {
namespace {

constexpr int kPrecision = 22;  // Pillow's PRECISION_BITS for 8-bit images
constexpr int32_t kHalf = int32_t{1} << (kPrecision - 1);

uint8_t Clip8(int32_t sum) {
  sum >>= kPrecision;
  return static_cast<uint8_t>(sum < 0 ? 0 : sum > 255 ? 255 : sum);
}

}  // namespace

// Pillow's precompute_coeffs and normalize_coeffs_8bpc for the bilinear filter. The centre is kept relative to
// floor(in_begin) so that an integer crop computes exactly the doubles Pillow computes for the cropped image.
ResampleAxis BuildResampleAxis(double in_begin, double in_end, int out_size, int first_output, int count,
                               int clip_begin, int clip_end, bool antialias) {
  STOKER_CHECK(out_size > 0 && count > 0 && in_end > in_begin && clip_end > clip_begin, "empty resample axis");
  const int base = static_cast<int>(std::floor(in_begin));
  const double offset = in_begin - base;
  const double scale = (in_end - in_begin) / out_size;
  const double filter_scale = antialias ? std::max(scale, 1.0) : 1.0;
  const double support = 1.0 * filter_scale;  // the bilinear filter's support is 1
  const double inverse = 1.0 / filter_scale;
  ResampleAxis a;
  a.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(count);
  a.count.resize(count);
  a.weights.assign(static_cast<size_t>(count) * a.max_taps, 0);
  a.lowest = clip_end;
  a.highest = clip_begin;
  std::vector<double> taps(a.max_taps);
  const int lo = clip_begin - base, hi = clip_end - base;
  for (int i = 0; i < count; ++i) {
    const double center = offset + (first_output + i + 0.5) * scale;
    int xmin = std::max(lo, static_cast<int>(center - support + 0.5));
    int xmax = std::min(hi, static_cast<int>(center + support + 0.5));
    // At most max_taps by construction. An output whose centre falls outside the clip window (no caller asks for
    // one) still reads one pixel inside it.
    if (xmax <= xmin) {
      xmin = std::clamp(static_cast<int>(center), lo, hi - 1);
      xmax = xmin + 1;
    }
    double total = 0;
    for (int x = xmin; x < xmax; ++x) {
      double t = std::abs((x - center + 0.5) * inverse);
      taps[x - xmin] = t < 1.0 ? 1.0 - t : 0.0;
      total += taps[x - xmin];
    }
    int32_t* w = &a.weights[static_cast<size_t>(i) * a.max_taps];
    for (int x = 0; x < xmax - xmin; ++x) {
      double k = total != 0.0 ? taps[x] / total : taps[x];
      w[x] = static_cast<int32_t>(k < 0 ? std::trunc(-0.5 + k * (1 << kPrecision))
                                        : std::trunc(0.5 + k * (1 << kPrecision)));
    }
    a.first[i] = xmin + base;
    a.count[i] = xmax - xmin;
    a.lowest = std::min(a.lowest, a.first[i]);
    a.highest = std::max(a.highest, a.first[i] + a.count[i]);
  }
  return a;
}

bool Resampler::CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

Resampler::Resampler() : simd_(CpuHasAvx2()) {}

void Resampler::Resize(const uint8_t* src, size_t stride, int src_x, int src_y, const ResampleAxis& ax,
                       const ResampleAxis& ay, bool flip, uint8_t* out) {
  const int row_bytes = ax.size() * 3;
  rows_.resize(static_cast<size_t>(ay.highest - ay.lowest) * row_bytes + 64);  // 64: the AVX2 stores' slack
  if (simd_) {
    HorizontalAvx2(src, stride, src_x, src_y, ax, ay, flip);
    VerticalAvx2(ay, row_bytes, out);
  } else {
    HorizontalScalar(src, stride, src_x, src_y, ax, ay, flip);
    VerticalScalar(ay, row_bytes, out);
  }
}

namespace {

// One source row's horizontal pass for destination columns [begin, end), scalar.
void HorizontalRow(const uint8_t* in, const ResampleAxis& ax, bool flip, int begin, int end, uint8_t* row) {
  const int width = ax.size();
  for (int d = begin; d < end; ++d) {
    const int ox = flip ? width - 1 - d : d;
    const int32_t* k = &ax.weights[static_cast<size_t>(ox) * ax.max_taps];
    const uint8_t* p = in + static_cast<size_t>(ax.first[ox]) * 3;
    int32_t r = kHalf, g = kHalf, b = kHalf;
    for (int x = 0; x < ax.count[ox]; ++x) {
      r += p[3 * x] * k[x];
      g += p[3 * x + 1] * k[x];
      b += p[3 * x + 2] * k[x];
    }
    uint8_t* o = row + static_cast<size_t>(d) * 3;
    o[0] = Clip8(r);
    o[1] = Clip8(g);
    o[2] = Clip8(b);
  }
}

// Pointer to source column 0 of source row y (which may lie before `src`: only the tapped columns are read).
const uint8_t* SourceRow(const uint8_t* src, size_t stride, int src_x, int src_y, int y) {
  return src + static_cast<ptrdiff_t>(y - src_y) * static_cast<ptrdiff_t>(stride) - static_cast<ptrdiff_t>(src_x) * 3;
}

}  // namespace

void Resampler::HorizontalScalar(const uint8_t* src, size_t stride, int src_x, int src_y, const ResampleAxis& ax,
                                 const ResampleAxis& ay, bool flip) {
  const size_t row_bytes = static_cast<size_t>(ax.size()) * 3;
  for (int y = ay.lowest; y < ay.highest; ++y) {
    HorizontalRow(SourceRow(src, stride, src_x, src_y, y), ax, flip, 0, ax.size(),
                  rows_.data() + (y - ay.lowest) * row_bytes);
  }
}

void Resampler::VerticalScalar(const ResampleAxis& ay, int row_bytes, uint8_t* out) const {
  std::vector<int32_t> sums(row_bytes);
  for (int oy = 0; oy < ay.size(); ++oy) {
    const int32_t* k = &ay.weights[static_cast<size_t>(oy) * ay.max_taps];
    const uint8_t* first = rows_.data() + static_cast<size_t>(ay.first[oy] - ay.lowest) * row_bytes;
    std::fill(sums.begin(), sums.end(), kHalf);
    for (int y = 0; y < ay.count[oy]; ++y) {
      const uint8_t* r = first + static_cast<size_t>(y) * row_bytes;
      for (int j = 0; j < row_bytes; ++j) sums[j] += r[j] * k[y];
    }
    uint8_t* o = out + static_cast<size_t>(oy) * row_bytes;
    for (int j = 0; j < row_bytes; ++j) o[j] = Clip8(sums[j]);
  }
}

// Four taps of one pixel's three channels per pmaddwd: the source bytes R0 R1 G0 G1 B0 B1 . . (taps 0-1) and
// the same for taps 2-3, widened to 16 bits, against weights laid out the same way. A weight is up to 2^22, too
// wide for 16 bits, so it is split: sum(v * hi) * 2^11 + sum(v * lo) is the exact 32-bit sum.
__attribute__((target("avx2"))) void Resampler::HorizontalAvx2(const uint8_t* src, size_t stride, int src_x,
                                                               int src_y, const ResampleAxis& ax,
                                                               const ResampleAxis& ay, bool flip) {
  const int width = ax.size();
  const int max_groups = (ax.max_taps + 3) / 4;
  offsets_.assign(width, 0);
  groups_.assign(width, 0);
  high_.assign(static_cast<size_t>(width) * max_groups * 16, 0);
  low_.assign(static_cast<size_t>(width) * max_groups * 16, 0);
  for (int d = 0; d < width; ++d) {
    const int ox = flip ? width - 1 - d : d;
    offsets_[d] = ax.first[ox] * 3;
    groups_[d] = (ax.count[ox] + 3) / 4;
    for (int x = 0; x < ax.count[ox]; ++x) {
      const int32_t k = ax.weights[static_cast<size_t>(ox) * ax.max_taps + x];
      for (int c = 0; c < 3; ++c) {
        size_t at = (static_cast<size_t>(d) * max_groups + x / 4) * 16 + (x % 4) / 2 * 8 + c * 2 + x % 2;
        high_[at] = static_cast<int16_t>(k >> 11);
        low_[at] = static_cast<int16_t>(k & 0x7FF);
      }
    }
  }
  const __m128i shuffle = _mm_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, 6, 9, 7, 10, 8, 11, -1, -1);
  const __m128i half = _mm_set1_epi32(kHalf);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  // A group loads 16 bytes for its 12, so a pixel's loads may run up to 13 bytes past its last tap: harmless inside
  // the region (they are multiplied by zero weights), but the region may end right after its last pixel. Loads
  // that would pass the end of the last guaranteed pixel are done by the scalar code instead.
  const ptrdiff_t region_end = static_cast<ptrdiff_t>(ay.highest - 1 - src_y) * static_cast<ptrdiff_t>(stride) +
                               static_cast<ptrdiff_t>(ax.highest - src_x) * 3;
  for (int y = ay.lowest; y < ay.highest; ++y) {
    const uint8_t* in = SourceRow(src, stride, src_x, src_y, y);
    const ptrdiff_t row_start = in - src;  // of column 0 (maybe before src)
    uint8_t* row = rows_.data() + (y - ay.lowest) * row_bytes;
    for (int d = 0; d < width; ++d) {
      const int groups = groups_[d];
      if (row_start + offsets_[d] + 12 * (groups - 1) + 16 > region_end) {
        HorizontalRow(in, ax, flip, d, d + 1, row);
        continue;
      }
      const uint8_t* p = in + offsets_[d];
      const int16_t* hi = high_.data() + static_cast<size_t>(d) * max_groups * 16;
      const int16_t* lo = low_.data() + static_cast<size_t>(d) * max_groups * 16;
      __m256i sum_hi = _mm256_setzero_si256(), sum_lo = _mm256_setzero_si256();
      for (int g = 0; g < groups; ++g, hi += 16, lo += 16) {
        __m128i bytes = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12 * g)), shuffle);
        __m256i v = _mm256_cvtepu8_epi16(bytes);
        sum_hi = _mm256_add_epi32(sum_hi, _mm256_madd_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi))));
        sum_lo = _mm256_add_epi32(sum_lo, _mm256_madd_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))));
      }
      __m256i s = _mm256_add_epi32(_mm256_slli_epi32(sum_hi, 11), sum_lo);
      __m128i q = _mm_add_epi32(_mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)), half);
      q = _mm_srai_epi32(q, kPrecision);
      q = _mm_packus_epi16(_mm_packs_epi32(q, q), q);
      const int32_t pixel = _mm_cvtsi128_si32(q);
      std::memcpy(row + static_cast<size_t>(d) * 3, &pixel, 4);  // the 4th byte: the next pixel's, or slack
    }
  }
}

namespace {
__attribute__((target("avx2"))) inline __m256i Widen8(const uint8_t* at) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)));
}
}  // namespace

// 32 bytes of one output row at a time, 32-bit products (a weight times 255 fits), packs saturating to 0..255.
__attribute__((target("avx2"))) void Resampler::VerticalAvx2(const ResampleAxis& ay, int row_bytes,
                                                             uint8_t* out) const {
  const __m256i half = _mm256_set1_epi32(kHalf);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int oy = 0; oy < ay.size(); ++oy) {
    const int32_t* k = &ay.weights[static_cast<size_t>(oy) * ay.max_taps];
    const uint8_t* first = rows_.data() + static_cast<size_t>(ay.first[oy] - ay.lowest) * row_bytes;
    uint8_t* o = out + static_cast<size_t>(oy) * row_bytes;
    int j = 0;
    for (; j + 32 <= row_bytes; j += 32) {
      __m256i a0 = half, a1 = half, a2 = half, a3 = half;
      for (int y = 0; y < ay.count[oy]; ++y) {
        const uint8_t* r = first + static_cast<size_t>(y) * row_bytes + j;
        const __m256i w = _mm256_set1_epi32(k[y]);
        a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(Widen8(r), w));
        a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(Widen8(r + 8), w));
        a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(Widen8(r + 16), w));
        a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(Widen8(r + 24), w));
      }
      __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, kPrecision), _mm256_srai_epi32(a1, kPrecision));
      __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, kPrecision), _mm256_srai_epi32(a3, kPrecision));
      __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + j), bytes);
    }
    for (; j < row_bytes; ++j) {
      int32_t sum = kHalf;
      for (int y = 0; y < ay.count[oy]; ++y) sum += first[static_cast<size_t>(y) * row_bytes + j] * k[y];
      o[j] = Clip8(sum);
    }
  }
}

}  // namespace stoker::worker
