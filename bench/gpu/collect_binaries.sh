#!/usr/bin/env bash
# collect_binaries.sh BUILD_DIR DEST: copies the GPU check's programs (bench/gpu/targets.txt) out of
# a build tree into one flat folder, stripped, with the source directory they read data from.
set -euo pipefail
build=$1 dest=$2
rm -rf "$dest"
mkdir -p "$dest"
for target in $(cat "$(dirname "$0")/targets.txt"); do
  found=$(find "$build/tests" "$build/bench" "$build/examples" "$build/tools" -maxdepth 2 -type f -name "$target" -print -quit)
  [ -n "$found" ] || { echo "collect_binaries: $target is not built in $build" >&2; exit 1; }
  strip -o "$dest/$target" "$found"
done
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" > "$dest/SOURCE_DIR"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes) $(date -u +%FT%TZ)" > "$dest/BUILT"
