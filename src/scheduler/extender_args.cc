#include "src/scheduler/extender_args.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <system_error>

namespace gs::scheduler {
namespace {

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A strict JSON reader over one buffer: each method checks the grammar at the cursor
// and moves past what it read, or returns false.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  bool AtEnd() const { return p_ == end_; }
  const char* pos() const { return p_; }
  void SkipWs() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  // Skips whitespace, then consumes `c` if it is next.
  bool Consume(char c) {
    SkipWs();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool Peek(char c) {
    SkipWs();
    return p_ != end_ && *p_ == c;
  }
  void SkipBom() {
    if (end_ - p_ >= 3 && p_[0] == '\xEF' && p_[1] == '\xBB' && p_[2] == '\xBF') p_ += 3;
  }

  // A string literal (whitespace before it skipped); `raw` is its content as written.
  bool String(std::string_view* raw, bool* escaped) {
    if (!Consume('"')) return false;
    const char* start = p_;
    bool esc = false;
    while (p_ != end_) {
      auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *raw = std::string_view(start, static_cast<size_t>(p_ - start));
        *escaped = esc;
        ++p_;
        return true;
      }
      if (c == '\\') {
        esc = true;
        if (!Escape()) return false;
      } else if (c >= 0x80) {
        if (!Utf8()) return false;
      } else if (c >= 0x20) {
        ++p_;
      } else {
        return false;  // a control character must be escaped
      }
    }
    return false;
  }

  // Any value, containers included (iteratively: no depth limit but memory).
  bool Value() {
    size_t base = stack_.size();
    for (;;) {
      SkipWs();
      if (p_ == end_) return false;
      char c = *p_;
      if (c == '{' || c == '[') {
        ++p_;
        if (Consume(c == '{' ? '}' : ']')) {
          // empty: a complete value
        } else {
          stack_.push_back(c);
          if (c == '{' && !MemberKey()) return false;
          continue;
        }
      } else if (!Scalar()) {
        return false;
      }
      // After a value: a separator, or the end of one or more containers.
      for (;;) {
        if (stack_.size() == base) return true;
        char open = stack_.back();
        if (Consume(',')) {
          if (open == '{' && !MemberKey()) return false;
          break;
        }
        if (!Consume(open == '{' ? '}' : ']')) return false;
        stack_.pop_back();
      }
    }
  }

  // "key" and the colon after it.
  bool MemberKey(std::string_view* raw = nullptr, bool* escaped = nullptr) {
    std::string_view r;
    bool e = false;
    if (!String(&r, &e) || !Consume(':')) return false;
    if (raw != nullptr) *raw = r;
    if (escaped != nullptr) *escaped = e;
    return true;
  }

  // `raw` as String() returned it, with escapes resolved.
  static void Decode(std::string_view raw, std::string* out) {
    out->clear();
    for (size_t i = 0; i < raw.size(); ++i) {
      char c = raw[i];
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      char e = raw[++i];
      switch (e) {
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = Hex4(raw.data() + i + 1);
          i += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a pair, checked by Escape()
            uint32_t low = Hex4(raw.data() + i + 3);
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          out->push_back(e);
          break;  // " \ /
      }
    }
  }

 private:
  static uint32_t Hex4(const char* p) {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v = v * 16 + static_cast<uint32_t>(HexValue(p[k]));
    return v;
  }
  // \uXXXX at the cursor (after the backslash and 'u'): its value, or -1.
  int32_t ReadHex4() {
    if (end_ - p_ < 4) return -1;
    int32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int h = HexValue(p_[k]);
      if (h < 0) return -1;
      v = v * 16 + h;
    }
    p_ += 4;
    return v;
  }
  bool Escape() {
    ++p_;  // the backslash
    if (p_ == end_) return false;
    char e = *p_++;
    switch (e) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        return true;
      case 'u':
        break;
      default:
        return false;
    }
    int32_t cp = ReadHex4();
    if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;  // a low surrogate alone
    if (cp >= 0xD800 && cp <= 0xDBFF) {                          // must be followed by a low one
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      int32_t low = ReadHex4();
      if (low < 0xDC00 || low > 0xDFFF) return false;
    }
    return true;
  }
  // One multi-byte UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
  bool Utf8() {
    auto b = [&](ptrdiff_t k) { return static_cast<unsigned char>(p_[k]); };
    auto cont = [&](ptrdiff_t k, unsigned lo, unsigned hi) { return p_ + k < end_ && b(k) >= lo && b(k) <= hi; };
    unsigned c = b(0);
    int n;
    bool ok;
    if (c >= 0xC2 && c <= 0xDF)
      n = 2, ok = cont(1, 0x80, 0xBF);
    else if (c == 0xE0)
      n = 3, ok = cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF);
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      n = 3, ok = cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF);
    else if (c == 0xED)
      n = 3, ok = cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF);
    else if (c == 0xF0)
      n = 4, ok = cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF);
    else if (c >= 0xF1 && c <= 0xF3)
      n = 4, ok = cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF);
    else if (c == 0xF4)
      n = 4, ok = cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF);
    else
      return false;
    if (!ok) return false;
    p_ += n;
    return true;
  }
  bool Number() {
    const char* start = p_;
    if (*p_ == '-') ++p_;
    if (p_ == end_ || !IsDigit(*p_)) return false;
    if (*p_ == '0')
      ++p_;
    else
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    bool plain = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return false;
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      plain = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return false;
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (plain && p_ - start < 300) return true;
    // As nlohmann-json: a number too large for a double is an error (one too small is 0).
    double v = 0;
    auto r = std::from_chars(start, p_, v);
    if (r.ec == std::errc::result_out_of_range) {
      // Too large or too small: too large when the integer digits plus the exponent say so.
      std::string_view text(start, static_cast<size_t>(p_ - start));
      if (text[0] == '-') text.remove_prefix(1);
      size_t int_end = text.find_first_of(".eE");
      long magnitude = text[0] == '0' ? 0 : static_cast<long>(std::min(int_end, text.size()));
      size_t e = text.find_first_of("eE");
      if (e != std::string_view::npos) {
        long exp = 0;
        size_t k = e + 1;
        bool neg = text[k] == '-';
        if (text[k] == '+' || text[k] == '-') ++k;
        for (; k < text.size() && exp < 100000; ++k) exp = exp * 10 + (text[k] - '0');
        magnitude += neg ? -exp : exp;
      }
      return magnitude <= 0;
    }
    return r.ec == std::errc();
  }
  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }
  bool Scalar() {
    char c = *p_;
    if (c == '"') {
      std::string_view raw;
      bool e;
      return String(&raw, &e);
    }
    if (c == '-' || IsDigit(c)) return Number();
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    return false;
  }

  const char* p_;
  const char* end_;
  std::vector<char> stack_;
};

enum class NamesState { kAbsent, kNull, kNotArray, kBadEntry, kOk };

}  // namespace

Status ParseExtenderArgs(std::string_view body, ExtenderArgs* out) {
  out->pod = {};
  out->names.clear();
  out->raw.clear();
  out->decoded.clear();
  Status not_object = InvalidArgument("ExtenderArgs: not a JSON object");
  Scanner s(body);
  s.SkipBom();
  if (!s.Consume('{')) return not_object;
  bool pod_object = false;
  NamesState names = NamesState::kAbsent;
  std::string key_buf;
  if (!s.Consume('}')) {
    do {
      std::string_view key;
      bool escaped = false;
      if (!s.MemberKey(&key, &escaped)) return not_object;
      if (escaped) {
        Scanner::Decode(key, &key_buf);
        key = key_buf;
      }
      if (key == "Pod") {
        pod_object = s.Peek('{');
        const char* start = s.pos();
        if (!s.Value()) return not_object;
        out->pod = std::string_view(start, static_cast<size_t>(s.pos() - start));
      } else if (key == "NodeNames") {
        out->names.clear();
        out->raw.clear();
        out->decoded.clear();
        if (s.Peek('n')) {
          if (!s.Value()) return not_object;
          names = NamesState::kNull;
        } else if (s.Consume('[')) {
          names = NamesState::kOk;
          if (!s.Consume(']')) {
            do {
              if (s.Peek('"')) {
                std::string_view raw;
                bool esc = false;
                if (!s.String(&raw, &esc)) return not_object;
                out->raw.push_back(raw);
                if (esc) {
                  out->decoded.emplace_back();
                  Scanner::Decode(raw, &out->decoded.back());
                  out->names.push_back(out->decoded.back());
                } else {
                  out->names.push_back(raw);
                }
              } else {
                if (!s.Value()) return not_object;
                names = NamesState::kBadEntry;
              }
            } while (s.Consume(','));
            if (!s.Consume(']')) return not_object;
          }
        } else {
          if (!s.Value()) return not_object;
          names = NamesState::kNotArray;
        }
      } else if (!s.Value()) {
        return not_object;
      }
    } while (s.Consume(','));
    if (!s.Consume('}')) return not_object;
  }
  s.SkipWs();
  if (!s.AtEnd()) return not_object;
  if (!pod_object) return InvalidArgument("ExtenderArgs: no \"Pod\" object");
  switch (names) {
    case NamesState::kAbsent:
    case NamesState::kNull:
      return InvalidArgument("ExtenderArgs: no \"NodeNames\" (configure the extender with nodeCacheCapable: true)");
    case NamesState::kNotArray:
      return InvalidArgument("ExtenderArgs: \"NodeNames\" is not an array");
    case NamesState::kBadEntry:
      return InvalidArgument("ExtenderArgs: a \"NodeNames\" entry is not a string");
    case NamesState::kOk:
      break;
  }
  return Status::Ok();
}

void AppendJsonString(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t done = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + done, i - done);
    done = i + 1;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else {
      *out += "\\u00";
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    }
  }
  out->append(s.data() + done, s.size() - done);
  out->push_back('"');
}

}  // namespace gs::scheduler
