//! `prescientctl version`: this tool's version, and the daemon's and the
//! module's when prescientd answers.

use crate::cli::JsonFlag;
use crate::client::{fail, json, Client, Res, EXIT_UNREACHABLE};
use prescient_uapi::control::{Reply, Request, VersionInfo};
use std::path::Path;

pub fn run(socket: &Path, f: &JsonFlag) -> Res<()> {
    let ctl = env!("CARGO_PKG_VERSION");
    // An unreachable daemon is one line on stderr (main prints it) and
    // exit 69, with or without --json; this tool's own version still shows.
    let (v, unreachable) = match Client::connect(socket).and_then(|mut c| c.call(&Request::Version))
    {
        Ok(Reply::Version(v)) => (Some(v), None),
        Ok(_) => (
            None,
            Some(fail(EXIT_UNREACHABLE, "unexpected reply to version")),
        ),
        Err(e) if e.code == EXIT_UNREACHABLE => (None, Some(e)),
        Err(e) => return Err(e),
    };
    if f.json {
        json(&serde_json::json!({ "prescientctl": ctl, "prescientd": v }))?;
    } else {
        println!("prescientctl {ctl}");
        print_daemon(v.as_ref());
    }
    unreachable.map_or(Ok(()), Err)
}

fn print_daemon(v: Option<&VersionInfo>) {
    match v {
        Some(v) => {
            println!(
                "prescientd   {} (control protocol {})",
                v.daemon, v.protocol
            );
            if v.backend == "userspace" {
                // No module under this backend: the driver it drives.
                match &v.userspace {
                    Some(u) => println!(
                        "backend      user-space (no prescient.ko), nvidia-uvm {}",
                        u.driver_version
                    ),
                    None => {
                        println!("backend      user-space (no prescient.ko), nvidia_uvm not loaded")
                    }
                }
                return;
            }
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
}
