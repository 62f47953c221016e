// Reading Prometheus's text exposition format (metrics_text.h).
#include "base/metrics_text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace stoker {
namespace {

bool NameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }

// One line, consumed left to right.
class LineReader {
 public:
  explicit LineReader(std::string_view line) : line_(line) {}

  bool AtEnd() const { return pos_ == line_.size(); }
  char Peek() const { return AtEnd() ? '\0' : line_[pos_]; }
  bool Take(char c) {
    if (Peek() != c || AtEnd()) return false;
    ++pos_;
    return true;
  }
  void SkipBlanks() {
    while (!AtEnd() && (line_[pos_] == ' ' || line_[pos_] == '\t')) ++pos_;
  }
  std::string_view Name(bool allow_colon) {
    const size_t start = pos_;
    if (AtEnd() || !NameStart(line_[pos_]) || (!allow_colon && line_[pos_] == ':')) return {};
    while (!AtEnd() && NameChar(line_[pos_]) && (allow_colon || line_[pos_] != ':')) ++pos_;
    return line_.substr(start, pos_ - start);
  }
  // A label value after its opening quote, up to and past the closing one; false if it does not close or holds an
  // escape the format lacks.
  bool QuotedValue(std::string* out) {
    while (!AtEnd()) {
      const char c = line_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) return false;
      const char e = line_[pos_++];
      if (e == '\\' || e == '"') {
        out->push_back(e);
      } else if (e == 'n') {
        out->push_back('\n');
      } else {
        return false;
      }
    }
    return false;
  }
  std::string_view Token() {
    const size_t start = pos_;
    while (!AtEnd() && line_[pos_] != ' ' && line_[pos_] != '\t') ++pos_;
    return line_.substr(start, pos_ - start);
  }

 private:
  std::string_view line_;
  size_t pos_ = 0;
};

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

bool ParseValue(std::string_view token, double* out) {
  // The special values as Go's ParseFloat takes them, in any case: prometheus-cpp writes NaN as "Nan".
  const bool negative = !token.empty() && token[0] == '-';
  std::string_view bare = !token.empty() && (token[0] == '+' || token[0] == '-') ? token.substr(1) : token;
  if (EqualsIgnoringCase(bare, "inf") || EqualsIgnoringCase(bare, "infinity")) {
    *out = negative ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (EqualsIgnoringCase(bare, "nan")) {
    *out = NAN;
    return true;
  }
  if (token.empty() || token.size() > 64) return false;
  for (char c : token) {  // digits, sign, point and exponent only: strtod would also take "inf", "nan" and hex
    if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) return false;
  }
  const std::string text(token);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return false;
  *out = v;  // out of range: strtod's ±HUGE_VAL or 0, as Prometheus's own reader takes it
  return true;
}

bool ParseTimestamp(std::string_view token) {
  if (token.empty() || token.size() > 20) return false;
  size_t i = token[0] == '-' ? 1 : 0;
  if (i == token.size()) return false;
  for (; i < token.size(); ++i) {
    if (token[i] < '0' || token[i] > '9') return false;
  }
  return true;
}

// One sample line; the error says what is wrong with it, without quoting it (it may be anything).
Status ParseSample(std::string_view line, MetricSample* out) {
  LineReader r(line);
  std::string_view name = r.Name(/*allow_colon=*/true);
  if (name.empty()) return InvalidArgumentError("a sample must start with a metric name");
  out->name = std::string(name);
  if (r.Take('{')) {
    r.SkipBlanks();
    while (!r.Take('}')) {
      if (out->labels.size() == kMaxSampleLabels) {
        return InvalidArgumentError("more than " + std::to_string(kMaxSampleLabels) + " labels");
      }
      std::string_view key = r.Name(/*allow_colon=*/false);
      if (key.empty()) return InvalidArgumentError("a label name must be [a-zA-Z_][a-zA-Z0-9_]*");
      r.SkipBlanks();
      if (!r.Take('=')) return InvalidArgumentError("a label name must be followed by =");
      r.SkipBlanks();
      if (!r.Take('"')) return InvalidArgumentError("a label value must be quoted");
      std::string value;
      if (!r.QuotedValue(&value)) return InvalidArgumentError("a label value is not closed or has a bad escape");
      out->labels.emplace_back(std::string(key), std::move(value));
      r.SkipBlanks();
      if (r.Take(',')) {
        r.SkipBlanks();
        continue;
      }
      if (r.Peek() != '}') return InvalidArgumentError("labels must be separated by , and closed by }");
    }
  }
  if (r.Peek() != ' ' && r.Peek() != '\t') return InvalidArgumentError("a sample's name must be followed by its value");
  r.SkipBlanks();
  if (!ParseValue(r.Token(), &out->value)) return InvalidArgumentError("a sample's value is not a number");
  r.SkipBlanks();
  if (!r.AtEnd()) {
    if (!ParseTimestamp(r.Token())) return InvalidArgumentError("a sample's timestamp is not an integer");
    r.SkipBlanks();
    if (!r.AtEnd()) return InvalidArgumentError("a sample has more than a value and a timestamp");
  }
  return Status::Ok();
}

}  // namespace

std::string MetricSample::Label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

StatusOr<std::vector<MetricSample>> ParseMetricsText(std::string_view text) {
  if (text.size() > kMaxMetricsTextBytes) {
    return InvalidArgumentError("metrics text of " + std::to_string(text.size()) + " bytes: at most " +
                                std::to_string(kMaxMetricsTextBytes));
  }
  std::vector<MetricSample> samples;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    MetricSample sample;
    if (Status s = ParseSample(line, &sample); !s.ok()) {
      return s.WithContext("metrics text line " + std::to_string(line_number));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace stoker
