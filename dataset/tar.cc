// Tar shards: scanning members (ustar, GNU long names and base-256 sizes, pax path and size) without trusting a
// header, and writing the plain ustar shards the generator and the tests make.
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

constexpr uint64_t kMaxMetaRecord = 1 << 20;  // long names and pax records larger than this are not credible

// What long-name ('L') and pax ('x') records said about the member that follows them.
struct PendingMeta {
  std::string long_name;
  std::string pax_path;
  uint64_t pax_size = 0;
  bool has_pax_size = false;

  // The member's name: a pax path, else a long name, else the header's own (behind its ustar prefix). What was
  // pending applied to this member only.
  std::string TakeName(const unsigned char* header) {
    std::string name;
    if (!pax_path.empty()) {
      name = pax_path;
    } else if (!long_name.empty()) {
      name = long_name;
    } else {
      std::string prefix = FieldString(header + 345, 155);
      name = FieldString(header, 100);
      if (std::memcmp(header + 257, "ustar", 5) == 0 && !prefix.empty()) name = prefix + "/" + name;
    }
    long_name.clear();
    pax_path.clear();
    has_pax_size = false;
    return name;
  }
};

// One header as read at `offset`, checked.
struct MemberHeader {
  char type = '0';
  uint64_t size = 0;
  uint64_t data_offset = 0;
  uint64_t next = 0;       // where the next header is
  bool truncated = false;  // the file ends inside this member's data
};

StatusOr<MemberHeader> ParseHeader(const RandomAccessFile& file, const unsigned char* header, uint64_t offset,
                                   const PendingMeta& meta) {
  const uint64_t file_size = file.Size();
  if (!ChecksumMatches(header)) {
    return DataLossError(file.path() + ": the header at byte " + std::to_string(offset) +
                         " is not a valid tar header (checksum mismatch): the shard is corrupt");
  }
  MemberHeader h;
  if (!ParseNumber(header + 124, 12, &h.size)) {
    return DataLossError(file.path() + ": the header at byte " + std::to_string(offset) + " has a bad size field");
  }
  h.type = static_cast<char>(header[156]);
  h.data_offset = offset + kBlock;
  if (meta.has_pax_size && h.type != 'L' && h.type != 'x') h.size = meta.pax_size;
  // A file cut short ends inside its last member (reported as truncated), but no member is larger than the whole
  // file: such a size is a damaged header, and refused before any offset arithmetic.
  if (h.size > file_size || !NextHeaderOffset(h.data_offset, h.size, &h.next)) {
    return DataLossError(file.path() + ": the member at byte " + std::to_string(offset) + " declares " +
                         std::to_string(h.size) + " bytes, more than the whole file (" + std::to_string(file_size) +
                         " bytes): the shard is corrupt");
  }
  h.truncated = h.size > file_size - h.data_offset;  // data_offset <= file_size: the header was read
  return h;
}

// Reads a whole long-name or pax record into *meta.
Status ReadMetaRecord(const RandomAccessFile& file, const MemberHeader& h, uint64_t offset, PendingMeta* meta) {
  if (h.size > kMaxMetaRecord) {
    return DataLossError(file.path() + ": a long-name or pax record of " + std::to_string(h.size) + " bytes at byte " +
                         std::to_string(offset));
  }
  std::string data(h.size, '\0');
  STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(h.data_offset, h.size, data.data()));
  data.resize(n);
  if (h.type == 'L') {
    meta->long_name = std::string(data.c_str());
  } else if (!ApplyPax(data, &meta->pax_path, &meta->pax_size, &meta->has_pax_size)) {
    return DataLossError(file.path() + ": the pax record at byte " + std::to_string(offset) +
                         " has a size that is not a number below 2^63: the shard is corrupt");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TarScanResult> ScanTar(const RandomAccessFile& file,
                                const std::function<Status(const TarMember&)>& visit) {
  TarScanResult result;
  const uint64_t file_size = file.Size();
  uint64_t offset = 0;
  PendingMeta meta;
  unsigned char header[kBlock];
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
    STOKER_ASSIGN_OR_RETURN(MemberHeader h, ParseHeader(file, header, offset, meta));
    if (h.type == 'L' || h.type == 'x') {
      if (h.truncated) {
        result.truncated = true;
        break;
      }
      STOKER_RETURN_IF_ERROR(ReadMetaRecord(file, h, offset, &meta));
      offset = h.next;
      continue;
    }
    std::string name = meta.TakeName(header);
    if (h.type == '0' || h.type == '\0' || h.type == '7') {
      TarMember member;
      member.name = std::move(name);
      member.header_offset = offset;
      member.data_offset = h.data_offset;
      member.size = h.size;
      member.truncated = h.truncated;
      ++result.members;
      STOKER_RETURN_IF_ERROR(visit(member));
    }
    if (h.truncated) {
      result.truncated = true;
      break;
    }
    STOKER_CHECK(h.next > offset, "tar scan must advance");  // NextHeaderOffset: next >= offset + 512
    offset = h.next;
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
