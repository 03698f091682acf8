#!/usr/bin/env bash
# Runs the fuzz targets built by the `fuzz` preset (docs/fuzzing.md): each replays its seed
# corpus and its regressions, then fuzzes for FUZZ_SECONDS; at most FUZZ_JOBS at a time.
# Prints one line per target and fails if any crashed (a sanitizer report, an uncaught
# exception, a broken invariant, a timeout or running out of memory).
#   fuzz/run.sh [build/fuzz] [target...]     FUZZ_SECONDS=20 FUZZ_JOBS=2
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/fuzz}
shift || true
seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-2}
bin=$build/fuzz
work=$build/fuzz-work  # corpus grown by this run, logs, crash artifacts

# The longest input worth trying for each target (what the parser sees in practice).
declare -A max_len=([quantity]=64 [visible_devices]=512 [oci_config]=8192 [oci_state]=8192 [extender_args]=8192
  [extender]=16384 [pod_spec]=8192 [hami_format]=4096 [handoff]=8192 [webhook]=16384 [kubeconfig]=8192
  [kube_api]=2048 [node_config]=4096 [enforcer_config]=4096 [region]=4096 [card]=2048 [journal]=8192
  [cdi_spec]=8192 [scenario]=4096 [http_request]=16384 [device_plugin_request]=4096 [mountinfo]=8192)
# Dictionaries (fuzz/dict/*.dict) per target.
declare -A dicts=([oci_config]=json [oci_state]=json [extender_args]=json [extender]=json [pod_spec]=json
  [hami_format]=hami [handoff]=json [webhook]=json [kube_api]=json [kubeconfig]=yaml [node_config]=yaml
  [enforcer_config]=enforcer [quantity]=quantity [visible_devices]=quantity [region]=region [card]=region
  [journal]=journal [cdi_spec]=cdi [scenario]=scenario [http_request]=http [device_plugin_request]=device_plugin)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$bin"/*_fuzzer; do targets+=("$(basename "$f" _fuzzer)"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "no fuzz targets in $bin: run cmake --preset fuzz && cmake --build --preset fuzz" >&2
  exit 1
fi

run_one() {
  local t=$1 exe=$bin/${1}_fuzzer out=$work/$1
  rm -rf "$out/artifacts" "$out"/*.log "$out"/*.summary
  mkdir -p "$out/corpus" "$out/artifacts"
  local seeds=$root/fuzz/corpus/$t regress=$root/fuzz/regressions/$t
  local inputs=("$seeds")
  [ -d "$regress" ] && inputs+=("$regress")
  local opts=(-timeout=5 -rss_limit_mb=2048 -max_len="${max_len[$t]:-4096}" -artifact_prefix="$out/artifacts/"
    -print_final_stats=1)
  [ -n "${dicts[$t]:-}" ] && opts+=(-dict="$root/fuzz/dict/${dicts[$t]}.dict")
  # 1. Every seed and every regression once.
  "$exe" "${opts[@]}" -runs=0 "${inputs[@]}" >"$out/replay.log" 2>&1
  local replay=$?
  # 2. Fuzzing, new inputs kept in $out/corpus (a later run starts from them). A
  # regression that still crashes is left out, so the fuzzing can look for other bugs.
  [ $replay -ne 0 ] && inputs=("$seeds")
  "$exe" "${opts[@]}" -max_total_time="$seconds" "$out/corpus" "${inputs[@]}" >"$out/fuzz.log" 2>&1
  local fuzz=$?
  echo "$replay $fuzz" >"$out/rc"
}

rm -rf "$work"/*/rc
start=$(date +%s)
for t in "${targets[@]}"; do
  [ -x "$bin/${t}_fuzzer" ] || { echo "no target $t" >&2; exit 1; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$t" &
done
wait

failed=0
printf '%-16s %10s %8s %6s %8s\n' target runs execs/s cov crashes
for t in "${targets[@]}"; do
  out=$work/$t
  log=$out/fuzz.log
  [ -f "$log" ] || log=$out/replay.log
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  crashes=$(find "$out/artifacts" -type f | wc -l)
  read -r replay fuzz <"$out/rc" 2>/dev/null || { replay=1 fuzz=1; }
  # Each crash leaves its input in artifacts/ (a timeout or an out-of-memory too).
  [ $((replay + fuzz)) -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1
  printf '%-16s %10s %8s %6s %8s\n' "$t" "${runs:--}" "${eps:--}" "${cov:--}" "$crashes"
  if [ "$crashes" -ne 0 ]; then
    failed=1
    for phase in replay fuzz; do
      [ "${!phase}" -eq 0 ] && continue
      {
        echo "--- $t: crash in the $phase (log: $out/$phase.log)"
        # The report's first lines and the stack frames in gpuslice's own code.
        grep -m3 -E 'what\(\)|fuzz invariant|ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error|SUMMARY' \
          "$out/$phase.log" || tail -20 "$out/$phase.log"
        grep -E '^ +#[0-9]+ .* in .* [^ ]*/(src|fuzz)/[^ ]*\.(cc|h):[0-9]+' "$out/$phase.log" | head -6
        grep -m1 'Test unit written to' "$out/$phase.log"
      } >"$out/$phase.summary"
    done
  fi
done
echo "fuzzed ${#targets[@]} targets, ${seconds}s each, $jobs at a time, in $(($(date +%s) - start))s"
for t in "${targets[@]}"; do
  cat "$work/$t"/*.summary >&2 2>/dev/null
  for a in "$work/$t"/artifacts/*; do [ -f "$a" ] && echo "reproducer: $a (new ones go to fuzz/regressions/$t/)" >&2; done
done
exit $failed
