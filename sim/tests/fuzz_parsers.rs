//! Property-based fuzzing of both trace parsers: arbitrary bytes, and real
//! traces with random corruption, never panic; they parse or give an error
//! that names the input.

use prescient_sim::g10;
use prescient_sim::native;
use prescient_sim::workload::{Kernel, Range, Touch, Workload};
use proptest::prelude::*;

fn sample_native() -> Vec<u8> {
    let w = Workload {
        name: "fuzz".into(),
        kernels: (0..4)
            .map(|i| Kernel {
                name: format!("k{i}"),
                exec_id: i,
                duration_ns: 1000 * i as u64,
                touches: vec![Touch {
                    range: Range {
                        addr: (i as u64) << 21,
                        len: 3 << 20,
                    },
                    write: i % 2 == 0,
                }],
                dead_after: vec![Range { addr: 0, len: 4096 }],
            })
            .collect(),
    };
    let mut v = Vec::new();
    native::write(&mut v, &w).unwrap();
    v
}

/// Two kernels in G10's format (the parser's unit tests use it too).
const G10_SAMPLE: &str = include_str!("data/g10_sample.txt");

/// `v` with byte `at` replaced and cut short at `cut` (never before `at`).
fn corrupt(mut v: Vec<u8>, at: usize, byte: u8, cut: usize) -> Vec<u8> {
    let at = at % v.len();
    v[at] = byte;
    v.truncate(cut.max(at + 1).min(v.len()));
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn native_reader_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut input = native::MAGIC.to_vec();
        input.extend(&bytes);
        if let Err(e) = native::read(&input[..], "f") {
            prop_assert!(e.to_string().starts_with("f"));
        }
    }

    #[test]
    fn native_reader_survives_corruption(at in 0usize..200, byte in any::<u8>(), cut in 0usize..200) {
        let v = corrupt(sample_native(), at, byte, cut);
        let _ = native::read(&v[..], "f");
    }

    #[test]
    fn g10_parser_survives_corruption(at in 0usize..2000, byte in any::<u8>(), cut in 0usize..2000) {
        let v = corrupt(G10_SAMPLE.as_bytes().to_vec(), at, byte, cut);
        let text = String::from_utf8_lossy(&v).into_owned();
        if let Ok(t) = g10::parse(text.as_bytes(), "f") {
            // Whatever parses must also lay out and plan without panicking.
            let w = t.workload("f", g10::Layout::Caching);
            let _ = prescient_sim::plan::Plan::new(&w);
        }
    }

    #[test]
    fn g10_parser_never_panics_on_lines(lines in prop::collection::vec("[ -~]{0,80}", 0..20)) {
        let text = lines.join("\n");
        let _ = g10::parse(text.as_bytes(), "f");
    }
}
