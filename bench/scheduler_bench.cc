// Scheduler extender figures (reported, never asserted):
//  1. 5000 nodes x 8 GPUs (24/48/80 GiB by node, NUMA 0/1, each node filled to 0-95 %),
//     under churn: per pod, Filter over all 5000 node names + Prioritize over the
//     feasible ones + Bind, each through the extender's JSON handlers (the HTTP hop is
//     not included); p50/p99 of wall time and of the thread's CPU time (the second is
//     what the handlers cost on a shared machine), and resident memory.
//  2. Stranded capacity: one pod stream placed online by the extender's way (filter,
//     best score, binpack) against best-fit-decreasing offline, on 500 nodes.
// Run: build/<dir>/bench/scheduler_bench [--nodes N] [--pods N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "src/scheduler/extender.h"
#include "src/scheduler/placement.h"

namespace {

using gs::Status;
using gs::StatusOr;
using namespace gs::scheduler;
using nlohmann::json;

class NullBinder : public KubeBinder {
 public:
  Status BindPod(const std::string&, const std::string&, const std::string&, const std::string&,
                 const hami::Annotations&) override {
    return Status::Ok();
  }
  StatusOr<std::string> GetPod(const std::string&, const std::string&) override { return gs::NotFound("none"); }
};

struct Shape {
  int gpus;
  int64_t mem_mib;
  int cores;
};
const Shape kShapes[] = {{1, 4096, 10}, {1, 10240, 25}, {1, 20480, 30}, {2, 16384, 50}, {1, 40960, 60}, {1, 2048, 0}};

NodeInventory MakeNode(int i) {
  static const int64_t kMem[] = {24576, 49152, 81920};
  NodeInventory n;
  n.name = "node-" + std::to_string(i);
  for (int g = 0; g < 8; ++g) {
    GpuDevice d;
    d.uuid = "GPU-" + std::to_string(i) + "-" + std::to_string(g);
    d.index = g;
    d.model = i % 3 == 2 ? "NVIDIA-H100-80GB-HBM3" : i % 3 == 1 ? "NVIDIA-L40S-48GB" : "NVIDIA-L4-24GB";
    d.memory_mib = kMem[i % 3];
    d.slots = 10;
    d.numa = g < 4 ? 0 : 1;
    n.gpus.push_back(d);
  }
  return n;
}

json PodJson(const std::string& uid, const Shape& s) {
  json limits = {{"nvidia.com/gpu", std::to_string(s.gpus)},
                 {"nvidia.com/gpumem", std::to_string(s.mem_mib)},
                 {"nvidia.com/gpucores", std::to_string(s.cores)}};
  return {{"metadata", {{"name", uid}, {"namespace", "bench"}, {"uid", uid}}},
          {"spec", {{"containers", json::array({{{"name", "c"}, {"resources", {{"limits", limits}}}}})}}}};
}

// The node agent's Allocate for a bound pod, as the watch reports it: the pod is no longer
// pending, so the next bind on its node need not wait (handoff_gate.h).
json Allocated(const std::string& uid) {
  return {{"metadata", {{"uid", uid}, {"annotations", {{hami::kBindPhase, "success"}}}}}};
}

std::string BindArgs(const std::string& uid, const std::string& node) {
  return json{{"PodName", uid}, {"PodNamespace", "bench"}, {"PodUID", uid}, {"Node", node}}.dump();
}

long RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

// This thread's CPU time: on a shared machine, what the handlers cost without the time
// they spent preempted.
double ThreadCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

void ExtenderAtScale(int nodes, int pods) {
  using Clock = std::chrono::steady_clock;
  std::mt19937 rng(15);
  NullBinder binder;
  Extender ext(ExtenderOptions{}, &binder);
  std::vector<std::string> names;
  long rss0 = RssKiB();
  for (int i = 0; i < nodes; ++i) {
    (void)ext.UpsertNode(MakeNode(i));
    names.push_back("node-" + std::to_string(i));
  }
  // Fill each node to a random 0-95 % of its memory, one single-node filter+bind at a time.
  std::vector<std::string> live;
  int64_t uid = 0;
  for (int i = 0; i < nodes; ++i) {
    double target = std::uniform_real_distribution<double>(0, 0.95)(rng);
    int64_t total = 8 * MakeNode(i).gpus[0].memory_mib, used = 0;
    for (int tries = 0; used < target * total && tries < 200; ++tries) {
      const Shape& s = kShapes[rng() % std::size(kShapes)];
      std::string id = "fill-" + std::to_string(uid++);
      json f = json::parse(ext.Filter(json{{"Pod", PodJson(id, s)}, {"NodeNames", {names[i]}}}.dump()));
      if (f["NodeNames"].empty()) continue;
      if (json::parse(ext.Bind(BindArgs(id, names[i])))["Error"] == "") {
        ext.ObservePod(Allocated(id));
        used += s.gpus * s.mem_mib;
        live.push_back(id);
      }
    }
  }
  long rss_filled = RssKiB();
  std::vector<double> total_us, filter_us, prio_us, bind_us;
  std::vector<double> total_cpu, filter_cpu, prio_cpu, bind_cpu;
  int unschedulable = 0;
  const json names_json = names;
  for (int p = 0; p < pods; ++p) {
    if (!live.empty() && rng() % 2) {  // churn: a pod leaves
      size_t k = rng() % live.size();
      ext.ReleasePod(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    const Shape& s = kShapes[rng() % std::size(kShapes)];
    std::string id = "pod-" + std::to_string(p);
    std::string args = json{{"Pod", PodJson(id, s)}, {"Nodes", nullptr}, {"NodeNames", names_json}}.dump();
    // Timed: the extender's handlers only; reading their replies is kube-scheduler's work.
    double c0 = ThreadCpuUs();
    auto t0 = Clock::now();
    std::string filter_reply = ext.Filter(args);
    auto t1 = Clock::now();
    double c1 = ThreadCpuUs();
    json f = json::parse(filter_reply);
    // kube-scheduler sends prioritize only the nodes that passed (its own filters and ours).
    std::string pargs = json{{"Pod", PodJson(id, s)}, {"Nodes", nullptr}, {"NodeNames", f["NodeNames"]}}.dump();
    double c2 = ThreadCpuUs();
    auto t2 = Clock::now();
    std::string prio_reply = ext.Prioritize(pargs);
    auto t3 = Clock::now();
    double c3 = ThreadCpuUs();
    json scores = json::parse(prio_reply);
    std::string best;
    int best_score = -1;
    for (const json& h : scores)
      if (h["Score"].get<int>() > best_score) {
        best_score = h["Score"];
        best = h["Host"];
      }
    bool bound = false;
    std::string bind_args = BindArgs(id, best);
    double c4a = ThreadCpuUs();
    auto t4a = Clock::now();
    std::string bind_reply = best.empty() ? "" : ext.Bind(bind_args);
    auto t4 = Clock::now();
    double c4 = ThreadCpuUs();
    if (!best.empty()) bound = json::parse(bind_reply)["Error"] == "";
    if (bound) ext.ObservePod(Allocated(id));
    auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    filter_us.push_back(us(t0, t1));
    prio_us.push_back(us(t2, t3));
    bind_us.push_back(us(t4a, t4));
    total_us.push_back(us(t0, t1) + us(t2, t3) + us(t4a, t4));
    filter_cpu.push_back(c1 - c0);
    prio_cpu.push_back(c3 - c2);
    bind_cpu.push_back(c4 - c4a);
    total_cpu.push_back(c1 - c0 + c3 - c2 + c4 - c4a);
    if (bound)
      live.push_back(id);
    else
      ++unschedulable;
  }
  Status c = ext.CheckConsistency();
  std::printf("\n== Extender at scale: %d nodes x 8 GPUs, %zu pods resident after fill, %d pods under churn ==\n",
              nodes, live.size(), pods);
  std::printf("%-34s %10s %10s %12s %12s\n", "per pod (JSON in and out)", "p50 us", "p99 us", "cpu p50 us",
              "cpu p99 us");
  auto row = [](const char* what, const std::vector<double>& wall, const std::vector<double>& cpu) {
    std::printf("%-34s %10.0f %10.0f %12.0f %12.0f\n", what, Percentile(wall, 0.5), Percentile(wall, 0.99),
                Percentile(cpu, 0.5), Percentile(cpu, 0.99));
  };
  row("filter (5000 node names)", filter_us, filter_cpu);
  row("prioritize (feasible nodes)", prio_us, prio_cpu);
  row("bind", bind_us, bind_cpu);
  row("filter + prioritize + bind", total_us, total_cpu);
  std::printf("unschedulable pods: %d of %d\n", unschedulable, pods);
  std::printf("resident memory: %ld MiB before nodes, %ld MiB after inventory and fill\n", rss0 / 1024,
              rss_filled / 1024);
  std::printf("ledger consistent (no card over memory, cores or slots): %s\n", c.ok() ? "yes" : c.message().c_str());
}

// Free memory a card cannot give to the smallest shape of the stream.
struct Strand {
  int64_t total = 0, used = 0, stranded = 0;
};
Strand Measure(const ClusterLedger& l) {
  Strand s;
  for (const auto& [name, node] : l.nodes())
    for (size_t i = 0; i < node.inventory.gpus.size(); ++i) {
      const GpuDevice& g = node.inventory.gpus[i];
      const CardUsage& u = node.used[i];
      s.total += g.memory_mib;
      s.used += u.memory_mib;
      int64_t free = g.memory_mib - u.memory_mib;
      if (CheckCard(g, u, 2048, 0) != CardVerdict::kFits) s.stranded += free;
    }
  return s;
}

void StrandedCapacity(int nodes) {
  std::mt19937 rng(1589);
  std::vector<PodRequest> stream;
  int64_t cluster_mem = 0;
  for (int i = 0; i < nodes; ++i) cluster_mem += 8 * MakeNode(i).gpus[0].memory_mib;
  int64_t asked = 0;
  while (asked < cluster_mem * 11 / 10) {
    const Shape& s = kShapes[rng() % std::size(kShapes)];
    PodRequest r;
    r.uid = "s-" + std::to_string(stream.size());
    r.containers = {ContainerRequest{s.gpus, s.mem_mib, 0, s.cores}};
    asked += s.gpus * s.mem_mib;
    stream.push_back(r);
  }
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("node-" + std::to_string(i));
  auto report = [&](const char* what, const ClusterLedger& l, int placed) {
    Strand s = Measure(l);
    std::printf("%-40s %7d %9.1f %%  %9.1f %%\n", what, placed, 100.0 * s.used / s.total, 100.0 * s.stranded / s.total);
  };
  std::printf("\n== Stranded capacity: %d nodes x 8 GPUs, %zu pods asking 110 %% of memory ==\n", nodes, stream.size());
  std::printf("%-40s %7s %11s  %11s\n", "placement", "placed", "mem used", "stranded");
  Policies binpack{Policy::kBinpack, Policy::kBinpack};
  for (Policies pol : {binpack, Policies{Policy::kSpread, Policy::kSpread}}) {
    ClusterLedger l;
    for (int i = 0; i < nodes; ++i) (void)l.UpsertNode(MakeNode(i));
    FitScratch sc;
    int placed = 0;
    for (const PodRequest& r : stream) {
      std::vector<int> scores = Prioritize(l, r, names, pol, &sc);
      FilterResult f = Filter(l, r, names, pol, &sc);
      int best = -1;
      for (int i : f.feasible)
        if (best < 0 || scores[i] > scores[best]) best = i;
      if (best < 0) continue;
      auto d = Decide(l, r, names[best], pol, &sc);
      if (d.ok() && l.Reserve(r.uid, *d).ok()) ++placed;
    }
    report(pol.node == Policy::kBinpack ? "online, extender binpack (arrival order)"
                                        : "online, extender spread (arrival order)",
           l, placed);
  }
  {
    ClusterLedger l;
    for (int i = 0; i < nodes; ++i) (void)l.UpsertNode(MakeNode(i));
    std::vector<PodRequest> sorted = stream;
    std::stable_sort(sorted.begin(), sorted.end(), [](const PodRequest& a, const PodRequest& b) {
      return a.containers[0].gpus * a.containers[0].memory_mib > b.containers[0].gpus * b.containers[0].memory_mib;
    });
    FitScratch sc;
    int placed = 0;
    for (const PodRequest& r : sorted) {
      int best = -1;
      int64_t best_left = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        const NodeState* n = l.FindNode(names[i]);
        if (!FitPod(*n, r, Policy::kBinpack, &sc)) continue;
        int64_t left = 0;  // memory left on the chosen cards: smaller is a tighter fit
        for (int k : sc.chosen) left += n->inventory.gpus[k].memory_mib - sc.cards[k].used.memory_mib;
        if (best < 0 || left < best_left) {
          best = static_cast<int>(i);
          best_left = left;
        }
      }
      if (best < 0) continue;
      auto d = Decide(l, r, names[best], binpack, &sc);
      if (d.ok() && l.Reserve(r.uid, *d).ok()) ++placed;
    }
    report("offline best-fit-decreasing", l, placed);
  }
  std::printf("(stranded = free memory on cards that cannot take even the smallest shape, 2 GiB with 0 cores)\n");
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 5000, pods = 2000, strand_nodes = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes")) nodes = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--pods")) pods = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--strand-nodes")) strand_nodes = std::atoi(argv[i + 1]);
  }
  ExtenderAtScale(nodes, pods);
  StrandedCapacity(strand_nodes);
  return 0;
}
