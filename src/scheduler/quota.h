// Namespace quotas on GPU memory and cores, counted the way HAMi's scheduler counts
// them: a ResourceQuota's spec.hard may set `limits.nvidia.com/gpumem` (MiB) and
// `limits.nvidia.com/gpucores` (percent of a card), and every pod the scheduler placed
// counts, in its namespace, the memory and cores actually given on each of its cards (a
// percentage or a whole card is the MiB of the card chosen; N cards count N times). A
// pod fits its namespace when, for every quota there that sets a key, used + requested
// stays within the hard value; several quotas setting one key all apply (Kubernetes'
// rule), so the smallest decides. A hard value of 0 admits nothing. Other keys
// (`requests.*`, `limits.nvidia.com/gpu`) are Kubernetes' own business and are ignored.
//
// QuotaBook holds the limits (by quota object) and the usage (by pod UID); its owner
// (the extender) keeps it in step with its ledger and serialises access. Pure: no I/O,
// no locking.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "src/common/status.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

// The spec.hard keys read: "limits." + the memory and cores resource names; the memory
// key counts in units of memory_factor MiB, as the pods' gpumem does (HAMi's memoryFactor).
struct QuotaKeys {
  std::string memory = "limits.nvidia.com/gpumem";
  std::string cores = "limits.nvidia.com/gpucores";
  int64_t memory_factor = 1;
};

// The keys for pods read with these options (their resource names and memory factor).
QuotaKeys QuotaKeysFor(const PodSpecOptions& options);

// What one ResourceQuota states about the keys; unset: it does not name the key.
struct QuotaLimits {
  std::optional<int64_t> memory_mib, cores;
  bool empty() const { return !memory_mib && !cores; }
  bool operator==(const QuotaLimits&) const = default;
};

// Reads spec.hard of a ResourceQuota object. A key whose value is not a whole
// non-negative number ("1.5", "-1", "x") is an error naming the quota, the key and the
// value; the keys it could read are still in `limits`.
Status QuotaLimitsFromJson(const nlohmann::json& quota, const QuotaKeys& keys, QuotaLimits* limits);

struct QuotaUsage {
  int64_t memory_mib = 0;
  int64_t cores = 0;
  bool operator==(const QuotaUsage&) const = default;
};

// The memory and cores of every share of a decision, summed.
QuotaUsage UsageOf(const PodDecision& decision);

class QuotaBook {
 public:
  explicit QuotaBook(QuotaKeys keys = {}) : keys_(std::move(keys)) {}
  const QuotaKeys& keys() const { return keys_; }

  // Replaces what the ResourceQuota `ns`/`name` states; empty limits forget it.
  void SetQuota(const std::string& ns, const std::string& name, const QuotaLimits& limits);
  void RemoveQuota(const std::string& ns, const std::string& name);
  // Whether any quota of `ns` sets a key (no quota: nothing to count against).
  bool Limited(const std::string& ns) const;

  // Counts a placed pod in `ns` (replacing what the UID counted before).
  void AddPod(const std::string& uid, const std::string& ns, const QuotaUsage& usage);
  // Returns false for a UID not counted.
  bool RemovePod(const std::string& uid);
  void ClearPods();
  QuotaUsage Used(const std::string& ns) const;

  // "" when `requested` fits every quota of `ns`; else why not, naming the quota, the
  // key, used, requested and hard, e.g. "ResourceQuota team-a/gpu:
  // limits.nvidia.com/gpumem used 6144 + requested 4096 > hard 8192".
  std::string Check(const std::string& ns, const QuotaUsage& requested) const;

 private:
  QuotaKeys keys_;
  std::map<std::string, std::map<std::string, QuotaLimits>> quotas_;  // ns -> quota name -> limits
  struct Counted {
    std::string ns;
    QuotaUsage usage;
  };
  std::unordered_map<std::string, Counted> pods_;     // by UID
  std::unordered_map<std::string, QuotaUsage> used_;  // by namespace
};

}  // namespace gs::scheduler
