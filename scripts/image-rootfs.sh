#!/usr/bin/env bash
# Assembles the node image's root file system from a build tree: gpuslice and every
# shared library it loads (as ldd resolves them here), the enforcer, the simulator.
#   scripts/image-rootfs.sh BUILD_DIR CONTEXT_DIR    -> CONTEXT_DIR/rootfs
set -euo pipefail
build=${1:?build dir}
ctx=${2:?context dir}
root=$ctx/rootfs
rm -rf "$root"
mkdir -p "$root/usr/bin" "$root/usr/lib/gpuslice/sim" "$root/etc" "$root/tmp"
install -m 0755 "$build/bin/gpuslice" "$root/usr/bin/gpuslice"
install -m 0755 "$build/enforcer/libgpuslice.so" "$root/usr/lib/gpuslice/libgpuslice.so"
install -m 0755 "$build/sim/lib/libcuda.so.1" "$build/sim/lib/libnvidia-ml.so.1" "$root/usr/lib/gpuslice/sim/"
copy_deps() {
  ldd "$1" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
copy_deps "$build/bin/gpuslice"
echo "root:x:0:0:root:/:/usr/bin/gpuslice" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
du -sh "$root" | awk '{ print "image root: " $1 }'
