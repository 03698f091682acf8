// A container's region file as the node agent reads it (src/host/region_reader.h
// ContainerRegion::Open, Read, WriteHostPid). The container writes that file, so every
// byte of it is hostile. The base is a region made by the real writer (src/region:
// OpenRegion, ClaimSlot, Reserve: two devices, two processes), so inputs get past the
// magic and layout checks; the input says what the container did to it:
//
//   byte 0: the file's shape (low 3 bits): 0-3 the base with the patches applied; 4 that,
//           cut at a length (3 bytes after byte 0); 5 the rest of the input as the whole
//           file; 6 a symlink to a valid region; 7 a FIFO. The high 5 bits pick the process
//           whose host pid is written back.
//   then patches, each: a selector byte (low 2 bits: 0 header + 1 byte offset, 1 device +
//           1 byte index + 1 byte offset, 2 process slot + 2 bytes index + 2 bytes offset,
//           3 anywhere + 3 bytes offset), a length byte, that many bytes written there.
//
// Checked (the reader's header): a region is refused only with NotFound, Unavailable or
// InvalidArgument naming the file, and never when its header is this version's; what it
// hands out is what the file holds, validated: UUIDs non-empty, NUL-free, of letters,
// digits and dashes; pids in 1..kMaxPid, host pids 0..kMaxPid; device indexes and process
// slots within the arrays, ascending, every valid slot reported; spilled <= used;
// consistent() exactly when the sequence is even (nothing writes meanwhile). WriteHostPid
// writes the 4 bytes of that one field and nothing else, and refuses a slot whose pid
// changed or that does not exist. And the enforcer's side of the same bytes: the slots
// leaving the table of shared pieces one by one (CheckLeavingPieces).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/common/proc_identity.h"
#include "src/host/region_reader.h"
#include "src/region/region.h"
#include "src/region/shared_pieces.h"

namespace {

namespace rg = gs::region;
using gs::host::ContainerRegion;
using gs::host::RegionDevice;
using gs::host::RegionProcess;

constexpr size_t kSize = sizeof(rg::Region);
constexpr size_t kDevices = offsetof(rg::Region, devices);
constexpr size_t kSlots = offsetof(rg::Region, procs);
constexpr size_t kPieces = offsetof(rg::Region, pieces);

template <typename T>
T At(const std::string& image, size_t offset) {
  T v;
  memcpy(&v, image.data() + offset, sizeof(T));
  return v;
}

// The region a container's enforcer leaves: two devices with limits, two live processes
// (this one and its parent) holding memory, some of it spilled.
const std::string& BaseImage() {
  static const std::string image = [] {
    std::string path = gs::fuzz::ScratchDir() + "/base-region";
    rg::OpenError err;
    char msg[256];
    rg::Region* r = rg::OpenRegion(path.c_str(), &err, msg, sizeof(msg));
    if (r == nullptr) {
      std::fprintf(stderr, "fuzz harness: %s\n", msg);
      std::abort();
    }
    snprintf(r->devices[0].uuid, sizeof(r->devices[0].uuid), "GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f");
    snprintf(r->devices[1].uuid, sizeof(r->devices[1].uuid), "GPU-2c3d0000-1111-2222-3333-444444444444");
    r->devices[0].memory_limit.store(10ull << 30);
    r->devices[1].memory_limit.store(20ull << 30);
    r->devices[0].card_tenant_id.store(77);
    r->device_count.store(2);
    rg::ProcessSlot* self = rg::ClaimSlot(r, getpid(), gs::ProcessStartTime(getpid()), gs::OwnPidNamespace());
    rg::ProcessSlot* parent = rg::ClaimSlot(r, getppid(), gs::ProcessStartTime(getppid()), gs::OwnPidNamespace());
    if (self == nullptr || parent == nullptr || !rg::Reserve(r, self, 0, 1ull << 30, false, 0) ||
        !rg::Reserve(r, parent, 1, 3ull << 30, true, 0) || !rg::Reserve(r, parent, 1, 1ull << 30, false, 0))
      std::abort();
    self->host_pid.store(static_cast<uint32_t>(getpid()));
    // A pool piece this process exported and its parent imported.
    if (!rg::RecordExportedPiece(r, self, 42, 0, 256ull << 20, 0x7000, 0x5000) ||
        !rg::RecordImportedPiece(r, parent, 42))
      std::abort();
    rg::CloseRegion(r);
    std::string bytes = gs::fuzz::ReadFile(path);
    if (bytes.size() != kSize) std::abort();
    return bytes;
  }();
  return image;
}

bool UuidChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

// What Read handed out against the bytes it read (`image`, unchanged meanwhile).
void CheckAgainst(const ContainerRegion& r, const std::string& image) {
  GS_FUZZ_CHECK(r.consistent() == (At<uint64_t>(image, offsetof(rg::Region, seq)) % 2 == 0));
  GS_FUZZ_CHECK(r.rejected() >= 0 && r.rejected() <= 2 * rg::kMaxDevices + 2 * rg::kMaxProcesses);
  GS_FUZZ_CHECK(r.devices().size() <= static_cast<size_t>(rg::kMaxDevices));
  int last = -1;
  size_t named = 0;  // device entries in use (a non-empty UUID field)
  for (int d = 0; d < rg::kMaxDevices; ++d) named += image[kDevices + d * sizeof(rg::Device)] != 0;
  GS_FUZZ_CHECK(r.devices().size() <= named);
  for (const RegionDevice& dev : r.devices()) {
    GS_FUZZ_CHECK(dev.index > last && dev.index < rg::kMaxDevices);
    last = dev.index;
    size_t at = kDevices + static_cast<size_t>(dev.index) * sizeof(rg::Device);
    GS_FUZZ_CHECK(!dev.uuid.empty() && dev.uuid.size() < sizeof(rg::Device::uuid));
    for (char c : dev.uuid) GS_FUZZ_CHECK(UuidChar(c));
    GS_FUZZ_CHECK(dev.uuid == std::string(image.data() + at + offsetof(rg::Device, uuid)));
    GS_FUZZ_CHECK(dev.memory_limit == At<uint64_t>(image, at + offsetof(rg::Device, memory_limit)));
    GS_FUZZ_CHECK(dev.memory_used == At<uint64_t>(image, at + offsetof(rg::Device, memory_used)));
    GS_FUZZ_CHECK(dev.card_tenant_id == At<uint64_t>(image, at + offsetof(rg::Device, card_tenant_id)));
    GS_FUZZ_CHECK(dev.spilled <= dev.memory_used);
    uint64_t spilled = At<uint64_t>(image, at + offsetof(rg::Device, spilled));
    GS_FUZZ_CHECK(dev.spilled == (spilled <= dev.memory_used ? spilled : dev.memory_used));
  }
  GS_FUZZ_CHECK(r.processes().size() <= static_cast<size_t>(rg::kMaxProcesses));
  size_t p = 0;
  for (int s = 0; s < rg::kMaxProcesses; ++s) {
    size_t at = kSlots + static_cast<size_t>(s) * sizeof(rg::ProcessSlot);
    uint32_t pid = At<uint32_t>(image, at + offsetof(rg::ProcessSlot, pid));
    bool valid = pid != 0 && pid <= ContainerRegion::kMaxPid;
    bool reported = p < r.processes().size() && r.processes()[p].slot == s;
    GS_FUZZ_CHECK(valid == reported);  // every valid slot, and only those, in slot order
    if (!reported) continue;
    const RegionProcess& proc = r.processes()[p++];
    GS_FUZZ_CHECK(proc.pid == pid);
    uint32_t host_pid = At<uint32_t>(image, at + offsetof(rg::ProcessSlot, host_pid));
    GS_FUZZ_CHECK(proc.host_pid <= ContainerRegion::kMaxPid);
    GS_FUZZ_CHECK(proc.host_pid == (host_pid <= ContainerRegion::kMaxPid ? host_pid : 0));
    GS_FUZZ_CHECK(proc.start_time == At<uint64_t>(image, at + offsetof(rg::ProcessSlot, start_time)));
  }
  GS_FUZZ_CHECK(p == r.processes().size());
}

// The enforcer's side of the same bytes (src/region/shared_pieces.h): each slot freed in
// turn, whatever the container wrote into the slots and the pieces table, moves charges
// only between the region's own slots: every device's sum of the slots' memory stays the
// same (modulo 2^64, as the atomics count), and every entry left is free or names a slot
// and a device inside the arrays.
void CheckLeavingPieces(const std::string& image) {
  static rg::Region* r = rg::CreatePrivateRegion();
  memcpy(static_cast<void*>(r->procs), image.data() + kSlots, sizeof(r->procs));
  memcpy(static_cast<void*>(r->pieces), image.data() + kPieces, sizeof(r->pieces));
  uint64_t before[rg::kMaxDevices] = {}, after[rg::kMaxDevices] = {};
  for (const auto& s : r->procs)
    for (int d = 0; d < rg::kMaxDevices; ++d) before[d] += s.memory[d].load();
  for (auto& s : r->procs) {
    rg::Lock(r);
    rg::LeavePiecesLocked(r, &s);
    rg::Unlock(r);
  }
  for (const auto& s : r->procs)
    for (int d = 0; d < rg::kMaxDevices; ++d) after[d] += s.memory[d].load();
  for (int d = 0; d < rg::kMaxDevices; ++d) GS_FUZZ_CHECK(before[d] == after[d]);
  for (const auto& p : r->pieces) GS_FUZZ_CHECK(p.key == 0);  // every slot left: nothing to follow
}

// Whether the file at path holds exactly `image` (read into a buffer kept between inputs:
// ASan maps and unmaps every large allocation, which made up most of an input's time).
bool FileHolds(const std::string& path, const std::string& image) {
  static std::string buf(kSize + 1, '\0');
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = pread(fd, buf.data(), buf.size(), 0);
  close(fd);
  return n == static_cast<ssize_t>(image.size()) && memcmp(buf.data(), image.data(), image.size()) == 0;
}

bool ThisVersion(const std::string& image) {
  return image.size() == kSize && At<uint64_t>(image, 0) == rg::kRegionMagic &&
         At<uint32_t>(image, offsetof(rg::Region, abi_major)) == rg::kRegionAbiMajor &&
         At<uint64_t>(image, offsetof(rg::Region, size)) == kSize;
}

void Patch(gs::fuzz::Reader& in, std::string* image) {
  while (in.left() > 0) {
    size_t at = 0;
    switch (in.Take(1) % 4) {
      case 0:
        at = in.Take(1) % kDevices;
        break;
      case 1:
        at = kDevices + (in.Take(1) % rg::kMaxDevices) * sizeof(rg::Device);
        at += in.Take(1) % sizeof(rg::Device);
        break;
      case 2:
        at = kSlots + (in.Take(2) % rg::kMaxProcesses) * sizeof(rg::ProcessSlot);
        at += in.Take(2) % sizeof(rg::ProcessSlot);
        break;
      default:
        at = in.Take(3) % kSize;
        break;
    }
    std::string_view bytes = in.Bytes(in.Take(1));
    image->replace(at, std::min(bytes.size(), kSize - at), bytes.substr(0, kSize - at));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = gs::fuzz::ScratchDir();
  const std::string path = dir + "/region", valid = dir + "/valid-region";
  static const bool made = [&] {
    gs::fuzz::WriteFile(valid, BaseImage());
    return true;
  }();
  (void)made;
  unlink(path.c_str());
  gs::fuzz::Reader in(data, size);
  unsigned head = static_cast<unsigned>(in.Take(1));
  unsigned shape = head & 7, pick = head >> 3;
  static std::string image;  // reused: see FileHolds
  image.clear();
  if (shape <= 4) {
    size_t cut = shape == 4 ? in.Take(3) % kSize : kSize;
    image.assign(BaseImage());
    Patch(in, &image);
    image.resize(cut);
    gs::fuzz::WriteFile(path, image);
  } else if (shape == 5) {
    image.assign(in.Bytes(in.left()));
    gs::fuzz::WriteFile(path, image);
  } else if (shape == 6) {
    if (symlink(valid.c_str(), path.c_str()) != 0) std::abort();
  } else {
    if (mkfifo(path.c_str(), 0600) != 0) std::abort();
  }

  auto r = ContainerRegion::Open(path);
  if (!r.ok()) {
    gs::StatusCode code = r.status().code();
    GS_FUZZ_CHECK(code == gs::StatusCode::kInvalidArgument || code == gs::StatusCode::kUnavailable);
    GS_FUZZ_CHECK(r.status().message().find(path) != std::string::npos);
    GS_FUZZ_CHECK(shape >= 5 || !ThisVersion(image));  // never a false refusal
    return 0;
  }
  GS_FUZZ_CHECK(shape <= 5 && ThisVersion(image));
  CheckAgainst(*r, image);
  CheckLeavingPieces(image);

  // The one write the agent makes: a host pid, into the slot it read, and nothing else.
  GS_FUZZ_CHECK(r->WriteHostPid(-1, 1, 1).code() == gs::StatusCode::kInvalidArgument);
  GS_FUZZ_CHECK(r->WriteHostPid(rg::kMaxProcesses, 1, 1).code() == gs::StatusCode::kInvalidArgument);
  if (r->processes().empty()) return 0;
  RegionProcess p = r->processes()[pick % r->processes().size()];
  GS_FUZZ_CHECK(r->WriteHostPid(p.slot, p.pid + 1, 4242).code() == gs::StatusCode::kFailedPrecondition);
  GS_FUZZ_CHECK(FileHolds(path, image));
  GS_FUZZ_CHECK(r->WriteHostPid(p.slot, p.pid, 4242).ok());
  size_t field = kSlots + static_cast<size_t>(p.slot) * sizeof(rg::ProcessSlot) + offsetof(rg::ProcessSlot, host_pid);
  uint32_t host_pid = 4242;
  memcpy(image.data() + field, &host_pid, sizeof(host_pid));
  GS_FUZZ_CHECK(FileHolds(path, image));
  GS_FUZZ_CHECK(r->Read().ok());
  CheckAgainst(*r, image);
  return 0;
}
