#!/usr/bin/env bash
# Scheduling throughput through the real kube-scheduler v1.20.2 with `gpuslice scheduler`
# as its extender, at cluster scale (5000 nodes, 1000 pods; the goal: >= 100 pods/s bound).
#
#   bench/cluster/throughput.sh [BUILD_DIR]          (default build/release; `make bench-cluster`)
#
# Brings up a control plane only (tests/e2e/cluster.sh up --control-plane: etcd, the API
# server, the default kube-scheduler and the GPU pods' kube-scheduler; no kubelet), creates
# $NODES Node objects carrying GPU inventories as the node agent publishes them
# (throughput.py nodes), starts `gpuslice scheduler` against the API server, then for each
# of $REPEAT rounds:
#   gpu       $PODS fractional pods (nvidia.com/gpu 1 + gpumem + gpucores, $SHAPES in turn)
#             to the GPU scheduler, which calls the extender (filter, prioritize, bind);
#             the node agents' claim is played by throughput.py (--claim, $CLAIM=1)
#   baseline  $PODS plain `nvidia.com/gpu: 1` pods to the default-scheduler, no extender
# and prints wall time from the first create to the last bind, pods/s, create->bound
# p50/p99 and kube-scheduler's own timings; afterwards checks no card is over its memory,
# cores or slots. Prints figures, asserts no timing. Takes the cluster down at the end
# (GPUSLICE_E2E_KEEP=1 leaves it up).
#
# Knobs: NODES (5000), PODS (1000), REPEAT (1), SHAPES ("2000:10,4000:20,8000:30,12000:50"),
# CLAIM (1), SCHED_QPS / SCHED_BURST (kube-scheduler's client, 1000 / 2000: the 1.20
# defaults 50/100 cap binds without an extender at 50 pods/s), SCHED_PERCENTAGE
# (percentageOfNodesToScore; unset: 1.20's adaptive default, 10 % of 5000), THREADS (16
# creating threads).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build/release}" && pwd)
cluster=$repo/tests/e2e/cluster.sh
export GPUSLICE_E2E_DIR=${GPUSLICE_E2E_DIR:-/tmp/gpuslice-e2e}
D=$GPUSLICE_E2E_DIR
NODES=${NODES:-5000} PODS=${PODS:-1000} REPEAT=${REPEAT:-1} CLAIM=${CLAIM:-1} THREADS=${THREADS:-16}
SHAPES=${SHAPES:-2000:10,4000:20,8000:30,12000:50}
EXTENDER_PORT=${GPUSLICE_E2E_EXTENDER_PORT:-29395}
export GPUSLICE_E2E_SCHED_QPS=${SCHED_QPS:-1000} GPUSLICE_E2E_SCHED_BURST=${SCHED_BURST:-2000}
[ -z "${SCHED_PERCENTAGE:-}" ] || export GPUSLICE_E2E_SCHED_PERCENTAGE=$SCHED_PERCENTAGE
py="python3 $here/throughput.py --dir $D"

[ -x "$build/bin/gpuslice" ] || {
  echo "bench-cluster: $build/bin/gpuslice not built" >&2
  exit 1
}

finish() {
  local rc=$?
  if [ -z "${GPUSLICE_E2E_KEEP:-}" ]; then
    "$cluster" down || rc=1
  else
    echo "bench-cluster: cluster left up: eval \"\$($cluster env)\"; $cluster down"
  fi
  exit "$rc"
}

echo "bench-cluster: $(uptime)"
kbin=$("$repo/scripts/kubernetes-build.sh")
export GPUSLICE_KUBE_BIN=$kbin
trap finish EXIT
"$cluster" up --control-plane --build "$build"
eval "$("$cluster" env)"

$py nodes --count "$NODES" --threads "$THREADS"

# The extender, recorded with the cluster's processes so `cluster.sh down` stops it.
log=$D/logs/gpuslice-scheduler.log
setsid "$build/bin/gpuslice" scheduler --kubeconfig "$D/kubeconfig/gpuslice-scheduler.kubeconfig" \
  --address 127.0.0.1 --port "$EXTENDER_PORT" >"$log" 2>&1 </dev/null &
echo $! >"$D/pids/gpuslice-scheduler.pid"
echo "$build/bin/gpuslice" >"$D/pids/gpuslice-scheduler.pid.cmd"
t=$SECONDS
until grep -q 'synced:' "$log"; do
  kill -0 "$(cat "$D/pids/gpuslice-scheduler.pid")" 2>/dev/null || {
    tail -20 "$log"
    exit 1
  }
  ((SECONDS - t < 300)) || {
    echo "bench-cluster: gpuslice scheduler not synced after 300 s" >&2
    exit 1
  }
  sleep 0.5
done
echo "bench-cluster: gpuslice scheduler synced $(grep -c ': 8 GPU(s)' "$log") nodes in $((SECONDS - t)) s"
"$cluster" gpu-scheduler "http://127.0.0.1:$EXTENDER_PORT"

gpu_metrics=http://127.0.0.1:20253/metrics base_metrics=http://127.0.0.1:20251/metrics
ext_metrics=http://127.0.0.1:$EXTENDER_PORT/metrics
results=$D/results.jsonl
: >"$results"
# A few pods first, unmeasured: both schedulers have their informers synced and their
# connections open before the clock starts.
$py run --run warm-gpu --pods 5 --scheduler "$GPUSLICE_E2E_SCHEDULER_NAME" --shapes "$SHAPES" --claim --timeout 120 >/dev/null
$py run --run warm-base --pods 5 --scheduler default-scheduler --timeout 120 >/dev/null

rc=0
claim=()
[ "$CLAIM" -eq 0 ] || claim=(--claim)
for ((r = 1; r <= REPEAT; r++)); do
  echo "bench-cluster: round $r: $(uptime)"
  $py run --run "gpu-$r" --label "extender, round $r" --pods "$PODS" --threads "$THREADS" \
    --scheduler "$GPUSLICE_E2E_SCHEDULER_NAME" --shapes "$SHAPES" "${claim[@]}" \
    --scheduler-metrics "$gpu_metrics" --extender-metrics "$ext_metrics" --result "$results" || rc=1
  $py run --run "base-$r" --label "no extender, round $r" --pods "$PODS" --threads "$THREADS" \
    --scheduler default-scheduler --scheduler-metrics "$base_metrics" --result "$results" || rc=1
  $py check --run "gpu-$r" --nodes "$NODES" || rc=1
done
echo "bench-cluster: $(uptime)"

python3 - "$results" <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print("| run | pods bound | create all (s) | first create -> last bound (s) | pods/s | create->bound p50 / p99 (ms) "
      "| kube-scheduler per pod: algorithm / binding / e2e (ms) | attempts (scheduled / unschedulable / error) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    a = r["attempts"]
    print(f"| {r['label']} | {r['bound']}/{r['pods']} | {r['create_s']:.1f} | {r['wall_s']:.1f} | {r['rate']:.0f} "
          f"| {r['p50_ms']:.0f} / {r['p99_ms']:.0f} | {r['algo_ms']:.1f} / {r['binding_ms']:.1f} / {r['e2e_ms']:.1f} "
          f"| {a['scheduled']} / {a['unschedulable']} / {a['error']} |")
ext = [r for r in rows if "extender" in r]
base = [r for r in rows if "extender" not in r]
for r in ext:
    e = r["extender"]
    print(f"{r['label']}: extender binds {e['binds_total']:.0f}, bind failures {e['bind_failures_total']:.0f}, "
          f"hand-off waits {e['handoff_waits_total']:.0f} ({e['handoff_wait_seconds_total']:.1f} s), "
          f"refusals {e['handoff_refusals_total']:.0f}; nodes used {r['nodes_used']}; "
          f"bound -> claimed (bind-phase success) p50 / p99 {r['claim_p50_ms']:.0f} / {r['claim_p99_ms']:.0f} ms")
for r in rows:
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu_s"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
    print(f"{r['label']}: CPU seconds over the {r['cpu_window_s']:.1f} s run ({os.cpu_count()} cores = {os.cpu_count() * r['cpu_window_s']:.0f} CPU s): {cpu}; "
          f"kube-scheduler Filter / Score plugins {r['fw_filter_ms']:.1f} / {r['fw_score_ms']:.1f} ms per pod")
if ext and base:
    re_ = sum(r["rate"] for r in ext) / len(ext)
    rb = sum(r["rate"] for r in base) / len(base)
    print(f"with the extender / without: {re_:.0f} / {rb:.0f} pods/s = {re_ / rb:.2f}")
EOF
exit "$rc"
