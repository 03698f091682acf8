#include "src/sim/ptx.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace gs::sim {

bool ParsePtxEntries(const char* ptx, std::vector<std::string>* names) {
  size_t before = names->size();
  // Guard against binary images: PTX is text that declares a .version.
  if (strstr(ptx, ".version") == nullptr) return false;
  for (const char* p = strstr(ptx, ".entry"); p != nullptr; p = strstr(p + 6, ".entry")) {
    const char* q = p + 6;
    if (!isspace(static_cast<unsigned char>(*q))) continue;
    while (isspace(static_cast<unsigned char>(*q))) ++q;
    const char* start = q;
    while (*q && (isalnum(static_cast<unsigned char>(*q)) || *q == '_' || *q == '$' || *q == '.')) ++q;
    if (q > start) names->emplace_back(start, static_cast<size_t>(q - start));
  }
  return names->size() > before;
}

bool ParsePtxKernels(const char* ptx, std::vector<PtxKernel>* kernels) {
  if (strstr(ptx, ".version") == nullptr) return false;
  size_t before = kernels->size();
  for (const char* p = strstr(ptx, ".entry"); p != nullptr; p = strstr(p + 6, ".entry")) {
    const char* q = p + 6;
    if (!isspace(static_cast<unsigned char>(*q))) continue;
    while (isspace(static_cast<unsigned char>(*q))) ++q;
    const char* start = q;
    while (*q && (isalnum(static_cast<unsigned char>(*q)) || *q == '_' || *q == '$' || *q == '.')) ++q;
    if (q == start) continue;
    PtxKernel k;
    k.name.assign(start, static_cast<size_t>(q - start));
    // The parameter list is in parentheses; the body is the first brace after it, unless
    // a semicolon ends a declaration first.
    int parens = 0;
    while (*q && (parens > 0 || (*q != '{' && *q != ';'))) {
      if (*q == '(') ++parens;
      if (*q == ')') --parens;
      ++q;
    }
    if (*q == '{') {
      const char* open = q;
      int depth = 0;
      for (; *q; ++q) {
        if (*q == '{') ++depth;
        if (*q == '}' && --depth == 0) break;
      }
      k.body_bytes = static_cast<uint64_t>(q - open) + (*q ? 1 : 0);
      p = q > p + 6 ? q - 6 : p;  // go on after the body
    }
    kernels->push_back(std::move(k));
  }
  return kernels->size() > before;
}

namespace {

uint64_t SatMul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t SatAdd(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// Bytes of one element of a PTX fundamental type (".u32" -> 4); 0 if not one.
uint64_t TypeBytes(const std::string& t) {
  static const struct {
    const char* name;
    uint64_t bytes;
  } kTypes[] = {{".b8", 1},   {".s8", 1},  {".u8", 1},  {".b16", 2}, {".s16", 2},  {".u16", 2},   {".f16", 2},
                {".bf16", 2}, {".b32", 4}, {".s32", 4}, {".u32", 4}, {".f32", 4},  {".f16x2", 4}, {".bf16x2", 4},
                {".b64", 8},  {".s64", 8}, {".u64", 8}, {".f64", 8}, {".b128", 16}};
  for (const auto& k : kTypes)
    if (t == k.name) return k.bytes;
  return 0;
}

// Splits at commas outside brackets and braces.
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char ch : s) {
    if (ch == '[' || ch == '{' || ch == '(') ++depth;
    if (ch == ']' || ch == '}' || ch == ')') --depth;
    if (ch == ',' && depth == 0)
      out.emplace_back();
    else
      out.back() += ch;
  }
  return out;
}

// Leaf values of an initialiser: "{1, 2, {3, 4}}" -> 4.
uint64_t InitialiserElements(const std::string& init) {
  uint64_t n = 0;
  bool in_value = false;
  for (char ch : init) {
    bool sep = ch == ',' || ch == '{' || ch == '}' || isspace(static_cast<unsigned char>(ch));
    if (!sep && !in_value) ++n;
    in_value = !sep;
  }
  return n;
}

// Bytes one module-scope statement declares in .global (0 for anything else).
uint64_t StatementGlobalBytes(const std::string& stmt) {
  // Directive tokens first (".visible .global .align 8 .v2 .u32"), then declarators.
  size_t pos = 0;
  bool global = false, external = false;
  uint64_t elem = 0, vec = 1;
  for (;;) {
    while (pos < stmt.size() && isspace(static_cast<unsigned char>(stmt[pos]))) ++pos;
    if (pos >= stmt.size() || stmt[pos] != '.') break;
    size_t end = pos;
    while (end < stmt.size() && !isspace(static_cast<unsigned char>(stmt[end]))) ++end;
    std::string tok = stmt.substr(pos, end - pos);
    pos = end;
    if (tok == ".global") global = true;
    if (tok == ".extern") external = true;
    if (tok == ".v2") vec = 2;
    if (tok == ".v4") vec = 4;
    if (tok == ".v8") vec = 8;
    if (uint64_t b = TypeBytes(tok)) elem = b;
    if (tok == ".align") {  // its number
      while (pos < stmt.size() && isspace(static_cast<unsigned char>(stmt[pos]))) ++pos;
      while (pos < stmt.size() && isdigit(static_cast<unsigned char>(stmt[pos]))) ++pos;
    }
  }
  if (!global || external || elem == 0) return 0;
  uint64_t total = 0;
  for (const std::string& decl : SplitTopLevel(stmt.substr(pos))) {
    size_t eq = decl.find('=');
    std::string head = decl.substr(0, eq);
    uint64_t count = 1;
    for (size_t b = head.find('['); b != std::string::npos; b = head.find('[', b + 1)) {
      size_t e = head.find(']', b);
      if (e == std::string::npos) break;
      std::string dim = head.substr(b + 1, e - b - 1);
      bool empty = dim.find_first_not_of(" \t") == std::string::npos;
      uint64_t n = empty ? (eq == std::string::npos ? 0 : InitialiserElements(decl.substr(eq + 1)))
                         : strtoull(dim.c_str(), nullptr, 0);
      count = SatMul(count, n);
      if (empty) break;  // the initialiser's leaves already count every dimension
    }
    total = SatAdd(total, SatMul(SatMul(count, vec), elem));
  }
  return total;
}

}  // namespace

uint64_t PtxGlobalBytes(const char* ptx) {
  uint64_t total = 0;
  std::string stmt;
  int body_depth = 0;  // inside a function body
  int init_depth = 0;  // inside a module-scope initialiser's braces
  for (const char* p = ptx; *p; ++p) {
    if (p[0] == '/' && p[1] == '/') {  // comments
      while (*p && *p != '\n') ++p;
      if (!*p) break;
      continue;
    }
    if (p[0] == '/' && p[1] == '*') {
      const char* e = strstr(p + 2, "*/");
      if (e == nullptr) break;
      p = e + 1;
      continue;
    }
    if (*p == '"') {  // strings (.file names)
      const char* e = strchr(p + 1, '"');
      if (e == nullptr) break;
      p = e;
      continue;
    }
    if (body_depth > 0) {
      if (*p == '{') ++body_depth;
      if (*p == '}') --body_depth;
      continue;
    }
    // Module directives that end at the line's end, not at a semicolon.
    if (*p == '.' && stmt.find_first_not_of(" \t\r\n") == std::string::npos &&
        (strncmp(p, ".version", 8) == 0 || strncmp(p, ".target", 7) == 0 || strncmp(p, ".address_size", 13) == 0 ||
         strncmp(p, ".file", 5) == 0)) {
      while (*p && *p != '\n') ++p;
      if (!*p) break;
      stmt.clear();
      continue;
    }
    if (*p == '{') {
      if (init_depth > 0 || stmt.find('=') != std::string::npos) {
        ++init_depth;
        stmt += *p;
      } else {
        body_depth = 1;
        stmt.clear();
      }
      continue;
    }
    if (*p == '}' && init_depth > 0) --init_depth;
    if (*p == ';' && init_depth == 0) {
      total = SatAdd(total, StatementGlobalBytes(stmt));
      stmt.clear();
      continue;
    }
    stmt += *p;
  }
  return total;
}

bool IsSpinKernel(const std::string& name) {
  return name == "gpuslice_spin";
}

}  // namespace gs::sim
