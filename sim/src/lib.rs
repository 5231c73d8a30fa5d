//! prescient-sim: replays DNN training traces through NVIDIA's driver policy,
//! Prescient's engine and an oracle, under one stated cost model
//! (see `model` and docs/cost-model.md).

pub mod g10;
pub mod gpu;
pub mod model;
pub mod native;
pub mod plan;
pub mod policy;
pub mod report;
pub mod workload;

use anyhow::{Context, Result};
use std::path::Path;

/// Trace file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// G10's kernels.config (plain or .gz).
    G10,
    /// Prescient's native binary trace (plain or .gz).
    Native,
    /// Decide from the file's first bytes.
    Auto,
}

/// Loads a trace in either format as one iteration.
pub fn load(path: &Path, format: Format, layout: g10::Layout) -> Result<workload::Workload> {
    let format = match format {
        Format::Auto => sniff(path)?,
        f => f,
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.split('.').next().unwrap_or(n).to_string())
        .unwrap_or_default();
    match format {
        Format::G10 => Ok(g10::read_file(path)?.workload(&name, layout)),
        Format::Native => native::read_file(path),
        Format::Auto => unreachable!("resolved above"),
    }
}

/// Opens a trace file for reading, decompressing it if its name ends in ".gz".
pub fn open_trace(path: &Path) -> Result<Box<dyn std::io::BufRead>> {
    let f =
        std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
            f,
        )))
    } else {
        Box::new(std::io::BufReader::new(f))
    })
}

fn sniff(path: &Path) -> Result<Format> {
    use std::io::Read;
    // Read up to 8 bytes: a decompressor may return fewer per call.
    let mut head = Vec::with_capacity(8);
    open_trace(path)?
        .take(8)
        .read_to_end(&mut head)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(if head == native::MAGIC {
        Format::Native
    } else {
        Format::G10
    })
}
