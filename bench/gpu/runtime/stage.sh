#!/bin/bash
# Copies what the GPU runs of issue 15 need into the device tool's carried
# folder ($1, a folder of the session's checkout that git ignores): the
# worktree's bench/gpu/runtime scripts, the torch helper (runtime/python)
# and the release binaries.
set -eu
dst=$1; src=$(cd "$(dirname "$0")/../../.." && pwd)
rm -rf "$dst"; mkdir -p "$dst/target/release" "$dst/bench/gpu"
cp -r "$src/bench/gpu/runtime" "$src/bench/gpu/lib" "$dst/bench/gpu/"
# The torch helper's sitecustomize: prescientctl finds it at ../../runtime/python.
mkdir -p "$dst/runtime" && cp -r "$src/runtime/python" "$dst/runtime/"
for f in prescientctl prescientd libprescient_runtime.so; do
  [ -f "$src/target/release/$f" ] && cp "$src/target/release/$f" "$dst/target/release/" && strip --strip-debug "$dst/target/release/$f"
done
du -sh "$dst"
