//! `prescientctl record PID --out FILE`: record a CUDA process into a native
//! trace (the capture itself is in capture.rs).

use crate::capture;
use crate::cli::{IterationArg, RecordArgs};
use crate::client::{fail, json, Res, EXIT_NOPERM, EXIT_REFUSED};
use prescient_sim::native::recording::{Iteration, Shape};

pub fn run(a: &RecordArgs) -> Res<()> {
    let req = capture::Request {
        pid: a.pid,
        out: &a.out,
        duration: a.duration,
        shape: Shape {
            iteration: iteration(a.iteration),
            gap_ns: a.gap_us * 1000,
            max_blocks: a.max_blocks,
        },
        queue_entries: a.queue_entries,
        attach_wait: a.attach_wait,
        ready_file: a.ready_file.as_deref(),
    };
    match capture::record(&req) {
        Ok(s) => json(&s),
        Err(e) => {
            let code = if prescient_uvm::is_permission(&e) {
                EXIT_NOPERM
            } else {
                EXIT_REFUSED
            };
            Err(fail(code, format!("record: {e:#}")))
        }
    }
}

/// The command line's iteration choice, in the trace builder's terms.
fn iteration(a: IterationArg) -> Iteration {
    match a {
        IterationArg::Auto => Iteration::Auto,
        IterationArg::Whole => Iteration::Whole,
        IterationArg::Index(i) => Iteration::Index(i),
    }
}
