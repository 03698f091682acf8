#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl
# (upstream v1.20.2) plus the pause binary from Debian bookworm's `kubernetes` source
# package, offline, with Debian's Go. No Kubernetes binaries are packaged for Debian 12
# and nothing outside the package registries can be fetched, so this is the only way to
# run a real Kubernetes here (docs/e2e.md, "The pieces", has the facts).
#
#   scripts/kubernetes-build.sh            prints the directory holding the binaries
#
# The binaries are cached by source version outside the clone, so a second run, or a
# fresh clone (CI), reuses them:
#   $GPUSLICE_CACHE_DIR                    if set
#   /var/cache/gpuslice                    as root
#   ${XDG_CACHE_HOME:-~/.cache}/gpuslice   otherwise
# KUBERNETES_DEB_VERSION picks the source package version (default: bookworm's).
# Progress goes to stderr, one line per step; the binary directory alone to stdout.
set -euo pipefail

version=${KUBERNETES_DEB_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}
upstream=v1.20.2
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

if [ -n "${GPUSLICE_CACHE_DIR:-}" ]; then
  cache=$GPUSLICE_CACHE_DIR
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/gpuslice
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/gpuslice
fi
out=$cache/kubernetes-$version
step() { echo "kubernetes-build: $*" >&2; }
die() {
  echo "kubernetes-build: FAILED: $*" >&2
  exit 1
}

complete() {
  local b
  [ -f "$out/VERSION" ] || return 1
  for b in "${binaries[@]}" pause; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
  step "cached: $out/bin ($(cat "$out/VERSION"))"
  echo "$out/bin"
  exit 0
fi

for tool in go rsync apt-get gcc make; do
  command -v "$tool" >/dev/null || die "'$tool' is missing; run scripts/install-deps.sh e2e"
done
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$reflect2/reflect2.go" ] || die "$reflect2 is missing; install golang-github-modern-go-reflect2-dev"

mkdir -p "$cache"
# Two clones building at once (a developer and CI) would each spend minutes on the same
# result: the second waits for the first and then finds the cache filled.
exec 9>"$cache/kubernetes.lock"
if ! flock -n 9; then
  step "another build holds $cache/kubernetes.lock; waiting for it"
  flock 9
fi
if complete; then
  step "cached: $out/bin (built by the run we waited for)"
  echo "$out/bin"
  exit 0
fi

work=$cache/kubernetes-$version.build
rm -rf "$work"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources" "$work/dl" "$work/home"
# The build tree is big (~1 GiB with the Go cache output); keep it only when asked to.
cleanup() { [ -n "${KEEP_KUBERNETES_BUILD:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

# A private apt configuration: the system's sources have no deb-src lines and must not
# be edited, so the same mirrors are listed as deb-src in a directory of our own, with
# our own lists and caches (the system's package lists stay untouched).
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ]; then
  sed 's/^Types:.*/Types: deb-src/' "$src" >"$work/apt/sources/debian-src.sources"
else
  # A machine with a one-line sources.list instead of deb822 files.
  grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' >"$work/apt/sources/debian-src.list" || true
fi
[ -n "$(ls -A "$work/apt/sources")" ] || die "found no Debian apt sources to derive deb-src entries from"
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/sources"
  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
  -o "APT::Sandbox::User=root")

step "apt-get update (private deb-src lists in $work/apt)"
apt-get "${apt_opts[@]}" update -qq >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; die "apt-get update of the deb-src lists failed"; }

step "apt-get source --download-only kubernetes=$version"
if ! (cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only "kubernetes=$version") >>"$work/apt.log" 2>&1; then
  cat "$work/apt.log" >&2
  have=$(apt-cache "${apt_opts[@]}" showsrc kubernetes 2>/dev/null | awk '/^Version:/ { print $2 }' | tr '\n' ' ')
  die "source package kubernetes=$version not available (the mirrors have: ${have:-none}); set KUBERNETES_DEB_VERSION"
fi
orig=$(find "$work/dl" -maxdepth 1 -name 'kubernetes_*.orig.tar.gz' | head -1)
[ -n "$orig" ] || die "no kubernetes_*.orig.tar.gz among the downloaded files: $(ls "$work/dl")"

step "unpacking $(basename "$orig")"
mkdir -p "$work/src"
tar -xzf "$orig" -C "$work/src" --strip-components=1
cd "$work/src"
grep -q 'github.com/modern-go/reflect2 v1.0.1' go.mod ||
  die "go.mod does not pin reflect2 v1.0.1 as expected; the reflect2 patch below does not apply to this source"

# Go 1.18+ changed runtime internals that the vendored reflect2 v1.0.1 reaches into:
# every binary would crash at start (json-iterator). Debian's v1.0.2 is API-compatible
# and supports Go 1.19, so it replaces the vendored copy, with go.mod and modules.txt
# made to agree (the vendor consistency check reads both).
step "replacing vendored reflect2 v1.0.1 with Debian's v1.0.2 (Go 1.18+ fix)"
rm -rf vendor/github.com/modern-go/reflect2
mkdir -p vendor/github.com/modern-go/reflect2
find "$reflect2" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
  -exec cp -L {} vendor/github.com/modern-go/reflect2/ \;
sed -i 's|github.com/modern-go/reflect2 v1.0.1|github.com/modern-go/reflect2 v1.0.2|g' go.mod vendor/modules.txt

# A source package has no git metadata: without a version file the build scripts fail.
cat >"$work/version.env" <<EOF
KUBE_GIT_VERSION=$upstream
KUBE_GIT_MAJOR=1
KUBE_GIT_MINOR=20
KUBE_GIT_TREE_STATE=clean
KUBE_GIT_COMMIT=
EOF

what=""
for b in "${binaries[@]}"; do what+="cmd/$b "; done
step "go build of ${binaries[*]} ($(go version | awk '{ print $3 }'), ~6 min on 2 cores; log: $work/build.log)"
start=$(date +%s)
# Offline by construction: no module proxy, vendored modules only, no checksum DB. (The
# Kubernetes build scripts keep Go's build cache inside the tree, which is removed
# afterwards: only the binaries are cached.)
if ! env HOME="$work/home" GOPATH="$work/home/go" \
  GOPROXY=off GOFLAGS=-mod=vendor GOSUMDB=off GO111MODULE=on CGO_ENABLED=0 \
  KUBE_GIT_VERSION_FILE="$work/version.env" \
  make WHAT="${what% }" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  die "the Kubernetes build failed (last lines above)"
fi
step "built in $(($(date +%s) - start)) s"

# The pod sandbox image's only program (k8s.gcr.io/pause:3.2), built from the same tree.
pause_c=$(find build/pause -name pause.c | head -1)
[ -n "$pause_c" ] || die "build/pause/**/pause.c not found in the source"
step "building pause from $pause_c (static)"
mkdir -p _output/bin
gcc -Os -Wall -static -DVERSION=3.2 -o _output/bin/pause "$pause_c" ||
  die "compiling $pause_c failed (needs libc6-dev's static libc)"

tmp=$out.tmp.$$
rm -rf "$tmp"
mkdir -p "$tmp/bin"
for b in "${binaries[@]}" pause; do
  bin=$(find _output -type f -name "$b" -perm -u+x | head -1)
  [ -n "$bin" ] || die "the build produced no $b"
  install -m 0755 "$bin" "$tmp/bin/$b"
done
"$tmp/bin/kubectl" version --client --short >/dev/null 2>&1 ||
  die "the built kubectl does not run (is the reflect2 fix in place?)"
echo "$version ($upstream, $(go version | awk '{ print $3 }'))" >"$tmp/VERSION"
rm -rf "$out"
mv "$tmp" "$out"
step "cached in $out/bin"
echo "$out/bin"
