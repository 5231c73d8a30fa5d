//! NVIDIA's driver as it ships (../shared/notes/uvm-facts.md): demand faults
//! only, no prefetch across 2 MB blocks, and on-demand eviction of the block
//! whose residency began earliest (the head of the "used" root-chunk list:
//! FIFO by first residency, not LRU by access). It knows nothing of dead data.

use crate::model::{Policy, State};
use prescient_core::Block;
use std::collections::VecDeque;

/// Residency order as the driver keeps it. Also used by the Prescient policy,
/// whose demand faults the driver still services.
#[derive(Default)]
pub struct ResidencyFifo {
    queue: VecDeque<(Block, u64)>,
    stamp: Vec<u64>,
    clock: u64,
}

impl ResidencyFifo {
    pub fn new(blocks: usize) -> Self {
        ResidencyFifo {
            queue: VecDeque::new(),
            stamp: vec![0; blocks],
            clock: 0,
        }
    }

    /// `b` became resident.
    pub fn push(&mut self, b: Block) {
        self.clock += 1;
        self.stamp[b as usize] = self.clock;
        self.queue.push_back((b, self.clock));
    }

    /// The earliest-resident block not used by the running kernel.
    pub fn victim(&mut self, st: &State) -> Option<Block> {
        let mut skipped = Vec::new();
        let mut found = None;
        while let Some((b, s)) = self.queue.pop_front() {
            if !st.is_on_gpu(b) || self.stamp[b as usize] != s {
                continue; // stale: left the GPU, or resident again since
            }
            if st.pinned(b) {
                skipped.push((b, s));
                continue;
            }
            found = Some(b);
            break;
        }
        for e in skipped.into_iter().rev() {
            self.queue.push_front(e);
        }
        found
    }
}

pub struct Driver {
    fifo: ResidencyFifo,
}

impl Driver {
    pub fn new(blocks: usize) -> Self {
        Driver {
            fifo: ResidencyFifo::new(blocks),
        }
    }
}

impl Policy for Driver {
    fn name(&self) -> String {
        "driver".into()
    }

    fn demand_arrived(&mut self, _st: &mut State, b: Block) {
        self.fifo.push(b);
    }

    fn demand_victim(&mut self, st: &mut State) -> Option<(Block, bool)> {
        self.fifo.victim(st).map(|b| (b, false))
    }
}
