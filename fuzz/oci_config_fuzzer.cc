// A bundle's config.json as the OCI hook reads it (src/container/oci_config.h): the image
// shapes process.env (NVIDIA_VISIBLE_DEVICES), the runtime the mounts and capabilities;
// then which devices the hook would give (src/container/device_request.h).
#include <algorithm>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/container/device_request.h"
#include "src/container/oci_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(gs::fuzz::AsText(data, size));
  auto c = gs::container::ParseContainerConfig(text, "/run/containerd/bundle");
  if (!c.ok()) return 0;
  GS_FUZZ_CHECK(!c->rootfs.empty() && c->rootfs[0] == '/');
  for (size_t i = 0; i < c->marker_devices.size(); ++i) {
    const std::string& m = c->marker_devices[i];
    GS_FUZZ_CHECK(!m.empty() && m.find('/') == std::string::npos && m != "." && m != "..");
    GS_FUZZ_CHECK(std::count(c->marker_devices.begin(), c->marker_devices.end(), m) == 1);
  }
  for (bool accept : {false, true}) {
    gs::container::DevicePolicy policy;
    policy.accept_env_when_unprivileged = accept;
    auto d = gs::container::DecideDevices(*c, policy);
    if (!d.ok()) continue;
    // The image's variable alone never gives GPUs to an unprivileged container.
    if (d->source == gs::container::DeviceSource::kEnvironment) GS_FUZZ_CHECK(c->privileged || accept);
    if (!c->marker_devices.empty()) GS_FUZZ_CHECK(d->source == gs::container::DeviceSource::kMarkers);
    (void)gs::container::Printable(d->ignored);
  }
  return 0;
}
