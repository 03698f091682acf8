#!/usr/bin/env bash
# The enforcer on a real NVIDIA GPU: the checks tests/enforcer_test.cc makes on the
# simulator, against the real driver, plus PyTorch. For GPU machines that have only a
# compiler, CMake, the CUDA toolkit and PyTorch: builds the minimal preset itself.
#   tests/gpu/run.sh [BUILD_DIR]
# Prints PASS/FAIL/SKIP lines and "N passed, N failed"; skips loudly without a GPU.
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build/gpu}
pass=0 fail=0
ok() { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU on this machine: the real-GPU checks did NOT run"
  echo "0 passed, 0 failed"
  exit 0
fi
nvidia-smi -L
cmake -S . -B "$BUILD" -DGS_MINIMAL=ON -DGS_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$BUILD" -j "$(nproc)" >/dev/null || { echo "FAIL: build"; echo "0 passed, 1 failed"; exit 1; }
G=$BUILD/bin/gpuslice P=$BUILD/tests/cuda_probe E=$PWD/$BUILD/enforcer/libgpuslice.so
export GPUSLICE_ENFORCER=$E
region=$(mktemp -d)

limited() { env LD_PRELOAD="$E" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region/$1" GPUSLICE_CONTEXT_OVERHEAD=0 "${@:2}"; }

# 1. The limit on every allocation API, through every path to the driver.
for via in linked dlsym getproc; do
  for kind in mem pitch managed async pool vmm array array3d mipmap graph; do
    out=$(limited "r-$via-$kind" CUDA_DEVICE_MEMORY_LIMIT=1g "$P" --via "$via" init alloc "$kind" 768m alloc "$kind" 512m \
      alloc "$kind" 256m alloc "$kind" 2m free free alloc "$kind" 1g 2>&1)
    got=$(grep '^alloc' <<<"$out" | awk '{print $2}' | tr '\n' ' ')
    [ "$got" = "ok err ok err ok " ] && ok "limit $kind via $via" || bad "limit $kind via $via: $got"
  done
done

# 2. CUDA and NVML views agree.
out=$(limited views CUDA_DEVICE_MEMORY_LIMIT=4g "$P" init alloc mem 1g meminfo nvml)
read -r _ free total devtotal <<<"$(grep ^meminfo <<<"$out")"
read -r _ ntotal nused nfree _ <<<"$(grep ^nvml <<<"$out")"
[ "$total" = 4294967296 ] && [ "$devtotal" = 4294967296 ] && [ "$ntotal" = 4294967296 ] &&
  [ $((ntotal - nused)) = "$nfree" ] && ok "views agree ($out)" || bad "views: $out"

# 3. Compute shares (policy force), achieved utilisation from burn's own measurement.
for share in 30 60; do
  u=$("$G" run --cores $share -- "$G" burn --memory 64m --util 100 --seconds 10 | sed -n 's/.*average util \([0-9.]*\)%.*/\1/p')
  awk -v u="$u" -v s=$share 'BEGIN { exit !(u >= s - 5 && u <= s + 5) }' && ok "compute share $share%: achieved $u%" ||
    bad "compute share $share%: achieved $u%"
done
"$G" run --cores 20 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/a" &
"$G" run --cores 50 -- "$G" burn --memory 64m --util 100 --seconds 10 >"$region/b"
wait
ua=$(sed -n 's/.*average util \([0-9.]*\)%.*/\1/p' "$region/a") ub=$(sed -n 's/.*average util \([0-9.]*\)%.*/\1/p' "$region/b")
awk -v a="$ua" -v b="$ub" 'BEGIN { exit !(a >= 15 && a <= 25 && b >= 45 && b <= 55) }' &&
  ok "competing shares 20/50: achieved $ua/$ub" || bad "competing shares 20/50: achieved $ua/$ub"

# 4. PyTorch under a slice.
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  if "$G" run --memory 4g -- python3 tests/gpu/torch_limit.py 4; then ok "pytorch under a 4 GiB slice"; else bad "pytorch"; fi
else
  echo "SKIP: PyTorch with CUDA is not installed: the PyTorch check did NOT run"
fi

# 5. What the enforcer costs on this GPU.
if [ -x "$BUILD/bench/gpuslice_bench" ]; then GS_ENFORCER=$E "$BUILD/bench/gpuslice_bench"; fi
rm -rf "$region"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
