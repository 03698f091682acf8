#!/bin/sh
# clang-tidy with the repository's curated .clang-tidy over every C++ source in src/ (or the
# files given after the build directory), on that build's compile database. Prints each
# finding and fails when there is one. About 5 minutes on 2 cores for the whole tree.
#   tools/check_tidy.sh build/release [FILE...]
set -u
build=${1:?usage: tools/check_tidy.sh BUILD_DIR [FILE...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
command -v clang-tidy >/dev/null 2>&1 || {
  echo "clang-tidy is not installed (scripts/install-deps.sh tidy installs it)" >&2
  exit 1
}
[ -f "$build/compile_commands.json" ] || {
  echo "$build/compile_commands.json is missing: build first (make build)" >&2
  exit 1
}
cd "$root" || exit 1
if [ $# -gt 0 ]; then
  files=$(printf '%s\n' "$@")
else
  files=$(find src -name '*.cc' | sort)
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$files" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet >"$out" 2>/dev/null
findings=$(grep -E '^[^ ].*: (warning|error): ' "$out" | sort -u)
if [ -n "$findings" ]; then
  echo "clang-tidy findings (.clang-tidy's checks):"
  echo "$findings"
  exit 1
fi
echo "clang-tidy: $(echo "$files" | wc -l) files, no findings"
