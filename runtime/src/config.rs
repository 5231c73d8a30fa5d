//! What the launcher (`prescientctl run`) asks of the runtime, read once
//! from the environment it sets.

use std::sync::OnceLock;

/// The variables, as `prescientctl run` sets them.
pub const ENV_BUDGET: &str = "PRESCIENT_BUDGET_BYTES";
pub const ENV_GPU_BUDGETS: &str = "PRESCIENT_GPU_BUDGETS";
pub const ENV_MODE: &str = "PRESCIENT_MODE";
pub const ENV_ID_ARGS: &str = "PRESCIENT_ID_ARGS";
pub const ENV_LOG: &str = "PRESCIENT_RUNTIME_LOG";
pub const ENV_ID_LOG: &str = "PRESCIENT_ID_LOG";
pub const ENV_PLACE_FRESH: &str = "PRESCIENT_PLACE_FRESH";
pub const ENV_FOOTPRINTS: &str = "PRESCIENT_FOOTPRINTS";
pub const ENV_FOOTPRINT_UNKNOWN: &str = "PRESCIENT_FOOTPRINT_UNKNOWN_BYTES";

/// The runtime's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Residency budget in bytes: `cuMemGetInfo` reports it as the total
    /// (for a GPU `gpu_budgets` does not name).
    pub budget: Option<u64>,
    /// GPUs' own budgets by UUID (16 bytes, as `cuDeviceGetUuid` gives
    /// them): `GPU-<uuid>=BYTES,...` (or `MIG-`), written by the launcher
    /// from the budget's UUID keys.
    pub gpu_budgets: Vec<([u8; 16], u64)>,
    /// Write execution ids into the page (false in transparent mode).
    pub marks: bool,
    /// Write them only while the page's reader asks for them (auto mode).
    pub marks_on_request: bool,
    /// Which argument bytes an id hashes besides the function and the
    /// launch shape (PRESCIENT_ID_ARGS: `pointers`, the default; `all`;
    /// `0` or `none`).
    pub id_args: IdArgs,
    /// One line at start and the counters at exit, on stderr.
    pub log: bool,
    /// Where to write every launch's id at exit (8 bytes each, little
    /// endian; measurements of id stability only).
    pub id_log: Option<String>,
    /// Prefetch each fresh managed allocation to the GPU that allocated
    /// it, as cuMemAlloc would have placed it: on by default without a
    /// budget (nothing to page: the job then starts as it would on device
    /// memory, without a first-touch fault per page), off under one (the
    /// daemon places memory). PRESCIENT_PLACE_FRESH=0/1 overrides;
    /// `prescientctl run` sets 0 when prescientd answers (it attaches the
    /// job and places its memory).
    pub place_fresh: bool,
    /// Make the launch ring (footprint/), whose records are written only
    /// while a reader asks: on unless PRESCIENT_FOOTPRINTS=0, and never
    /// without ids (a footprint is keyed by its launch's id).
    pub footprints: bool,
    /// Bytes from the pointer a pointer argument with no live allocator
    /// block known there stands for at most (footprint/extents.rs):
    /// PRESCIENT_FOOTPRINT_UNKNOWN_BYTES, default 64 MB; 0: only the
    /// pointer's own 2 MB block.
    pub footprint_unknown_cap: u64,
}

impl Config {
    /// Parses the settings from a variable lookup (tests pass their own).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Config {
        let mode = get(ENV_MODE);
        let transparent = mode.as_deref() == Some("transparent");
        let budget = get(ENV_BUDGET)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&b| b > 0);
        let gpu_budgets = get(ENV_GPU_BUDGETS)
            .map(|v| parse_gpu_budgets(&v))
            .unwrap_or_default();
        // Any budget, one for all GPUs or one per GPU, means pressure:
        // the daemon places memory then, not the runtime.
        let budgeted = budget.is_some() || !gpu_budgets.is_empty();
        Config {
            budget,
            gpu_budgets,
            marks: !transparent,
            marks_on_request: mode.as_deref().is_none_or(|m| m == "auto"),
            id_args: IdArgs::parse(get(ENV_ID_ARGS).as_deref()),
            log: get(ENV_LOG).is_some_and(|v| v == "1"),
            id_log: get(ENV_ID_LOG).filter(|p| !p.is_empty()),
            footprints: !transparent && get(ENV_FOOTPRINTS).is_none_or(|v| v != "0"),
            footprint_unknown_cap: get(ENV_FOOTPRINT_UNKNOWN)
                .and_then(|v| v.parse().ok())
                .unwrap_or(crate::footprint::extents::UNKNOWN_CAP),
            place_fresh: match get(ENV_PLACE_FRESH).as_deref() {
                Some("0") => false,
                Some("1") => true,
                _ => !budgeted,
            },
        }
    }
}

/// Which of a launch's argument bytes its execution id hashes.
///
/// An id must repeat in the next step and tell apart the same kernel on
/// other tensors. The tensors' addresses do both (the caching allocator
/// hands the same blocks out again); other arguments may not: a time step
/// (FDTD-2D's `t`) or a random-number offset changes on every launch and
/// makes every id new (BENCHMARKS-gpu.md run 66: FDTD-2D 279 ms a step
/// without arguments, 717 ms with all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdArgs {
    /// Function and launch shape only.
    None,
    /// Plus the argument words that point into managed memory.
    Pointers,
    /// Plus up to 1 KiB of argument bytes, whatever they hold.
    All,
}

impl IdArgs {
    /// `0`/`none`, `1`/`all`, else (`pointers`, unset or unknown) pointers.
    fn parse(v: Option<&str>) -> IdArgs {
        match v {
            Some("0" | "none") => IdArgs::None,
            Some("1" | "all") => IdArgs::All,
            _ => IdArgs::Pointers,
        }
    }
}

impl Config {
    /// The budget `cuMemGetInfo` reports for the GPU whose UUID is `uuid`
    /// (None: not known): its own, else the each-GPU one.
    pub fn budget_of(&self, uuid: Option<[u8; 16]>) -> Option<u64> {
        uuid.and_then(|u| self.gpu_budgets.iter().find(|(g, _)| *g == u))
            .map(|(_, b)| *b)
            .or(self.budget)
    }
}

/// The 16 bytes of a UUID as nvidia-smi writes it (`GPU-` or `MIG-`, then
/// 32 hex digits in groups joined by `-`); None if it is not one.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex = s
        .strip_prefix("GPU-")
        .or_else(|| s.strip_prefix("MIG-"))?
        .replace('-', "");
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// `GPU-<uuid>=BYTES,...`; an item that is not one is skipped (the
/// launcher writes only valid ones; a hand-set variable may not).
fn parse_gpu_budgets(v: &str) -> Vec<([u8; 16], u64)> {
    v.split(',')
        .filter_map(|item| {
            let (k, b) = item.trim().split_once('=')?;
            Some((parse_uuid(k.trim())?, b.trim().parse::<u64>().ok()?))
        })
        .filter(|&(_, b)| b > 0)
        .collect()
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The process's settings.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| Config::parse(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Config {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(|k| m.get(k).cloned())
    }

    #[test]
    fn ids_are_off_in_transparent_mode_only() {
        assert!(parse(&[]).marks);
        assert!(parse(&[]).marks_on_request);
        assert!(parse(&[(ENV_MODE, "exec-id")]).marks);
        assert!(!parse(&[(ENV_MODE, "exec-id")]).marks_on_request);
        assert!(!parse(&[(ENV_MODE, "transparent")]).marks);
        assert_eq!(parse(&[(ENV_BUDGET, "0")]).budget, None);
        assert_eq!(parse(&[(ENV_BUDGET, "1048576")]).budget, Some(1 << 20));
        assert_eq!(parse(&[]).id_args, IdArgs::Pointers);
        assert_eq!(
            parse(&[(ENV_ID_ARGS, "pointers")]).id_args,
            IdArgs::Pointers
        );
        assert_eq!(parse(&[(ENV_ID_ARGS, "0")]).id_args, IdArgs::None);
        assert_eq!(parse(&[(ENV_ID_ARGS, "none")]).id_args, IdArgs::None);
        assert_eq!(parse(&[(ENV_ID_ARGS, "all")]).id_args, IdArgs::All);
        assert_eq!(parse(&[(ENV_ID_ARGS, "1")]).id_args, IdArgs::All);
    }

    #[test]
    fn fresh_memory_is_placed_only_without_a_budget_unless_told() {
        assert!(parse(&[]).place_fresh);
        assert!(!parse(&[(ENV_BUDGET, "1048576")]).place_fresh);
        let per_gpu = "GPU-7ce8175b-3288-efcd-14ce-8dc53dec1d6a=1048576";
        assert!(!parse(&[(ENV_GPU_BUDGETS, per_gpu)]).place_fresh);
        assert!(parse(&[(ENV_BUDGET, "1048576"), (ENV_PLACE_FRESH, "1")]).place_fresh);
        assert!(!parse(&[(ENV_PLACE_FRESH, "0")]).place_fresh);
    }

    #[test]
    fn each_gpu_named_by_uuid_has_its_own_budget() {
        let u1 = "GPU-7ce8175b-3288-efcd-14ce-8dc53dec1d6a";
        let c = parse(&[
            (ENV_BUDGET, "100"),
            (
                ENV_GPU_BUDGETS,
                &format!("{u1}=300, MIG-00000000-0000-0000-0000-000000000002=200,bad=1,GPU-12=5"),
            ),
        ]);
        let b1 = parse_uuid(u1).unwrap();
        assert_eq!(b1[..4], [0x7c, 0xe8, 0x17, 0x5b]);
        assert_eq!(b1[15], 0x6a);
        assert_eq!(c.gpu_budgets.len(), 2, "{:?}", c.gpu_budgets);
        assert_eq!(c.budget_of(Some(b1)), Some(300));
        let mut mig = [0u8; 16];
        mig[15] = 2;
        assert_eq!(c.budget_of(Some(mig)), Some(200));
        // Another GPU, or one whose UUID is not known: the each-GPU size.
        assert_eq!(c.budget_of(Some([9; 16])), Some(100));
        assert_eq!(c.budget_of(None), Some(100));
        assert_eq!(
            parse(&[(ENV_GPU_BUDGETS, &format!("{u1}=3"))]).budget_of(Some([9; 16])),
            None
        );
        assert_eq!(parse_uuid("GPU-7ce8175b-3288-efcd-14ce-8dc53dec1d6"), None);
        assert_eq!(parse_uuid("7ce8175b-3288-efcd-14ce-8dc53dec1d6a"), None);
    }
}
