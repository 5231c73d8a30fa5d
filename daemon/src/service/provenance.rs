//! The parameters the daemon applies (the config's, with the budget
//! resolved from the detected GPU) and where each value in force came from,
//! for `prescientctl status`: the built-in default, the config file,
//! `prescientctl set`, or NVML.

use crate::config::{BackendKind, Config};
use crate::gpu::{self, Detected};
use prescient_uapi::control::{EngineParams, Setting};

/// The parameters the daemon applies for `cfg`: the config's engine
/// section, with the module backend's budget resolved from the detected
/// GPU when the config leaves it 0. The user-space backend keeps 0: there a
/// budget means enforcing one below the GPU's size, and its engine is
/// sized by [`gpu::gpu_memory`] instead.
pub fn engine_params(cfg: &Config, detected: &Detected) -> EngineParams {
    let mut p = EngineParams::from(&cfg.engine);
    match cfg.backend {
        BackendKind::Module => {
            p.residency_budget_bytes =
                gpu::residency_budget(p.residency_budget_bytes, detected).bytes;
        }
        BackendKind::Userspace => {
            crate::userspace::own_table_defaults(&mut p);
        }
    }
    p
}

/// One engine key: its config name and its value in a parameter set.
type EngineKey = (&'static str, fn(&EngineParams) -> String);

const ENGINE: &[EngineKey] = &[
    ("engine.rows", |p| p.rows.to_string()),
    ("engine.assoc", |p| p.assoc.to_string()),
    ("engine.succs", |p| p.succs.to_string()),
    ("engine.lookahead", |p| p.lookahead.to_string()),
    ("engine.inflight_limit", |p| p.inflight_limit.to_string()),
    ("engine.pre_evict_watermark_pct", |p| {
        p.pre_evict_watermark_pct.to_string()
    }),
    ("engine.residency_budget", |p| {
        bytes(p.residency_budget_bytes)
    }),
    ("engine.enabled", |p| p.enabled.to_string()),
    ("engine.mode", |p| p.mode.name().to_string()),
];

/// A size as prescient-units prints it ("0" stays "0").
fn bytes(b: u64) -> String {
    prescient_units::ByteSize(b).to_string()
}

/// "config" or "default", by whether the file set `key`.
fn from_file(cfg: &Config, key: &str) -> String {
    if cfg.explicit.has(key) {
        "config".into()
    } else {
        "default".into()
    }
}

/// Each value in force (`desired`: the config's, then prescientctl set's)
/// and its source.
pub(super) fn settings(cfg: &Config, desired: &EngineParams, det: &Detected) -> Vec<Setting> {
    let from_config = engine_params(cfg, det);
    let own = match cfg.backend {
        BackendKind::Userspace => {
            crate::userspace::own_table_defaults(&mut EngineParams::from(&cfg.engine))
        }
        BackendKind::Module => Vec::new(),
    };
    let mut out: Vec<Setting> = ENGINE
        .iter()
        .map(|(key, read)| {
            let value = read(desired);
            let source = if value != read(&from_config) {
                "prescientctl set".into()
            } else if own.contains(key) {
                "default (user-space backend)".into()
            } else if *key == "engine.residency_budget" && cfg.backend == BackendKind::Module {
                gpu::residency_budget(cfg.engine.residency_budget.each_bytes(), det).source
            } else {
                from_file(cfg, key)
            };
            Setting {
                key: (*key).into(),
                value,
                source,
            }
        })
        .collect();
    if cfg.backend == BackendKind::Userspace {
        let m = gpu::gpu_memory(cfg.userspace.gpu_memory.0, det);
        out.push(Setting {
            key: "userspace.gpu_memory".into(),
            value: bytes(m.bytes),
            source: m.source,
        });
    }
    let gpu_source = match det {
        Detected::Gpu(_) => format!("{} (NVML)", from_file(cfg, "gpu.index")),
        Detected::None(why) => format!("not detected: {why}"),
    };
    out.push(Setting {
        key: "gpu.index".into(),
        value: cfg.gpu.index.to_string(),
        source: gpu_source,
    });
    for (key, value) in [
        ("metrics.listen", cfg.metrics.listen.clone()),
        ("control.socket", cfg.control.socket.display().to_string()),
    ] {
        out.push(Setting {
            key: key.into(),
            source: from_file(cfg, key),
            value,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source<'a>(s: &'a [Setting], key: &str) -> (&'a str, &'a str) {
        let x = s.iter().find(|x| x.key == key).unwrap();
        (x.value.as_str(), x.source.as_str())
    }

    #[test]
    fn each_value_names_its_source() {
        let cfg = Config::parse("[engine]\nassoc = 4\n").unwrap();
        let det = Detected::None("NVML is not available (no library)".into());
        let mut desired = engine_params(&cfg, &det);
        desired.lookahead = 8;
        let s = settings(&cfg, &desired, &det);
        assert_eq!(source(&s, "engine.assoc"), ("4", "config"));
        assert_eq!(source(&s, "engine.rows").1, "default");
        assert_eq!(source(&s, "engine.lookahead"), ("8", "prescientctl set"));
        assert_eq!(
            source(&s, "engine.residency_budget"),
            ("0", "none: GPU size unknown, no pre-eviction")
        );
        assert!(source(&s, "gpu.index").1.contains("no library"));
    }

    #[test]
    fn a_detected_gpu_sizes_the_module_budget_and_says_so() {
        let cfg = Config::parse("").unwrap();
        let det = Detected::Gpu(gpu::Device {
            index: 0,
            uuid: "GPU-1".into(),
            name: "H100".into(),
            memory_bytes: 80 << 30,
        });
        let desired = engine_params(&cfg, &det);
        assert_eq!(desired.residency_budget_bytes, 80 << 30);
        let s = settings(&cfg, &desired, &det);
        assert_eq!(
            source(&s, "engine.residency_budget").1,
            "detected GPU size (NVML)"
        );
        assert_eq!(source(&s, "gpu.index"), ("0", "default (NVML)"));
        // The user-space backend is sized by it instead, with no budget.
        let cfg = Config::parse("backend = \"userspace\"").unwrap();
        let desired = engine_params(&cfg, &det);
        assert_eq!(desired.residency_budget_bytes, 0);
        let s = settings(&cfg, &desired, &det);
        assert_eq!(source(&s, "userspace.gpu_memory").1, "detected (NVML)");
    }

    /// The user-space backend's table keys: attach's where the file
    /// leaves prescient.ko's, said so; the file's or prescientctl set's
    /// otherwise.
    #[test]
    fn the_userspace_backend_names_its_own_table_defaults() {
        let det = Detected::None("test".into());
        let cfg = Config::parse("backend = \"userspace\"\n[engine]\nassoc = 4\n").unwrap();
        let mut desired = engine_params(&cfg, &det);
        let s = settings(&cfg, &desired, &det);
        assert_eq!(
            source(&s, "engine.rows"),
            ("2048", "default (user-space backend)")
        );
        assert_eq!(
            source(&s, "engine.lookahead"),
            ("16", "default (user-space backend)")
        );
        assert_eq!(source(&s, "engine.assoc"), ("4", "config"));
        desired.rows = 512;
        let s = settings(&cfg, &desired, &det);
        assert_eq!(source(&s, "engine.rows"), ("512", "prescientctl set"));
    }
}
