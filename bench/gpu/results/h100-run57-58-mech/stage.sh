#!/bin/bash
# Stages this worktree's bench/gpu (without results) and stripped release
# binaries (prescientd, prescientctl, migbench) plus the batch scripts into
# the device tool's carried folder $1 (in /work/main, ignored by git).
set -eu
dst=$1; src=$(cd "$(dirname "$0")/../../../.." && pwd); here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dst"; mkdir -p "$dst/target/release" "$dst/bench"
tar -C "$src/bench" --exclude=results --exclude=__pycache__ -cf - gpu | tar -C "$dst/bench" -xf -
cp "$here"/batch*.sh "$dst/"
for f in prescientd prescientctl migbench; do
  cp "$src/target/release/$f" "$dst/target/release/" && strip --strip-debug "$dst/target/release/$f"
done
du -sh "$dst"
