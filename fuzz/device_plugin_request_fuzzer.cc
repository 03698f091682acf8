// The kubelet's AllocateRequest and PreferredAllocationRequest as the node agent handles
// them (src/node/device_plugin.h DevicePluginService::Allocate, GetPreferredAllocation):
// the input is the protobuf message as it arrives on the device plugin socket, parsed by
// the generated code (api/deviceplugin/v1beta1/api.proto) and handed to the real service,
// with a real SliceBook and ContainerDirs in a scratch state directory, on a node of three
// GPUs (the third unhealthy) split 4 ways.
//
// Input: byte 0 (bit 0: AllocateRequest, else PreferredAllocationRequest; bit 1:
// --enable-legacy-preferred; bit 2: binpack, else spread), then the serialized message.
// Each input starts from a book holding one allocation, `old`, on GPU-a's slice 0.
//
// Checked:
// - Allocate is all or nothing: an error (INVALID_ARGUMENT, FAILED_PRECONDITION or
//   INTERNAL, with a message) leaves no new record, and drops only records sharing a
//   requested slice; success answers every container, each with a record in the book
//   that holds the container's slices (the IDs asked for, unless remapped by
//   --enable-legacy-preferred), each a slice of a healthy GPU of this node, no two on one
//   GPU; its limits file written, mounted read-only; NVIDIA_VISIBLE_DEVICES and the CDI
//   devices naming exactly those GPUs;
// - GetPreferredAllocation answers every container: the must-include IDs first, then
//   IDs from the available ones, each once, each a slice of a healthy GPU, no more than
//   the size asked for.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/common/raw_log.h"
#include "src/node/config.h"
#include "src/node/container_dirs.h"
#include "src/node/device_plugin.h"
#include "src/node/slice_book.h"

namespace {

struct Node {
  std::vector<gs::model::Gpu> gpus;
  gs::node::Config cfg[4];  // [legacy preferred][binpack]
  std::unique_ptr<gs::node::SliceBook> book;
  std::unique_ptr<gs::node::ContainerDirs> dirs;
  std::unique_ptr<gs::node::DevicePluginService> service[4];
};

Node& TheNode() {
  static Node* node = [] {
    auto* n = new Node;
    const std::string state = gs::fuzz::ScratchDir() + "/state";
    std::filesystem::create_directories(state + "/containers");
    n->gpus = {{"GPU-a", 0, "NVIDIA H100 80GB HBM3", 80ull << 30, 0, 0, true},
               {"GPU-b", 1, "NVIDIA H100 80GB HBM3", 80ull << 30, 1, 1, true},
               {"GPU-dead", 2, "NVIDIA H100 80GB HBM3", 80ull << 30, 1, 2, false}};
    gs::model::SplitPolicy split;
    split.split_count = 4;
    n->book = std::make_unique<gs::node::SliceBook>(n->gpus, split, state);
    if (!n->book->Load().ok()) std::abort();
    n->dirs = std::make_unique<gs::node::ContainerDirs>(n->book.get(), 2);
    n->dirs->Start();
    gs::container::EnforcerInstall enforcer{state + "/lib/v1/libgpuslice.so", "/usr/lib/gpuslice/v1/libgpuslice.so",
                                            state + "/lib/v1/ld.so.preload"};
    for (int i = 0; i < 4; ++i) {
      gs::node::Config& c = n->cfg[i];
      c.state_dir = state;
      c.driver_root = gs::fuzz::ScratchDir() + "/driver";  // no device nodes: none to check for
      c.split = split;
      c.device_list_strategy = {"envvar", "cdi-cri"};
      c.enable_legacy_preferred = i & 1;
      c.packing = i & 2 ? gs::model::PackingPolicy::kBinpack : gs::model::PackingPolicy::kSpread;
      n->service[i] = std::make_unique<gs::node::DevicePluginService>(c, n->book.get(), n->dirs.get(), enforcer);
    }
    return n;
  }();
  return *node;
}

std::map<std::string, std::vector<std::string>> Records(const gs::node::SliceBook& b) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& r : b.Records()) out[r.id] = r.device_ids;
  return out;
}

// The GPU (index) of a slice ID of this node, -1 when it is none.
int GpuOf(const Node& n, const std::string& id, int* k = nullptr) {
  std::string uuid;
  int slice = 0;
  if (!gs::model::ParseSliceId(id, &uuid, &slice)) return -1;
  if (k != nullptr) *k = slice;
  for (size_t g = 0; g < n.gpus.size(); ++g)
    if (n.gpus[g].uuid == uuid) return static_cast<int>(g);
  return -1;
}

bool Shares(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}

void Allocate(Node& n, int which, const v1beta1::AllocateRequest& req) {
  // The book as each input finds it: empty but for `old` on GPU-a::0.
  for (const auto& r : n.book->Records()) {
    n.book->Remove(r.id);
    n.dirs->Discard(r.id);
  }
  std::string old;
  std::vector<std::string> dropped;
  if (!n.dirs->Take(&old).ok() || !n.book->Add({old, {"GPU-a::0"}, 1}, &dropped).ok()) std::abort();
  const auto before = Records(*n.book);
  std::vector<std::string> requested;
  for (const auto& c : req.container_requests())
    requested.insert(requested.end(), c.devices_ids().begin(), c.devices_ids().end());

  v1beta1::AllocateResponse resp;
  grpc::Status s = n.service[which]->Allocate(nullptr, &req, &resp);
  const auto after = Records(*n.book);
  if (!s.ok()) {
    GS_FUZZ_CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                  s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                  s.error_code() == grpc::StatusCode::INTERNAL);
    GS_FUZZ_CHECK(!s.error_message().empty());
    for (const auto& [id, devices] : after) GS_FUZZ_CHECK(before.count(id));  // no new record
    for (const auto& [id, devices] : before)
      GS_FUZZ_CHECK(after.count(id) || (!n.cfg[which].enable_legacy_preferred ? Shares(devices, requested) : true));
    return;
  }
  GS_FUZZ_CHECK(resp.container_responses_size() == req.container_requests_size());
  const std::string containers = n.book->ContainersDir() + "/";
  for (int i = 0; i < resp.container_responses_size(); ++i) {
    const auto& r = resp.container_responses(i);
    std::string id;
    for (const auto& m : r.mounts())
      if (m.container_path() == "/etc/gpuslice/limits") {
        GS_FUZZ_CHECK(m.read_only() && id.empty());
        GS_FUZZ_CHECK(m.host_path().rfind(containers, 0) == 0);
        id = m.host_path().substr(containers.size());
        GS_FUZZ_CHECK(id.size() > 7 && id.substr(id.size() - 7) == "/limits");
        id.resize(id.size() - 7);
        GS_FUZZ_CHECK(!gs::fuzz::ReadFile(m.host_path()).empty());
      }
    GS_FUZZ_CHECK(!id.empty() && !before.count(id));
    GS_FUZZ_CHECK(after.count(id));  // the container's record is in the book
    const std::vector<std::string>& slices = after.at(id);
    const auto& asked = req.container_requests(i).devices_ids();
    if (!n.cfg[which].enable_legacy_preferred)
      GS_FUZZ_CHECK(slices == std::vector<std::string>(asked.begin(), asked.end()));
    GS_FUZZ_CHECK(slices.size() == static_cast<size_t>(asked.size()));
    std::set<int> gpus;
    std::string visible;
    for (const auto& slice : slices) {
      int k = -1, g = GpuOf(n, slice, &k);
      GS_FUZZ_CHECK(g >= 0 && n.gpus[g].healthy && k >= 0 && k < 4);
      GS_FUZZ_CHECK(gpus.insert(g).second);
      visible += (visible.empty() ? "" : ",") + n.gpus[g].uuid;
    }
    auto env = r.envs().find("NVIDIA_VISIBLE_DEVICES");
    GS_FUZZ_CHECK(env != r.envs().end() && env->second == (visible.empty() ? "void" : visible));
    GS_FUZZ_CHECK(r.cdi_devices_size() == static_cast<int>(slices.size()));
    for (int d = 0; d < r.cdi_devices_size(); ++d)
      GS_FUZZ_CHECK(r.cdi_devices(d).name() == "gpuslice.io/gpu=" + n.gpus[GpuOf(n, slices[d])].uuid);
  }
}

void Prefer(Node& n, int which, const v1beta1::PreferredAllocationRequest& req) {
  v1beta1::PreferredAllocationResponse resp;
  grpc::Status s = n.service[which]->GetPreferredAllocation(nullptr, &req, &resp);
  GS_FUZZ_CHECK(s.ok());
  GS_FUZZ_CHECK(resp.container_responses_size() == req.container_requests_size());
  for (int i = 0; i < resp.container_responses_size(); ++i) {
    const auto& c = req.container_requests(i);
    const auto& ids = resp.container_responses(i).deviceids();
    const int must = c.must_include_deviceids_size();
    GS_FUZZ_CHECK(ids.size() >= must);
    for (int j = 0; j < must; ++j) GS_FUZZ_CHECK(ids[j] == c.must_include_deviceids(j));
    GS_FUZZ_CHECK(ids.size() == must || ids.size() <= c.allocation_size());
    std::set<std::string> added;
    for (int j = must; j < ids.size(); ++j) {
      const std::string& id = ids[j];
      GS_FUZZ_CHECK(std::find(c.available_deviceids().begin(), c.available_deviceids().end(), id) !=
                    c.available_deviceids().end());
      GS_FUZZ_CHECK(std::find(c.must_include_deviceids().begin(), c.must_include_deviceids().end(), id) ==
                    c.must_include_deviceids().end());
      GS_FUZZ_CHECK(added.insert(id).second);
      int g = GpuOf(n, id);
      GS_FUZZ_CHECK(g >= 0 && n.gpus[g].healthy);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gs::SetRawLogLevel(-1);  // Allocate logs each container
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Node& n = TheNode();
  const int which = (data[0] >> 1) & 3;
  if (data[0] & 1) {
    v1beta1::AllocateRequest req;
    if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    Allocate(n, which, req);
  } else {
    v1beta1::PreferredAllocationRequest req;
    if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    Prefer(n, which, req);
  }
  return 0;
}
