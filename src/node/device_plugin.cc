#include "src/node/device_plugin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "src/common/raw_log.h"
#include "src/model/container_edits.h"
#include "src/node/card_entries.h"

namespace gs::node {
namespace {

grpc::Status ToGrpc(const Status& s) {
  auto code = s.code() == StatusCode::kInvalidArgument      ? grpc::StatusCode::INVALID_ARGUMENT
              : s.code() == StatusCode::kFailedPrecondition ? grpc::StatusCode::FAILED_PRECONDITION
                                                            : grpc::StatusCode::INTERNAL;
  return grpc::Status(code, s.message());
}

// Writes the spare's limits file (a new, empty inode no container has mounted:
// ContainerDirs) in place. Not with O_TRUNC: with plain directories (--shared-dir-size 0)
// it is on the state disk, and ext4 flushes a file that was truncated to zero and
// rewritten when it is closed (auto_da_alloc), a disk write on the Allocate path;
// shrinking to the written length is only a safeguard should the file not be empty.
Status WriteLimits(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open " + path + ": " + strerror(errno));
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
            (st.st_size <= static_cast<off_t>(text.size()) || ftruncate(fd, static_cast<off_t>(text.size())) == 0);
  int e = errno;
  close(fd);
  return ok ? Status::Ok() : Internal("cannot write " + path + ": " + strerror(e));
}

}  // namespace

container::ExtraDevices ExtraDevicesFor(const Config& cfg) {
  return {cfg.gdrcopy_enabled, cfg.gds_enabled, cfg.mofed_enabled};
}

DevicePluginService::DevicePluginService(const Config& cfg, SliceBook* book, ContainerDirs* dirs,
                                         EnforcerInstall enforcer, DecisionSource* decisions)
    : cfg_(cfg), book_(book), dirs_(dirs), enforcer_(std::move(enforcer)), decisions_(decisions) {}

void DevicePluginService::Stop() {
  stopping_ = true;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* out) {
  out->set_pre_start_required(false);
  out->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  uint64_t sent = 0;
  while (!ctx->IsCancelled() && !stopping_) {
    uint64_t v = book_->version();
    if (v != sent) {
      // Every message carries the complete list, never a delta.
      v1beta1::ListAndWatchResponse resp;
      for (const auto& d : book_->Devices()) {
        auto* dev = resp.add_devices();
        dev->set_id(d.id);
        dev->set_health(d.healthy ? "Healthy" : "Unhealthy");
        if (d.numa_node >= 0) dev->mutable_topology()->add_nodes()->set_id(d.numa_node);
      }
      if (!writer->Write(resp)) break;
      sent = v;
    }
    book_->Wait(sent, std::chrono::milliseconds(200));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                         const v1beta1::PreferredAllocationRequest* req,
                                                         v1beta1::PreferredAllocationResponse* out) {
  auto gpus = book_->Gpus();
  auto in_use = book_->InUse();
  for (const auto& c : req->container_requests()) {
    // Each ID once: an ID listed twice would otherwise be preferred twice.
    std::vector<std::string> available;
    std::set<std::string> listed;
    for (const auto& id : c.available_deviceids())
      if (listed.insert(id).second) available.push_back(id);
    std::vector<std::string> must(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
    auto ids = model::PreferSlices(gpus, available, must, c.allocation_size(), in_use, cfg_.packing);
    auto* r = out->add_container_responses();
    for (const auto& id : ids) r->add_deviceids(id);
  }
  return grpc::Status::OK;
}

StatusOr<v1beta1::ContainerAllocateResponse> DevicePluginService::AllocateContainer(
    const std::vector<std::string>& requested, std::string* record_id) {
  return AllocateContainer(requested, {}, record_id);
}

StatusOr<v1beta1::ContainerAllocateResponse> DevicePluginService::AllocateContainer(
    const std::vector<std::string>& requested, const std::set<std::string>& reserved, std::string* record_id) {
  auto gpus = book_->Gpus();
  std::vector<std::string> ids = requested;
  StatusOr<model::Allocation> alloc = Internal("no allocation");
  if (decisions_ != nullptr) {
    auto claim = decisions_->Claim(static_cast<int>(ids.size()));
    if (!claim.ok())
      return Status(claim.status().code(),
                    "the GPU decision for this container: " + claim.status().message() +
                        " (with --scheduler-decisions, GPU pods must be placed by gpuslice scheduler)");
    alloc = AllocationForClaim(gpus, *claim, book_->policy().oversubscribed());
    if (alloc.ok())
      GS_LOG(kInfo, "Allocate: pod %s container #%zu gets %zu card(s) as decided by the scheduler", claim->pod.c_str(),
             claim->container, claim->cards.size());
  } else {
    if (cfg_.enable_legacy_preferred) {
      std::set<std::string> taken = book_->TakenIds();
      taken.insert(reserved.begin(), reserved.end());
      for (const auto& id : requested) taken.erase(id);
      auto remapped = model::LegacyDistinct(gpus, book_->policy(), requested, taken);
      if (!remapped.ok()) return remapped.status();
      ids = *remapped;
    }
    alloc = model::AllocationFor(gpus, book_->policy(), ids);
  }
  if (!alloc.ok()) return alloc.status();
  // The node's compute policy (--core-policy); `disable` leaves no compute share to hold.
  alloc->core_policy = cfg_.EffectiveCorePolicy();
  if (alloc->core_policy == model::CorePolicy::kDisable)
    for (auto& d : alloc->devices) d.sm_share = 0;

  AllocationRecord rec{
      "", ids,
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()};
  if (Status s = dirs_->Take(&rec.id); !s.ok()) return s;
  std::string dir = book_->ContainerDir(rec.id);
  model::EditOptions o;
  o.enforcer_host_path = enforcer_.host_path;
  o.enforcer_container_path = enforcer_.container_path;
  o.preload_file_host_path = enforcer_.preload_file;
  o.limits_file_host_path = book_->LimitsFile(rec.id);
  o.region_host_dir = book_->SharedDir(rec.id);
  o.cards_host_dir = book_->CardsDir();
  o.dev_root = model::DevRoot(cfg_.driver_root);
  o.log_level = cfg_.enforcer_log_level;
  if (Status s = TakeCardEntries(o.cards_host_dir, dir, rec.created_unix, &*alloc); !s.ok()) {
    dirs_->Discard(rec.id);
    return s;
  }
  std::string limits =
      model::LimitsFileText(*alloc, o.region_container_dir + "/region", o.cards_container_dir,
                            "written by gpuslice node for allocation " + rec.id + "; authoritative, mounted read-only");
  if (Status s = WriteLimits(o.limits_file_host_path, limits); !s.ok()) {
    dirs_->Discard(rec.id);
    return s;
  }
  model::ContainerEdits edits = model::ToContainerEdits(*alloc, o);
  for (auto& n : container::ExtraDeviceNodes(o.dev_root, ExtraDevicesFor(cfg_))) edits.devices.push_back(std::move(n));

  v1beta1::ContainerAllocateResponse resp;
  bool envvar = false, cdi = false;
  for (const auto& s : cfg_.device_list_strategy) {
    envvar |= s == "envvar";
    cdi |= s == "cdi-cri";
  }
  // The enforcer's environment and mounts are per container: they are returned whatever
  // the device list strategy; the strategy decides how device nodes get in.
  for (const auto& [k, v] : edits.env) (*resp.mutable_envs())[k] = v;
  for (const auto& m : edits.mounts) {
    auto* mount = resp.add_mounts();
    mount->set_container_path(m.container_path);
    mount->set_host_path(m.host_path);
    mount->set_read_only(m.read_only);
  }
  if (envvar)
    for (const auto& d : edits.devices) {
      if (access(d.host_path.c_str(), F_OK) != 0) continue;  // e.g. no nvidia-uvm-tools
      auto* spec = resp.add_devices();
      spec->set_container_path(d.container_path);
      spec->set_host_path(d.host_path);
      spec->set_permissions(d.permissions);
    }
  if (cdi)
    for (const auto& g : alloc->devices) resp.add_cdi_devices()->set_name(cfg_.cdi_kind + "=" + g.uuid);
  std::vector<std::string> dropped;
  Status s = book_->Add(rec, &dropped);
  for (const auto& id : dropped) dirs_->Discard(id);
  if (!s.ok()) {
    dirs_->Discard(rec.id);
    return s;
  }
  *record_id = rec.id;
  return resp;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                                           v1beta1::AllocateResponse* out) {
  auto start = std::chrono::steady_clock::now();
  ContainerDirs::Call call(dirs_);  // the directories' background work waits for this call
  grpc::Status status = AllocateAll(*req, out);
  allocate_latency_.Observe(std::chrono::steady_clock::now() - start, status.ok());
  return status;
}

grpc::Status DevicePluginService::AllocateAll(const v1beta1::AllocateRequest& req, v1beta1::AllocateResponse* out) {
  // A slice goes to one container: were it asked for by two, the second's record would
  // drop the first's (SliceBook::Add) and its directory would be recycled under it.
  std::set<std::string> asked;
  for (const auto& c : req.container_requests())
    for (const auto& id : std::set<std::string>(c.devices_ids().begin(), c.devices_ids().end()))
      if (!asked.insert(id).second)
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "device ID '" + id + "' is asked for by two containers of one request");
  std::vector<std::string> made;
  for (const auto& c : req.container_requests()) {
    std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
    std::string rec;
    auto r = AllocateContainer(ids, asked, &rec);
    if (!r.ok()) {
      // All or nothing: undo what this call created.
      for (const auto& id : made) {
        book_->Remove(id);
        dirs_->Discard(id);
      }
      return ToGrpc(r.status());
    }
    made.push_back(rec);
    *out->add_container_responses() = std::move(*r);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                                    v1beta1::PreStartContainerResponse*) {
  return grpc::Status::OK;
}

}  // namespace gs::node
