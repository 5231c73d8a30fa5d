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
        mode: a.mode.map(|m| match m {
            ModeArg::Transparent => Mode::Transparent,
            ModeArg::ExecId => Mode::ExecId,
        }),
    })
}

/// A byte count: digits and an optional binary unit (K, M, G, T, with or
/// without B or iB, any case), as prescientd's `parse_bytes` reads it.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "{s:?} is not a byte count (e.g. 4294967296, \"4G\", \"512M\")"
        ));
    }
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use K, M, G or T)")),
    };
    let v: u64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    v.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} does not fit in 64 bits"))
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

    /// The cases of prescientd's own `bytes` test (daemon/src/main.rs).
    #[test]
    fn sizes_read_as_the_daemon_reads_them() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size(" 2GiB "), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
