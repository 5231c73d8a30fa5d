#!/bin/bash
# prescientd with --order-queue, and OQ_WINDOW (if set) as the footprint
# window instead of the 25 that ahead.sh's foot25B passes.
args=()
for a in "$@"; do
  if [ -n "${OQ_WINDOW:-}" ] && [ "$a" = 25 ] && [ "${#args[@]}" -gt 0 ] && [ "${args[-1]}" = --footprint-window-pct ]; then a=$OQ_WINDOW; fi
  args+=("$a")
done
exec "$(dirname "$0")/target/release/prescientd" "${args[@]}" --order-queue
