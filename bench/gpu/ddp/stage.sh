#!/bin/bash
# Copies what bench/gpu/ddp/run.sh needs into the device tool's carried
# folder ($1, a folder of the session's checkout that git ignores): this
# folder's scripts and the stripped release binaries.
set -eu
dst=$1; src=$(cd "$(dirname "$0")/../../.." && pwd)
rm -rf "$dst"; mkdir -p "$dst/bin"
cp -r "$src/bench/gpu/ddp" "$src/bench/gpu/lib" "$dst/"
rm -rf "$dst/ddp/__pycache__"
for f in prescientctl prescientd libprescient_runtime.so; do
  cp "$src/target/release/$f" "$dst/bin/" && strip --strip-debug "$dst/bin/$f"
done
du -sh "$dst"
