// Object URLs: where a remote shard is. `s3://BUCKET/KEY` names an object on any S3-compatible service (the
// endpoint, region and addressing style come from StorageOptions); `http://` and `https://` name a file any web
// server serves with byte ranges. Parsing is a pure function of the text, so malformed URLs from manifests or the
// command line are InvalidArgument errors, never crashes.
//
// Thread safety: values and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker::storage {

enum class UrlScheme { kS3, kHttp, kHttps };

struct ObjectUrl {
  UrlScheme scheme = UrlScheme::kS3;
  std::string bucket;     // s3: the bucket
  std::string authority;  // http(s): host[:port]
  std::string key;        // s3: the object key (or a prefix); http(s): the path after the first '/', unencoded

  bool s3() const { return scheme == UrlScheme::kS3; }
  std::string ToString() const;  // the URL it was parsed from, normalised
};

StatusOr<ObjectUrl> ParseObjectUrl(std::string_view url);

// RFC 3986 percent-encoding of everything but unreserved characters (and '/' when keep_slash), as SigV4's
// canonical URI and query string want it.
std::string UriEncode(std::string_view text, bool keep_slash);

}  // namespace stoker::storage
