// A card region (src/region/card.h) as the node agent reads it for metrics: the file is
// writable by every tenant of the card, so, as for container regions, it is read as a
// private copy (pread, never mapped), validated, and never locked.
//
// Thread-safe (no state). Cost: an open and a ~5 KiB pread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::host {

struct CardTenantUse {
  uint64_t id = 0;       // the container's tenant id (its region names it per device)
  uint64_t used_ns = 0;  // GPU time its turns took in all
};

// The tenants of the card region at path. NotFound when there is none; InvalidArgument
// naming the problem when it is not a card region this version reads (not initialised
// yet counts as no tenants).
StatusOr<std::vector<CardTenantUse>> ReadCardTenants(const std::string& path);

}  // namespace gs::host
