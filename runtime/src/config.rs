//! What the launcher (`prescientctl run`) asks of the runtime, read once
//! from the environment it sets.

use std::sync::OnceLock;

/// The variables, as `prescientctl run` sets them.
pub const ENV_BUDGET: &str = "PRESCIENT_BUDGET_BYTES";
pub const ENV_MODE: &str = "PRESCIENT_MODE";
pub const ENV_ID_ARGS: &str = "PRESCIENT_ID_ARGS";
pub const ENV_LOG: &str = "PRESCIENT_RUNTIME_LOG";
pub const ENV_ID_LOG: &str = "PRESCIENT_ID_LOG";
pub const ENV_PLACE_FRESH: &str = "PRESCIENT_PLACE_FRESH";

/// The runtime's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Residency budget in bytes: `cuMemGetInfo` reports it as the total.
    pub budget: Option<u64>,
    /// Write execution ids into the page (false in transparent mode).
    pub marks: bool,
    /// Write them only while the page's reader asks for them (auto mode).
    pub marks_on_request: bool,
    /// Hash kernel arguments into ids (else function and launch shape only).
    pub id_args: bool,
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
}

impl Config {
    /// Parses the settings from a variable lookup (tests pass their own).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Config {
        let mode = get(ENV_MODE);
        let transparent = mode.as_deref() == Some("transparent");
        let budget = get(ENV_BUDGET)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&b| b > 0);
        Config {
            budget,
            marks: !transparent,
            marks_on_request: mode.as_deref().is_none_or(|m| m == "auto"),
            id_args: get(ENV_ID_ARGS).is_none_or(|v| v != "0"),
            log: get(ENV_LOG).is_some_and(|v| v == "1"),
            id_log: get(ENV_ID_LOG).filter(|p| !p.is_empty()),
            place_fresh: match get(ENV_PLACE_FRESH).as_deref() {
                Some("0") => false,
                Some("1") => true,
                _ => budget.is_none(),
            },
        }
    }
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
        assert!(parse(&[]).id_args);
        assert!(!parse(&[(ENV_ID_ARGS, "0")]).id_args);
    }

    #[test]
    fn fresh_memory_is_placed_only_without_a_budget_unless_told() {
        assert!(parse(&[]).place_fresh);
        assert!(!parse(&[(ENV_BUDGET, "1048576")]).place_fresh);
        assert!(parse(&[(ENV_BUDGET, "1048576"), (ENV_PLACE_FRESH, "1")]).place_fresh);
        assert!(!parse(&[(ENV_PLACE_FRESH, "0")]).place_fresh);
    }
}
