#!/usr/bin/env bash
# make check-newer-gcc: builds the minimal configuration (what tests/gpu/run.sh builds on
# GPU machines: -DGS_MINIMAL=ON -DGS_BUILD_TESTS=OFF, RelWithDebInfo) with a newer GCC than
# Debian 12's GCC 12, and with -DGS_WERROR=ON so that any warning fails. GPU machines run
# Ubuntu 24.04 with GCC 13, whose libstdc++ drops transitive includes GCC 12's had: a
# missing #include builds here and breaks there. The compiler comes from a Debian trixie
# chroot (GCC 13 by default; GS_GCC=14 for trixie's default), made with debootstrap on
# the first run and reused after; the repository and the CUDA toolkit are bind-mounted
# into it (same paths as here) for the build and unmounted afterwards.
#   scripts/check-newer-gcc.sh [BUILD_DIR]      default build/gcc$GS_GCC-minimal
#   GS_CHROOT=/var/tmp/trixie  GS_GCC=13  JOBS=$(nproc)  CUDA_TOOLKIT_ROOT=/usr/local/cuda
# Needs root (debootstrap, chroot, mount) and network access to Debian's archive
# (deb.debian.org) on the first run, or when GS_GCC changes. Time on a busy 2-core
# machine: 6-10 minutes the first time (debootstrap ~2.5 min, packages ~1 min, build
# 3-4 min), then 3-4 minutes (seconds when the build directory is up to date). Prints the
# compiler and the last line of the build; exits non-zero on any error or warning.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CHROOT=${GS_CHROOT:-/var/tmp/trixie}
GCC=${GS_GCC:-13}
JOBS=${JOBS:-$(nproc)}
MIRROR=${GS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CUDA=$(readlink -f "${CUDA_TOOLKIT_ROOT:-/usr/local/cuda}")
BUILD=${1:-build/gcc$GCC-minimal}

if [ "$(id -u)" -ne 0 ]; then
  echo "check-newer-gcc: needs root (debootstrap, chroot, mount)" >&2
  exit 1
fi
if [ ! -f "$CUDA/include/cuda.h" ] || [ ! -x "$CUDA/bin/nvcc" ]; then
  echo "check-newer-gcc: no CUDA toolkit at $CUDA (set CUDA_TOOLKIT_ROOT)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive

# 1. The chroot: debootstrap once, then the compiler and CMake inside.
if [ ! -e "$CHROOT/.debootstrap-done" ]; then  # remove $CHROOT to start over
  if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap"
    apt-get update -qq && apt-get install -y --no-install-recommends debootstrap >/dev/null
  fi
  echo "debootstrap trixie into $CHROOT (a few minutes)"
  nice -n 10 debootstrap --variant=minbase trixie "$CHROOT" "$MIRROR" >"$CHROOT.debootstrap.log" 2>&1 ||
    { tail -n 20 "$CHROOT.debootstrap.log" >&2; exit 1; }
  touch "$CHROOT/.debootstrap-done"
fi
if ! chroot "$CHROOT" sh -c "command -v g++-$GCC && command -v cmake && command -v make" >/dev/null; then
  echo "installing g++-$GCC, cmake and make in $CHROOT"
  { chroot "$CHROOT" apt-get update -qq &&
    chroot "$CHROOT" nice -n 10 apt-get install -y -qq --no-install-recommends "g++-$GCC" cmake make; } \
    >"$CHROOT.apt.log" 2>&1 || { tail -n 20 "$CHROOT.apt.log" >&2; exit 1; }
fi

# 2. The repository and the CUDA toolkit at the same paths inside; unmounted on exit.
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" || echo "could not unmount ${mounted[i]}" >&2; done
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET_INSIDE (skipped if something is mounted there already)
  mkdir -p "$CHROOT$2"
  mountpoint -q "$CHROOT$2" && return 0
  mount --bind "$1" "$CHROOT$2"
  mounted+=("$CHROOT$2")
}
if ! mountpoint -q "$CHROOT/proc"; then
  mount -t proc proc "$CHROOT/proc"
  mounted+=("$CHROOT/proc")
fi
bind "$REPO" "$REPO"
bind "$CUDA" "$CUDA"

# 3. The build, exactly as tests/gpu/run.sh configures it, but with warnings as errors.
# nvcc (for the burn kernels' PTX) preprocesses with the host compiler: NVCC_CCBIN names it.
# shellcheck disable=SC2016  # expanded by the shell inside the chroot
chroot "$CHROOT" env -C "$REPO" -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
  CC="gcc-$GCC" CXX="g++-$GCC" NVCC_CCBIN="g++-$GCC" JOBS="$JOBS" BUILD="$BUILD" CUDA="$CUDA" \
  bash -c '
    set -euo pipefail
    "$CXX" --version | head -n 1
    cmake -S . -B "$BUILD" -DGS_MINIMAL=ON -DGS_BUILD_TESTS=OFF -DGS_WERROR=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDA_TOOLKIT_ROOT="$CUDA" >/dev/null
    log=$BUILD/check-newer-gcc.log
    if ! nice -n 10 cmake --build "$BUILD" -j "$JOBS" >"$log" 2>&1; then
      grep -E "error|warning:" "$log" | head -n 40 >&2 || true
      echo "--- last lines of $log:" >&2
      tail -n 15 "$log" >&2
      exit 1
    fi
    grep "Built target" "$log" | tail -n 1
  '
echo "check-newer-gcc: minimal build with g++-$GCC and -Werror passed ($BUILD)"
