#!/usr/bin/env bash
# make demo: five tenants share a simulated 2 x H100-80GB node through gpuslice, with
# real processes, and a table at the end says whether each was held to its slice.
# Exits non-zero if any tenant was not.
set -uo pipefail
BUILD=${1:-build/release}
G="$PWD/$BUILD/bin/gpuslice"
SECONDS_RUN=${DEMO_SECONDS:-15}
ROOT=$(mktemp -d /tmp/gpuslice-demo-XXXXXX)
OUT="$ROOT/out"
mkdir -p "$OUT"
# The agent's per-container tmpfs mounts (as root) go first, deepest first.
unmount_all() { awk -v d="$ROOT" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null; }
cleanup() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; "$G" sim down --root "$ROOT/node" >/dev/null 2>&1; unmount_all; rm -rf "$ROOT"; }
trap cleanup EXIT

bold() { printf '\033[1m%s\033[0m\n' "$*"; }

bold "== gpuslice demo: a simulated node with 2 x NVIDIA H100 80GB =="
"$G" sim up --scenario deploy/scenarios/demo.yaml --root "$ROOT/node" >/dev/null || exit 1
eval "$("$G" sim env --root "$ROOT/node")"
"$G" smi | head -11
echo

# The node agent on the same node: its Prometheus endpoint serves the GPUs' metrics while
# the tenants run (no kubelet here, so it only waits to register; Kubernetes adds the
# per-pod series: docs/node-agent.md).
"$G" node --driver-root "$ROOT/node" --kubelet-dir "$ROOT/kubelet" --state-dir "$ROOT/agent" \
  --metrics-addr "${DEMO_METRICS_ADDR:-127.0.0.1:0}" --cdi-spec-dir "" >"$OUT/node-agent.out" 2>&1 &
scrape() {  # prints the node agent's /metrics (bash's /dev/tcp: no curl needed)
  local port
  port=$(cat "$ROOT/agent/metrics.port" 2>/dev/null) || return 1
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: demo\r\n\r\n' >&3
  sed '1,/^\r*$/d' <&3
  exec 3<&-
}

# name | device | memory limit | SM share | burn arguments | expectation
tenants=(
  "train-a|0|20g|30|--memory 16g --verify-bytes 256m --util 100|share"
  "serve-b|0|10g|50|--memory 8g --verify-bytes 256m --util 100|share"
  "batch-c|1|40g|20|--memory 30g --verify-bytes 256m --util 100|share"
  "greedy-d|1|8g|10|--memory 12g --util 100|oom"
  "vmem-e|1|100g|10|--memory 60g --verify-bytes 512m --util 100|spill"
)

tenant_pids=()
bold "== starting tenants =="
printf '%-9s %-4s %-11s %-6s %s\n' tenant gpu mem-limit share "program"
for t in "${tenants[@]}"; do
  IFS='|' read -r name dev mem share args expect <<<"$t"
  extra=""
  if [ "$expect" = spill ]; then
    extra="--oversubscribe"
    # The card must be full of the others' memory first, or nothing needs to spill.
    for _ in $(seq 50); do
      ready=1
      for p in "$OUT"/*.log; do
        grep -q -e 'burn: allocated' -e '"ok":false' "$p" || ready=0
      done
      [ $ready -eq 1 ] && break
      sleep 0.1
    done
  fi
  printf '%-9s %-4s %-11s %-6s gpuslice burn %s\n' "$name" "$dev" "$mem" "$share%" "$args"
  # shellcheck disable=SC2086
  "$G" run --device "$dev" --memory "$mem" --cores "$share" $extra --summary-json "$OUT/$name.slice.json" -- \
    "$G" burn $args --seconds "$SECONDS_RUN" --json >"$OUT/$name.log" 2>"$OUT/$name.err" &
  tenant_pids+=($!)
done
echo

for ((i = 0; i < SECONDS_RUN; i += 5)); do
  sleep 5
  bold "== live: gpuslice smi (t=$((i + 5))s) =="
  "$G" smi | sed -n '6,10p;14,40p' | grep -v '^$'
  echo
  if [ "$i" -eq 0 ]; then
    bold "== live: Prometheus metrics, http://127.0.0.1:$(cat "$ROOT/agent/metrics.port" 2>/dev/null)/metrics =="
    scrape | grep -E '^gpuslice_gpu_(memory_used_bytes|utilization_ratio)' | sed 's/,uuid="[^"]*"//'
    echo
  fi
done
metrics_series=$(scrape | grep -c '^gpuslice_')
wait "${tenant_pids[@]}"

bold "== what each tenant got =="
fail=0
printf '%-9s %-4s %-10s %-10s %-9s %-7s %-9s %-10s %s\n' tenant gpu mem-limit mem-peak spilled share achieved data verdict
for t in "${tenants[@]}"; do
  IFS='|' read -r name dev mem share args expect <<<"$t"
  log="$OUT/$name.log"
  slice="$OUT/$name.slice.json"
  json=$(grep '^{' "$log" | tail -1)
  peak=$(sed -n 's/.*"memory_peak":\([0-9]*\).*/\1/p' "$slice" 2>/dev/null)
  spilled=$(sed -n 's/.*"spilled_peak":\([0-9]*\).*/\1/p' "$slice" 2>/dev/null)
  limit=$(sed -n 's/.*"memory_limit":\([0-9]*\).*/\1/p' "$slice" 2>/dev/null)
  util=$(sed -n 's/.*"util":\([0-9.]*\).*/\1/p' <<<"$json")
  gib() { awk -v b="${1:-0}" 'BEGIN { printf "%.1fGiB", b / 1073741824 }'; }
  data="-"
  grep -q '"verified"' <<<"$json" && data="intact"
  verdict="OK"
  case "$expect" in
    share)
      awk -v u="${util:-0}" -v s="$share" 'BEGIN { exit !(u >= s - 5 && u <= s + 5) }' || verdict="FAIL: util ${util:-?}% vs $share%"
      [ -n "$peak" ] && [ "$peak" -le "$limit" ] || verdict="FAIL: memory over limit"
      ;;
    oom)
      grep -q CUDA_ERROR_OUT_OF_MEMORY "$OUT/$name.err" && util="" && data="-" || verdict="FAIL: was not refused"
      verdict=${verdict/OK/OK (refused: out of memory)}
      ;;
    spill)
      [ "${spilled:-0}" -gt 0 ] && [ "$data" = intact ] || verdict="FAIL: no spill or data lost"
      verdict=${verdict/OK/OK (spilled to host)}
      ;;
  esac
  [[ $verdict == OK* ]] || fail=1
  printf '%-9s %-4s %-10s %-10s %-9s %-7s %-9s %-10s %s\n' "$name" "$dev" "$(gib "$limit")" "$(gib "$peak")" \
    "$(gib "$spilled")" "$share%" "${util:--}${util:+%}" "$data" "$verdict"
done
echo
if [ $fail -ne 0 ]; then
  bold "Some tenant was NOT held to its slice. Logs: kept in $OUT"
  trap - EXIT
  kill $(jobs -p) 2>/dev/null
  "$G" sim down --root "$ROOT/node" >/dev/null 2>&1
  unmount_all
  exit 1
fi
echo "metrics endpoint: ${metrics_series:-0} gpuslice_* series served by the node agent at the end"
[ "${metrics_series:-0}" -gt 0 ] || { bold "The metrics endpoint did not answer."; exit 1; }
bold "Every tenant was held to its slice."
