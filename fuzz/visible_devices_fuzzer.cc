// NVIDIA_VISIBLE_DEVICES as an image or a user sets it (src/model/visible_devices.h), the
// GPUs it selects on a node, and slice ids (src/model/slices.h ParseSliceId).
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/container/device_request.h"
#include "src/model/slices.h"
#include "src/model/visible_devices.h"

namespace {

std::vector<gs::model::Gpu> NodeGpus() {
  std::vector<gs::model::Gpu> gpus;
  for (int i = 0; i < 4; ++i) {
    gs::model::Gpu g;
    g.uuid = "GPU-0000000" + std::to_string(i) + "-1111-2222-3333-444444444444";
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory = 80ull << 30;
    g.numa_node = i / 2;
    g.minor = static_cast<unsigned>(i);
    gpus.push_back(g);
  }
  return gpus;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<gs::model::Gpu> gpus = NodeGpus();
  std::string value(gs::fuzz::AsText(data, size));

  for (bool set : {true, false}) {
    auto v = gs::model::ParseVisibleDevices(value, set);
    if (!v.ok()) continue;
    if (v->kind != gs::model::Visibility::kList) GS_FUZZ_CHECK(v->items.empty());
    auto selected = gs::model::SelectGpus(*v, gpus);
    if (selected.ok()) {
      GS_FUZZ_CHECK(selected->size() <= gpus.size());
      for (size_t i = 0; i < selected->size(); ++i)
        for (size_t j = i + 1; j < selected->size(); ++j) GS_FUZZ_CHECK((*selected)[i].uuid != (*selected)[j].uuid);
    }
  }

  std::string uuid;
  int k = -1;
  if (gs::model::ParseSliceId(value, &uuid, &k)) {
    // "uuid::007" is read as slice 7 (kubelet only sends ids the plugin advertised); the
    // canonical id reads back to the same slice.
    GS_FUZZ_CHECK(k >= 0 && k <= 999 && !uuid.empty());
    std::string uuid2;
    int k2 = -1;
    GS_FUZZ_CHECK(gs::model::ParseSliceId(gs::model::SliceId(uuid, k), &uuid2, &k2) && uuid2 == uuid && k2 == k);
  }

  std::string printable = gs::container::Printable(value, 64);
  for (char c : printable) GS_FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  return 0;
}
