// Quantities from outside text: byte quantities and plain numbers (src/common/quantity.h:
// CUDA_DEVICE_MEMORY_LIMIT, the limits file, flags) and Kubernetes quantities
// (pod_spec.h ParseKubeQuantity: nvidia.com/gpumem and friends in a pod spec).
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/common/quantity.h"
#include "src/scheduler/pod_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input = gs::fuzz::AsText(data, size);
  // The C parsers see the text up to its first NUL, as they would a C string.
  std::string text(input.substr(0, input.find('\0')));

  uint64_t bytes = 0;
  if (gs::ParseByteQuantity(text.c_str(), &bytes)) {
    // Any accepted quantity starts with a digit after blanks.
    size_t first = text.find_first_not_of(" \t");
    GS_FUZZ_CHECK(first != std::string::npos && text[first] >= '0' && text[first] <= '9');
  }

  uint64_t value = 0;
  if (gs::ParseUnsigned(text.c_str(), &value)) {
    // Only digits, and the value is the decimal number written (leading zeros aside).
    GS_FUZZ_CHECK(!text.empty() && text.find_first_not_of("0123456789") == std::string::npos);
    size_t nz = text.find_first_not_of('0');
    std::string digits = nz == std::string::npos ? "0" : text.substr(nz);
    GS_FUZZ_CHECK(std::to_string(value) == digits);
    // The same digits are a byte quantity with the same value.
    uint64_t b = 0;
    GS_FUZZ_CHECK(gs::ParseByteQuantity(text.c_str(), &b) && b == value);
  }

  // FormatBytes always leaves a terminated string in a buffer of any size.
  for (unsigned long n : {1ul, 4ul, 9ul, 32ul}) {
    char buf[32];
    std::memset(buf, 'x', sizeof buf);
    gs::FormatBytes(bytes ^ value, buf, n);
    GS_FUZZ_CHECK(strnlen(buf, n) < n);
  }

  auto q = gs::scheduler::ParseKubeQuantity(input);
  if (q.ok() && !input.empty() && input.find_first_not_of("0123456789") == std::string_view::npos) {
    // A plain number (no suffix) is itself.
    uint64_t plain = 0;
    if (gs::ParseUnsigned(std::string(input).c_str(), &plain)) GS_FUZZ_CHECK(static_cast<uint64_t>(*q) == plain);
  }
  return 0;
}
