// POSIX tar, the container of WebDataset-style shards: a scanner that walks a tar's headers (never its data) to
// find where each member's bytes are, and a writer used by `stoker gen-dataset` and the tests.
//
// The scanner understands ustar (name + prefix), GNU long names ('L'), pax extended headers ('x': path, size)
// and base-256 sizes. It reads only the 512-byte headers, so indexing a 1 GB shard reads a few hundred KB.
// A member whose data runs past the end of the file is reported with truncated = true and ends the scan; a
// header that fails its checksum, or declares a member larger than the whole file, is a DataLoss error naming the
// shard and the offset. Every offset is computed with overflow checks and strictly advances, so no header, however
// hostile, can make a scan wrap around or stand still (`stoker index` once looped forever on two such headers).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "stoker/status.h"

namespace stoker {

struct TarMember {
  std::string name;          // full path inside the archive
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;  // where the member's bytes start
  uint64_t size = 0;         // the member's size as its header declares it
  bool truncated = false;    // the file ends before data_offset + size
};

struct TarScanResult {
  uint64_t members = 0;      // regular files seen
  bool truncated = false;    // a member ran past the end of the file, or a header was cut short
  bool end_marker = false;   // the two zero blocks that end an archive were found
};

// Calls visit for every regular file member, in archive order. Stops early if visit returns an error.
StatusOr<TarScanResult> ScanTar(const RandomAccessFile& file,
                                const std::function<Status(const TarMember&)>& visit);

// Appends members to a tar image in memory (ustar; names up to 100 bytes, longer ones through GNU 'L' records).
class TarWriter {
 public:
  void Add(const std::string& name, std::string_view data);
  // Appends the two zero blocks that end an archive and returns the whole image.
  std::string Finish();
  size_t size() const { return image_.size(); }

 private:
  void AddHeader(const std::string& name, uint64_t size, char type);
  std::string image_;
};

}  // namespace stoker
