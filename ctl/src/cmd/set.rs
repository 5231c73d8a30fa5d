//! `prescientctl set ...`: change parameters; prints the old and new values.

use crate::cli::{ModeArg, SetArgs};
use crate::client::{fail, json, Client, Res, EXIT_REFUSED, EXIT_USAGE};
use crate::render::param_rows;
use prescient_uapi::control::{Mode, ParamChanges, Reply, Request};
use prescient_units::GpuBudget;
use std::path::Path;

pub fn run(socket: &Path, a: &SetArgs) -> Res<()> {
    let (ch, per_gpu) = changes(a)?;
    if let Some(b) = per_gpu {
        let r = Client::connect(socket)?.call(&Request::SetGpuBudget {
            budget: b.to_string(),
        })?;
        if let Reply::Done { message } = r {
            println!("{message}");
        }
        if ch.is_empty() {
            return Ok(());
        }
    }
    let Reply::ParamsChanged { old, new } =
        Client::connect(socket)?.call(&Request::SetParams { changes: ch })?
    else {
        return Err(fail(EXIT_REFUSED, "unexpected reply to set"));
    };
    if a.json {
        return json(&serde_json::json!({ "old": old, "new": new }));
    }
    println!("{:<10} {:>12} {:>12}", "", "OLD", "NEW");
    for ((k, o), (_, n)) in param_rows(&old).into_iter().zip(param_rows(&new)) {
        let mark = if o != n { "  *" } else { "" };
        println!("{k:<10} {o:>12} {n:>12}{mark}");
    }
    Ok(())
}

/// The changes `a` asks for, and the per-GPU sizes of its `--budget`
/// (sent apart: only the user-space backend keeps them); a bad `--budget`
/// is a usage error.
fn changes(a: &SetArgs) -> Res<(ParamChanges, Option<GpuBudget>)> {
    let parsed = match &a.budget {
        Some(b) => Some(
            prescient_units::parse_budget(b)
                .map_err(|e| fail(EXIT_USAGE, format!("--budget: {e}")))?,
        ),
        None => None,
    };
    let budget = parsed.as_ref().and_then(|b| b.each);
    let per_gpu = parsed.filter(|b| !b.gpus.is_empty()).map(|b| GpuBudget {
        each: None,
        gpus: b.gpus,
    });
    let ch = ParamChanges {
        rows: a.rows,
        assoc: a.assoc,
        succs: a.succs,
        lookahead: a.lookahead,
        inflight_limit: a.inflight,
        pre_evict_watermark_pct: a.watermark,
        residency_budget_bytes: budget,
        enabled: if a.enable {
            Some(true)
        } else if a.disable {
            Some(false)
        } else {
            None
        },
        mode: a.mode.map(Mode::from),
    };
    Ok((ch, per_gpu))
}

/// The flag's value as the protocol names it. `ModeArg` stays in cli.rs
/// because build.rs compiles that file with clap alone.
impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Transparent => Mode::Transparent,
            ModeArg::ExecId => Mode::ExecId,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn budget_parses_with_units_and_refuses_garbage() {
        let cli = Cli::try_parse_from(["prescientctl", "set", "--budget", "4G"]).unwrap();
        let Command::Set(a) = cli.command else {
            panic!()
        };
        assert_eq!(
            changes(&a).ok().unwrap().0.residency_budget_bytes,
            Some(4 << 30)
        );
        let cli = Cli::try_parse_from(["prescientctl", "set", "--budget", "lots"]).unwrap();
        let Command::Set(a) = cli.command else {
            panic!()
        };
        let e = changes(&a).err().unwrap();
        assert!(e.message.starts_with("--budget"), "{}", e.message);
    }

    /// `--mode`'s values are the protocol's names for the same modes.
    #[test]
    fn mode_flag_values_are_the_protocols_names() {
        use clap::ValueEnum;
        for m in ModeArg::value_variants() {
            let flag = m.to_possible_value().unwrap();
            assert_eq!(flag.get_name(), Mode::from(*m).name());
        }
    }

    /// The shared grammar's cases (units/src/size.rs, budget.rs): 1.5G is
    /// 1536M, and per-GPU sizes go apart from the each-GPU one.
    #[test]
    fn budgets_read_as_the_daemon_reads_them() {
        let set = |b: &str| {
            let flag = format!("--budget={b}");
            let cli = Cli::try_parse_from(["prescientctl", "set", flag.as_str()]).unwrap();
            let Command::Set(a) = cli.command else {
                panic!()
            };
            changes(&a).map_err(|e| e.message)
        };
        for (b, want) in [
            ("4G", 4u64 << 30),
            ("512M", 512 << 20),
            ("1000", 1000),
            (" 2GiB ", 2 << 30),
            ("1.5G", 1536 << 20),
        ] {
            let (ch, per_gpu) = set(b).unwrap();
            assert_eq!(
                (ch.residency_budget_bytes, per_gpu),
                (Some(want), None),
                "{b}"
            );
        }
        for bad in ["x", "-1", "99999999999T", "1=2G,1=2G"] {
            assert!(set(bad).unwrap_err().starts_with("--budget"), "{bad}");
        }
        let (ch, per_gpu) = set("30G,1=20G").unwrap();
        assert_eq!(ch.residency_budget_bytes, Some(30 << 30));
        assert_eq!(per_gpu.unwrap().to_string(), "1=20GiB");
        let (ch, per_gpu) = set("GPU-ab12=8G").unwrap();
        assert!(ch.is_empty());
        assert_eq!(per_gpu.unwrap().to_string(), "GPU-ab12=8GiB");
    }
}
