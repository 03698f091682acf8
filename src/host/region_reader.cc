#include "src/host/region_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "src/host/private_copy.h"
#include "src/region/region.h"

namespace gs::host {
namespace {

namespace rg = gs::region;

using internal::Field;
using internal::PreadAll;

size_t DeviceOffset(int d) {
  return offsetof(rg::Region, devices) + static_cast<size_t>(d) * sizeof(rg::Device);
}
size_t SlotOffset(int s) {
  return offsetof(rg::Region, procs) + static_cast<size_t>(s) * sizeof(rg::ProcessSlot);
}

// A UUID as the enforcer writes it: NUL-terminated inside the field, letters, digits and
// dashes only (so it can name a file and a metric label).
bool ValidUuid(const char* field, size_t size, std::string* out) {
  const void* nul = memchr(field, 0, size);
  if (nul == nullptr) return false;
  size_t len = static_cast<size_t>(static_cast<const char*>(nul) - field);
  for (size_t i = 0; i < len; ++i) {
    char c = field[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  out->assign(field, len);
  return true;
}

}  // namespace

StatusOr<ContainerRegion> ContainerRegion::Open(const std::string& path) {
  // O_PATH opens nothing: a FIFO does not block, a device is not touched, a link is not
  // followed (its own inode is what fstat then sees).
  int probe = open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (probe < 0) {
    if (errno == ENOENT) return NotFound(path + " does not exist (yet)");
    return Unavailable("cannot open " + path + ": " + strerror(errno));
  }
  struct stat st;
  if (fstat(probe, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(probe);
    return InvalidArgument(path + " is not a regular file; not a region");
  }
  char self[64];
  snprintf(self, sizeof(self), "/proc/self/fd/%d", probe);
  int fd = open(self, O_RDWR | O_CLOEXEC);
  if (fd < 0) fd = open(self, O_RDONLY | O_CLOEXEC);  // WriteHostPid then fails with the reason
  int e = errno;
  close(probe);
  if (fd < 0) return Unavailable("cannot open " + path + ": " + strerror(e));
  ContainerRegion r(fd, path);
  GS_RETURN_IF_ERROR(r.Read());
  return r;
}

ContainerRegion::ContainerRegion(ContainerRegion&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      consistent_(o.consistent_),
      rejected_(o.rejected_),
      devices_(std::move(o.devices_)),
      processes_(std::move(o.processes_)) {}

ContainerRegion& ContainerRegion::operator=(ContainerRegion&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    consistent_ = o.consistent_;
    rejected_ = o.rejected_;
    devices_ = std::move(o.devices_);
    processes_ = std::move(o.processes_);
  }
  return *this;
}

ContainerRegion::~ContainerRegion() {
  if (fd_ >= 0) close(fd_);
}

Status ContainerRegion::Read() {
  constexpr size_t kSize = sizeof(rg::Region);
  std::unique_ptr<unsigned char[]> copy(new unsigned char[kSize]);
  const off_t seq_at = offsetof(rg::Region, seq);
  consistent_ = false;
  // A seqlock read without blocking anyone: the sequence before and after the copy must
  // be the same even number. A container can keep it moving forever, so a few attempts,
  // then the last copy is used as it is (every field is validated anyway).
  for (int attempt = 0; attempt < 3 && !consistent_; ++attempt) {
    uint64_t before = 0, after = 0;
    if (!PreadAll(fd_, &before, sizeof(before), seq_at) || !PreadAll(fd_, copy.get(), kSize, 0) ||
        !PreadAll(fd_, &after, sizeof(after), seq_at)) {
      struct stat st;
      if (fstat(fd_, &st) == 0 && st.st_size == 0) return Unavailable(path_ + " is empty (being made)");
      return InvalidArgument(path_ + " is shorter than a region (" + std::to_string(kSize) + " bytes)");
    }
    consistent_ = before == after && before % 2 == 0;
  }
  const unsigned char* c = copy.get();
  if (Field<uint64_t>(c, offsetof(rg::Region, magic)) != rg::kRegionMagic) {
    if (Field<uint64_t>(c, offsetof(rg::Region, magic)) == 0) return Unavailable(path_ + " is not initialised yet");
    return InvalidArgument(path_ + " is not a gpuslice region (wrong magic)");
  }
  uint32_t major = Field<uint32_t>(c, offsetof(rg::Region, abi_major));
  uint64_t size = Field<uint64_t>(c, offsetof(rg::Region, size));
  if (major != rg::kRegionAbiMajor || size != kSize)
    return InvalidArgument(path_ + " is a region of another version (ABI " + std::to_string(major) + ", " +
                           std::to_string(size) + " bytes; this one reads ABI " + std::to_string(rg::kRegionAbiMajor) +
                           ", " + std::to_string(kSize) + " bytes)");
  rejected_ = 0;
  devices_.clear();
  processes_.clear();
  for (int d = 0; d < rg::kMaxDevices; ++d) {
    size_t at = DeviceOffset(d);
    const char* uuid_field = reinterpret_cast<const char*>(c + at + offsetof(rg::Device, uuid));
    if (uuid_field[0] == 0) continue;  // unused
    RegionDevice dev;
    if (!ValidUuid(uuid_field, sizeof(rg::Device::uuid), &dev.uuid)) {
      ++rejected_;
      continue;
    }
    dev.index = d;
    dev.memory_limit = Field<uint64_t>(c, at + offsetof(rg::Device, memory_limit));
    dev.memory_used = Field<uint64_t>(c, at + offsetof(rg::Device, memory_used));
    dev.spilled = Field<uint64_t>(c, at + offsetof(rg::Device, spilled));
    dev.card_tenant_id = Field<uint64_t>(c, at + offsetof(rg::Device, card_tenant_id));
    if (dev.spilled > dev.memory_used) {  // a part larger than the whole: one of them is forged
      ++rejected_;
      dev.spilled = dev.memory_used;
    }
    devices_.push_back(std::move(dev));
  }
  for (int s = 0; s < rg::kMaxProcesses; ++s) {
    size_t at = SlotOffset(s);
    RegionProcess p;
    p.pid = Field<uint32_t>(c, at + offsetof(rg::ProcessSlot, pid));
    if (p.pid == 0) continue;
    if (p.pid > kMaxPid) {
      ++rejected_;
      continue;
    }
    p.slot = s;
    p.host_pid = Field<uint32_t>(c, at + offsetof(rg::ProcessSlot, host_pid));
    if (p.host_pid > kMaxPid) {
      ++rejected_;
      p.host_pid = 0;
    }
    p.start_time = Field<uint64_t>(c, at + offsetof(rg::ProcessSlot, start_time));
    p.pid_namespace = Field<uint32_t>(c, at + offsetof(rg::ProcessSlot, pid_namespace));
    processes_.push_back(p);
  }
  return Status::Ok();
}

Status ContainerRegion::WriteHostPid(int slot, uint32_t pid, uint32_t host_pid) {
  if (slot < 0 || slot >= rg::kMaxProcesses) return InvalidArgument("no process slot " + std::to_string(slot));
  off_t at = static_cast<off_t>(SlotOffset(slot));
  uint32_t now = 0;
  if (!PreadAll(fd_, &now, sizeof(now), at + static_cast<off_t>(offsetof(rg::ProcessSlot, pid))))
    return InvalidArgument(path_ + " shrank: no slot " + std::to_string(slot) + " any more");
  if (now != pid) return FailedPrecondition("slot " + std::to_string(slot) + " of " + path_ + " changed hands");
  off_t field = at + static_cast<off_t>(offsetof(rg::ProcessSlot, host_pid));
  if (pwrite(fd_, &host_pid, sizeof(host_pid), field) != static_cast<ssize_t>(sizeof(host_pid)))
    return Unavailable("cannot write " + path_ + ": " + strerror(errno));
  return Status::Ok();
}

}  // namespace gs::host
