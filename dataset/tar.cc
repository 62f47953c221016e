#include "dataset/tar.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "stoker/check.h"

namespace stoker {
namespace {

constexpr size_t kBlock = 512;

uint64_t RoundUpToBlock(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// Octal (NUL/space terminated) or GNU base-256 (top bit of the first byte set).
bool ParseNumber(const unsigned char* field, size_t len, uint64_t* out) {
  if (field[0] & 0x80) {
    uint64_t v = field[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | field[i];
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && field[i] == ' ') ++i;
  bool any = false;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < len; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  *out = any ? v : 0;
  return true;
}

std::string FieldString(const unsigned char* field, size_t len) {
  size_t n = 0;
  while (n < len && field[n] != '\0') ++n;
  return std::string(reinterpret_cast<const char*>(field), n);
}

bool ChecksumMatches(const unsigned char* h) {
  uint64_t stored = 0;
  if (!ParseNumber(h + 148, 8, &stored)) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

bool AllZero(const unsigned char* h) {
  for (size_t i = 0; i < kBlock; ++i) {
    if (h[i] != 0) return false;
  }
  return true;
}

// Applies "LEN key=value\n" pax records for path and size. A record whose length is not a plain decimal that
// covers at least its own "LEN " and fits in what is left ends the parse: the position only ever moves forward,
// by at least one byte, so no length can make it wrap or stand still. False for a size value that is not a plain
// decimal below 2^63.
bool ApplyPax(const std::string& records, std::string* path, uint64_t* size, bool* has_size) {
  size_t pos = 0;
  while (pos < records.size()) {
    const size_t space = records.find(' ', pos);
    if (space == std::string::npos || space == pos || space - pos > 19) return true;
    uint64_t len = 0;
    for (size_t i = pos; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9') return true;
      len = len * 10 + static_cast<uint64_t>(records[i] - '0');
    }
    const size_t left = records.size() - pos;
    if (len <= space - pos + 1 || len > left || records[pos + len - 1] != '\n') return true;
    const std::string record = records.substr(space + 1, pos + len - space - 2);  // without the newline
    const size_t eq = record.find('=');
    if (eq != std::string::npos) {
      const std::string key = record.substr(0, eq);
      const std::string value = record.substr(eq + 1);
      if (key == "path") *path = value;
      if (key == "size") {
        uint64_t v = 0;
        if (value.empty() || value.size() > 18) return false;
        for (char c : value) {
          if (c < '0' || c > '9') return false;
          v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        *size = v;
        *has_size = true;
      }
    }
    pos += len;
  }
  return true;
}

// Where the header after a member of `size` bytes whose data starts at `data_offset` is: false when that does
// not fit in 64 bits (a base-256 size near 2^64 used to wrap the next offset back onto the current one).
bool NextHeaderOffset(uint64_t data_offset, uint64_t size, uint64_t* next) {
  if (size > UINT64_MAX - (kBlock - 1)) return false;
  const uint64_t padded = RoundUpToBlock(size);
  if (padded > UINT64_MAX - data_offset) return false;
  *next = data_offset + padded;
  return true;
}

}  // namespace

StatusOr<TarScanResult> ScanTar(const RandomAccessFile& file,
                                const std::function<Status(const TarMember&)>& visit) {
  TarScanResult result;
  const uint64_t file_size = file.Size();
  uint64_t offset = 0;
  std::string pending_long_name;
  std::string pending_pax_path;
  uint64_t pending_pax_size = 0;
  bool pending_has_pax_size = false;
  unsigned char header[kBlock];
  constexpr uint64_t kMaxMetaRecord = 1 << 20;  // long names and pax records larger than this are not credible

  while (offset < file_size) {
    if (offset + kBlock > file_size) {
      result.truncated = true;  // a header cut short
      break;
    }
    STOKER_ASSIGN_OR_RETURN(size_t got, file.Read(offset, kBlock, header));
    if (got < kBlock) {
      result.truncated = true;
      break;
    }
    if (AllZero(header)) {
      result.end_marker = true;
      break;
    }
    if (!ChecksumMatches(header)) {
      return DataLossError(file.path() + ": the header at byte " + std::to_string(offset) +
                           " is not a valid tar header (checksum mismatch): the shard is corrupt");
    }
    uint64_t size = 0;
    if (!ParseNumber(header + 124, 12, &size)) {
      return DataLossError(file.path() + ": the header at byte " + std::to_string(offset) + " has a bad size field");
    }
    char type = static_cast<char>(header[156]);
    const uint64_t data_offset = offset + kBlock;
    if (pending_has_pax_size && type != 'L' && type != 'x') size = pending_pax_size;
    // A file cut short ends inside its last member (reported as truncated below), but no member is larger
    // than the whole file: such a size is a damaged header, and refused before any offset arithmetic.
    uint64_t next = 0;
    if (size > file_size || !NextHeaderOffset(data_offset, size, &next)) {
      return DataLossError(file.path() + ": the member at byte " + std::to_string(offset) + " declares " +
                           std::to_string(size) + " bytes, more than the whole file (" + std::to_string(file_size) +
                           " bytes): the shard is corrupt");
    }
    const bool truncated = size > file_size - data_offset;  // data_offset <= file_size: the header was read

    if (type == 'L' || type == 'x') {
      if (truncated || size > kMaxMetaRecord) {
        result.truncated = truncated;
        if (!truncated) {
          return DataLossError(file.path() + ": a long-name or pax record of " + std::to_string(size) +
                               " bytes at byte " + std::to_string(offset));
        }
        break;
      }
      std::string data(size, '\0');
      STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(data_offset, size, data.data()));
      data.resize(n);
      if (type == 'L') {
        pending_long_name = std::string(data.c_str());
      } else if (!ApplyPax(data, &pending_pax_path, &pending_pax_size, &pending_has_pax_size)) {
        return DataLossError(file.path() + ": the pax record at byte " + std::to_string(offset) +
                             " has a size that is not a number below 2^63: the shard is corrupt");
      }
      offset = next;
      continue;
    }

    std::string name;
    if (!pending_pax_path.empty()) {
      name = pending_pax_path;
    } else if (!pending_long_name.empty()) {
      name = pending_long_name;
    } else {
      std::string prefix = FieldString(header + 345, 155);
      name = FieldString(header, 100);
      if (std::memcmp(header + 257, "ustar", 5) == 0 && !prefix.empty()) name = prefix + "/" + name;
    }
    pending_long_name.clear();
    pending_pax_path.clear();
    pending_has_pax_size = false;

    if (type == '0' || type == '\0' || type == '7') {
      TarMember member;
      member.name = std::move(name);
      member.header_offset = offset;
      member.data_offset = data_offset;
      member.size = size;
      member.truncated = truncated;
      ++result.members;
      STOKER_RETURN_IF_ERROR(visit(member));
    }
    if (truncated) {
      result.truncated = true;
      break;
    }
    STOKER_CHECK(next > offset, "tar scan must advance");  // NextHeaderOffset: next >= offset + 512
    offset = next;
  }
  return result;
}

void TarWriter::AddHeader(const std::string& name, uint64_t size, char type) {
  unsigned char h[kBlock];
  std::memset(h, 0, sizeof(h));
  std::memcpy(h, name.data(), name.size() < 100 ? name.size() : 100);
  std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
  h[156] = static_cast<unsigned char>(type);
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
  h[155] = ' ';
  image_.append(reinterpret_cast<const char*>(h), kBlock);
}

void TarWriter::Add(const std::string& name, std::string_view data) {
  if (name.size() > 100) {
    std::string long_name = name + '\0';
    AddHeader("././@LongLink", long_name.size(), 'L');
    image_.append(long_name);
    image_.append(RoundUpToBlock(long_name.size()) - long_name.size(), '\0');
  }
  AddHeader(name, data.size(), '0');
  image_.append(data);
  image_.append(RoundUpToBlock(data.size()) - data.size(), '\0');
}

std::string TarWriter::Finish() {
  image_.append(2 * kBlock, '\0');
  return std::move(image_);
}

}  // namespace stoker
