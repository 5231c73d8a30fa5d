"""Builds sim/gpu-runs/runs.json from the raw GPU results in bench/gpu/results.

Each entry is one repetition of one workload in one bench/gpu/run.sh run: the
driver-like case and the Prescient case of the same repetition, their median
GPU phase (ms, iterations 3-10), steady fault blocks per iteration (the
daemon's sampler cut at the iteration marks: bench/gpu/periter.py; for the
stream, which the sampler does not cut, the daemon's fault blocks over the run
divided by its iterations), and the link speeds cudaMemcpy measured in the
same run (bw.jsonl). Only workloads the simulator can rebuild exactly from
bench/gpu/umbench.cu are taken (dnn, stream); the PyTorch loops have no trace.
Usage (from the repository root): python3 sim/gpu-runs/extract.py > sim/gpu-runs/runs.json"""
import io
import json
import tarfile

# (run, workload, driver-like case, Prescient case, held out, what the Prescient case ran)
CASES = [
    ("h100-run30", "dnn", "dnn_driverlike_1", "dnn_prescientB_1", False, "--regret-window"),
    ("h100-run30", "dnn", "dnn_driverlike_2", "dnn_prescientB_2", False, "--regret-window"),
    ("h100-run32", "dnn", "dnn_driverlike_1", "dnn_prescient_1", False, "default (regret window)"),
    ("h100-run32", "dnn", "dnn_driverlike_2", "dnn_prescient_2", False, "default (regret window)"),
    ("h100-run33", "dnn", "dnn_driverlike_1", "dnn_prescient_1", False, "default, shared host loop"),
    ("h100-run33", "dnn", "dnn_driverlike_2", "dnn_prescient_2", False, "default, shared host loop"),
    ("h100-run34", "dnn", "dnn_driverlike_1", "dnn_prescient_1", True, "default, shared host loop"),
    ("h100-run34", "dnn", "dnn_driverlike_2", "dnn_prescient_2", True, "default, shared host loop"),
    ("h100-run34", "dnn", "dnn_driverlike_3", "dnn_prescient_3", True, "default, shared host loop"),
    ("h100-run30", "stream", "stream_driverlike", "stream_prescientB", False, "--regret-window"),
    ("h100-run30", "stream", "stream_driverlike2", "stream_prescientB2", True, "--regret-window"),
    # Run 148: main's prescientd at f2919c8 as the model configures it
    # (transparent mode, 4 workers, no queue merging), never fitted on.
    ("h100-run148-sim-heldout", "dnn", "dnn_d4_1", "dnn_t4_1", True, "transparent, --workers 4 --merge-queued 0"),
    ("h100-run148-sim-heldout", "dnn", "dnn_d4_2", "dnn_t4_2", True, "transparent, --workers 4 --merge-queued 0"),
    ("h100-run148-sim-heldout", "stream", "stream_d4_1", "stream_t4_1", True, "transparent, --workers 4 --merge-queued 0"),
    ("h100-run148-sim-heldout", "stream", "stream_d4_2", "stream_t4_2", True, "transparent, --workers 4 --merge-queued 0"),
]
COMMANDS = {
    "h100-run30": 'OUT=.../r30 B_EXTRA="--regret-window" NO_MARKS=1 TORCH_BUDGET=1536M REPS="1 2" WHAT="dnnbudget budget torchbudget" bash bench/gpu/run.sh',
    "h100-run32": 'OUT=.../r32 PRESCIENTD_B=<floor-4 build> REPS="1 2" ITERS=10 WHAT="dnnbudget xfbudget" bash bench/gpu/run.sh',
    "h100-run33": 'OUT=.../r33 PRESCIENTD=dist/new/prescientd PRESCIENTD_B=dist/old/prescientd-compat REPS="1 2" ITERS=10 WHAT="dnnbudget xfbudget" bash bench/gpu/run.sh',
    "h100-run148-sim-heldout": 'bench/gpu/results/h100-run148-sim-heldout/batch148.sh (OUT=.../sim WHAT=oracle ORACLE_WL="dnn stream" REPS="1 2" ITERS=10 NO_PRESCIENT=1 NO_ORACLE=1 VARIANTS="t4:prescient:--exec-ids off --workers 4 --merge-queued 0;d4:driver-like:--workers 4 --merge-queued 0;t8:prescient:--exec-ids off" bash bench/gpu/run.sh)',
    "h100-run34": 'OUT=.../r34 PRESCIENTD=dist/new/prescientd PRESCIENTD_B=dist/old/prescientd-compat REPS="1 2 3" ITERS=10 WHAT="dnnbudget xfbudget" bash bench/gpu/run.sh',
}
WORKLOAD = {
    "dnn": {"command": "umbench dnn 10 1024 4 256", "budget_bytes": 1 << 30},
    "stream": {"command": "umbench stream 10 32 256", "budget_bytes": 4 << 30},
}


def member(tar, name):
    return tar.extractfile(tar.getmember("./" + name)).read().decode()


def faults(rec):
    per = rec.get("per_iter") or {}
    if per.get("steady_mean_fault_blocks") is not None:
        return per["steady_mean_fault_blocks"]
    return rec["daemon"]["fault_blocks"] / rec["bench"]["iters"]


runs = []
for run, wl, dcase, pcase, held, what in CASES:
    path = f"bench/gpu/results/{run}/results.tgz"
    with tarfile.open(path) as tar:
        recs = {json.loads(l)["case"]: json.loads(l) for l in io.StringIO(member(tar, "results.jsonl")) if l.strip()}
        bw = json.loads(member(tar, "bw.jsonl"))
    d, p = recs[dcase], recs[pcase]
    rep = dcase.rsplit("_", 1)[-1] if dcase[-1].isdigit() else "1"
    rep = rep.replace("driverlike", "") or "1"
    runs.append({
        "name": f"{run}-{wl}-rep{rep}",
        "workload": wl,
        "command": WORKLOAD[wl]["command"],
        "budget_bytes": WORKLOAD[wl]["budget_bytes"],
        "source": f"{path}: cases {dcase} (driver-like) and {pcase} (Prescient: {what}); run.sh: {COMMANDS[run]}",
        "h2d_gbps": bw["h2d_gbps"],
        "d2h_gbps": bw["d2h_gbps"],
        "driverlike_gpu_ms": d["bench"]["median_gpu_ms"],
        "prescient_gpu_ms": p["bench"]["median_gpu_ms"],
        "driverlike_fault_blocks": round(faults(d), 1),
        "prescient_fault_blocks": round(faults(p), 1),
        "held_out": held,
    })
print(json.dumps({"runs": runs}, indent=1))
