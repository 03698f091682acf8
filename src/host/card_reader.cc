#include "src/host/card_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>

#include "src/host/private_copy.h"
#include "src/region/card.h"

namespace gs::host {
namespace {

namespace rg = gs::region;

using internal::Field;

}  // namespace

StatusOr<std::vector<CardTenantUse>> ReadCardTenants(const std::string& path) {
  // O_NONBLOCK: a FIFO in its place must not hang the reader; checked to be a file below.
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + " does not exist");
    return Unavailable("cannot open " + path + ": " + strerror(errno));
  }
  constexpr size_t kSize = sizeof(rg::Card);
  std::unique_ptr<unsigned char[]> copy(new unsigned char[kSize]);
  struct stat st;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  bool whole = regular && internal::PreadAll(fd, copy.get(), kSize, 0);
  close(fd);
  if (!regular) return InvalidArgument(path + " is not a regular file; not a card region");
  if (!whole) return InvalidArgument(path + " is shorter than a card region");
  const unsigned char* c = copy.get();
  uint64_t magic = Field<uint64_t>(c, offsetof(rg::Card, magic));
  if (magic == 0) return std::vector<CardTenantUse>{};  // not initialised: no tenant yet
  if (magic != rg::kCardMagic || Field<uint32_t>(c, offsetof(rg::Card, abi_major)) != rg::kCardAbiMajor ||
      Field<uint64_t>(c, offsetof(rg::Card, size)) != kSize)
    return InvalidArgument(path + " is not a card region of this version");
  std::vector<CardTenantUse> out;
  for (int i = 0; i < rg::kCardTenants; ++i) {
    size_t at = offsetof(rg::Card, tenants) + static_cast<size_t>(i) * sizeof(rg::CardTenant);
    CardTenantUse t;
    t.id = Field<uint64_t>(c, at + offsetof(rg::CardTenant, id));
    if (t.id == 0) continue;
    t.used_ns = Field<uint64_t>(c, at + offsetof(rg::CardTenant, used_ns));
    out.push_back(t);
  }
  return out;
}

}  // namespace gs::host
