//! `prescientctl set ...`: change parameters; prints the old and new values.

use crate::cli::{ModeArg, SetArgs};
use crate::client::{fail, json, Client, Res, EXIT_REFUSED, EXIT_USAGE};
use crate::render::param_rows;
use prescient_uapi::control::{Mode, ParamChanges, Reply, Request};
use std::path::Path;

pub fn run(socket: &Path, a: &SetArgs) -> Res<()> {
    let ch = changes(a)?;
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

/// The changes `a` asks for; a bad `--budget` is a usage error.
fn changes(a: &SetArgs) -> Res<ParamChanges> {
    let budget = match &a.budget {
        Some(b) => Some(parse_size(b).map_err(|e| fail(EXIT_USAGE, format!("--budget: {e}")))?),
        None => None,
    };
    Ok(ParamChanges {
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
    })
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

/// A byte count in the shared size grammar (prescient-units), as prescientd
/// and its config file read it.
fn parse_size(s: &str) -> Result<u64, String> {
    prescient_units::parse_size(s).map_err(|e| e.to_string())
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
            changes(&a).ok().unwrap().residency_budget_bytes,
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

    /// The shared grammar's cases (units/src/size.rs): 1.5G is 1536M.
    #[test]
    fn sizes_read_as_the_daemon_reads_them() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size(" 2GiB "), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert_eq!(parse_size("1.5G"), Ok(1536 << 20));
        assert!(parse_size("99999999999T").is_err());
    }
}
