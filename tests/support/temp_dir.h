// TempDir: a fresh directory under $TMPDIR (or /tmp) for one test, removed with everything in it when the
// object goes out of scope. Set STOKER_KEEP_TEST_DIRS=1 to keep it for a post-mortem. ReadFile: what a test's
// process wrote (a log, a summary), whole.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace stoker::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/stoker-test-XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() {
    const char* keep = std::getenv("STOKER_KEEP_TEST_DIRS");
    if (keep == nullptr || std::string(keep) != "1") {
      std::error_code ignored;
      std::filesystem::remove_all(path_, ignored);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(std::string_view relative) const { return path_ + "/" + std::string(relative); }

  // Writes `data` to path()/relative, creating parent directories.
  std::string Write(std::string_view relative, std::string_view data) const {
    std::string full = Join(relative);
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream out(full, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    return full;
  }

 private:
  std::string path_;
};

// The whole of the file at `path` ("" if it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace stoker::testing
