//! prescientctl's command line. This file is also compiled by build.rs to
//! generate the shell completions and the man page, so it depends on clap
//! alone.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "prescientctl",
    version,
    about = "Control Prescient (prefetching for CUDA Unified Memory) through prescientd",
    long_about = "Control Prescient through prescientd's control socket: read status and \
statistics, tune the correlation tables (rows, associativity, successors, lookahead), \
the residency budget, and attach or detach CUDA processes. prescientd owns /dev/prescient; \
prescientctl never opens it. Reading needs access to the socket; changing anything needs root.",
    after_help = "Exit status: 0 ok, 1 the daemon refused the request, 2 bad usage, \
69 prescientd not reachable, 77 permission denied."
)]
pub struct Cli {
    /// prescientd's control socket.
    #[arg(
        long,
        global = true,
        env = "PRESCIENT_SOCKET",
        default_value = "/run/prescient/control.sock"
    )]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Daemon, module and parameters in force; attached processes.
    Status(JsonFlag),
    /// Counters: faults, prefetches, pre-evictions, per process.
    Stats {
        #[arg(long)]
        json: bool,
        /// Repeat every SECS seconds, with per-second rates (Ctrl-C stops).
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        watch: Option<f64>,
    },
    /// Change table parameters or the budget; prints old and new values.
    Set(SetArgs),
    /// Clear the correlation tables (learning starts over).
    Reset,
    /// Attach a CUDA process (it must have /dev/nvidia-uvm open).
    Attach {
        /// Process id.
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
    },
    /// Detach a process.
    Detach {
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
    },
    /// Versions of prescientctl, prescientd, the module's ABI and the bound driver.
    Version(JsonFlag),
    /// Print a shell completion script (generated at build time).
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (roff, generated at build time).
    Man,
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = true, id = "change")]
pub struct SetArgs {
    /// Rows per correlation table (power of two, 1..=65536).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub rows: Option<u32>,
    /// Ways per row (1..=16, at most rows).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub assoc: Option<u32>,
    /// Successors per entry (1..=16).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub succs: Option<u32>,
    /// Kernels predicted ahead (1..=64).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub lookahead: Option<u32>,
    /// Residency budget: bytes or K/M/G/T (multiple of 2 MiB); 0 = the GPU's size.
    #[arg(long, group = "change", value_name = "BYTES")]
    pub budget: Option<String>,
    /// Most migrations in flight (1..=1024).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub inflight: Option<u32>,
    /// Pre-eviction watermark, percent of the budget (1..=100).
    #[arg(long, group = "change", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub watermark: Option<u32>,
    /// Turn prefetching on.
    #[arg(long, group = "change", conflicts_with = "disable")]
    pub enable: bool,
    /// Turn prefetching off (faults are still recorded).
    #[arg(long, group = "change")]
    pub disable: bool,
    /// Engine mode.
    #[arg(long, group = "change", value_enum)]
    pub mode: Option<ModeArg>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// One global table learnt from faults (unmodified jobs).
    Transparent,
    /// One table per execution id (a runtime reports kernels).
    ExecId,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if !(0.1..=3600.0).contains(&v) {
        return Err(format!("{v} is out of range 0.1..=3600 seconds"));
    }
    Ok(v)
}
