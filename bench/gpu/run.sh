#!/usr/bin/env bash
# Builds umbench (nvcc) and runs the whole measurement set on one GPU machine,
# writing results under $OUT (default ./out). Needs root (pidfd_getfd on the
# workload). prescientd: $PRESCIENTD, else dist/prescientd, else cargo build.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=/tmp/umb; mkdir -p $B
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }
log "host: $(uname -r); uid $(id -u); $(which nvcc cargo rustc 2>/dev/null | tr '\n' ' ')"
cat /sys/module/nvidia_uvm/version > "$OUT/driver_version.txt" 2>&1
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used --format=csv > "$OUT/nvidia-smi.csv" 2>&1
# Built again only when a source is newer (one GPU call runs run.sh several times).
built() { [ -x "$1" ] && [ "$1" -nt "$HERE/$2" ] && [ "$1" -nt "$HERE/umcommon.cuh" ]; }
built $B/umbench umbench.cu || nvcc -O2 -arch=sm_90 -o $B/umbench "$HERE/umbench.cu" 2> "$OUT/nvcc.log" \
  || { log "nvcc failed"; cat "$OUT/nvcc.log"; exit 1; }
# PolyBench/GPU's FDTD-2D, managed (fdtd2d.cu): the oracle set's "fdtd".
built $B/fdtd2d fdtd2d.cu || nvcc -O2 -arch=sm_90 -o $B/fdtd2d "$HERE/fdtd2d.cu" 2>> "$OUT/nvcc.log" \
  || log "nvcc (fdtd2d) failed: $(tail -3 "$OUT/nvcc.log")"
PD=${PRESCIENTD:-$ROOT/dist/prescientd}
if [ ! -x "$PD" ]; then
  (cd "$ROOT" && cargo build --release -p prescientd) > "$OUT/cargo.log" 2>&1 && PD=$ROOT/target/release/prescientd
fi
log "prescientd: $PD ($($PD --version 2>&1))"
CTL=${PRESCIENTCTL:-$ROOT/dist/prescientctl}
[ -x "$CTL" ] || CTL=$(dirname "$PD")/prescientctl
log "prescientctl: $CTL ($($CTL --version 2>&1))"
RES="$OUT/results.jsonl"; : > "$RES"

# The managed-memory allocator the PyTorch workloads load (UM_ALLOC_SO).
torch_allocator() {
  nvcc -O2 -shared -Xcompiler -fPIC -o $B/managed_alloc.so "$HERE/torch/managed_alloc.cu" 2>> "$OUT/nvcc.log" \
    || { log "nvcc (torch allocator) failed"; return 1; }
  export UM_ALLOC_SO=$B/managed_alloc.so
}

# case NAME MODE(none|observe|prescient|driver-like) BUDGET(-|bytes) -- umbench args
# A/B/C in the budget groups: PRESCIENTD_B and/or B_EXTRA make a "prescientB"
# case (another build, other options), C_EXTRA a "prescientC" case (this
# build, other options).
# RUNNER: the workload command (default umbench); PD_CASE: another prescientd
# for this case (an A/B comparison in one run; it must have the `attach`
# subcommand, so builds before issue 14 need a wrapper); STATS_MS: the daemon's stats
# interval; below 1000 a sampler keeps the time series and periter.py cuts
# it into faults per iteration.
case_() {
  local name=$1 mode=$2 budget=$3; shift 4
  local go=$B/go.$name; rm -f "$go"
  local t0=$(date +%s%N)
  # No wrapper (timeout would fork): $! must be the CUDA process itself.
  local run=(${RUNNER:-$B/umbench})
  # CTL_RUN="ARGS": the workload under `prescientctl run ARGS --` (the
  # runtime: execution ids); prescientd then attaches the launcher's child.
  # CTL_LOG=1: the runtime's exit line (its footprint counters) goes to
  # the case's bench.err; it times every launch, so it is off by default.
  # CTL_ENV="VAR=VALUE ...": more environment for the launcher (a variant's
  # fifth field), e.g. PRESCIENT_RUNTIME=PATH for another build's runtime.
  [ -n "${CTL_RUN:-}" ] && run=(env PRESCIENT_RUNTIME_LOG=${CTL_LOG:-0} ${CTL_ENV:-} "$CTL" run $CTL_RUN -- "${run[@]}")
  PRESCIENT_GO=$go PRESCIENT_MARKS_SOCKET=${MARKS_SOCK:-} "${run[@]}" "$@" > "$OUT/$name.bench.jsonl" 2> "$OUT/$name.bench.err" &
  local bp=$! dp= wp=$!
  if [ -n "${CTL_RUN:-}" ]; then
    bp=; for _ in $(seq 200); do bp=$(pgrep -P $wp | head -1); [ -n "$bp" ] && break; sleep 0.02; done
    [ -n "$bp" ] || { log "$name: no child of prescientctl run"; bp=$wp; }
  fi
  (sleep 150; kill $bp 2>/dev/null) & local wd=$!
  if [ "$mode" = none ]; then
    touch "$go"
  elif [ "$mode" = record ]; then
    # prescientctl record alone: the trace, and the fault counts "without Prescient".
    timeout 110 "$CTL" record $bp --out "$OUT/$name.trace.gz" --ready-file "$go" \
      > "$OUT/$name.daemon.json" 2> "$OUT/$name.daemon.log" &
    dp=$!
  else
    local ba=(); [ "$budget" != - ] && ba=(--budget "$budget")
    # BLOCK_LOG=1: every block decision and movement (blocklog.py reads it).
    [ -n "${BLOCK_LOG:-}" ] && ba+=(--block-log "$OUT/$name.blocks.tsv")
    timeout 110 "${PD_CASE:-$PD}" attach --pid $bp --mode "$mode" "${ba[@]}" --stats-json "$OUT/$name.stats.json" \
      --ready-file "$go" --stats-interval ${STATS_MS:-1000}ms ${EXTRA:-} > "$OUT/$name.daemon.json" 2> "$OUT/$name.daemon.log" &
    dp=$!
    [ "${STATS_MS:-1000}" -lt 1000 ] && python3 "$HERE/sampler.py" "$OUT/$name.stats.json" $bp "$OUT/$name.samples.tsv" &
    # The managed ranges (the oracle's plans name blocks by them) a few
    # seconds in: what a refused plan was compared with.
    [ -n "${MAPS:-}" ] && (sleep ${MAPS}; grep nvidia-uvm /proc/$bp/maps > "$OUT/$name.maps.txt" 2>/dev/null) &
  fi
  wait $wp; local rc=$?
  kill $wd 2>/dev/null
  [ -n "$dp" ] && wait $dp
  local t1=$(date +%s%N)
  local sum=$(grep '"summary"' "$OUT/$name.bench.jsonl" | tail -1)
  local d=$(tr -d '\n' < "$OUT/$name.daemon.json" 2>/dev/null); [ -z "$d" ] && d=null
  [ -z "$sum" ] && sum=null
  local per=null
  if [ -s "$OUT/$name.samples.tsv" ]; then
    sleep 0.1; per=$(python3 "$HERE/periter.py" "$OUT/$name.bench.jsonl" "$OUT/$name.samples.tsv")
  fi
  if [ -s "$OUT/$name.blocks.tsv" ]; then
    python3 "$HERE/blocklog.py" "$OUT/$name.blocks.tsv" "$OUT/$name.bench.jsonl" > "$OUT/$name.blocklog.json"
    gzip -f "$OUT/$name.blocks.tsv"
    log "$name blocks: $(cut -c1-900 "$OUT/$name.blocklog.json")"
  fi
  echo "{\"case\":\"$name\",\"mode\":\"$mode\",\"budget\":\"$budget\",\"rc\":$rc,\"wall_ms\":$(( (t1 - t0) / 1000000 )),\"bench\":$sum,\"per_iter\":$per,\"daemon\":$d}" >> "$RES"
  log "$name rc=$rc $sum $per"
  [ -n "$dp" ] && log "$name daemon: $(cut -c1-600 "$OUT/$name.daemon.json" 2>/dev/null) $(tail -2 "$OUT/$name.daemon.log")"
}

$B/umbench bw 2048 > "$OUT/bw.jsonl" 2>&1; log "bw: $(cat "$OUT/bw.jsonl")"
WHAT=${WHAT:-dnn stream random dnnmig streammig randommig}
for w in $WHAT; do
  case $w in
  dnn)
    A=(dnn 12 1024 4 256)
    case_ dnn_base none - -- "${A[@]}"
    case_ dnn_observe observe - -- "${A[@]}"
    case_ dnn_prescient prescient - -- "${A[@]}"
    EXTRA=--sync-migrate case_ dnn_prescient_sync prescient - -- "${A[@]}"
    ;;
  stream)
    A=(stream 10 32 256)   # 8 GiB working set, budget 4 GiB
    case_ stream_observe observe - -- "${A[@]}"
    case_ stream_driverlike driver-like 4G -- "${A[@]}"
    case_ stream_prescient prescient 4G -- "${A[@]}"
    ;;
  dnnmig)
    A=(dnn 12 1024 4 256)
    EXTRA="--fault-source migrations" case_ dnn_observe_mig observe - -- "${A[@]}"
    EXTRA="--fault-source migrations" case_ dnn_prescient_mig prescient - -- "${A[@]}"
    ;;
  streammig)
    A=(stream 10 32 256)
    EXTRA="--fault-source migrations" case_ stream_driverlike_mig driver-like 4G -- "${A[@]}"
    EXTRA="--fault-source migrations" case_ stream_prescient_mig prescient 4G -- "${A[@]}"
    ;;
  faultsonly)
    A=(dnn 12 1024 4 256)
    case_ dnn_base none - -- "${A[@]}"
    EXTRA="--fault-source faults-only" case_ dnn_observe_fo observe - -- "${A[@]}"
    EXTRA="--fault-source faults-only" case_ dnn_prescient_fo prescient - -- "${A[@]}"
    A=(random 10 4096 0.25)
    case_ random_base none - -- "${A[@]}"
    EXTRA="--fault-source faults-only" case_ random_prescient_fo prescient - -- "${A[@]}"
    ;;
  randommig)
    A=(random 10 4096 0.25)
    EXTRA="--fault-source migrations" case_ random_prescient_mig prescient - -- "${A[@]}"
    ;;
  run4)
    # Issue 5, run 4: traces recorded with prescientctl record, and the
    # self back-off (default on; *_nobo = --no-backoff) on dnn and random.
    A=(dnn 12 1024 4 256)
    case_ dnn_base none - -- "${A[@]}"
    case_ dnn_record record - -- "${A[@]}"
    case_ dnn_observe observe - -- "${A[@]}"
    case_ dnn_prescient prescient - -- "${A[@]}"
    EXTRA=--no-backoff case_ dnn_prescient_nobo prescient - -- "${A[@]}"
    A=(random 10 4096 0.25)
    case_ random_base none - -- "${A[@]}"
    case_ random_record record - -- "${A[@]}"
    case_ random_prescient prescient - -- "${A[@]}"
    EXTRA=--no-backoff case_ random_prescient_nobo prescient - -- "${A[@]}"
    case_ random_base2 none - -- "${A[@]}"
    A=(stream 10 32 256)   # 8 GiB working set; pressure only from the 4 GiB budget
    case_ stream_record record - -- "${A[@]}"
    case_ stream_driverlike driver-like 4G -- "${A[@]}"
    case_ stream_prescient prescient 4G -- "${A[@]}"
    ;;
  gate)
    # Issue 5, run 6: the tracker gate (events off while the CPU faults; on
    # by default, *_nogate = --no-gate) and faults per iteration from a 10 ms
    # time series. No memory pressure in dnn/random/torch; stream's pressure
    # is only the 4 GiB residency budget that Prescient itself enforces.
    export STATS_MS=10
    A=(dnn 12 1024 4 256)
    case_ dnn_base none - -- "${A[@]}"
    case_ dnn_observe observe - -- "${A[@]}"
    EXTRA=--no-gate case_ dnn_prescient_nogate prescient - -- "${A[@]}"
    case_ dnn_prescient prescient - -- "${A[@]}"
    case_ dnn_base2 none - -- "${A[@]}"
    A=(random 10 4096 0.25)
    case_ random_base none - -- "${A[@]}"
    case_ random_observe observe - -- "${A[@]}"
    EXTRA=--no-gate case_ random_prescient_nogate prescient - -- "${A[@]}"
    case_ random_prescient prescient - -- "${A[@]}"
    case_ random_base2 none - -- "${A[@]}"
    ;;
  torch)
    # A PyTorch training loop whose every CUDA tensor is managed memory
    # (bench/gpu/torch), input written by the CPU into UM each iteration.
    export STATS_MS=10
    torch_allocator || continue
    A=(12 8192 16384 4096)
    RUNNER="python3 $HERE/torch/train.py" case_ torch_base none - -- "${A[@]}"
    RUNNER="python3 $HERE/torch/train.py" case_ torch_observe observe - -- "${A[@]}"
    RUNNER="python3 $HERE/torch/train.py" EXTRA=--no-gate case_ torch_prescient_nogate prescient - -- "${A[@]}"
    RUNNER="python3 $HERE/torch/train.py" case_ torch_prescient prescient - -- "${A[@]}"
    RUNNER="python3 $HERE/torch/train.py" case_ torch_base2 none - -- "${A[@]}"
    ;;
  torchbudget)
    # The PyTorch loop under a residency budget of about half its managed
    # memory (1.5 of 2.96 GB); the only pressure is the budget Prescient
    # (or the driver-like mode) enforces by its own evictions. "marks": the
    # allocator marks freed blocks dead and reused ones alive, and dead
    # victims are discarded (UVM_DISCARD) instead of copied; "marks_nodiscard"
    # takes the marks (dead blocks are the first victims) but copies them.
    export STATS_MS=10
    torch_allocator || continue
    A=(${ITERS:-12} 8192 16384 4096)
    TB=${TORCH_BUDGET:-1536M}
    M="--marks-socket $B/marks.sock"
    for rep in ${REPS:-1 2}; do
      RUNNER="python3 $HERE/torch/train.py" case_ torch_driverlike_$rep driver-like $TB -- "${A[@]}"
      RUNNER="python3 $HERE/torch/train.py" case_ torch_prescient_$rep prescient $TB -- "${A[@]}"
      [ -n "${PRESCIENTD_B:-}${B_EXTRA:-}" ] && PD_CASE=${PRESCIENTD_B:-$PD} EXTRA="${B_EXTRA:-}" RUNNER="python3 $HERE/torch/train.py" case_ torch_prescientB_$rep prescient $TB -- "${A[@]}"
      [ -n "${C_EXTRA:-}" ] && EXTRA="$C_EXTRA" RUNNER="python3 $HERE/torch/train.py" case_ torch_prescientC_$rep prescient $TB -- "${A[@]}"
      [ -z "${NO_MARKS:-}" ] && MARKS_SOCK=$B/marks.sock EXTRA="$M" RUNNER="python3 $HERE/torch/train.py" case_ torch_marks_$rep prescient $TB -- "${A[@]}"
      [ -n "${NODISCARD:-}" ] && MARKS_SOCK=$B/marks.sock EXTRA="$M --no-discard" RUNNER="python3 $HERE/torch/train.py" case_ torch_marks_nodiscard_$rep prescient $TB -- "${A[@]}"
    done
    ;;
  xfbudget)
    # A transformer encoder (ViT/BERT-like: train.py MODEL=transformer, the
    # CPU writing each batch of token embeddings into managed memory) under
    # a residency budget of half its managed memory, which a first run
    # without a daemon measures. Pressure only from prescientd's budget.
    export STATS_MS=10
    torch_allocator || continue
    A=(${ITERS:-10} ${XF_BATCH:-16} ${XF_SEQ:-256} ${XF_DIM:-1024} transformer)
    R="python3 $HERE/torch/train.py"
    RUNNER="$R" case_ xf_base none - -- "${A[@]}"
    mb=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["managed_bytes"])' "$OUT/xf_base.bench.jsonl" 2>/dev/null)
    [ -n "$mb" ] || { log "xf_base gave no managed_bytes"; continue; }
    XB=${XF_BUDGET:-$((mb / 2))}
    log "xfbudget: $mb managed bytes, budget $XB"
    for rep in ${REPS:-1 2}; do
      RUNNER="$R" case_ xf_driverlike_$rep driver-like $XB -- "${A[@]}"
      RUNNER="$R" case_ xf_prescient_$rep prescient $XB -- "${A[@]}"
      [ -n "${PRESCIENTD_B:-}${B_EXTRA:-}" ] && PD_CASE=${PRESCIENTD_B:-$PD} EXTRA="${B_EXTRA:-}" RUNNER="$R" case_ xf_prescientB_$rep prescient $XB -- "${A[@]}"
      [ -n "${C_EXTRA:-}" ] && EXTRA="$C_EXTRA" RUNNER="$R" case_ xf_prescientC_$rep prescient $XB -- "${A[@]}"
    done
    ;;
  dnnbudget)
    # The DNN-like loop (2 GiB: 1 GiB CPU-written input, four 256 MiB layers
    # first touched by the GPU) under a 1 GiB budget: pressure only from the
    # budget prescientd enforces.
    export STATS_MS=10
    A=(dnn ${ITERS:-12} 1024 4 256)
    for rep in ${REPS:-1 2}; do
      case_ dnn_driverlike_$rep driver-like ${DNN_BUDGET:-1G} -- "${A[@]}"
      case_ dnn_prescient_$rep prescient ${DNN_BUDGET:-1G} -- "${A[@]}"
      [ -n "${PRESCIENTD_B:-}${B_EXTRA:-}" ] && PD_CASE=${PRESCIENTD_B:-$PD} EXTRA="${B_EXTRA:-}" case_ dnn_prescientB_$rep prescient ${DNN_BUDGET:-1G} -- "${A[@]}"
      [ -n "${C_EXTRA:-}" ] && EXTRA="$C_EXTRA" case_ dnn_prescientC_$rep prescient ${DNN_BUDGET:-1G} -- "${A[@]}"
    done
    ;;
  oracle)
    # Issue 20: driver-like (recording the plan), Prescient, and the GPU
    # oracle replaying the plan of the same repetition's driver-like run,
    # under half of each workload's managed memory (the only pressure: the
    # budget prescientd enforces), plus a resident run without a daemon.
    # ORACLE_WL: which of dnn stream xf fdtd random; O_EXTRA: more oracle flags;
    # MAPS=SECONDS: each case's /dev/nvidia-uvm mappings that long in;
    # NO_PRESCIENT=1: driver-like and oracle only; NO_ORACLE=1: no oracle case;
    # PRESCIENTD_B: another build's prescient mode beside (prescientB);
    # VARIANTS="NAME:MODE:FLAGS;...": more cases of this build per
    # repetition (MODE prescient or oracle; oracle gets the plan), e.g.
    # "oracleW8:oracle:--workers 8;oracleM:oracle:--merge-queued 64";
    # a fourth field runs the workload under `prescientctl run FIELD4`
    # (execution ids from the runtime), e.g.
    # "ids:prescient:--exec-ids on:--mode exec-id --no-marks"; a fifth
    # field is more environment for the launcher (CTL_ENV), a sixth
    # another prescientd for the case (PD_CASE: an A/B of two builds);
    # WL_VARIANTS: which workloads get them (default all).
    export STATS_MS=10
    for wl in ${ORACLE_WL:-dnn stream xf}; do
      R=; AA=
      case $wl in
      dnn) A=(dnn ${ITERS:-10} 1024 4 256); OB=${DNN_BUDGET:-1G} ;;
      stream) A=(stream ${ITERS:-10} 32 256); OB=${STREAM_BUDGET:-4G} ;;
      # umbench random: the CPU rewrites a random quarter of 4 GiB every
      # iteration, the GPU reads random pages of all of it.
      random) A=(random ${ITERS:-10} 4096 0.25); OB=${RANDOM_BUDGET:-4G} ;;
      xf)
        torch_allocator || continue
        R="python3 $HERE/torch/train.py"; A=(${ITERS:-10} ${XF_BATCH:-16} ${XF_SEQ:-256} ${XF_DIM:-1024} transformer) ;;
      fdtd)
        # FDTD-2D, 3 fields of FDTD_N^2 floats (16384: 3.22 GB managed).
        [ -x $B/fdtd2d ] || continue
        R=$B/fdtd2d; A=(${ITERS:-10} ${FDTD_N:-16384} ${FDTD_N:-16384}) ;;
      esac
      RUNNER="$R" case_ ${wl}_base none - -- "${A[@]}"
      if [ $wl = xf ] || [ $wl = fdtd ]; then
        # Half of what the resident run reported managed (its last line with managed_bytes).
        mb=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "managed_bytes" in l][-1]["managed_bytes"])' "$OUT/${wl}_base.bench.jsonl" 2>/dev/null)
        [ -n "$mb" ] || { log "${wl}_base gave no managed_bytes"; continue; }
        OB=$((mb / 2))
      fi
      log "oracle $wl: budget $OB"
      for rep in ${REPS:-1 2}; do
        RUNNER="$R" EXTRA="--record-plan $OUT/${wl}_$rep.plan" case_ ${wl}_driverlike_$rep driver-like $OB -- "${A[@]}"
        [ -z "${NO_PRESCIENT:-}" ] && RUNNER="$R" case_ ${wl}_prescient_$rep prescient $OB -- "${A[@]}"
        [ -n "${PRESCIENTD_B:-}" ] && PD_CASE=$PRESCIENTD_B RUNNER="$R" case_ ${wl}_prescientB_$rep prescient $OB -- "${A[@]}"
        [ -z "${NO_ORACLE:-}" ] && RUNNER="$R" EXTRA="--plan $OUT/${wl}_$rep.plan ${O_EXTRA:-}" case_ ${wl}_oracle_$rep oracle $OB -- "${A[@]}"
        [ -n "${O2_EXTRA:-}" ] && RUNNER="$R" EXTRA="--plan $OUT/${wl}_$rep.plan $O2_EXTRA" case_ ${wl}_oracleB_$rep oracle $OB -- "${A[@]}"
        case " ${WL_VARIANTS:-$wl} " in *" $wl "*)
          IFS=';' read -ra VS <<< "${VARIANTS:-}"
          for v in "${VS[@]}"; do
            IFS=: read -r vn vm vf vc ve vp <<< "$v"
            [ "$vm" = oracle ] && vf="--plan $OUT/${wl}_$rep.plan $vf"
            PD_CASE="$vp" CTL_RUN="$vc" CTL_ENV="$ve" RUNNER="$R" EXTRA="$vf" case_ ${wl}_${vn}_$rep $vm $OB -- "${A[@]}"
          done ;;
        esac
      done
      gzip -f "$OUT"/${wl}_*.plan
    done
    python3 "$HERE/oracle_table.py" "$OUT/results.jsonl" "$OUT/bw.jsonl" | tee "$OUT/oracle_table.txt"
    ;;
  migbench)
    # The mechanism's ceiling (issue 20): migbench (uvm/src/bin/migbench)
    # migrates MIG_MB of an idle umbench hold process's managed memory,
    # ASYNC as prescientd's workers do, per job size and thread count.
    MB_BIN=${MIGBENCH:-$(dirname "$PD")/migbench}
    $B/umbench hold ${MIG_MB:-4096} 300 > "$OUT/hold.jsonl" 2> "$OUT/hold.err" &
    hp=$!
    for i in $(seq 100); do grep -q '"hold"' "$OUT/hold.jsonl" 2>/dev/null && break; sleep 0.1; done
    base=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "hold" in l][-1]["base"])' "$OUT/hold.jsonl")
    log "migbench: hold pid $hp base $base $(head -1 "$OUT/hold.jsonl")"
    timeout ${MIG_TIMEOUT:-200} "$MB_BIN" --pid $hp --base $base --bytes $(( ${MIG_MB:-4096} << 20 )) \
      --sizes-mb ${MIG_SIZES:-2,8,32} --threads ${MIG_THREADS:-1,2,4,8,16} --reps ${MIG_REPS:-2} \
      > "$OUT/migbench.jsonl" 2> "$OUT/migbench.err"
    log "migbench rc=$? $(wc -l < "$OUT/migbench.jsonl") lines; $(tail -2 "$OUT/migbench.err")"
    # Synchronous calls for comparison (the copy inside each call).
    [ -n "${MIG_SYNC:-}" ] && timeout 60 "$MB_BIN" --pid $hp --base $base --bytes $(( ${MIG_MB:-4096} << 20 )) \
      --sizes-mb 2,32 --threads 1,4 --reps 1 --sync >> "$OUT/migbench.jsonl" 2>> "$OUT/migbench.err"
    kill $hp; wait $hp
    python3 "$HERE/migtable.py" "$OUT/migbench.jsonl" | tee "$OUT/migtable.txt"
    ;;
  budget)
    export STATS_MS=1000
    A=(stream 10 32 256)   # 8 GiB working set; pressure only from the 4 GiB budget
    # Twice each, interleaved: the machine is noisy. (Self back-off is not
    # used under a budget since run 7.)
    case_ stream_driverlike driver-like 4G -- "${A[@]}"
    case_ stream_prescient prescient 4G -- "${A[@]}"
    [ -n "${PRESCIENTD_B:-}${B_EXTRA:-}" ] && PD_CASE=${PRESCIENTD_B:-$PD} EXTRA="${B_EXTRA:-}" case_ stream_prescientB prescient 4G -- "${A[@]}"
    [ -n "${C_EXTRA:-}" ] && EXTRA="$C_EXTRA" case_ stream_prescientC prescient 4G -- "${A[@]}"
    case_ stream_driverlike2 driver-like 4G -- "${A[@]}"
    case_ stream_prescient2 prescient 4G -- "${A[@]}"
    [ -n "${PRESCIENTD_B:-}${B_EXTRA:-}" ] && PD_CASE=${PRESCIENTD_B:-$PD} EXTRA="${B_EXTRA:-}" case_ stream_prescientB2 prescient 4G -- "${A[@]}"
    [ -n "${C_EXTRA:-}" ] && EXTRA="$C_EXTRA" case_ stream_prescientC2 prescient 4G -- "${A[@]}"
    ;;
  budgetseries)
    # The stream budget cases with a 10 ms counter series (sampler.py), to
    # see what Prescient does in its slow iterations.
    export STATS_MS=10
    A=(stream ${ITERS:-10} 32 256)
    case_ stream_driverlike_ts driver-like 4G -- "${A[@]}"
    case_ stream_prescient_ts prescient 4G -- "${A[@]}"
    ;;
  random)
    A=(random 10 4096 0.25)
    case_ random_base none - -- "${A[@]}"
    case_ random_prescient prescient - -- "${A[@]}"
    case_ random_observe observe - -- "${A[@]}"
    ;;
  esac
done
log done
# The device returns few files: pack everything into one archive.
# Recorded traces stay beside it (they come back as files of their own).
(cd "$OUT" && tar czf /tmp/umb-results.tgz --exclude=results.tgz --exclude='*.trace.gz' . && rm -f ./*.jsonl ./*.json ./*.log ./*.err ./*.txt ./*.csv ./*.tsv ./*.tsv.gz ./*.plan.gz && mv /tmp/umb-results.tgz results.tgz)
