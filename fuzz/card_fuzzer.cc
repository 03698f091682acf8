// A card region (one per GPU, writable by every container computing on it) as the node
// agent reads it for metrics (src/host/card_reader.h ReadCardTenants). The base is a card
// made by the real writer (src/region/card.h: OpenCard, JoinCard, Charge: three tenants);
// the input says what a tenant did to it:
//
//   byte 0: the file's shape (low 3 bits): 0-3 the base with the patches applied; 4 that,
//           cut at a length (2 bytes after byte 0); 5 the rest of the input as the whole
//           file; 6 a symlink to a valid card; 7 a FIFO.
//   then patches, each: a selector byte (0 header + 1 byte offset, 1 tenant + 1 byte
//           index + 1 byte offset, 2 anywhere + 2 bytes offset), a length byte, that many
//           bytes written there.
//
// Checked (the reader's header): a card is refused only with Unavailable or
// InvalidArgument naming the file, and never when its header is this version's or it is
// not initialised yet (no tenants then); the tenants handed out are the file's non-zero
// ids, in order, with their GPU time, at most kCardTenants; a FIFO does not hang it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/host/card_reader.h"
#include "src/region/card.h"

namespace {

namespace rg = gs::region;

constexpr size_t kSize = sizeof(rg::Card);
constexpr size_t kTenants = offsetof(rg::Card, tenants);

template <typename T>
T At(const std::string& image, size_t offset) {
  T v;
  memcpy(&v, image.data() + offset, sizeof(T));
  return v;
}

const std::string& BaseImage() {
  static const std::string image = [] {
    std::string path = gs::fuzz::ScratchDir() + "/base-card";
    char msg[256];
    rg::Card* c = rg::OpenCard(path.c_str(), msg, sizeof(msg));
    if (c == nullptr) {
      std::fprintf(stderr, "fuzz harness: %s\n", msg);
      std::abort();
    }
    const int64_t now = 1'000'000'000'000;
    int a = rg::JoinCard(c, 77, 30, true, 0, now), b = rg::JoinCard(c, 78, 70, false, 1, now);
    int d = rg::JoinCard(c, 0xFFFFFFFFFFFFFFFFull, 100, false, -5, now);
    if (a < 0 || b < 0 || d < 0) std::abort();
    rg::Charge(c, a, 5'000'000, now, 0);
    rg::Charge(c, b, 123'456'789, now, 0);
    rg::CloseCard(c);
    std::string bytes = gs::fuzz::ReadFile(path);
    if (bytes.size() != kSize) std::abort();
    return bytes;
  }();
  return image;
}

void Patch(gs::fuzz::Reader& in, std::string* image) {
  while (in.left() > 0) {
    size_t at = 0;
    switch (in.Take(1) % 3) {
      case 0:
        at = in.Take(1) % kTenants;
        break;
      case 1:
        at = kTenants + (in.Take(1) % rg::kCardTenants) * sizeof(rg::CardTenant);
        at += in.Take(1) % sizeof(rg::CardTenant);
        break;
      default:
        at = in.Take(2) % kSize;
        break;
    }
    std::string_view bytes = in.Bytes(in.Take(1));
    image->replace(at, std::min(bytes.size(), kSize - at), bytes.substr(0, kSize - at));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = gs::fuzz::ScratchDir();
  const std::string path = dir + "/card", valid = dir + "/valid-card";
  static const bool made = [&] {
    gs::fuzz::WriteFile(valid, BaseImage());
    return true;
  }();
  (void)made;
  unlink(path.c_str());
  gs::fuzz::Reader in(data, size);
  unsigned shape = static_cast<unsigned>(in.Take(1)) & 7;
  std::string image;
  if (shape <= 4) {
    size_t cut = shape == 4 ? in.Take(2) % kSize : kSize;
    image = BaseImage();
    Patch(in, &image);
    image.resize(cut);
    gs::fuzz::WriteFile(path, image);
  } else if (shape == 5) {
    image = std::string(in.Bytes(in.left()));
    gs::fuzz::WriteFile(path, image);
  } else if (shape == 6) {
    if (symlink(valid.c_str(), path.c_str()) != 0) std::abort();
  } else {
    if (mkfifo(path.c_str(), 0600) != 0) std::abort();
  }

  bool whole = shape <= 5 && image.size() >= kSize;
  uint64_t magic = whole ? At<uint64_t>(image, offsetof(rg::Card, magic)) : 1;
  bool this_version = whole && magic == rg::kCardMagic &&
                      At<uint32_t>(image, offsetof(rg::Card, abi_major)) == rg::kCardAbiMajor &&
                      At<uint64_t>(image, offsetof(rg::Card, size)) == kSize;
  auto tenants = gs::host::ReadCardTenants(path);
  if (!tenants.ok()) {
    gs::StatusCode code = tenants.status().code();
    GS_FUZZ_CHECK(code == gs::StatusCode::kInvalidArgument || code == gs::StatusCode::kUnavailable);
    GS_FUZZ_CHECK(tenants.status().message().find(path) != std::string::npos);
    GS_FUZZ_CHECK(!this_version && !(whole && magic == 0));  // never a false refusal
    return 0;
  }
  GS_FUZZ_CHECK(whole && (this_version || magic == 0));
  if (magic == 0) {
    GS_FUZZ_CHECK(tenants->empty());
    return 0;
  }
  size_t t = 0;
  for (int i = 0; i < rg::kCardTenants; ++i) {
    size_t at = kTenants + static_cast<size_t>(i) * sizeof(rg::CardTenant);
    uint64_t id = At<uint64_t>(image, at + offsetof(rg::CardTenant, id));
    if (id == 0) continue;
    GS_FUZZ_CHECK(t < tenants->size());
    GS_FUZZ_CHECK((*tenants)[t].id == id);
    GS_FUZZ_CHECK((*tenants)[t].used_ns == At<uint64_t>(image, at + offsetof(rg::CardTenant, used_ns)));
    ++t;
  }
  GS_FUZZ_CHECK(t == tenants->size() && t <= static_cast<size_t>(rg::kCardTenants));
  return 0;
}
