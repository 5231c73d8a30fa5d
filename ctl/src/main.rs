//! prescientctl: talks to prescientd over its control socket (one JSON
//! request per line, one response per line; see prescientd::proto).

mod cli;
mod record;

use clap::Parser;
use cli::{Cli, Command, ModeArg, SetArgs, Shell};
use prescientd::proto::{
    Counters, EngineParams, ErrorReply, Mode, ParamChanges, Reply, Request, Response, Stats,
};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

const EXIT_REFUSED: i32 = 1;
const EXIT_UNREACHABLE: i32 = 69;
const EXIT_NOPERM: i32 = 77;

/// An error with the exit status it maps to.
struct Failure {
    code: i32,
    message: String,
}

type Res<T> = Result<T, Failure>;

fn fail(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// One connection to the daemon.
struct Client {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
}

impl Client {
    fn connect(path: &Path) -> Res<Client> {
        let s = UnixStream::connect(path).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::PermissionDenied {
                EXIT_NOPERM
            } else {
                EXIT_UNREACHABLE
            };
            fail(
                code,
                format!(
                    "cannot reach prescientd at {}: {e} (is prescientd running? --socket or PRESCIENT_SOCKET name another socket)",
                    path.display()
                ),
            )
        })?;
        let t = Some(Duration::from_secs(30));
        let _ = s.set_read_timeout(t);
        let _ = s.set_write_timeout(t);
        let wr = s
            .try_clone()
            .map_err(|e| fail(EXIT_UNREACHABLE, e.to_string()))?;
        Ok(Client {
            rd: BufReader::new(s),
            wr,
        })
    }

    fn call(&mut self, req: &Request) -> Res<Reply> {
        let mut line = serde_json::to_string(req).map_err(|e| fail(EXIT_REFUSED, e.to_string()))?;
        line.push('\n');
        self.wr
            .write_all(line.as_bytes())
            .map_err(|e| fail(EXIT_UNREACHABLE, format!("sending to prescientd: {e}")))?;
        let mut resp = String::new();
        match self.rd.read_line(&mut resp) {
            Ok(0) => return Err(fail(EXIT_UNREACHABLE, "prescientd closed the connection")),
            Ok(_) => {}
            Err(e) => {
                return Err(fail(
                    EXIT_UNREACHABLE,
                    format!("reading from prescientd: {e}"),
                ))
            }
        }
        match serde_json::from_str::<Response>(&resp) {
            Ok(Response::Ok(r)) => Ok(r),
            Ok(Response::Error(ErrorReply { kind, message })) => Err(fail(
                if kind == "permission" {
                    EXIT_NOPERM
                } else if kind == "unavailable" {
                    EXIT_UNREACHABLE
                } else {
                    EXIT_REFUSED
                },
                message,
            )),
            Err(e) => Err(fail(
                EXIT_REFUSED,
                format!("unexpected reply from prescientd ({e}): {}", resp.trim()),
            )),
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Res<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| fail(EXIT_REFUSED, e.to_string()))?;
    println!("{s}");
    Ok(())
}

fn bytes(v: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < U.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v} B")
    } else {
        format!("{x:.1} {}", U[i])
    }
}

fn mode_str(m: Mode) -> &'static str {
    match m {
        Mode::Transparent => "transparent",
        Mode::ExecId => "exec-id",
    }
}

/// (label, value) rows of the parameters, for `status` and `set`.
fn param_rows(p: &EngineParams) -> Vec<(&'static str, String)> {
    vec![
        ("rows", p.rows.to_string()),
        ("assoc", p.assoc.to_string()),
        ("succs", p.succs.to_string()),
        ("lookahead", p.lookahead.to_string()),
        ("inflight", p.inflight_limit.to_string()),
        ("watermark", format!("{}%", p.pre_evict_watermark_pct)),
        (
            "budget",
            if p.residency_budget_bytes == 0 {
                "GPU size".into()
            } else {
                bytes(p.residency_budget_bytes)
            },
        ),
        ("prefetch", if p.enabled { "on" } else { "off" }.into()),
        ("mode", mode_str(p.mode).into()),
    ]
}

fn counter_rows(c: &Counters) -> Vec<(&'static str, u64)> {
    vec![
        ("faults", c.faults),
        ("prefetched blocks", c.prefetched_blocks),
        ("prefetches used", c.prefetches_used),
        ("late prefetches", c.late_prefetches),
        ("pre-evicted blocks", c.pre_evictions),
        ("discarded blocks", c.discards),
        ("queue drops", c.queue_drops),
        ("migrate errors", c.migrate_errors),
        ("in flight", c.inflight),
        ("table bytes", c.table_bytes),
    ]
}

fn print_stats(s: &Stats, prev: Option<&Stats>) {
    let dt = prev.map(|p| s.at_s - p.at_s).filter(|d| *d > 0.0);
    if !s.backend_up {
        println!("prescient.ko is not loaded");
    }
    let cur = counter_rows(&s.totals);
    let old = prev.map(|p| counter_rows(&p.totals));
    for (i, (name, v)) in cur.iter().enumerate() {
        match (dt, &old) {
            (Some(dt), Some(o)) if !matches!(*name, "in flight" | "table bytes") => {
                let rate = v.saturating_sub(o[i].1) as f64 / dt;
                println!("{name:<20} {v:>14} {rate:>12.1}/s");
            }
            _ => println!("{name:<20} {v:>14}"),
        }
    }
    if !s.processes.is_empty() {
        println!();
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8}",
            "PID", "FAULTS", "PREFETCHED", "RESIDENT", "PRE-EVICTED", "DISCARDED", "ERRORS"
        );
        for p in &s.processes {
            println!(
                "{:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8}",
                p.pid,
                p.faults,
                p.prefetched_blocks,
                bytes(p.resident_bytes),
                p.pre_evictions,
                p.discards,
                p.migrate_errors
            );
        }
    }
}

fn changes(a: &SetArgs) -> Res<ParamChanges> {
    let budget = match &a.budget {
        Some(b) => {
            Some(prescient_units::parse_size(b).map_err(|e| fail(2, format!("--budget: {e}")))?)
        }
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

fn run(cli: Cli) -> Res<()> {
    let connect = || Client::connect(&cli.socket);
    match &cli.command {
        Command::Completions { shell } => {
            print!(
                "{}",
                match shell {
                    Shell::Bash => include_str!(concat!(env!("OUT_DIR"), "/prescientctl.bash")),
                    Shell::Zsh => include_str!(concat!(env!("OUT_DIR"), "/_prescientctl")),
                    Shell::Fish => include_str!(concat!(env!("OUT_DIR"), "/prescientctl.fish")),
                }
            );
            Ok(())
        }
        Command::Man => {
            print!(
                "{}",
                include_str!(concat!(env!("OUT_DIR"), "/prescientctl.1"))
            );
            Ok(())
        }
        Command::Version(f) => {
            let ctl = env!("CARGO_PKG_VERSION");
            let v = match connect().and_then(|mut c| c.call(&Request::Version)) {
                Ok(Reply::Version(v)) => Some(v),
                Ok(_) => None,
                Err(e) if e.code == EXIT_UNREACHABLE => {
                    eprintln!("prescientctl: {}", e.message);
                    None
                }
                Err(e) => return Err(e),
            };
            if f.json {
                return json(&serde_json::json!({ "prescientctl": ctl, "prescientd": v }));
            }
            println!("prescientctl {ctl}");
            match &v {
                Some(v) => {
                    println!(
                        "prescientd   {} (control protocol {})",
                        v.daemon, v.protocol
                    );
                    match &v.module {
                        Some(m) => println!(
                            "prescient.ko ABI {}, bound to nvidia-uvm {}",
                            m.abi_version, m.driver_version
                        ),
                        None => println!("prescient.ko not loaded"),
                    }
                }
                None => println!("prescientd   not reachable"),
            }
            if v.is_none() {
                return Err(fail(EXIT_UNREACHABLE, "prescientd not reachable"));
            }
            Ok(())
        }
        Command::Status(f) => {
            let Reply::Status(s) = connect()?.call(&Request::Status)? else {
                return Err(fail(EXIT_REFUSED, "unexpected reply to status"));
            };
            if f.json {
                return json(&s);
            }
            println!(
                "prescientd {} ({} backend, up {:.0} s), config {}",
                s.daemon_version, s.backend, s.uptime_s, s.config_path
            );
            match &s.module {
                Some(m) => println!(
                    "prescient.ko: ABI {}, bound to nvidia-uvm {}, prefetch {}, up to {} processes",
                    m.abi_version,
                    m.driver_version,
                    if m.enabled { "on" } else { "off" },
                    m.max_processes
                ),
                None => println!("prescient.ko: not loaded (the daemon waits for it)"),
            }
            let line: Vec<String> = param_rows(&s.params)
                .into_iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!("parameters: {}", line.join(", "));
            if let Some(mp) = &s.module_params {
                if *mp != s.params {
                    let line: Vec<String> = param_rows(mp)
                        .into_iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect();
                    println!(
                        "  but the module has: {} (changed outside prescientd)",
                        line.join(", ")
                    );
                }
            }
            println!("attached: {}", s.attached.len());
            if !s.attached.is_empty() {
                println!("{:>8}  {:<16} REASON", "PID", "COMMAND");
                for a in &s.attached {
                    println!("{:>8}  {:<16} {}", a.pid, a.comm, a.reason);
                }
            }
            Ok(())
        }
        Command::Stats { json: j, watch } => {
            let mut c = connect()?;
            let mut prev: Option<Stats> = None;
            loop {
                let Reply::Stats(s) = c.call(&Request::Stats)? else {
                    return Err(fail(EXIT_REFUSED, "unexpected reply to stats"));
                };
                if *j {
                    if watch.is_some() {
                        // One object per line, for pipes.
                        println!(
                            "{}",
                            serde_json::to_string(&s).map_err(|e| fail(1, e.to_string()))?
                        );
                    } else {
                        json(&s)?;
                    }
                } else {
                    if watch.is_some() {
                        println!("--- at {:.1} s", s.at_s);
                    }
                    print_stats(&s, prev.as_ref());
                }
                let _ = std::io::stdout().flush();
                match watch {
                    Some(secs) => std::thread::sleep(Duration::from_secs_f64(*secs)),
                    None => return Ok(()),
                }
                prev = Some(s);
            }
        }
        Command::Set(a) => {
            let ch = changes(a)?;
            let Reply::ParamsChanged { old, new } =
                connect()?.call(&Request::SetParams { changes: ch })?
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
        Command::Reset => done(connect()?.call(&Request::Reset)?),
        Command::Attach { pid } => done(connect()?.call(&Request::Attach { pid: *pid })?),
        Command::Detach { pid } => done(connect()?.call(&Request::Detach { pid: *pid })?),
        Command::Record(a) => record_cmd(a),
        Command::CompactTrace { input, output } => {
            let r = prescient_sim::native::read_file(input).and_then(|mut w| {
                record::compact(&mut w);
                prescient_sim::native::write_file(output, &w)
            });
            r.map_err(|e| fail(EXIT_REFUSED, format!("compact-trace: {e:#}")))
        }
    }
}

fn record_cmd(a: &cli::RecordArgs) -> Res<()> {
    let req = record::Request {
        pid: a.pid,
        out: &a.out,
        duration: a.duration.map(Duration::from_secs_f64),
        shape: record::Shape {
            iteration: a.iteration,
            gap_ns: a.gap_us * 1000,
            max_blocks: a.max_blocks,
        },
        queue_entries: a.queue_entries,
        attach_wait: Duration::from_secs_f64(a.attach_wait),
        ready_file: a.ready_file.as_deref(),
    };
    match record::record(&req) {
        Ok(s) => json(&s),
        Err(e) => {
            let code = if record::is_permission(&e) {
                EXIT_NOPERM
            } else {
                EXIT_REFUSED
            };
            Err(fail(code, format!("record: {e:#}")))
        }
    }
}

fn done(r: Reply) -> Res<()> {
    match r {
        Reply::Done { message } => {
            println!("{message}");
            Ok(())
        }
        _ => Err(fail(EXIT_REFUSED, "unexpected reply")),
    }
}

fn main() {
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
    }

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

    #[test]
    fn generated_completions_and_man_page_are_embedded() {
        let bash = include_str!(concat!(env!("OUT_DIR"), "/prescientctl.bash"));
        assert!(bash.contains("--assoc") && bash.contains("attach"));
        let man = include_str!(concat!(env!("OUT_DIR"), "/prescientctl.1"));
        assert!(man.contains(".TH prescientctl"));
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4 << 30), "4.0 GiB");
    }
}
