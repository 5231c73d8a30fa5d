//! prescientctl: talks to prescientd over its control socket (one JSON
//! request per line, one response per line; see `prescient_uapi::control`),
//! and records CUDA processes into simulator traces without the daemon.

mod capture;
mod cli;
mod client;
mod cmd;
mod render;

use clap::Parser;
use cli::{Cli, Command};
use client::Res;

/// Runs one command.
fn run(cli: Cli) -> Res<()> {
    let socket = cli.socket.as_path();
    match &cli.command {
        Command::Completions { shell } => {
            cmd::docs::completions(*shell);
            Ok(())
        }
        Command::Man { out_dir: None } => {
            cmd::docs::man();
            Ok(())
        }
        Command::Man { out_dir: Some(d) } => cmd::docs::man_pages(d),
        Command::Version(f) => cmd::version::run(socket, f),
        Command::Status(f) => cmd::status::run(socket, f),
        Command::Stats { json, watch } => cmd::stats::run(socket, *json, *watch),
        Command::Set(a) => cmd::set::run(socket, a),
        Command::Reset => cmd::reset::run(socket),
        Command::Attach { pid } => cmd::attach::attach(socket, *pid),
        Command::Detach { pid } => cmd::attach::detach(socket, *pid),
        Command::Record(a) => cmd::record::run(a),
        Command::Run(a) => cmd::run::run(socket, a),
        Command::CompactTrace { input, output } => cmd::compact_trace::run(input, output),
    }
}

/// Lets a closed pipe end the program quietly, as it does for other CLI
/// tools (`prescient-sim check-gpu | head`): Rust ignores SIGPIPE, so a
/// write to a closed pipe would panic in `println!`.
fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to the default, before any
    // thread is started; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

fn main() {
    restore_sigpipe();
    let cli = Cli::parse();
    if let Err(f) = run(cli) {
        eprintln!("prescientctl: {}", f.message);
        std::process::exit(f.code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn out_of_range_values_are_refused_by_name() {
        for (args, name) in [
            (vec!["set", "--assoc", "0"], "--assoc"),
            (vec!["set", "--assoc", "17"], "--assoc"),
            (vec!["set", "--rows", "0"], "--rows"),
            (vec!["set", "--succs", "x"], "--succs"),
            (vec!["set", "--lookahead", "65"], "--lookahead"),
            (vec!["set", "--watermark", "101"], "--watermark"),
            (vec!["attach", "0"], "PID"),
            (vec!["attach", "-5"], "unexpected argument"),
            (vec!["stats", "--watch", "0"], "--watch"),
        ] {
            let mut full = vec!["prescientctl"];
            full.extend(args.iter().copied());
            let e = Cli::try_parse_from(&full).expect_err(&format!("{args:?}"));
            let msg = e.to_string();
            assert!(msg.contains(name), "{args:?}: {msg}");
        }
        // `set` with nothing to set is a usage error.
        assert!(Cli::try_parse_from(["prescientctl", "set"]).is_err());
        assert!(Cli::try_parse_from(["prescientctl", "set", "--enable", "--disable"]).is_err());
        // --json is not a change: alone it is a usage error too.
        let e = Cli::try_parse_from(["prescientctl", "set", "--json"]).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(Cli::try_parse_from(["prescientctl", "set", "--assoc", "4", "--json"]).is_ok());
    }

    #[test]
    fn duration_flags_take_seconds_and_humantime_forms() {
        use std::time::Duration;
        let parse = |args: &[&str]| Cli::try_parse_from(args).unwrap().command;
        let Command::Stats { watch, .. } = parse(&["prescientctl", "stats", "--watch", "500ms"])
        else {
            panic!("not stats");
        };
        assert_eq!(watch, Some(Duration::from_millis(500)));
        let rec = ["prescientctl", "record", "7", "--out", "t.trace"];
        let Command::Record(r) = parse(&rec) else {
            panic!("not record");
        };
        assert_eq!((r.duration, r.attach_wait), (None, Duration::from_secs(30)));
        let args = [&rec[..], &["--duration", "90", "--attach-wait", "1m 30s"]].concat();
        let Command::Record(r) = parse(&args) else {
            panic!("not record");
        };
        assert_eq!(r.duration, Some(Duration::from_secs(90)));
        assert_eq!(r.attach_wait, Duration::from_secs(90));
    }

    #[test]
    fn generated_completions_and_man_page_are_embedded() {
        let bash = include_str!(concat!(env!("OUT_DIR"), "/prescientctl.bash"));
        assert!(bash.contains("--assoc") && bash.contains("attach"));
        let man = include_str!(concat!(env!("OUT_DIR"), "/prescientctl.1"));
        assert!(man.contains(".TH prescientctl"));
    }
}
