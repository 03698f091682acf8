#include "src/common/quantity.h"

#include <cstdio>

namespace gs {
namespace {
char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool SuffixEquals(const char* s, const char* want) {
  for (; *s && *want; ++s, ++want)
    if (Lower(*s) != *want) return false;
  return *s == 0 && *want == 0;
}
}  // namespace

bool ParseUnsigned(const char* text, uint64_t* value) {
  if (text == nullptr || *text == 0) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = v;
  return true;
}

bool ParseByteQuantity(const char* text, uint64_t* bytes) {
  if (text == nullptr) return false;
  while (*text == ' ' || *text == '\t') ++text;
  const char* p = text;
  uint64_t v = 0;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  const char* suffix = p;
  // Trailing blanks are tolerated (env files written by hand).
  char trimmed[8];
  unsigned n = 0;
  for (; *p && *p != ' ' && *p != '\t' && *p != '\n'; ++p) {
    if (n + 1 >= sizeof(trimmed)) return false;
    trimmed[n++] = *p;
  }
  for (; *p; ++p)
    if (*p != ' ' && *p != '\t' && *p != '\n') return false;
  trimmed[n] = 0;
  (void)suffix;
  unsigned shift = 0;
  if (n == 0 || SuffixEquals(trimmed, "b")) {
    shift = 0;
  } else {
    static const struct {
      char letter;
      unsigned shift;
    } kUnits[] = {{'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}};
    bool found = false;
    for (const auto& u : kUnits) {
      if (Lower(trimmed[0]) != u.letter) continue;
      const char* rest = trimmed + 1;
      if (*rest == 0 || SuffixEquals(rest, "i") || SuffixEquals(rest, "ib") || SuffixEquals(rest, "b")) {
        shift = u.shift;
        found = true;
      }
      break;
    }
    if (!found) return false;
  }
  if (shift > 0 && v > (UINT64_MAX >> shift)) return false;
  *bytes = v << shift;
  return true;
}

const char* FormatBytes(uint64_t bytes, char* buf, unsigned long size) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0)
    snprintf(buf, size, "%llu B", static_cast<unsigned long long>(bytes));
  else
    snprintf(buf, size, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace gs
