// Resampling a decoded region into the output slot the way Pillow does: Image.resize(size, BILINEAR), which is
// what torchvision's RandomResizedCrop and Resize + CenterCrop run on PIL images. Exact to the byte for RGB uint8.
//
// Pillow's resize is separable: a horizontal pass into an 8-bit image, then a vertical pass. Each output sample
// is a weighted sum of its source taps. The weights come from a triangle filter whose support grows with the
// downscale factor, which is the antialiasing. They are normalised and held as 22-bit fixed point. The
// horizontal pass runs only over the source rows that some output row reads. A horizontal flip costs nothing: the
// horizontal taps are taken in reverse order. The vertical pass writes straight into the caller's output.
//
// There are two implementations, scalar and AVX2; the AVX2 one is chosen at run time when the CPU has it. Both use
// integer arithmetic only, so they give the same bytes (resample_test checks this on random inputs).
//
// Thread safety: none. A Resampler owns scratch buffers; keep one per pipeline (per worker thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::worker {

// The taps of one axis: for each output index, `count` consecutive source indices from `first`, with weights.
struct ResampleAxis {
  int max_taps = 0;
  std::vector<int> first;        // per output: the first source index it reads
  std::vector<int> count;        // per output: how many (at most max_taps)
  std::vector<int32_t> weights;  // per output: max_taps weights, 22-bit fixed point, summing to about 1 << 22
  int lowest = 0;                // the smallest source index any output reads
  int highest = 0;               // one past the largest

  int size() const { return static_cast<int>(first.size()); }
};

// The taps for outputs [first_output, first_output + count) when source span [in_begin, in_end) (in source pixels,
// possibly fractional) is resized to out_size samples, reading only source indices in [clip_begin, clip_end).
// Pillow's precompute_coeffs: the filter's support is one source pixel, times the downscale factor when
// shrinking and `antialias` is set. With `antialias` off the support stays one pixel (plain bilinear).
ResampleAxis BuildResampleAxis(double in_begin, double in_end, int out_size, int first_output, int count,
                               int clip_begin, int clip_end, bool antialias);

class Resampler {
 public:
  Resampler();

  // Writes ay.size() rows of ax.size() RGB pixels to `out` (packed, 3 * ax.size() bytes per row). `src` points at
  // source pixel (src_x, src_y), `stride` bytes per row, and must hold every pixel of columns [ax.lowest,
  // ax.highest) and rows [ay.lowest, ay.highest). `flip` mirrors the output left to right.
  void Resize(const uint8_t* src, size_t stride, int src_x, int src_y, const ResampleAxis& ax, const ResampleAxis& ay,
              bool flip, uint8_t* out);

  // For tests and benchmarks: use the scalar code even where AVX2 is available.
  void ForceScalar(bool scalar) { simd_ = !scalar && CpuHasAvx2(); }
  bool uses_avx2() const { return simd_; }
  static bool CpuHasAvx2();

 private:
  void HorizontalScalar(const uint8_t* src, size_t stride, int src_x, int src_y, const ResampleAxis& ax,
                        const ResampleAxis& ay, bool flip);
  void HorizontalAvx2(const uint8_t* src, size_t stride, int src_x, int src_y, const ResampleAxis& ax,
                      const ResampleAxis& ay, bool flip);
  void VerticalScalar(const ResampleAxis& ay, int row_bytes, uint8_t* out) const;
  void VerticalAvx2(const ResampleAxis& ay, int row_bytes, uint8_t* out) const;

  bool simd_;
  std::vector<uint8_t> rows_;  // the horizontal pass: one output-width row per source row the vertical pass reads
  // The AVX2 horizontal pass's weights, laid out per destination column in groups of four taps, each weight split
  // into its high and low 11 bits (pmaddwd multiplies 16-bit values): hi * 2^11 + lo is the 22-bit weight.
  std::vector<int32_t> offsets_;  // per destination column: its first tap's byte in a row
  std::vector<int32_t> groups_;   // per destination column: its groups of four taps
  std::vector<int16_t> high_, low_;
};

}  // namespace stoker::worker
