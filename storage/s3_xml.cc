// Scanning S3's XML responses (s3_xml.h).
#include "storage/s3_xml.h"

#include <optional>

namespace stoker::storage {
namespace {

constexpr size_t kMaxResponseBytes = 64 << 20;  // a page of 1,000 keys of 1 KiB each is ~1.3 MB
constexpr size_t kMaxObjectsPerPage = 100000;   // S3 sends at most 1,000
constexpr size_t kMaxKeyBytes = 4096;

struct Element {
  std::string_view content;
  size_t end = 0;  // just past the closing tag
};

// The first <tag>...</tag> (or <tag attr...>...</tag>) at or after `from`; nullopt when absent or unclosed.
std::optional<Element> FindElement(std::string_view xml, std::string_view tag, size_t from) {
  std::string open = "<" + std::string(tag);
  std::string close = "</" + std::string(tag) + ">";
  size_t at = from;
  while (true) {
    at = xml.find(open, at);
    if (at == std::string_view::npos) return std::nullopt;
    const size_t after = at + open.size();
    if (after >= xml.size()) return std::nullopt;
    const char c = xml[after];
    if (c == '>' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '/') break;
    at = after;  // a longer tag with this prefix (<KeyCount> when looking for <Key>)
  }
  const size_t gt = xml.find('>', at);
  if (gt == std::string_view::npos) return std::nullopt;
  if (xml[gt - 1] == '/') return Element{std::string_view(), gt + 1};  // <tag/>
  const size_t end = xml.find(close, gt + 1);
  if (end == std::string_view::npos) return std::nullopt;
  return Element{xml.substr(gt + 1, end - gt - 1), end + close.size()};
}

bool ParseUint(std::string_view s, uint64_t* out) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A numeric character reference's code point ("#65", "#x41"); nullopt if malformed or not a Unicode scalar.
std::optional<uint32_t> NumericReference(std::string_view ref) {
  if (ref.size() < 2 || ref[0] != '#') return std::nullopt;
  const bool hex = ref[1] == 'x' || ref[1] == 'X';
  std::string_view digits = ref.substr(hex ? 2 : 1);
  if (digits.empty() || digits.size() > 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : digits) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (hex && c >= 'a' && c <= 'f') ? c - 'a' + 10
                                             : (hex && c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                                             : -1;
    if (d < 0) return std::nullopt;
    v = v * (hex ? 16 : 10) + static_cast<uint32_t>(d);
  }
  if (v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return std::nullopt;
  return v;
}

}  // namespace

std::string XmlUnescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t semi = text[i] == '&' ? text.find(';', i) : std::string_view::npos;
    if (semi == std::string_view::npos || semi - i > 12) {
      out.push_back(text[i]);
      continue;
    }
    std::string_view ref = text.substr(i + 1, semi - i - 1);
    if (ref == "amp") out.push_back('&');
    else if (ref == "lt") out.push_back('<');
    else if (ref == "gt") out.push_back('>');
    else if (ref == "quot") out.push_back('"');
    else if (ref == "apos") out.push_back('\'');
    else if (auto cp = NumericReference(ref)) AppendUtf8(*cp, out);
    else {
      out.push_back('&');
      continue;
    }
    i = semi;
  }
  return out;
}

StatusOr<ListPage> ParseListObjectsV2(std::string_view xml) {
  if (xml.size() > kMaxResponseBytes) return DataLossError("list response over 64 MiB");
  auto result = FindElement(xml, "ListBucketResult", 0);
  if (!result) return DataLossError("not a ListObjectsV2 response (no ListBucketResult element)");
  std::string_view body = result->content;
  ListPage page;
  if (auto t = FindElement(body, "IsTruncated", 0)) page.truncated = t->content == "true";
  if (auto n = FindElement(body, "NextContinuationToken", 0)) page.next_token = XmlUnescape(n->content);
  if (page.truncated && page.next_token.empty()) {
    return DataLossError("list response is truncated but has no NextContinuationToken");
  }
  size_t at = 0;
  while (auto contents = FindElement(body, "Contents", at)) {
    at = contents->end;
    if (page.objects.size() >= kMaxObjectsPerPage) return DataLossError("list response holds too many objects");
    auto key = FindElement(contents->content, "Key", 0);
    auto size = FindElement(contents->content, "Size", 0);
    if (!key || !size) return DataLossError("list response has an object without Key or Size");
    ListedObject object;
    object.key = XmlUnescape(key->content);
    if (object.key.empty() || object.key.size() > kMaxKeyBytes) {
      return DataLossError("list response has an empty or oversized key");
    }
    if (!ParseUint(size->content, &object.size)) {
      return DataLossError("list response has a malformed Size for key " + object.key.substr(0, 200));
    }
    if (auto etag = FindElement(contents->content, "ETag", 0)) object.etag = XmlUnescape(etag->content);
    page.objects.push_back(std::move(object));
  }
  if (body.find("<Contents", at) != std::string_view::npos) return DataLossError("list response is cut short");
  return page;
}

S3Error ParseS3Error(std::string_view xml) {
  S3Error error;
  if (xml.size() > kMaxResponseBytes) return error;
  auto root = FindElement(xml, "Error", 0);
  if (!root) return error;
  if (auto code = FindElement(root->content, "Code", 0)) error.code = XmlUnescape(code->content).substr(0, 100);
  if (auto message = FindElement(root->content, "Message", 0)) {
    error.message = XmlUnescape(message->content).substr(0, 200);
  }
  return error;
}

}  // namespace stoker::storage
