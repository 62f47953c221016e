// ParseObjectUrl and UriEncode (url.h).
#include "storage/url.h"

namespace stoker::storage {
namespace {

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool ValidAuthority(std::string_view a) {
  if (a.empty()) return false;
  for (char c : a) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '/' || c == '?' || c == '#' || c == '@' || c == '\\') {
      return false;
    }
  }
  return true;
}

bool HasControlCharacters(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

std::string ObjectUrl::ToString() const {
  switch (scheme) {
    case UrlScheme::kS3: return "s3://" + bucket + "/" + key;
    case UrlScheme::kHttp: return "http://" + authority + "/" + key;
    case UrlScheme::kHttps: return "https://" + authority + "/" + key;
  }
  return "";
}

StatusOr<ObjectUrl> ParseObjectUrl(std::string_view url) {
  ObjectUrl out;
  std::string_view rest;
  if (url.starts_with("s3://")) {
    out.scheme = UrlScheme::kS3;
    rest = url.substr(5);
  } else if (url.starts_with("http://")) {
    out.scheme = UrlScheme::kHttp;
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    out.scheme = UrlScheme::kHttps;
    rest = url.substr(8);
  } else {
    return InvalidArgumentError("'" + std::string(url.substr(0, 200)) + "' is not an s3://, http:// or https:// URL");
  }
  if (HasControlCharacters(url) || url.size() > 4096) {
    return InvalidArgumentError("URL has control characters or is over 4096 bytes");
  }
  const size_t slash = rest.find('/');
  std::string_view head = rest.substr(0, slash);
  out.key = slash == std::string_view::npos ? "" : std::string(rest.substr(slash + 1));
  if (out.key.find('?') != std::string::npos || out.key.find('#') != std::string::npos) {
    return InvalidArgumentError("URL " + std::string(url) + ": query strings and fragments are not supported");
  }
  if (out.s3()) {
    if (!ValidBucket(head)) {
      return InvalidArgumentError("s3 URL " + std::string(url) + ": '" + std::string(head) +
                                  "' is not a bucket name (3-63 of a-z 0-9 . - _)");
    }
    out.bucket = std::string(head);
  } else {
    if (!ValidAuthority(head)) return InvalidArgumentError("URL " + std::string(url) + " has no valid host");
    out.authority = std::string(head);
  }
  return out;
}

std::string UriEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace stoker::storage
