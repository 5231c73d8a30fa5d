#!/bin/bash
# prescientd with --cyclic-victims (ahead.sh's foot25B).
exec "$(dirname "$0")/target/release/prescientd" "$@" --cyclic-victims
