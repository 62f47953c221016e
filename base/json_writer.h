// JsonWriter: builds small JSON documents (summaries, /state dumps) without a dependency. Keys and values are
// added in order; strings are escaped; doubles print with enough digits to round-trip the figures we report.
//
//   JsonWriter j;
//   j.BeginObject().Key("lost").Value(0).Key("ranks").BeginArray().Value(3).Value(3).EndArray().EndObject();
//   j.str()  ->  {"lost": 0, "ranks": [3, 3]}
//
// Thread safety: none.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace stoker {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  JsonWriter& Key(std::string_view key) {
    Separate();
    Quote(key);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& Value(std::string_view s) {
    Separate();
    Quote(s);
    return *this;
  }
  JsonWriter& Value(const char* s) { return Value(std::string_view(s)); }
  JsonWriter& Value(bool b) { return Raw(b ? "true" : "false"); }
  JsonWriter& Value(int v) { return Raw(std::to_string(v)); }
  JsonWriter& Value(int64_t v) { return Raw(std::to_string(v)); }
  JsonWriter& Value(uint64_t v) { return Raw(std::to_string(v)); }
  JsonWriter& Value(uint32_t v) { return Raw(std::to_string(v)); }
  JsonWriter& Value(double v) {
    if (!std::isfinite(v)) return Raw("null");
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return Raw(buf);
  }
  JsonWriter& Null() { return Raw("null"); }

  const std::string& str() const { return out_; }

 private:
  JsonWriter& Open(char c) {
    Separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  JsonWriter& Raw(std::string_view text) {
    Separate();
    out_ += text;
    return *this;
  }
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ", ";
      first_.back() = false;
    }
  }
  void Quote(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace stoker
