#include "src/sim/ptx.h"

#include <cctype>
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

bool IsSpinKernel(const std::string& name) {
  return name == "gpuslice_spin";
}

}  // namespace gs::sim
