// The two S3 responses stoker reads, parsed from untrusted bytes: a ListObjectsV2 page and an error document.
// Pure functions of the bytes, with limits on everything they accept, so garbage, truncation or hostile input is an
// error value (or an empty S3Error), never a crash or an unbounded allocation; a fuzz target can drive them as is.
// Only the elements stoker needs are read (Key, Size, ETag, IsTruncated, NextContinuationToken; Code, Message); the
// XML is scanned, not validated, as S3-compatible servers differ in namespaces and extra elements.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker::storage {

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // as sent, quotes included
};

struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // ListObjectsV2's NextContinuationToken, when truncated
};

// DataLoss naming what is wrong for anything that is not a well-formed ListBucketResult.
StatusOr<ListPage> ParseListObjectsV2(std::string_view xml);

struct S3Error {
  std::string code;     // e.g. SignatureDoesNotMatch, NoSuchKey, SlowDown; empty if the body is not one
  std::string message;  // at most 200 bytes
};
S3Error ParseS3Error(std::string_view xml);

// XML text with its five named entities and numeric character references decoded (others kept as they are).
std::string XmlUnescape(std::string_view text);

}  // namespace stoker::storage
