#!/usr/bin/env bash
# Installs the Debian 12 packages gpuslice needs to build and test, when they are missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
#   scripts/install-deps.sh build     compilers, libraries, test tools
#   scripts/install-deps.sh test      + what the tests drive: prometheus (promtool, a real scrape),
#                                      runc, podman, docker.io, docker-compose and busybox (the
#                                      container tests)
#   scripts/install-deps.sh e2e       + what `make e2e` needs: Go (to build Kubernetes v1.20.2 from
#                                      Debian's source package), etcd, containerd, runc, image tools
#   scripts/install-deps.sh fuzz      + clang and libFuzzer (`make fuzz`)
#   scripts/install-deps.sh tidy      + clang-tidy (`make tidy`)
set -euo pipefail
what=${1:-build}

build_pkgs=(cmake ninja-build ccache g++ make pkg-config libgtest-dev libgmock-dev
  libyaml-cpp-dev nlohmann-json3-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpp-httplib-dev strace python3 openssl clang-format)
test_pkgs=(prometheus runc podman buildah conmon busybox-static debootstrap uidmap catatonit fuse-overlayfs slirp4netns
  containernetworking-plugins golang-github-containers-common docker.io docker-compose)
e2e_pkgs=(golang-go golang-github-modern-go-reflect2-dev rsync etcd-server containerd runc
  containernetworking-plugins busybox-static umoci skopeo openssl curl)

fuzz_pkgs=(clang libclang-rt-14-dev llvm)
tidy_pkgs=(clang-tidy)
pkgs=("${build_pkgs[@]}")
[ "$what" = test ] && pkgs+=("${test_pkgs[@]}")
[ "$what" = e2e ] && pkgs+=("${e2e_pkgs[@]}")
[ "$what" = fuzz ] && pkgs+=("${fuzz_pkgs[@]}")
[ "$what" = tidy ] && pkgs+=("${tidy_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ! -x /usr/local/cuda/bin/nvcc ] || [ ! -f /usr/local/cuda/include/cuda.h ]; then
  echo "gpuslice needs the CUDA 13 toolkit headers and nvcc at /usr/local/cuda (set CUDA_TOOLKIT_ROOT to override)." >&2
  [ -n "${CUDA_TOOLKIT_ROOT:-}" ] || exit 1
fi

[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "gpuslice needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
$cmd >/dev/null
