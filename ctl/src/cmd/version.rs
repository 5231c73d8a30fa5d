//! `prescientctl version`: this tool's version, and the daemon's and the
//! module's when prescientd answers.

use crate::cli::JsonFlag;
use crate::client::{fail, json, Client, Res, EXIT_UNREACHABLE};
use prescient_uapi::control::{Reply, Request, VersionInfo};
use std::path::Path;

pub fn run(socket: &Path, f: &JsonFlag) -> Res<()> {
    let ctl = env!("CARGO_PKG_VERSION");
    let v = match Client::connect(socket).and_then(|mut c| c.call(&Request::Version)) {
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
    print_daemon(v.as_ref());
    if v.is_none() {
        return Err(fail(EXIT_UNREACHABLE, "prescientd not reachable"));
    }
    Ok(())
}

fn print_daemon(v: Option<&VersionInfo>) {
    match v {
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
}
