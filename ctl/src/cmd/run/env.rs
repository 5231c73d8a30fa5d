//! The environment `prescientctl run` gives the command: the runtime
//! preloaded, PyTorch's allocator set so that its memory can be made
//! managed, and the runtime's settings.

use crate::cli::{RunArgs, RunMode};
use std::collections::BTreeMap;

/// Set in the command's environment (to the launcher's pid): a
/// `prescientctl run` inside it runs its command as it is.
pub const ENV_NESTED: &str = "PRESCIENT_RUN_PID";
/// PyTorch's allocator settings, current and older name.
pub const ALLOC_CONF: &str = "PYTORCH_ALLOC_CONF";
pub const ALLOC_CONF_OLD: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// The runtime's switch for prefetching fresh allocations to the GPU
/// (runtime/src/config.rs).
pub const ENV_PLACE_FRESH: &str = "PRESCIENT_PLACE_FRESH";

/// What the launcher sets, and what it says it overrode.
#[derive(Debug, PartialEq, Eq)]
pub struct ChildEnv {
    pub set: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

/// PyTorch's allocator settings with the two that managed memory needs:
/// the native caching allocator (cudaMallocAsync pools cannot be managed)
/// and no expandable segments (cuMemCreate/cuMemMap mappings cannot be
/// either). Other keys are kept in order. Returns the value and what was
/// overridden.
///
/// `backend` is written only over a user's own `backend` key: native is
/// PyTorch's default, and a `backend` token in the variable makes a job
/// that installs its own `CUDAPluggableAllocator` die on PyTorch's check
/// that the backend parsed at runtime is the one parsed at load time
/// (c10/cuda/CUDAAllocatorConfig.cpp: "native != pluggable"; GPU run 63).
pub fn alloc_conf(user: Option<&str>) -> (String, Vec<String>) {
    let user_backend = user.is_some_and(|u| {
        u.split(',')
            .any(|i| i.split(':').next().is_some_and(|k| k.trim() == "backend"))
    });
    let all = [("backend", "native"), ("expandable_segments", "False")];
    let forced = &all[usize::from(!user_backend)..];
    let mut out: Vec<(String, String)> = Vec::new();
    let mut notes = Vec::new();
    for item in user
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (k, v) = item.split_once(':').unwrap_or((item, ""));
        let (k, v) = (k.trim(), v.trim());
        match forced.iter().find(|(fk, _)| *fk == k) {
            Some((_, fv)) if !v.eq_ignore_ascii_case(fv) => {
                notes.push(format!("{k}:{v} overridden with {k}:{fv}"))
            }
            Some(_) => {}
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    let mut items: Vec<String> = forced.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    items.extend(
        out.into_iter()
            .map(|(k, v)| if v.is_empty() { k } else { format!("{k}:{v}") }),
    );
    (items.join(","), notes)
}

/// `LD_PRELOAD` with the runtime first (once).
pub fn preload(runtime: &str, user: Option<&str>) -> String {
    let rest: Vec<&str> = user
        .unwrap_or("")
        .split([':', ' '])
        .filter(|s| !s.is_empty() && *s != runtime)
        .collect();
    std::iter::once(runtime)
        .chain(rest)
        .collect::<Vec<_>>()
        .join(":")
}

/// Where marks go (the runtime reads it): unset, the job sends none.
pub const ENV_MARKS_SOCKET: &str = "PRESCIENT_MARKS_SOCKET";

/// What the launcher found for the torch helper's marks: the folder with
/// its sitecustomize (runtime/python) and the socket marks go to.
#[derive(Clone, Copy, Debug, Default)]
pub struct MarksSetup<'a> {
    pub python_dir: Option<&'a str>,
    pub socket: Option<&'a str>,
}

/// `PYTHONPATH` with `dir` first (once).
pub fn python_path(dir: &str, user: Option<&str>) -> String {
    std::iter::once(dir)
        .chain(
            user.unwrap_or("")
                .split(':')
                .filter(|s| !s.is_empty() && *s != dir),
        )
        .collect::<Vec<_>>()
        .join(":")
}

/// The marks' variables: the sitecustomize folder on PYTHONPATH and the
/// socket, unless `--no-marks` (a socket the user set is kept: `prescientd
/// attach --marks-socket` serves one).
fn marks_env(
    set: &mut BTreeMap<String, String>,
    args: &RunArgs,
    m: MarksSetup<'_>,
    get: &impl Fn(&str) -> Option<String>,
) {
    if args.no_marks {
        set.insert(ENV_MARKS_SOCKET.to_string(), String::new());
        return;
    }
    let (Some(dir), Some(sock)) = (
        m.python_dir,
        get(ENV_MARKS_SOCKET).or(m.socket.map(String::from)),
    ) else {
        return;
    };
    set.insert(
        "PYTHONPATH".to_string(),
        python_path(dir, get("PYTHONPATH").as_deref()),
    );
    set.insert(ENV_MARKS_SOCKET.to_string(), sock);
}

/// True for a UUID the runtime can match against `cuDeviceGetUuid`:
/// `GPU-` or `MIG-` and 32 hex digits (dashes aside), as nvidia-smi -L
/// prints them.
fn full_uuid(u: &str) -> bool {
    let hex = u.get(4..).unwrap_or("").replace('-', "");
    hex.len() == 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The budgets the job's runtime reports as its GPU's size (cuMemGetInfo),
/// by the UUID of the current context's device: `GPU-<uuid>=BYTES,...`
/// for the GPUs the budget names by a full UUID; None when there are none.
pub fn job_gpu_budgets(b: Option<&prescient_units::GpuBudget>) -> Option<String> {
    use prescient_units::GpuKey;
    let items: Vec<String> = (b?.gpus.iter())
        .filter_map(|(k, size)| match k {
            GpuKey::Uuid(u) if full_uuid(u) => Some(format!("{u}={size}")),
            _ => None,
        })
        .collect();
    (!items.is_empty()).then(|| items.join(","))
}

/// The size the job's runtime reports for a GPU `job_gpu_budgets` does not
/// name: the each-GPU budget, or smaller when the budget names GPUs by
/// nvidia-smi index (CUDA does not know that index, so the job cannot tell
/// whether its GPU is one of them: never more than such a GPU may hold).
pub fn job_budget(b: Option<&prescient_units::GpuBudget>) -> Option<u64> {
    use prescient_units::GpuKey;
    let b = b?;
    let unnamed = (b.gpus.iter())
        .filter(|(k, _)| !matches!(k, GpuKey::Uuid(u) if full_uuid(u)))
        .map(|(_, size)| *size);
    b.each.into_iter().chain(unnamed).min()
}

/// The variables to set for the command, from the launcher's own
/// environment (`get`) and arguments.
pub fn child_env(
    args: &RunArgs,
    runtime: &str,
    launcher_pid: u32,
    marks: MarksSetup<'_>,
    get: impl Fn(&str) -> Option<String>,
) -> ChildEnv {
    let mut set = BTreeMap::new();
    // prescientd answered, so it attaches the job and places its memory:
    // the runtime leaves fresh allocations to it (they are prefetched to
    // the GPU only when no daemon will place them; the user's setting wins).
    if marks.socket.is_some() && get(ENV_PLACE_FRESH).is_none() {
        set.insert(ENV_PLACE_FRESH.to_string(), "0".to_string());
    }
    marks_env(&mut set, args, marks, &get);
    let user_conf = get(ALLOC_CONF).or_else(|| get(ALLOC_CONF_OLD));
    let (conf, mut notes) = alloc_conf(user_conf.as_deref());
    set.insert(ALLOC_CONF.to_string(), conf.clone());
    set.insert(ALLOC_CONF_OLD.to_string(), conf);
    set.insert(
        "LD_PRELOAD".to_string(),
        preload(runtime, get("LD_PRELOAD").as_deref()),
    );
    set.insert(ENV_NESTED.to_string(), launcher_pid.to_string());
    let mode = match args.mode {
        RunMode::Auto => "auto",
        RunMode::ExecId => "exec-id",
        RunMode::Transparent => "transparent",
    };
    set.insert("PRESCIENT_MODE".to_string(), mode.to_string());
    if let Some(n) = notes.first_mut() {
        *n = format!("PyTorch allocator: {n}");
    }
    let by_uuid = job_gpu_budgets(args.budget.as_ref());
    if let Some(g) = &by_uuid {
        set.insert("PRESCIENT_GPU_BUDGETS".to_string(), g.clone());
    }
    if let Some(b) = job_budget(args.budget.as_ref()) {
        set.insert("PRESCIENT_BUDGET_BYTES".to_string(), b.to_string());
        let indexed = (args.budget.iter())
            .flat_map(|x| x.gpus.iter())
            .any(|(k, s)| {
                *s != b && !matches!(k, prescient_units::GpuKey::Uuid(u) if full_uuid(u))
            });
        if indexed
            || args
                .budget
                .as_ref()
                .and_then(|x| x.each)
                .is_some_and(|e| e != b)
        {
            notes.push(format!(
                "GPUs named by nvidia-smi index: the job sees {} MiB (the smallest) as the size of every GPU not named by its full UUID (CUDA does not know nvidia-smi's index); prescientd keeps each GPU under its own",
                b >> 20
            ));
        }
    }
    ChildEnv { set, notes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn allocator_settings_force_two_keys_and_keep_the_rest() {
        assert_eq!(
            alloc_conf(None),
            ("expandable_segments:False".into(), vec![])
        );
        let (c, n) = alloc_conf(Some(
            "backend:cudaMallocAsync, max_split_size_mb:128,expandable_segments:True",
        ));
        assert_eq!(
            c,
            "backend:native,expandable_segments:False,max_split_size_mb:128"
        );
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].contains("cudaMallocAsync"));
        let (c, n) = alloc_conf(Some(
            "expandable_segments:false,garbage_collection_threshold:0.6",
        ));
        assert_eq!(
            c,
            "expandable_segments:False,garbage_collection_threshold:0.6"
        );
        assert!(n.is_empty());
        // A user's own native backend stays said.
        let (c, n) = alloc_conf(Some("backend:native"));
        assert_eq!(c, "backend:native,expandable_segments:False");
        assert!(n.is_empty());
    }

    #[test]
    fn per_gpu_budgets_show_the_job_the_smallest_and_say_so() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: RunArgs,
        }
        let parse = |b: &str| T::try_parse_from(["t", "--budget", b, "--", "x"]).map(|t| t.a);
        let a = parse("30G,1=20G").unwrap();
        let e = child_env(&a, "/r.so", 42, MarksSetup::default(), |_| None);
        assert_eq!(e.set["PRESCIENT_BUDGET_BYTES"], (20u64 << 30).to_string());
        assert!(!e.set.contains_key("PRESCIENT_GPU_BUDGETS"));
        assert!(
            e.notes
                .iter()
                .any(|n| n.contains("20480 MiB (the smallest)")),
            "{:?}",
            e.notes
        );
        // Abbreviated UUIDs cannot be matched by the runtime: as an index.
        let a = parse("GPU-ab12=8G,GPU-cd34=8G").unwrap();
        let e = child_env(&a, "/r.so", 42, MarksSetup::default(), |_| None);
        assert_eq!(e.set["PRESCIENT_BUDGET_BYTES"], (8u64 << 30).to_string());
        assert!(!e.set.contains_key("PRESCIENT_GPU_BUDGETS"));
        assert!(e.notes.is_empty(), "{:?}", e.notes);
        // Full UUIDs: the runtime reports each GPU's own, the each-GPU
        // size elsewhere; nothing to warn about.
        let u = "GPU-7ce8175b-3288-efcd-14ce-8dc53dec1d6a";
        let a = parse(&format!("12G,{u}=8G")).unwrap();
        let e = child_env(&a, "/r.so", 42, MarksSetup::default(), |_| None);
        assert_eq!(e.set["PRESCIENT_BUDGET_BYTES"], (12u64 << 30).to_string());
        assert_eq!(
            e.set["PRESCIENT_GPU_BUDGETS"],
            format!("{u}={}", 8u64 << 30)
        );
        assert!(e.notes.is_empty(), "{:?}", e.notes);
        let a = parse(&format!("{u}=8G")).unwrap();
        let e = child_env(&a, "/r.so", 42, MarksSetup::default(), |_| None);
        assert!(
            !e.set.contains_key("PRESCIENT_BUDGET_BYTES"),
            "no budget elsewhere"
        );
        for (bad, says) in [
            ("1M", "at least 2 MiB"),
            ("4G,1=1M", "at least 2 MiB"),
            ("1=2G,1=3G", "named twice"),
            ("cuda:0=2G", "names no GPU"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("--budget") && err.contains(says),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_runtime_is_preloaded_first_and_once() {
        assert_eq!(preload("/r.so", None), "/r.so");
        assert_eq!(
            preload("/r.so", Some("/a.so /r.so:/b.so")),
            "/r.so:/a.so:/b.so"
        );
    }

    #[test]
    fn the_command_gets_mode_budget_and_nesting_guard() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: RunArgs,
        }
        let t = T::try_parse_from([
            "t",
            "--budget",
            "4G",
            "--mode",
            "transparent",
            "--",
            "python3",
            "x.py",
        ])
        .unwrap();
        let e = child_env(&t.a, "/r.so", 42, MarksSetup::default(), |k| {
            (k == ALLOC_CONF_OLD).then(|| "backend:cudaMallocAsync".to_string())
        });
        assert_eq!(e.set["PRESCIENT_MODE"], "transparent");
        assert_eq!(e.set["PRESCIENT_BUDGET_BYTES"], (4u64 << 30).to_string());
        assert_eq!(e.set[ENV_NESTED], "42");
        assert_eq!(
            e.set[ALLOC_CONF],
            "backend:native,expandable_segments:False"
        );
        assert_eq!(e.notes.len(), 1);
        assert_eq!(t.a.command, vec!["python3", "x.py"]);
    }

    #[test]
    fn marks_put_the_helper_first_on_pythonpath_and_name_the_socket() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: RunArgs,
        }
        let parse = |extra: &[&str]| {
            let mut v = vec!["t"];
            v.extend_from_slice(extra);
            v.extend_from_slice(&["--", "python3", "x.py"]);
            T::try_parse_from(v).unwrap().a
        };
        let m = MarksSetup {
            python_dir: Some("/p"),
            socket: Some("/run/s.sock"),
        };
        let user = |k: &str| (k == "PYTHONPATH").then(|| "/a:/p:/b".to_string());
        let e = child_env(&parse(&[]), "/r.so", 1, m, user);
        assert_eq!(e.set["PYTHONPATH"], "/p:/a:/b");
        assert_eq!(e.set[ENV_MARKS_SOCKET], "/run/s.sock");
        // A socket the user names (prescientd attach --marks-socket) wins.
        let e = child_env(&parse(&[]), "/r.so", 1, m, |k| {
            (k == ENV_MARKS_SOCKET).then(|| "/tmp/m.sock".to_string())
        });
        assert_eq!(e.set[ENV_MARKS_SOCKET], "/tmp/m.sock");
        // --no-marks: an empty socket (the runtime sends nothing), no hook.
        let e = child_env(&parse(&["--no-marks"]), "/r.so", 1, m, user);
        assert_eq!(e.set[ENV_MARKS_SOCKET], "");
        assert!(!e.set.contains_key("PYTHONPATH"));
        // No daemon, or no helper: nothing.
        let e = child_env(&parse(&[]), "/r.so", 1, MarksSetup::default(), user);
        assert!(!e.set.contains_key(ENV_MARKS_SOCKET));
        assert!(!e.set.contains_key("PYTHONPATH"));
    }

    #[test]
    fn fresh_memory_is_left_to_prescientd_when_it_answers() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: RunArgs,
        }
        let a = T::try_parse_from(["t", "--", "x"]).unwrap().a;
        let daemon = MarksSetup {
            python_dir: None,
            socket: Some("/run/s.sock"),
        };
        let none = |_: &str| None;
        let e = child_env(&a, "/r.so", 1, daemon, none);
        assert_eq!(e.set[ENV_PLACE_FRESH], "0");
        // No daemon: the runtime's default (placed, without a budget).
        let e = child_env(&a, "/r.so", 1, MarksSetup::default(), none);
        assert!(!e.set.contains_key(ENV_PLACE_FRESH));
        // The user's setting is the user's.
        let e = child_env(&a, "/r.so", 1, daemon, |k| {
            (k == ENV_PLACE_FRESH).then(|| "1".to_string())
        });
        assert!(!e.set.contains_key(ENV_PLACE_FRESH));
    }
}
