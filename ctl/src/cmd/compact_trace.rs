//! `prescientctl compact-trace IN OUT` (hidden): renumber an old recorded
//! trace's blocks from 0, as `record` now does itself.

use crate::client::{fail, Res, EXIT_REFUSED};
use prescient_sim::native;
use std::path::Path;

pub fn run(input: &Path, output: &Path) -> Res<()> {
    let r = native::read_file(input).and_then(|mut w| {
        native::recording::compact(&mut w);
        native::write_file(output, &w)
    });
    r.map_err(|e| fail(EXIT_REFUSED, format!("compact-trace: {e:#}")))
}
