//! Property tests of transparent mode's history (`history.rs`) against a
//! plain model: the runs it keeps and the occurrences it returns.

use prescient_core::history::{History, HistoryState, HISTORY_ENTRY_WORDS};
use prescient_core::NONE;
use proptest::prelude::*;

/// The model: every appended block in order, grouped as the history groups
/// them (a run continues while blocks are consecutive inside one 16-block
/// chunk).
#[derive(Default)]
struct Model {
    runs: Vec<(u64, u64, u64)>, // (head, len, offset)
    blocks: u64,
}

impl Model {
    fn append(&mut self, mut b: u64, mut n: u64) {
        while n > 0 {
            let take = n.min(16 - (b & 15));
            match self.runs.last_mut() {
                Some((h, len, _)) if *h + *len == b && *h >> 4 == b >> 4 => *len += take,
                _ => self.runs.push((b, take, self.blocks)),
            }
            self.blocks += take;
            b += take;
            n -= take;
        }
    }
}

fn appends() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // Few distinct blocks, so that blocks recur and chains get long.
    prop::collection::vec((0u64..200, 1u64..20), 1..300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn history_keeps_the_newest_runs_and_finds_only_true_places(
        ops in appends(),
        log_entries in 2u32..8,
        log_index in 0u32..9,
    ) {
        let entries = 1usize << log_entries;
        let mut st = HistoryState::default();
        let mut ring = vec![0u64; entries * HISTORY_ENTRY_WORDS];
        let mut index = vec![0u64; 1 << log_index];
        let mut h = History::new(&mut st, &mut ring, &mut index);
        h.clear();
        let mut m = Model::default();
        for &(b, n) in &ops {
            h.append(b, n);
            m.append(b, n);
        }
        let head = m.runs.len() as u64;
        prop_assert_eq!(st.head(), head);
        prop_assert_eq!(st.blocks(), m.blocks);
        let h = History::new(&mut st, &mut ring, &mut index);
        let r = h.as_ref();
        // The ring holds exactly the newest `entries` runs.
        for pos in 0..head + 2 {
            let want = (pos < head && pos + entries as u64 >= head).then(|| m.runs[pos as usize]);
            let got = r.entry(pos).map(|e| (e.head, e.len, e.offset));
            prop_assert_eq!(got, want, "entry {}", pos);
        }
        // Every place returned holds the block, is still in the ring, and
        // appears once; with an index as large as the ring and few
        // recurrences the newest run starting at a block is found.
        for b in 0..220u64 {
            let mut seen = Vec::new();
            for (p, e) in r.occurrences(b) {
                prop_assert!(e.contains(b));
                prop_assert_eq!(p.off, b - e.head);
                let (mh, ml, mo) = m.runs[p.pos as usize];
                prop_assert_eq!((e.head, e.len, e.offset), (mh, ml, mo));
                prop_assert!(p.pos + entries as u64 >= head, "overwritten place");
                prop_assert!(!seen.contains(&p.pos));
                seen.push(p.pos);
            }
            prop_assert!(seen.len() <= prescient_core::history::CHAIN_STEPS);
        }
        prop_assert!(r.entry(NONE).is_none());
    }
}
