#include "src/container/device_request.h"

#include <cstdio>

#include "src/model/container_edits.h"

namespace gs::container {

std::string Printable(const std::string& s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", ch);
      out += hex;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

StatusOr<DeviceDecision> DecideDevices(const ContainerConfig& c, const DevicePolicy& p) {
  DeviceDecision d;
  if (!c.marker_devices.empty()) {
    std::string list;
    for (const auto& name : c.marker_devices) {
      if (name == "all") {
        list = "all";
        break;
      }
      list += (list.empty() ? "" : ",") + name;
    }
    auto v = model::ParseVisibleDevices(list, true);
    if (!v.ok())
      return InvalidArgument("device list mounted under " + std::string(model::kDeviceMarkerDir) + ": " +
                             v.status().message());
    d.devices = *v;
    d.source = DeviceSource::kMarkers;
    return d;  // the image's NVIDIA_VISIBLE_DEVICES cannot widen an allocation
  }
  bool asks = c.visible_set && !c.visible.empty() && c.visible != "void";
  if (!asks) return d;
  if (!c.privileged && !p.accept_env_when_unprivileged) {
    d.ignored = "ignoring NVIDIA_VISIBLE_DEVICES=\"" + Printable(c.visible) +
                "\" of an unprivileged container: it has no device allocation (no /dev/null mount under " +
                model::kDeviceMarkerDir +
                "/, which gpuslice's device plugin adds), so it gets no GPU; to honour the variable for "
                "unprivileged containers, run the hook with --accept-env-when-unprivileged";
    return d;
  }
  auto v = model::ParseVisibleDevices(c.visible, true);
  if (!v.ok()) return v.status();
  d.devices = *v;
  d.source = d.devices.kind == model::Visibility::kVoid ? DeviceSource::kNone : DeviceSource::kEnvironment;
  return d;
}

}  // namespace gs::container
