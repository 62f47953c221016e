// Synthetic ImageNet-like JPEGs and their tar shards (synthetic_dataset.h), a deterministic function of the index.
#include "datagen/synthetic_dataset.h"

#include <jpeglib.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <thread>

#include "base/rng.h"
#include "dataset/tar.h"
#include "base/sync.h"

namespace stoker::datagen {
namespace {

struct EncodeErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnEncodeError(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<EncodeErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Adobe's CMYK as a JPEG stores it (inverted): with m = max(R, G, B), C M Y K = 255 R / m, 255 G / m, 255 B / m, m,
// which a CMYK decoder (Pillow's cmyk2rgb after its inversion) turns back into R G B, up to rounding.
std::vector<uint8_t> RgbToAdobeCmyk(const uint8_t* rgb, size_t pixels) {
  std::vector<uint8_t> cmyk(pixels * 4);
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = rgb + 3 * i;
    const int m = std::max({p[0], p[1], p[2]});
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = static_cast<uint8_t>(m == 0 ? 0 : (255 * p[c] + m / 2) / m);
    cmyk[4 * i + 3] = static_cast<uint8_t>(m);
  }
  return cmyk;
}

// The libjpeg part, kept free of C++ objects because errors leave it by longjmp.
// Every bit of every coefficient of every component in a scan of its own: DC in eleven successive-approximation
// scans, then each AC coefficient alone, bit 10 first, down to bit 0.
std::vector<jpeg_scan_info> EveryBitScans() {
  std::vector<jpeg_scan_info> scans;
  scans.push_back({3, {0, 1, 2, 0}, 0, 0, 0, 10});
  for (int bit = 10; bit > 0; --bit) scans.push_back({3, {0, 1, 2, 0}, 0, 0, bit, bit - 1});
  for (int component = 0; component < 3; ++component) {
    for (int k = 1; k < 64; ++k) {
      scans.push_back({1, {component, 0, 0, 0}, k, k, 0, 10});
      for (int bit = 10; bit > 0; --bit) scans.push_back({1, {component, 0, 0, 0}, k, k, bit, bit - 1});
    }
  }
  return scans;
}

// `scans` (may be empty) lives in the caller's frame: nothing with a destructor may live in this one, which
// libjpeg's errors leave by longjmp.
// `pixels` are RGB, or CMYK for the CMYK and YCCK colour spaces.
bool EncodeRaw(const uint8_t* pixels, int width, int height, const JpegEncodeOptions& options,
               const std::vector<jpeg_scan_info>& scans, unsigned char** out, unsigned long* out_size, char* message) {
  using ColourSpace = JpegEncodeOptions::ColourSpace;
  const bool cmyk = options.colour_space == ColourSpace::kCmyk || options.colour_space == ColourSpace::kYcck;
  jpeg_compress_struct cinfo;
  EncodeErrors errors;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = OnEncodeError;
  if (setjmp(errors.jump) != 0) {
    std::strncpy(message, errors.message, JMSG_LENGTH_MAX);
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, out, out_size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = cmyk ? 4 : 3;
  cinfo.in_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  if (options.colour_space == ColourSpace::kYcck) jpeg_set_colorspace(&cinfo, JCS_YCCK);  // Adobe transform 2
  if (options.colour_space == ColourSpace::kGrey) jpeg_set_colorspace(&cinfo, JCS_GRAYSCALE);
  cinfo.arith_code = options.arithmetic ? TRUE : FALSE;
  jpeg_set_quality(&cinfo, options.quality, TRUE);
  for (int c = 0; c < cinfo.num_components; ++c) {
    // Full resolution, or 2x2 for the components a subsampling encoder makes large (libjpeg's default for YCbCr
    // and YCCK: the first; CMYK has no luma, so C and K here).
    const bool large = !options.chroma_444 && (c == 0 || (options.colour_space == ColourSpace::kCmyk && c == 3));
    cinfo.comp_info[c].h_samp_factor = large ? 2 : 1;
    cinfo.comp_info[c].v_samp_factor = large ? 2 : 1;
  }
  for (int c = 0; c < cinfo.num_components && options.every_component_h > 0; ++c) {
    cinfo.comp_info[c].h_samp_factor = options.every_component_h;
    cinfo.comp_info[c].v_samp_factor = options.every_component_v;
  }
  if (options.progression == JpegEncodeOptions::Progression::kProgressive) jpeg_simple_progression(&cinfo);
  if (!scans.empty()) {
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + static_cast<size_t>(cinfo.next_scanline) * width *
                                        cinfo.input_components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

}  // namespace

StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width, int height, const JpegEncodeOptions& options) {
  std::vector<uint8_t> cmyk;
  if (options.colour_space == JpegEncodeOptions::ColourSpace::kCmyk ||
      options.colour_space == JpegEncodeOptions::ColourSpace::kYcck) {
    if (options.progression == JpegEncodeOptions::Progression::kEveryBit) {
      return InvalidArgumentError("JPEG encode: the every-bit progression is for three components only");
    }
    cmyk = RgbToAdobeCmyk(rgb, static_cast<size_t>(width) * height);
    rgb = cmyk.data();
  }
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  char message[JMSG_LENGTH_MAX] = {0};
  const std::vector<jpeg_scan_info> scans =
      options.progression == JpegEncodeOptions::Progression::kEveryBit ? EveryBitScans() : std::vector<jpeg_scan_info>();
  bool ok = EncodeRaw(rgb, width, height, options, scans, &buffer, &size, message);
  std::string out;
  if (ok) out.assign(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  if (!ok) return InternalError(std::string("JPEG encode: ") + message);
  return out;
}

std::vector<uint8_t> SyntheticImage(uint64_t index, int* width, int* height, double noise_sigma) {
  Rng rng(DeriveSeed(index, 0x696d67ULL /* "img" */));
  const int h = (index % 3 == 1) ? 500 : 375;
  const int w = (index % 3 == 1) ? 375 : 500;
  cv::Mat img(h, w, CV_32FC3);
  // 127 + 80 sin(x fx + y fy + phase) per channel, via sin(a + b) = sin a cos b + cos a sin b tables.
  for (int c = 0; c < 3; ++c) {
    double fx = rng.Uniform(0.005, 0.05), fy = rng.Uniform(0.005, 0.05), phase = rng.Uniform(0, 6.28);
    std::vector<float> sx(w), cx(w);
    for (int x = 0; x < w; ++x) {
      sx[x] = static_cast<float>(std::sin(x * fx + phase));
      cx[x] = static_cast<float>(std::cos(x * fx + phase));
    }
    for (int y = 0; y < h; ++y) {
      float sy = static_cast<float>(std::sin(y * fy)), cy = static_cast<float>(std::cos(y * fy));
      float* row = img.ptr<float>(y);
      for (int x = 0; x < w; ++x) row[x * 3 + c] = 127.0f + 80.0f * (sx[x] * cy + cx[x] * sy);
    }
  }
  for (int i = 0; i < 12; ++i) {
    cv::Point center(static_cast<int>(rng.UniformInt(0, w - 1)), static_cast<int>(rng.UniformInt(0, h - 1)));
    int radius = static_cast<int>(rng.UniformInt(10, 79));
    cv::Scalar colour(static_cast<double>(rng.UniformInt(0, 254)), static_cast<double>(rng.UniformInt(0, 254)),
                      static_cast<double>(rng.UniformInt(0, 254)));
    cv::circle(img, center, radius, colour, cv::FILLED);
  }
  if (noise_sigma > 0) {
    cv::Mat noise(h, w, CV_32FC3);
    cv::RNG cv_rng(DeriveSeed(index, 0x6e6f6973ULL));
    cv_rng.fill(noise, cv::RNG::NORMAL, 0.0, noise_sigma);
    img += noise;
  }
  cv::Mat bytes;
  img.convertTo(bytes, CV_8UC3);  // saturating: clips to [0, 255]
  *width = w;
  *height = h;
  return std::vector<uint8_t>(bytes.data, bytes.data + bytes.total() * 3);
}

StatusOr<std::string> SyntheticJpeg(uint64_t index, const JpegEncodeOptions& options) {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb = SyntheticImage(index, &w, &h);
  return EncodeJpeg(rgb.data(), w, h, options);
}

Status GenerateTarDataset(Env& env, const std::string& directory, const GenerateOptions& options) {
  if (options.images == 0) return InvalidArgumentError("gen-dataset: --images must be at least 1");
  if (options.per_shard == 0) return InvalidArgumentError("gen-dataset: --per-shard must be at least 1");
  if (options.classes == 0) return InvalidArgumentError("gen-dataset: --classes must be at least 1");
  STOKER_RETURN_IF_ERROR(env.CreateDirectories(directory));
  const uint64_t shards = (options.images + options.per_shard - 1) / options.per_shard;
  unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<uint64_t> next_shard{0};
  std::atomic<uint64_t> done{0};
  Mutex mu;
  Status first_error;  // under mu
  auto work = [&]() {
    for (uint64_t s = next_shard++; s < shards; s = next_shard++) {
      TarWriter tar;
      uint64_t begin = s * options.per_shard;
      uint64_t end = std::min(options.images, begin + options.per_shard);
      for (uint64_t i = begin; i < end; ++i) {
        auto jpeg = SyntheticJpeg(i, options.jpeg);
        if (!jpeg.ok()) {
          MutexLock lock(mu);
          if (first_error.ok()) first_error = jpeg.status();
          return;
        }
        char key[32];
        std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(i));
        tar.Add(std::string(key) + ".jpg", *jpeg);
        tar.Add(std::string(key) + ".cls", std::to_string(i % options.classes));
        uint64_t total_done = ++done;
        if (options.progress && (total_done % 64 == 0 || total_done == options.images)) {
          MutexLock lock(mu);
          options.progress(total_done, options.images);
        }
      }
      char name[32];
      std::snprintf(name, sizeof(name), "shard-%06llu.tar", static_cast<unsigned long long>(s));
      std::string image = tar.Finish();
      Status written = env.WriteFileAtomically(JoinPath(directory, name), image.data(), image.size());
      if (!written.ok()) {
        MutexLock lock(mu);
        if (first_error.ok()) first_error = written;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return first_error;
}

}  // namespace stoker::datagen
