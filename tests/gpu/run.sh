#!/usr/bin/env bash
# The enforcer on a real NVIDIA GPU: the checks tests/enforcer_test.cc makes on the
# simulator, against the real driver, plus PyTorch. For GPU machines that have only a
# compiler, CMake, the CUDA toolkit and PyTorch: builds the minimal preset itself.
#   tests/gpu/run.sh [BUILD_DIR]
#   GS_GPU_SECTIONS="2b 6 6d" tests/gpu/run.sh   (only those sections, for short device time;
#   sections: 1 2 2b 3 4 5 6 6b 6c 6d 6e 7, where 6d includes 6d')
# Prints PASS/FAIL/SKIP lines, a markdown table of the compute shares achieved, and
# "N passed, N failed"; skips loudly without a GPU.
# Runtime on an H200 (2026-11-26): 400 s with the build and the bench; on an H100
# (2026-11-27): 440 s, (2026-11-28) 472 s; on an H200 (2026-11-28) 529 s. Section 1 ~1 min of short probe runs, 2b ~35 s,
# 3 ~1.7 min (host-bound rows and 2b's utilisation period, 3 s, added since the last card run), 4 ~15 s, 5 ~4 min (12 workload runs and 2 competing rounds of ~8 s timed + ~1 s warm-up + torch
# start-up each), 6 ~80 s (eight watched 2 GiB slices; four of them added after the
# H100's run).
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build/gpu}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac  # absolute: the enforcer's path goes into LD_PRELOAD
pass=0 fail=0
ok() { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU on this machine: the real-GPU checks did NOT run"
  echo "0 passed, 0 failed"
  exit 0
fi
nvidia-smi -L
# Warnings are not errors here (GS_WERROR is for the developer and CI presets): a newer
# compiler on the GPU machine must not stop the checks.
cmake -S . -B "$BUILD" -DGS_MINIMAL=ON -DGS_BUILD_TESTS=OFF -DGS_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$BUILD" -j "$(nproc)" >/dev/null || { echo "FAIL: build"; echo "0 passed, 1 failed"; exit 1; }
G=$BUILD/bin/gpuslice P=$BUILD/tests/cuda_probe E=$BUILD/enforcer/libgpuslice.so
export GPUSLICE_ENFORCER=$E
region=$(mktemp -d)

# NVML's figure for this process at each "nvml" line, in MiB above the first.
mib_steps() { awk '/^nvml/ { v = int($NF / 1048576); if (base == "") base = v; printf "%s%d", sep, v - base; sep = " " }'; }
limited() { env LD_PRELOAD="$E" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region/$1" GPUSLICE_CONTEXT_OVERHEAD=0 "${@:2}"; }

# Whether section $1 runs (all of them unless GS_GPU_SECTIONS names some).
want() { [ -z "${GS_GPU_SECTIONS:-}" ] || [[ " $GS_GPU_SECTIONS " == *" $1 "* ]]; }
only=${GS_GPU_SECTIONS:+"NOTE: GS_GPU_SECTIONS='$GS_GPU_SECTIONS': only these sections ran; the others did NOT"}
[ -n "$only" ] && echo "$only"
H=$BUILD/tests/hostile_program
have_torch=0
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && have_torch=1
# The slice also pays for the process's context, charged what NVML says the context added
# to the process (docs/enforcer.md): section 1's limits are that charge, read back through
# cuMemGetInfo under a large slice, plus the sizes allocated.
ctx_mib=$(limited ctx CUDA_DEVICE_MEMORY_LIMIT=64g "$P" init meminfo |
  awk '/^meminfo/ { printf "%d", ($3 - $2 + 1048575) / 1048576 }')
echo "a context of cuda_probe is charged ${ctx_mib:-?} MiB"
case $ctx_mib in '' | *[!0-9]*) bad "context charge: none read back"; ctx_mib=0 ;; esac
# Rows of the compute-share table printed at the end: workload | asked | achieved | alone rate.
rows=""
row() { rows+="| $1 | $2 | $3 | $4 |"$'\n'; }
# Prints the probe's sharemodel lines with the figures in MiB; share_fig STAGE WHO reads one.
share_mib() { awk '/^sharemodel/ { for (k = 3; k <= NF; k++) { split($k, kv, "="); $k = kv[1] "=" int(kv[2] / 1048576) } print }'; }
share_fig() { echo "$share" | awk -v s="$1" -v f="$2" '$2 == s { for (k = 3; k <= NF; k++) { split($k, kv, "="); if (kv[1] == f) print kv[2] } }'; }

# 1. The limit on every allocation API, through every path to the driver.
# 1a. Large pieces on the linear-memory paths: 768m, 512m (refused: over 1g), 256m, 2m
#     (refused: the slice is full to the byte), two frees, then 1g fits again.
if want 1; then
for via in linked dlsym getproc; do
  for kind in mem pitch managed async pool vmm graph; do
    out=$(limited "r-$via-$kind" CUDA_DEVICE_MEMORY_LIMIT=$((ctx_mib + 1024))m "$P" --via "$via" init alloc "$kind" 768m alloc "$kind" 512m \
      alloc "$kind" 256m alloc "$kind" 2m free free alloc "$kind" 1g 2>&1)
    got=$(grep '^alloc' <<<"$out" | awk '{print $2}' | tr '\n' ' ')
    [ "$got" = "ok err ok err ok " ] && ok "limit $kind via $via" || bad "limit $kind via $via: $got"
  done
done
# 1b. Every path, arrays included, filled in 64 MiB pieces under a 512 MiB limit (plus
#     the context). Arrays
#     must stay within the card's texture limits or the driver refuses them for that
#     reason (on an H100 a 768m 2D array 196608 wide did: the 2D limit is 131072, which
#     the simulator enforces too); cuda_probe's shapes are 4096 high (2D and mipmap
#     float, one level: a 768m array is 49152x4096) and 3D 256x256 deep RGBA8, all inside
#     the limits. Expected: exactly 8 pieces, the 9th refused with
#     CUDA_ERROR_OUT_OF_MEMORY and 2m too (full to the byte); after one free, one 64m piece
#     fits again and 2m is refused again.
piece_limit_mb=512 piece_mb=64
pieces=$((piece_limit_mb / piece_mb))
want=""
for ((k = 0; k < pieces; k++)); do want+="ok "; done
want+="OOM OOM ok OOM "
for via in linked dlsym getproc; do
  for kind in mem pitch managed async pool vmm array array3d mipmap graph; do
    args=(init)
    for ((k = 0; k <= pieces; k++)); do args+=(alloc "$kind" "${piece_mb}m"); done
    args+=(alloc "$kind" 2m free alloc "$kind" "${piece_mb}m" alloc "$kind" 2m)
    out=$(limited "p-$via-$kind" CUDA_DEVICE_MEMORY_LIMIT=$((ctx_mib + piece_limit_mb))m "$P" --via "$via" "${args[@]}" 2>&1)
    got=$(grep '^alloc' <<<"$out" | awk '{ if ($2 == "ok") print "ok"; else if ($3 == "CUDA_ERROR_OUT_OF_MEMORY") print "OOM"; else print $3 }' | tr '\n' ' ')
    granted=$(grep '^alloc' <<<"$out" | awk '$2 != "ok" { exit } { n++ } END { print n + 0 }')
    [ "$got" = "$want" ] && ok "limit $kind via $via in ${piece_mb} MiB pieces: $granted granted under ${piece_limit_mb} MiB, then out of memory" ||
      bad "limit $kind via $via in ${piece_mb} MiB pieces under ${piece_limit_mb} MiB: got '$got', want '$want'"
  done
done
fi  # 1

# 2. CUDA and NVML views agree.
if want 2; then
out=$(limited views CUDA_DEVICE_MEMORY_LIMIT=4g "$P" init alloc mem 1g meminfo nvml)
read -r _ free total devtotal <<<"$(grep ^meminfo <<<"$out")"
read -r _ ntotal nused nfree _ <<<"$(grep ^nvml <<<"$out")"
[ "$total" = 4294967296 ] && [ "$devtotal" = 4294967296 ] && [ "$ntotal" = 4294967296 ] &&
  [ $((ntotal - nused)) = "$nfree" ] && ok "views agree ($out)" || bad "views: $out"
fi  # 2

# 2b. Driver facts the enforcer and the simulator stand on (docs/measurements/h100-driver.md),
#     without the enforcer unless named.
# A VMM handle released while it stays mapped: the mapping keeps the memory on the card
# until it is unmapped (what the enforcer must keep charged).
if want 2b; then
vmm=$("$P" init nvml alloc vmm 256m release nvml free nvml | mib_steps)
echo "vmm (after init; 256m created and mapped, handle released; unmapped): $vmm MiB"
if [ "$vmm" = "0 256 0" ]; then ok "a released VMM handle's memory stays until unmapped, as the simulator models it"; else
  bad "a released VMM handle's memory: '$vmm' MiB, the simulator models '0 256 0'"; fi
# A green context: what it adds to the process beside the primary context, and whether
# cuCtxFromGreenCtx names a context of its own (docs/measurements/README.md, "Green
# contexts"; the simulator models the least convenient case: a context's cost, distinct).
green=$("$P" init nvml greenctx greendestroy 2>&1)
echo "$green" | awk '/^greenctx|^greendestroy/ { print "green context: " $0 }'
gmib=$(echo "$green" | awk '$1 == "greenctx" && $2 == "ok" { print $3 }')
if [ -z "$gmib" ]; then bad "green context not made on this card: $(echo "$green" | grep greenctx)"
elif [ "$gmib" -le 518 ]; then ok "a green context costs $gmib MiB, within the context charge the simulator models (518)"
else bad "a green context costs $gmib MiB, more than the 518 the simulator and the enforcer's estimate assume"; fi
# A multicast binding: does it keep a released handle's memory on the card until unbound?
mc=$("$P" init mckeeps 2>&1 | awk '$1 == "mckeeps"')
echo "multicast (MiB after bind, release, unbind, object released): ${mc#mckeeps }"
case "$mc" in
  "mckeeps unsupported") echo "SKIP: this card has no multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED 0): whether a multicast binding keeps a released handle was NOT measured" ;;
  "mckeeps "*" "*" "*" "*)
    set -- ${mc#mckeeps }
    if [ "$1" = "$2" ] && [ "$3" -lt "$2" ]; then ok "a multicast binding keeps a released handle until unbound, as the simulator models it"
    else bad "multicast binding of a released handle: '$*' MiB, the simulator models bound = released > unbound"; fi ;;
  *) bad "multicast probe: '${mc:-no answer}'" ;;
esac
# The deprecated launch entry points the enforcer gates: does this driver still run them?
for how in culaunch grid gridasync multidev; do
  got=$("$P" init "$how" 3 1000 sync 2>&1 | awk -v h="$how" '$1 == h { print $2 }')
  echo "launch path $how on this driver: ${got:-no answer (crashed?)}"
  [ "$got" = ok ] && ok "$how runs on this driver, as the simulator models it" || bad "$how on this driver: '${got:-?}', the simulator models ok"
done
# A process's exit: its memory has left the card by the time its parent sees the exit, as
# the simulator models it (docs/simulator.md); and what a call made at the exit, after the
# driver's own exit work, gets (the simulator, as an H100 showed it: CUDA_ERROR_DEINITIALIZED,
# the process's memory still listed).
se=$("$P" spawnexit 1g spawnexit 1g spawnexit 1g 2>&1 | awk '$1 == "spawnexit" { printf "%s%s", sep, $2 "/" $3; sep = " " }')
echo "spawnexit (MiB on the device while a child holds 1g / at once after waitpid): ${se:-no answer}"
if [ "$(echo "$se" | tr ' ' '\n' | grep -c '/0$')" = 3 ]; then
  ok "a process's memory has left the card when its parent sees it exit, as the simulator models it"
else bad "memory of an exited process at its parent's waitpid: '$se' MiB, the simulator models 0 each time"; fi
# A child forked after its parent's cuInit: NVIDIA documents that it cannot use CUDA but no
# code was recorded; the simulator answers CUDA_ERROR_NOT_INITIALIZED to both calls.
fa=$("$P" init forkafter 2>&1 | awk '$1 == "forkafter"')
echo "a child forked after its parent's cuInit: ${fa:-no answer}"
if [ "$fa" = "forkafter init=CUDA_ERROR_NOT_INITIALIZED retain=CUDA_ERROR_NOT_INITIALIZED" ]; then
  ok "a child forked after cuInit gets CUDA_ERROR_NOT_INITIALIZED, as the simulator models it"
else bad "a child forked after cuInit: '${fa:-?}', the simulator models init=CUDA_ERROR_NOT_INITIALIZED retain=CUDA_ERROR_NOT_INITIALIZED"; fi
ax=$("$P" atexit init alloc mem 256m 2>&1 | awk '$1 == "atexit" && $2 != "armed"' | sed 's/CUresult_4/CUDA_ERROR_DEINITIALIZED/g')
echo "a call at exit after the driver's exit work: ${ax:-no answer}"
ax_own=$(echo "$ax" | sed -n 's/.*own=\([0-9]*\).*/\1/p')
if [ -n "$ax_own" ] && [ "$ax_own" -ge 256 ] && [ "${ax#* free=}" = "CUDA_ERROR_DEINITIALIZED alloc=CUDA_ERROR_DEINITIALIZED" ]; then
  ok "a call at exit after the driver's exit work is refused while the memory is still listed, as the simulator models it"
else bad "a call at exit after the driver's exit work: '${ax:-?}', the simulator models own=its memory free=CUDA_ERROR_DEINITIALIZED alloc=CUDA_ERROR_DEINITIALIZED"; fi
# What the first NVML use costs a process (the enforcer's context charge makes it).
for k in 1 2 3 4 5; do "$P" init nvmlcost | awk '/^nvmlcost/ { print "nvml first use (us): init " $2 ", handle " $3 ", process list " $4 }'; done
# A process's start-up to its first context: plain, under the enforcer with a slice, and
# under gpuslice run with a memory limit and a compute share; mean wall ms of 10 each.
startup_ms() {
  local k t0 t1 sum=0
  for k in 1 2 3 4 5 6 7 8 9 10; do
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    sum=$((sum + t1 - t0))
  done
  awk -v s="$sum" 'BEGIN { printf "%.1f", s / 10 / 1e6 }'
}
plain=$(startup_ms "$P" init)
preloaded=$(startup_ms limited startup CUDA_DEVICE_MEMORY_LIMIT=4g "$P" init)
run=$(startup_ms "$G" run --memory 4g --cores 30 -- "$P" init)
echo "start-up to a context (mean of 10, ms): plain $plain, enforcer with a 4 GiB slice $preloaded, gpuslice run --memory 4g --cores 30 $run"
# Where the enforcer's share of it goes: cuInit and the first context, timed inside the
# process (median of 10, ms).
phases() {
  local k got
  got=$(for k in 1 2 3 4 5 6 7 8 9 10; do "$@" inittimed 2>/dev/null | awk '$1 == "inittimed" { print $3, $4 }'; done)
  median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f", NR ? v[int((NR + 1) / 2)] / 1000 : -1 }'; }
  echo "cuInit $(awk '{ print $1 }' <<<"$got" | median), first context $(awk '{ print $2 }' <<<"$got" | median)"
}
echo "start-up phases (median of 10, ms): plain: $(phases "$P"); enforcer with a 4 GiB slice: $(phases limited startup CUDA_DEVICE_MEMORY_LIMIT=4g "$P")"
# Memory the driver lists under no process beside K idle contexts (and the probe's own,
# which reads the figures on its CUDA device 0): the node agent reports NVML version 2's used
# memory less what it lists under processes, and warns above 64 MiB + 16 MiB a listed
# process (src/node/unlisted_memory.h); what the driver keeps unlisted itself must stay
# under that.
for k in 1 2 4; do
  holders=()
  for j in $(seq "$k"); do
    "$P" init sleep 5000 >/dev/null 2>&1 &
    holders+=($!)
  done
  sleep 3
  fig=$("$P" init unlisted 2>/dev/null | awk '$1 == "unlisted" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ { print $2, $3, $4 }')
  wait "${holders[@]}" || true
  if [ -z "$fig" ]; then
    bad "memory under no process beside $k contexts: the probe's unlisted step did not answer"
    continue
  fi
  read -r v2 listed procs <<<"$fig"
  mib=$(((v2 - listed) / 1048576))
  echo "RECORD in docs/measurements/ (this card's driver page): memory under no process beside $procs contexts: $mib MiB (version 2 used $((v2 / 1048576)), listed $((listed / 1048576)))"
  if [ "$mib" -le $((64 + 16 * procs)) ]; then
    ok "memory under no process beside $procs contexts ($mib MiB) is within the node agent's slack"
  else
    bad "memory under no process beside $procs contexts ($mib MiB) is above the node agent's slack: raise UnlistedMemoryWatch's"
  fi
done
# How often the card's utilisation (nvmlDeviceGetUtilizationRates) changes: a lone tenant
# under force is charged the card's busy time in its turns from it (src/enforcer/card_busy.h),
# matched against its held time up to 300 ms earlier, which holds for a period up to ~250 ms.
period=$("$P" init utilperiod 3000 2>/dev/null | sed -n 's/^utilperiod changes=\([0-9]*\) median_ms=\([0-9.]*\)$/\2 (\1 changes)/p')
echo "RECORD in docs/measurements/ (this card's driver page): the device utilisation changes every ${period:-?} ms"
awk -v p="${period%% *}" 'BEGIN { exit !(p != "" && p > 0 && p <= 250) }' &&
  ok "device utilisation period ${period:-?} ms: within what the charge of a lone tenant assumes" ||
  bad "device utilisation period ${period:-?} ms: longer than CardBusy::kMostLag covers"
fi  # 2b

# 3. Compute shares (policy force), achieved utilisation from burn's own measurement.
if want 3; then
for share in 30 60; do
  u=$("$G" run --cores $share -- "$G" burn --memory 64m --util 100 --seconds 10 | sed -n 's/.*average util \([0-9.]*\)%.*/\1/p')
  awk -v u="$u" -v s=$share 'BEGIN { exit !(u >= s - 5 && u <= s + 5) }' && ok "compute share $share%: achieved $u%" ||
    bad "compute share $share%: achieved $u%"
  row "burn (util)" "$share" "${u:-?}" "-"
done
"$G" run --cores 20 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/a" &
"$G" run --cores 50 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/b"
wait
ua=$(sed -n 's/.*average util \([0-9.]*\)%.*/\1/p' "$region/a") ub=$(sed -n 's/.*average util \([0-9.]*\)%.*/\1/p' "$region/b")
awk -v a="$ua" -v b="$ub" 'BEGIN { exit !(a >= 15 && a <= 25 && b >= 45 && b <= 55) }' &&
  ok "competing shares 20/50: achieved $ua/$ub" || bad "competing shares 20/50: achieved $ua/$ub"
row "burn (util), competing 20/50" "20" "${ua:-?}" "-"
row "burn (util), competing 20/50" "50" "${ub:-?}" "-"
# Kernel lengths from 5 us to 2 ms at 30 % (force), as a share of the same burn alone.
burn_util() { sed -n 's/.*average util \([0-9.]*\)%.*/\1/p'; }
for us in 5 100 2000; do
  alone=$("$G" burn --memory 64m --util 100 --seconds 5 --kernel-us $us | burn_util)
  held=$("$G" run --cores 30 -- "$G" burn --memory 64m --util 100 --seconds 10 --kernel-us $us | burn_util)
  rel=$(awk -v h="$held" -v a="$alone" 'BEGIN { if (a > 0) printf "%.1f", 100 * h / a; else print "?" }')
  awk -v r="$rel" 'BEGIN { exit !(r >= 25 && r <= 35) }' && ok "compute share 30% with ${us} us kernels: $rel% of alone" ||
    bad "compute share 30% with ${us} us kernels: $held% vs $alone% alone = $rel%"
  row "burn ${us} us kernels (% of alone)" 30 "$rel" "$alone% util"
done
# A host-bound program (20 us of CPU work before each 5 us kernel) keeps the card only
# partly busy alone; a share is a cap on its use of the card, so it should get
# min(share, its use alone): a lone tenant under force is charged the card's busy time in its
# turns, read from NVML (docs/enforcer.md, "A share is a cap"; whole turns for the first
# 1.3 s of a run).
hb="--memory 64m --host-us 20 --kernel-us 5"
alone=$("$G" burn $hb --seconds 4 | burn_util)
for share in 30 60; do
  held=$("$G" run --cores $share -- "$G" burn $hb --seconds 6 | burn_util)
  want_u=$(awk -v a="$alone" -v s=$share 'BEGIN { print (a < s ? a : s) }')
  awk -v h="$held" -v w="$want_u" 'BEGIN { exit !(h != "" && h >= w - 5 && h <= w + 5) }' &&
    ok "host-bound burn at $share%: $held% util, alone $alone%" ||
    bad "host-bound burn at $share%: $held% util, alone $alone% (wanted $want_u)"
  row "burn, host-bound (20 us CPU + 5 us kernel), util" "$share" "${held:-?}" "$alone% util"
done
# Kernels longer than a turn, competing 30/70 (policy default): 300 ms kernels cannot be
# preempted by a turn; each tenant's share is its utilisation as burn measures it.
"$G" run --cores 30 -- "$G" burn --memory 64m --util 100 --seconds 10 --kernel-us 300000 >"$region/long30" &
"$G" run --cores 70 -- "$G" burn --memory 64m --util 100 --seconds 10 --kernel-us 300000 >"$region/long70"
wait
u30=$(burn_util <"$region/long30") u70=$(burn_util <"$region/long70")
awk -v a="$u30" -v b="$u70" 'BEGIN { exit !(a >= 25 && a <= 35 && b >= 65 && b <= 75) }' &&
  ok "300 ms kernels competing 30/70: achieved $u30/$u70" || bad "300 ms kernels competing 30/70: achieved $u30/$u70"
row "burn 300 ms kernels, competing 30/70" "30 / 70" "${u30:-?} / ${u70:-?}" "-"
# A tenant that teaches the limiter a low launch cost (64 kernels of 5 us), then queues eight
# of 50 ms each round, at 30 % beside a 70 % burn (policy default; docs/enforcer.md, the
# hostile tenant's mixed kernels): the short ones must not buy the long ones time. Its share
# is what its kernels asked for over the time it ran (cuda_probe mixburn's own figure).
"$G" run --cores 70 --policy default -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/mix70" &
"$G" run --cores 30 --policy default -- "$P" init mixburn 8000 64 5000 8 50000000 >"$region/mix30" 2>&1
wait
um=$(awk '$1 == "mixburn" { print $2 }' "$region/mix30") uh70=$(burn_util <"$region/mix70")
awk -v a="$um" -v b="$uh70" 'BEGIN { exit !(a != "" && a <= 35 && b >= 65) }' &&
  ok "mixed 5 us and 50 ms kernels at 30 % beside 70 %: $um/$uh70" ||
  bad "mixed 5 us and 50 ms kernels at 30 % beside 70 %: '$um'/'$uh70' (want <= 35 / >= 65; $(tail -n 1 "$region/mix30"))"
row "5 us and 50 ms kernels mixed (30 %), beside burn (70 %)" "30 / 70" "${um:-?} / ${uh70:-?}" "-"
# A card file filled before any run by another program of this user (64 made-up tenants that
# look alive and never compute: hostile_program card ... fill): two runs at 30 % and 70 %
# (policy default) still compute in the entries `gpuslice run` hands them
# (tests/hostile_program_test.cc, HostileCard.AFilledCardFileLeavesTwoRunsTheirShares).
uuid=$("$G" smi 2>/dev/null | grep -o 'GPU-[0-9a-fA-F-]*' | head -n 1)
mkdir -p "$region/runs/cards"
"$H" card "$region/runs/cards/$uuid" 20000 fill >"$region/filler" 2>&1 &
filler=$!
sleep 1
GPUSLICE_RUN_DIR=$region/runs "$G" run --cores 70 --policy default -- "$G" burn --memory 64m --util 100 --seconds 8 >"$region/fill70" 2>&1 &
fill70=$!
GPUSLICE_RUN_DIR=$region/runs "$G" run --cores 30 --policy default -- "$G" burn --memory 64m --util 100 --seconds 8 >"$region/fill30" 2>&1
wait "$fill70"
kill -9 "$filler" 2>/dev/null
wait "$filler" 2>/dev/null
uf30=$(burn_util <"$region/fill30") uf70=$(burn_util <"$region/fill70")
if grep -q 'NOT enforced' "$region/fill30" "$region/fill70"; then
  bad "a filled card file: a run's share was not enforced ($(grep -h 'NOT enforced' "$region/fill30" "$region/fill70" | head -n 1))"
elif awk -v a="$uf30" -v b="$uf70" 'BEGIN { exit !(a >= 25 && a <= 35 && b >= 65 && b <= 75) }'; then
  ok "a filled card file leaves two runs their shares: $uf30/$uf70"
else
  bad "a filled card file: two runs at 30/70 achieved '$uf30'/'$uf70' (card $uuid)"
fi
row "burn, competing 30/70 on a card file filled by another program" "30 / 70" "${uf30:-?} / ${uf70:-?}" "-"
# CUDA_TASK_PRIORITY: priority 0 at 30 % against priority 1 at 60 % (policy default).
"$G" run --cores 60 --policy default --priority 1 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/lo" &
"$G" run --cores 30 --policy default --priority 0 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/hi"
wait
uh=$(burn_util <"$region/hi") ul=$(burn_util <"$region/lo")
awk -v h="$uh" -v l="$ul" 'BEGIN { exit !(h > 85 && l < 10) }' && ok "priority 0 vs 1: $uh/$ul" || bad "priority 0 vs 1: $uh/$ul (want > 85 / < 10)"
row "burn, priority 0 (30 %) vs priority 1 (60 %)" "30 / 60" "$uh / $ul" "-"
fi  # 3

# 4. PyTorch under a slice.
if want 4; then
if [ $have_torch = 1 ]; then
  if "$G" run --memory 4g -- python3 tests/gpu/torch_limit.py 4; then ok "pytorch under a 4 GiB slice"; else bad "pytorch"; fi
else
  echo "SKIP: PyTorch with CUDA is not installed: the PyTorch check did NOT run"
fi
fi  # 4

# 5. Compute shares on real workloads (tests/gpu/share_workload.py), each within +-5 points of
# the share asked. A lone run under `force` is judged by the card's busy time (nvidia-smi's,
# sampled while it is timed) against min(share, the same workload's busy time alone): a
# share caps the card's time a tenant takes, and a card that runs at its power limit alone
# (large matmuls) clocks higher when held to part of its time, so its throughput then
# runs ahead of its time share (docs/measurements/h200-driver.md, 2026-11-28); the
# throughput is recorded beside it, and judged when the card gave no busy time. A
# host-bound workload that used less than its share alone keeps what it used
# (docs/enforcer.md, "A share is a cap"). Competing
# runs are judged by throughput under the slice / throughput of the same workload alone
# (no enforcer), in percent. Each run: SECS timed after ~1 s warm-up.
if want 5; then
W=tests/gpu/share_workload.py SECS=8
wrate() { sed -n 's/^workload .* rate=\([0-9.]*\)$/\1/p' "$1" | tail -n 1; }
wbusy() { sed -n 's/^card util=\([0-9.]*\) .*/\1/p' "$1" | tail -n 1; }
# The card while a lone run was timed (share_workload.py --watch): busy %, SM clock, power.
wcard() {
  local c
  c=$(sed -n 's/^card util=\([0-9.]*\) sm_mhz=\([0-9?]*\) power_w=\([0-9?]*\).*/card busy \1 %, SM \2 MHz, \3 W/p' "$1" | tail -n 1)
  echo "${c:-card not sampled}"
}
pct() { awk -v r="$1" -v a="$2" 'BEGIN { if (r == "" || a == "" || a + 0 <= 0) print "?"; else printf "%.1f", r / a * 100 }'; }
near() { awk -v u="$1" -v s="$2" 'BEGIN { exit !(u != "?" && u >= s - 5 && u <= s + 5) }'; }
why() { tail -n 2 "$1" | tr '\n' ' '; }  # the last words of a run that printed no rate
declare -A alone=() busy_alone=()
# compete NAME SHARE...: matmul4096 tenants at these shares, policy default, started at
# once; a barrier in the script times all of them over the same window.
compete() {
  local name=$1 n=$(($# - 1)) k=0 s sum=0 a r detail
  local tag=${name//\//-}  # 30/70 -> 30-70 in file names
  local bar="$region/barrier-$tag"
  mkdir -p "$bar"
  for s in "${@:2}"; do
    "$G" run --cores "$s" --policy default -- python3 "$W" matmul4096 "$SECS" --barrier "$bar" "$n" >"$region/c-$tag-$k" 2>&1 &
    k=$((k + 1))
  done
  wait
  k=0
  for s in "${@:2}"; do
    r=$(wrate "$region/c-$tag-$k")
    a=$(pct "$r" "${alone[matmul4096]:-}")
    detail="${r:+$r of ${alone[matmul4096]} ops/s}"
    if near "$a" "$s"; then ok "matmul4096 competing $name: share $s%: achieved $a% ($detail)"; else
      bad "matmul4096 competing $name: share $s%: achieved $a% (${detail:-no rate: $(why "$region/c-$tag-$k")})"; fi
    row "matmul4096, competing $name" "$s" "$a" "${alone[matmul4096]:-?}"
    sum=$(awk -v x="$sum" -v a="$a" 'BEGIN { if (x == "?" || a == "?") print "?"; else print x + a }')
    k=$((k + 1))
  done
  row "matmul4096, competing $name, together" "100" "$sum" "${alone[matmul4096]:-?}"
  awk -v t="$sum" 'BEGIN { exit !(t != "?" && t >= 90) }' && ok "matmul4096 competing $name: together $sum% of alone (>= 90)" ||
    bad "matmul4096 competing $name: together $sum% of alone (want >= 90)"
}
if [ $have_torch = 1 ]; then
  for kind in matmul4096 matmul16384 infer small; do
    python3 "$W" "$kind" "$SECS" --watch >"$region/w-$kind-alone" 2>&1
    alone[$kind]=$(wrate "$region/w-$kind-alone")
    busy_alone[$kind]=$(wbusy "$region/w-$kind-alone")
    if [ -z "${alone[$kind]}" ]; then
      bad "workload $kind alone printed no rate: $(why "$region/w-$kind-alone")"
      continue
    fi
    echo "workload $kind alone: ${alone[$kind]} ops/s; $(wcard "$region/w-$kind-alone")"
    for share in 30 60; do
      "$G" run --cores "$share" --policy force -- python3 "$W" "$kind" "$SECS" --watch >"$region/w-$kind-$share" 2>&1
      echo "RECORD in docs/measurements (the card's driver file): workload $kind, share $share% (force): $(wcard "$region/w-$kind-$share")"
      r=$(wrate "$region/w-$kind-$share")
      a=$(pct "$r" "${alone[$kind]}")
      busy=$(wbusy "$region/w-$kind-$share")
      b=$(pct "$busy" "${busy_alone[$kind]}")
      # A share caps the card's busy time: a workload that used less alone should keep it.
      cap=$(awk -v a="${busy_alone[$kind]}" -v s="$share" 'BEGIN { print (a != "" && a < s ? a : s) }')
      detail="${r:+$r of ${alone[$kind]} ops/s}"
      if [ -z "$r" ]; then
        bad "workload $kind, share $share% (force): no rate: $(why "$region/w-$kind-$share")"
      elif [ "$b" = "?" ]; then
        near "$a" "$share" && ok "workload $kind, share $share% (force): achieved $a% ($detail; the card gave no busy time)" ||
          bad "workload $kind, share $share% (force): achieved $a% ($detail; the card gave no busy time)"
      else
        msg="card busy $busy% (alone ${busy_alone[$kind]}%, wanted $cap; $b% of alone's; throughput $a%: $detail)"
        near "$busy" "$cap" && ok "workload $kind, share $share% (force): $msg" || bad "workload $kind, share $share% (force): $msg"
      fi
      row "$kind (force): card busy (alone) / throughput" "$share" "${busy:-?} (${busy_alone[$kind]:-?}) / $a" "${alone[$kind]}"
    done
  done
  if [ -n "${alone[matmul4096]:-}" ]; then
    compete 30/70 30 70
    compete 20/30/50 20 30 50
  else
    bad "competing matmul4096 runs: no rate alone to compare with"
  fi
else
  echo "SKIP: PyTorch with CUDA is not installed: the compute-share workloads (matmul, inference, small kernels) did NOT run"
fi
fi  # 5

# 6. What the card holds for a 2 GiB slice, watched from outside: an observer without the
#    enforcer reads the device's used memory (NVML version 2, which leaves out what the
#    driver reserves for itself) every 0.5 ms while the container works, less what it read
#    before the container started (tests/slice_on_card_test.cc does the same on the
#    simulator). The real context is measured here (no GPUSLICE_CONTEXT_OVERHEAD=0).
#    Each must stay within 2 GiB + 2 MiB (the driver's granularity).
if want 6; then
card_watch() {  # NAME WATCH_MS CMD...: runs CMD under the slice while watching the card
  local name=$1 ms=$2 most
  shift 2
  "$P" cardwatch "$ms" >"$region/watch-$name" 2>&1 &
  local watcher=$!
  sleep 0.2
  env LD_PRELOAD="$E" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region/card-$name" CUDA_DEVICE_MEMORY_LIMIT=2g "$@" \
    >"$region/out-$name" 2>&1
  wait "$watcher"
  most=$(awk '/^cardwatch/ { print int(($2 - $4) / 1048576) }' "$region/watch-$name")
  if [ -n "$most" ] && [ "$most" -le 2050 ]; then
    ok "card holds $most MiB for a 2 GiB slice: $name"
    # What the program got: pieces granted and shared (size, count of pieces whose data both
    # sides read), the importer's count, the fill.
    grep -E '^(ipc-leak|fd-leak|pool-leak|importer|fill|tensors) ' "$region/out-$name" | tr '\n' ' ' | sed "s/^./  $name: &/;s/ $/\n/"
  else
    bad "card holds '${most:-?}' MiB for a 2 GiB slice (want <= 2050): $name ($(tr '\n' ' ' <"$region/out-$name" | cut -c1-300))"
  fi
}
card_watch "driver-API program filling it" 4000 "$H" init fill 64 sleep 1500
four() {
  local k
  for k in 1 2 3 4; do "$H" init sleep 1000 fill 64 sleep 1500 & done
  wait
}
export -f four
export H
card_watch "four processes at once" 6000 bash -c four
card_watch "8 GiB malloc heap asked, then filled" 4000 "$H" init heap 8192 fill 64 sleep 1500
# Memory shared with an importer of the container and freed at once, eight 256 MiB pieces
# (tests/hostile_program_test.cc, HostileIpcLeak): the card lists legacy IPC memory the owner
# freed under the importer, and the owner stays charged until the importer is (the enforcer's
# KeepWhileShared); then an honest exporter that gets its whole slice back once its importer
# closed (fill: what 64 MiB pieces fit beside its context).
for leak in ipc-leak fd-leak pool-leak; do
  card_watch "$leak: shared pieces freed while imported" 8000 "$H" init "$leak" 8 256 sleep 200 importer-done
done
card_watch "an honest exporter after its importer closed" 8000 "$H" init ipc-leak 1 512 importer-done sleep 100 fill 64 sleep 100
grep -q "^fill $(((2048 - ctx_mib) / 64 * 64))\$" "$region/out-an honest exporter after its importer closed" &&
  ok "an honest exporter has its whole slice back once its importer closed" ||
  bad "an honest exporter after its importer closed: $(grep -E '^(fill|ipc-leak|importer)' "$region/out-an honest exporter after its importer closed" | tr '\n' ' ')"
if [ $have_torch = 1 ]; then
  card_watch "PyTorch with cuBLAS loaded, 64 MiB tensors until out of memory" 30000 python3 -c '
import time, torch
x = torch.randn(1024, 1024, device="cuda")
(x @ x).sum().item()  # cuBLAS loaded
keep = []
try:
    while True:
        keep.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
print("tensors", len(keep))
time.sleep(1.5)'
else
  echo "SKIP: PyTorch with CUDA is not installed: the card's view of a PyTorch slice did NOT run"
fi
fi  # 6

# 6b. Pids as the driver sees them (docs/measurements/pids-and-namespaces.md): a process in
#     a PID namespace of its own holds memory. NVML answers in the caller's PID namespace:
#     from outside it lists the holder by its host pid (NSpid's first field); the holder
#     finds itself as its own pid 1; from a sibling namespace the holder is not listed (only
#     the asker, as 1), while the per-process utilisation samples there still carry the
#     holder's host pid.
if want 6b; then
if [ "$(id -u)" = 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
  unshare --pid --fork --mount-proc "$P" init alloc mem 64m launch 2000 1000000 nvml sleep 3000 >"$region/ns-holder" 2>&1 &
  ns_unshare=$!
  sleep 1.5
  ns_host=$(cat "/proc/$ns_unshare/task/$ns_unshare/children" 2>/dev/null | awk '{ print $1 }')
  ns_pids=$(awk '/^NSpid:/ { $1 = ""; print }' "/proc/${ns_host:-0}/status" 2>/dev/null)
  outside=$("$P" init pids | awk '/^pids/')
  sibling=$(unshare --pid --fork --mount-proc "$P" init pids)
  wait "$ns_unshare"
  self_mib=$(awk '/^nvml/ { print int($NF / 1048576) }' "$region/ns-holder")
  inside=$(awk '/^pids/' <<<"$sibling") inside_samples=$(awk '/^samplepids/' <<<"$sibling")
  echo "pids: holder NSpid '$ns_pids' sees itself holding ${self_mib:-?} MiB; NVML from outside '$outside'; from a sibling namespace '$inside', '$inside_samples'"
  if [ -n "$ns_host" ] && echo " $outside " | grep -q " $ns_host "; then
    ok "NVML outside lists a process of another PID namespace by its host pid $ns_host (NSpid$ns_pids)"
  else
    bad "NVML outside does not list the host pid '${ns_host:-?}': '$outside'"
  fi
  [ "${self_mib:-0}" -ge 64 ] && ok "a process in its own PID namespace finds itself in NVML by its own pid (${self_mib} MiB)" ||
    bad "a process in its own PID namespace finds '${self_mib:-?}' MiB under its own pid in NVML"
  [ "$inside" = "pids 1" ] && ok "NVML in a sibling namespace lists only the asker, as pid 1" ||
    bad "NVML in a sibling namespace lists '$inside', want 'pids 1'"
  echo " $inside_samples " | grep -q " $ns_host " && ok "NVML's samples in a sibling namespace carry the holder's host pid $ns_host" ||
    bad "NVML's samples in a sibling namespace: '$inside_samples', want the host pid $ns_host among them"
else
  echo "SKIP: needs root and unshare --pid: NVML's pids for a process in a PID namespace did NOT run"
fi
fi  # 6b

# 6c. What a stream-ordered pool and a graph keep on the card, without the enforcer
#     (docs/measurements/h200-driver.md, "Graph memory"): NVML's figure for this process after
#     each step, in MiB above the first. A pool keeps freed memory until a synchronize
#     (beyond its release threshold) or a trim. A graph's allocation reaches the card at its
#     first launch, not at instantiation, and stays after the graph and its executable are
#     destroyed and after cuMemFreeAsync (in the device's graph pool) until
#     cuDeviceGraphMemTrim; launching it again before it is freed is refused.
if want 6c; then
pool=$("$P" init nvml alloc async 256m free nvml sync nvml poolkeep 1g alloc async 256m free sync nvml pooltrim 0 nvml | mib_steps)
echo "pool (after init; async 256m freed; synchronised; threshold 1g, again freed and synchronised; trimmed): $pool MiB"
if [ "$pool" = "0 256 0 256 0" ]; then ok "a pool keeps freed memory as the simulator models it"; else bad "a pool keeps '$pool' MiB, the simulator models '0 256 0 256 0'"; fi
graph=$("$P" init nvml alloc graph 256m graphexec nvml graphlaunch nvml free nvml execfree nvml graphfree nvml graphtrim nvml | mib_steps)
echo "graph (after init; a 256m alloc node instantiated; launched; graph destroyed; executable destroyed; freed; trimmed): $graph MiB"
want_graph="0 0 256 256 256 256 0"
if [ "$graph" = "$want_graph" ]; then ok "graph memory lives as the simulator models it"; else bad "graph memory '$graph' MiB, the simulator models '$want_graph'"; fi
again=$("$P" init alloc graph 256m graphexec graphlaunch graphlaunch | awk '/^graphlaunch/ { print $2 }' | tr '\n' ' ')
[ "$again" = "ok CUDA_ERROR_INVALID_VALUE " ] && ok "a graph whose allocation is not freed cannot launch again" ||
  bad "a graph launched twice without a free: '$again', want 'ok CUDA_ERROR_INVALID_VALUE '"
# An allocation node made by cuGraphAddNode behaves as cuGraphAddMemAllocNode's; a graph
# with one cannot be cloned.
node=$("$P" init nvml alloc graphnode 256m graphexec nvml graphlaunch nvml | mib_steps)
[ "$node" = "0 0 256" ] && ok "a cuGraphAddNode allocation reaches the card at launch" ||
  bad "a cuGraphAddNode allocation: '$node' MiB, the simulator models '0 0 256'"
clone=$("$P" init alloc graph 256m graphclone | awk '/^graphclone/ { print $2 }')
[ "$clone" = CUDA_ERROR_NOT_SUPPORTED ] && ok "a graph with an allocation node is not cloned" ||
  bad "cuGraphClone of a graph with an allocation node: '$clone', want CUDA_ERROR_NOT_SUPPORTED"
# Nor instantiated a second time while its first executable exists.
twice=$("$P" init alloc graph 256m graphexec graphexec execfree graphexec | awk '/^graphexec/ { print $2 }' | tr '\n' ' ')
[ "$twice" = "ok CUDA_ERROR_NOT_SUPPORTED ok " ] && ok "a graph with an allocation node has one executable at a time" ||
  bad "instantiating a graph with an allocation node, again, then after its executable went: '$twice', want 'ok CUDA_ERROR_NOT_SUPPORTED ok '"
# A child graph moved into another runs there, and is no graph of its own any more
# (docs/measurements/README.md, "Child graphs").
child=$("$P" init nvml alloc graph 256m graphchild graphexec nvml graphlaunch nvml graphchildclone)
child_mib=$(mib_steps <<<"$child")
child_codes=$(awk '/^graphchild / { print $3, $4 } /^graphchildclone/ { print $2 }' <<<"$child" | tr '\n' ' ')
echo "child graph (MiB after init; the parent instantiated; launched): $child_mib; moved child destroyed, instantiated; a clone of it: $child_codes"
[ "$child_mib" = "0 0 256" ] && [ "$child_codes" = "CUDA_ERROR_INVALID_VALUE CUDA_ERROR_NOT_SUPPORTED CUDA_ERROR_NOT_SUPPORTED " ] &&
  ok "a moved child graph runs in its parent as the simulator models it" ||
  bad "a moved child graph: '$child_mib' MiB, '$child_codes'; the simulator models '0 0 256', 'CUDA_ERROR_INVALID_VALUE CUDA_ERROR_NOT_SUPPORTED CUDA_ERROR_NOT_SUPPORTED '"
fi  # 6c

# 6d. Memory shared between processes, without the enforcer (docs/measurements/shared-memory.md,
#     measured once on an H100): 256 MiB exported by this process (legacy IPC of cuMemAlloc memory;
#     a POSIX descriptor of a cuMemCreate handle; an allocation of a pool exported as a POSIX
#     descriptor, with cuMemPoolExportPointer), opened and mapped by an importer process;
#     then freed by the owner (the pool's: cuMemFreeAsync and a synchronize, which gives back
#     what the pool holds free); then closed by the importer (the pool's: cuMemFree). NVML's
#     per-process figures in MiB after each, and what the import added to the importer's own
#     figure. The simulator's model (as an H100 showed it, twice, and an H200): importing
#     adds nothing; legacy IPC and descriptor memory the owner freed is listed under the
#     importer until it lets go; a pool allocation freed by its owner first is listed under
#     no one and stays on the card past the importer.
if want 6d; then
for kind in ipc fd pool; do
  out=$("$P" init sharemodel "$kind" 256 2>&1)
  share=$(share_mib <<<"$out")
  added=$(awk '/^shareimport ok/ { split($3, kv, "="); print int(kv[2] / 1048576) }' <<<"$out")
  echo "$share" | sed "s/^/shared memory ($kind): /"
  echo "shared memory ($kind): the import added ${added:-?} MiB to the importer's own figure"
  [ "$kind" = ipc ] || echo "RECORD in docs/measurements/shared-memory.md: the exported descriptor ($kind) $(awk '/^shareexport/ { print $2 }' <<<"$out")"
  [ "$kind" = fd ] && echo "RECORD in docs/measurements/shared-memory.md: mapping only the first granule of an imported descriptor: $(awk '/^sharepartialmap/ { print $2 }' <<<"$out")"
  if [ "$kind" = fd ]; then
    # Every export one file and one inode (an H100: opens of /dev/nvidiactl): two exports
    # cannot be told apart by fstat, as the simulator models it (the enforcer never asks).
    ident=$(awk '/^shareidentity/ { $1 = ""; print }' <<<"$out")
    echo "a VMM handle's descriptor (the same handle exported again, another handle):$ident"
    read -r ino again other < <(awk '/^shareidentity/ { for (k = 3; k <= 5; k++) { split($k, kv, "="); printf "%s ", kv[2] } }' <<<"$out")
    if [ -n "${ino:-}" ] && [ "$ino" = "${again:-}" ] && [ "$ino" = "${other:-}" ]; then
      ok "exported descriptors share one inode, as the simulator models it ($ident)"
    else
      bad "exported descriptors can be told apart ($ident): update src/sim/cuda_ipc.cc and docs/measurements/shared-memory.md"
    fi
  fi
  o1=$(share_fig imported owner) o2=$(share_fig owner-freed owner) o3=$(share_fig importer-closed owner)
  i1=$(share_fig imported importer) i2=$(share_fig owner-freed importer)
  if [ -z "$o1" ] || [ -z "$o3" ]; then
    bad "shared memory ($kind): the probe did not run through: $out"
    continue
  fi
  u1=$(share_fig imported used) u2=$(share_fig owner-freed used) u3=$(share_fig importer-closed used)
  if [ "$kind" = pool ]; then
    # Freed by its owner first: listed under no one, still on the card (device used
    # unchanged), and still there once the importer is gone (its context's figure aside).
    if [ $((o1 - o2)) -ge 256 ] && [ "$i2" = "$i1" ] && [ "$u2" = "$u1" ] && [ "$u3" -gt $((u1 - i1 - 128)) ]; then
      ok "shared memory (pool) lives as the simulator models it (freed by its owner first: on the card, listed under no one, past the importer)"
    else
      bad "shared memory (pool) differs from the simulator's model (owner $o1/$o2/$o3, importer $i1/$i2, device used $u1/$u2/$u3 MiB): update src/sim/node_shares.cc and docs/measurements/shared-memory.md"
    fi
  elif [ $((o1 - o2)) -ge 256 ] && [ $((i2 - i1)) -ge 256 ] && [ $((o1 - o3)) -ge 256 ]; then
    ok "shared memory ($kind) lives as the simulator models it (the importer's once the owner freed it)"
  else
    bad "shared memory ($kind) differs from the simulator's model (owner $o1/$o2/$o3, importer $i1/$i2 MiB): update src/sim/node_shares.cc and docs/measurements/shared-memory.md"
  fi
  [ "${added:-x}" = 0 ] && ok "importing shared memory ($kind) adds nothing to the importer" ||
    bad "importing shared memory ($kind) added '${added:-?}' MiB to the importer, the simulator models 0: update docs/measurements/shared-memory.md"
  if [ "$kind" = pool ]; then
    # Which call lets go of what the owner freed while imported: the enforcer's pool rule
    # (docs/enforcer.md, "Memory") rests on it. Not judged yet: record the figures.
    u3=$(share_fig importer-closed used) u4=$(share_fig owner-trimmed used) u5=$(share_fig pool-destroyed used)
    r3=$(share_fig importer-closed reserved) r4=$(share_fig owner-trimmed reserved)
    echo "RECORD in docs/measurements/shared-memory.md: a pool allocation freed by its owner while imported: device used ${u3:-?} MiB once the importer is gone (owner pool reserved ${r3:-?}), ${u4:-?} after cuMemPoolTrimTo(0) (reserved ${r4:-?}), ${u5:-?} after cuMemPoolDestroy"
  fi
done

# 6d'. The owner exits (normally) while the importer holds the memory: the simulator's model
#      (src/sim/node_shares.cc, as an H100 showed it) keeps it on the card until the
#      importer lets go, listed under the importer (legacy IPC, descriptors)
#      or under no one (a pool's allocation). Judged against that model and recorded.
for kind in ipc fd pool; do
  out=$("$P" shareownerexit "$kind" 256 2>&1)
  share=$(share_mib <<<"$out")
  echo "$share" | sed "s/^/owner exits first ($kind): /"
  i1=$(share_fig imported importer) i2=$(share_fig owner-exited importer) i3=$(share_fig importer-closed importer)
  u1=$(share_fig imported used) u2=$(share_fig owner-exited used) u3=$(share_fig importer-closed used)
  echo "RECORD in docs/measurements/shared-memory.md: owner exits first ($kind): importer ${i1:-?}/${i2:-?}/${i3:-?} MiB, device used ${u1:-?}/${u2:-?}/${u3:-?} MiB (imported, owner exited, importer closed)"
  if [ -z "$i2" ] || [ -z "$u3" ]; then
    bad "owner exits first ($kind): the probe did not run through: $out"
  elif [ "$kind" != pool ] && [ $((i2 - i1)) -ge 256 ] && [ $((u2 - u3)) -ge 256 ]; then
    ok "owner exits first ($kind): the memory stays on the card under the importer until it lets go, as the simulator models it"
  elif [ "$kind" = pool ] && [ "$i2" = "$i1" ] && [ $((u2 - u3)) -ge 256 ]; then
    ok "owner exits first (pool): the memory stays on the card, listed under no one, until the importer lets go, as the simulator models it"
  else
    bad "owner exits first ($kind) differs from the simulator's model (importer $i1/$i2/$i3, device used $u1/$u2/$u3 MiB): update src/sim/node_shares.cc and docs/measurements/shared-memory.md"
  fi
done
fi  # 6d

# 6e. Legacy IPC across PID namespaces, without the enforcer (docs/measurements/shared-memory.md):
#     the importer runs in a PID namespace of its own with its own /proc (unshare --pid
#     --fork --mount-proc, as in a container), where it is pid 1; the exporter runs on the
#     host, then in a namespace of its own too, pid 1 there as well. Prints what
#     cuIpcOpenMemHandle answered. The model: the first opens and the memory lives as 6d's
#     (no longer the owner's once it freed it); the second is refused with
#     CUDA_ERROR_INVALID_CONTEXT (the two see the same pid).
if want 6e; then
if [ "$(id -u)" = 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
  for exporter in "on the host" "in a PID namespace"; do
    if [ "$exporter" = "on the host" ]; then
      out=$("$P" init sharemodel ipc-pidns 256 2>&1)
    else
      out=$(unshare --pid --fork --mount-proc "$P" init sharemodel ipc-pidns 256 2>&1)
    fi
    share=$(share_mib <<<"$out")
    answer=$(awk '/^shareimport/ { print $2 }' <<<"$out")
    o1=$(share_fig imported owner) o2=$(share_fig owner-freed owner) o3=$(share_fig importer-closed owner)
    echo "legacy IPC into another PID namespace (exporter $exporter): cuIpcOpenMemHandle answered '${answer:-nothing}'; owner ${o1:-?}/${o2:-?}/${o3:-?} MiB"
    if [ "$exporter" = "in a PID namespace" ]; then
      [ "$answer" = CUDA_ERROR_INVALID_CONTEXT ] &&
        ok "legacy IPC between two pid 1s is refused (CUDA_ERROR_INVALID_CONTEXT), as the simulator models it" ||
        bad "legacy IPC between two pid 1s answered '${answer:-$out}'; the simulator refuses it with CUDA_ERROR_INVALID_CONTEXT"
    elif [ "$answer" != ok ]; then
      bad "the driver refused legacy IPC into another PID namespace (exporter $exporter): ${answer:-$out}; the simulator lets it through"
    elif [ -n "$o1" ] && [ -n "$o3" ] && [ $((o1 - o2)) -ge 256 ] && [ $((o1 - o3)) -ge 256 ]; then
      ok "legacy IPC into another PID namespace (exporter $exporter) opens and lives as the simulator models it"
    else
      bad "legacy IPC into another PID namespace (exporter $exporter) opened, but the owner held $o1/$o2/$o3 MiB: update docs/measurements/shared-memory.md"
    fi
  done
else
  echo "SKIP: needs root and unshare --pid: legacy IPC across PID namespaces did NOT run"
fi
fi  # 6e

# 7. What the enforcer costs on this GPU.
if want 7; then
if [ -x "$BUILD/bench/gpuslice_bench" ]; then GS_ENFORCER=$E "$BUILD/bench/gpuslice_bench"; fi
fi  # 7

rm -rf "$region"

echo
echo "Compute share achieved (burn: its own utilisation; workloads: throughput as % of alone, lone runs also the card's busy time as % of alone's; alone rate in ops/s):"
echo
echo "| workload | asked (%) | achieved (%) | alone rate |"
echo "|---|---|---|---|"
printf '%s' "$rows"
echo
[ -n "$only" ] && echo "$only"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
