#include "protocol/json_reader.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace mcd {

// The recursive-descent parser behind JsonReader::Parse. Recursion is bounded by max_depth.
class JsonParser {
 public:
  JsonParser(std::string_view text, int max_depth, JsonReader& out)
      : text_(text), max_depth_(max_depth), out_(out) {}

  // Parses one value at depth `depth` (the root is at 0; each object or array adds one).
  bool Value(int depth) {
    SkipSpace();
    if (pos_ >= text_.size()) return Fail();
    char c = text_[pos_];
    if ((c == '{' || c == '[') && depth + 1 > max_depth_) {
      too_deep_ = true;
      return Fail();
    }
    uint32_t index = static_cast<uint32_t>(out_.nodes_.size());
    out_.nodes_.emplace_back();
    bool ok = false;
    switch (c) {
      case '{': ok = Object(index, depth + 1); break;
      case '[': ok = Array(index, depth + 1); break;
      case '"': {
        std::string_view s;
        ok = String(s);
        out_.nodes_[index].kind = JsonReader::Kind::kString;
        out_.nodes_[index].text = s;
        break;
      }
      case 't': ok = Literal("true", JsonReader::Kind::kBool, true, index); break;
      case 'f': ok = Literal("false", JsonReader::Kind::kBool, false, index); break;
      case 'n': ok = Literal("null", JsonReader::Kind::kNull, false, index); break;
      default: ok = Number(index); break;
    }
    if (!ok) return false;
    out_.nodes_[index].end = static_cast<uint32_t>(out_.nodes_.size());
    return true;
  }

  // After the root value: only whitespace may follow.
  bool End() {
    SkipSpace();
    return pos_ == text_.size() || Fail();
  }

  size_t error_offset() const { return pos_; }
  bool too_deep() const { return too_deep_; }

 private:
  bool Fail() { return false; }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool Literal(std::string_view word, JsonReader::Kind kind, bool value, uint32_t index) {
    if (text_.substr(pos_, word.size()) != word) return Fail();
    pos_ += word.size();
    out_.nodes_[index].kind = kind;
    out_.nodes_[index].boolean = value;
    return true;
  }

  // At the opening bracket; Value has checked the depth.
  bool Object(uint32_t index, int depth) {
    ++pos_;  // '{'
    out_.nodes_[index].kind = JsonReader::Kind::kObject;
    if (Consume('}')) return true;
    uint32_t count = 0;
    do {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Fail();
      uint32_t key_index = static_cast<uint32_t>(out_.nodes_.size());
      std::string_view key;
      if (!String(key)) return Fail();
      NoteDuplicate(index, count, key);
      JsonReader::Node key_node;
      key_node.kind = JsonReader::Kind::kString;
      key_node.text = key;
      key_node.end = key_index + 1;
      out_.nodes_.push_back(key_node);
      if (!Consume(':')) return Fail();
      if (!Value(depth)) return false;
      ++count;
    } while (Consume(','));
    out_.nodes_[index].count = count;
    return Consume('}') || Fail();
  }

  // Compares `key` with the `count` keys the object at `index` has so far.
  void NoteDuplicate(uint32_t index, uint32_t count, std::string_view key) {
    if (!out_.duplicate_.empty()) return;
    uint32_t i = index + 1;
    for (uint32_t n = 0; n < count; ++n) {
      if (out_.nodes_[i].text == key) {
        out_.duplicate_ = std::string(key);
        return;
      }
      i = out_.nodes_[i + 1].end;
    }
  }

  // At the opening bracket; Value has checked the depth.
  bool Array(uint32_t index, int depth) {
    ++pos_;  // '['
    out_.nodes_[index].kind = JsonReader::Kind::kArray;
    if (Consume(']')) return true;
    uint32_t count = 0;
    do {
      if (!Value(depth)) return false;
      ++count;
    } while (Consume(','));
    out_.nodes_[index].count = count;
    return Consume(']') || Fail();
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; integers that fit 64 bits keep their value.
  bool Number(uint32_t index) {
    size_t start = pos_;
    bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Fail();
    size_t digits = pos_;
    if (text_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    size_t digits_end = pos_;
    bool integer = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integer = false;
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Fail();
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Fail();
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    JsonReader::Node& node = out_.nodes_[index];
    node.text = text_.substr(start, pos_ - start);
    node.kind = JsonReader::Kind::kFloat;
    // A number beyond a double's range is refused, as conforming parsers that read doubles do.
    if (!integer) return std::isfinite(std::strtod(std::string(node.text).c_str(), nullptr)) || Fail();
    uint64_t magnitude = 0;
    auto [ptr, ec] = std::from_chars(text_.data() + digits, text_.data() + digits_end, magnitude);
    if (ec != std::errc() || ptr != text_.data() + digits_end) {  // beyond 64 bits: a double
      return std::isfinite(std::strtod(std::string(node.text).c_str(), nullptr)) || Fail();
    }
    constexpr uint64_t kInt64Max = static_cast<uint64_t>(INT64_MAX);
    if (negative) {
      if (magnitude > kInt64Max + 1) return true;
      node.kind = JsonReader::Kind::kInt;
      node.int_value = magnitude == kInt64Max + 1 ? INT64_MIN : -static_cast<int64_t>(magnitude);
    } else if (magnitude <= kInt64Max) {
      node.kind = JsonReader::Kind::kInt;
      node.int_value = static_cast<int64_t>(magnitude);
    } else {
      node.kind = JsonReader::Kind::kUint;
      node.uint_value = magnitude;
    }
    return true;
  }

  // Length of the well-formed UTF-8 sequence at p (Unicode table 3-7), 0 if there is none.
  static size_t Utf8Length(const unsigned char* p, size_t left) {
    auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
      return i < left && p[i] >= lo && p[i] <= hi;
    };
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
    if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    return 0;
  }

  bool Hex4(uint32_t& value) {
    if (pos_ + 4 > text_.size()) return false;
    value = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      value = value * 16 + digit;
    }
    return true;
  }

  void Put(char c) { out_.decoded_[out_.decoded_size_++] = c; }

  void PutCodePoint(uint32_t cp) {
    if (cp < 0x80) {
      Put(static_cast<char>(cp));
    } else if (cp < 0x800) {
      Put(static_cast<char>(0xC0 | (cp >> 6)));
      Put(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      Put(static_cast<char>(0xE0 | (cp >> 12)));
      Put(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      Put(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      Put(static_cast<char>(0xF0 | (cp >> 18)));
      Put(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      Put(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      Put(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // At the opening quote. Strings without escapes are views into the text; others are decoded.
  bool String(std::string_view& out) {
    ++pos_;  // '"'
    size_t start = pos_;
    // Fast scan: the common string has no escapes.
    while (pos_ < text_.size()) {
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        out = text_.substr(start, pos_ - start);
        ++pos_;
        return true;
      }
      if (c == '\\') break;
      if (c < 0x20) return Fail();
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      size_t n = Utf8Length(reinterpret_cast<const unsigned char*>(text_.data()) + pos_, text_.size() - pos_);
      if (n == 0) return Fail();
      pos_ += n;
    }
    if (pos_ >= text_.size()) return Fail();
    // An escape: decode from the start into the shared buffer.
    if (!out_.decoded_) out_.decoded_ = std::make_unique<char[]>(text_.size());
    size_t decoded_start = out_.decoded_size_;
    for (size_t i = start; i < pos_; ++i) Put(text_[i]);
    while (pos_ < text_.size()) {
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        out = std::string_view(out_.decoded_.get() + decoded_start, out_.decoded_size_ - decoded_start);
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail();
      if (c >= 0x80) {
        size_t n = Utf8Length(reinterpret_cast<const unsigned char*>(text_.data()) + pos_, text_.size() - pos_);
        if (n == 0) return Fail();
        for (size_t k = 0; k < n; ++k) Put(text_[pos_++]);
        continue;
      }
      if (c != '\\') {
        Put(static_cast<char>(c));
        ++pos_;
        continue;
      }
      if (++pos_ >= text_.size()) return Fail();
      char e = text_[pos_++];
      switch (e) {
        case '"': Put('"'); break;
        case '\\': Put('\\'); break;
        case '/': Put('/'); break;
        case 'b': Put('\b'); break;
        case 'f': Put('\f'); break;
        case 'n': Put('\n'); break;
        case 'r': Put('\r'); break;
        case 't': Put('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(cp)) return Fail();
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail();  // a low surrogate alone
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u') return Fail();
            pos_ += 2;
            if (!Hex4(low) || low < 0xDC00 || low > 0xDFFF) return Fail();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          PutCodePoint(cp);
          break;
        }
        default:
          return Fail();
      }
    }
    return Fail();
  }

  std::string_view text_;
  size_t pos_ = 0;
  int max_depth_;
  bool too_deep_ = false;
  JsonReader& out_;
};

Result<JsonReader> JsonReader::Parse(std::string_view text, int max_depth, const char* what) {
  JsonReader reader;
  reader.nodes_.reserve(32);
  JsonParser parser(text, max_depth, reader);
  if (parser.Value(0) && parser.End()) return reader;
  if (parser.too_deep()) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(what) + " nests deeper than " + std::to_string(max_depth) + " levels");
  }
  return Status(ErrorCode::kInvalidArgument, std::string(what) + " is not valid JSON (byte " +
                                                 std::to_string(parser.error_offset()) + ")");
}

std::optional<uint32_t> JsonReader::Find(uint32_t object, std::string_view key) const {
  std::optional<uint32_t> found;
  ForEachMember(object, [&](std::string_view k, uint32_t value) {
    if (!found && k == key) found = value;
  });
  return found;
}

}  // namespace mcd
