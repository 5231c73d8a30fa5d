//! Engine parameters, validated in one place.
//!
//! Every component sizes its storage from a validated [`Params`], so a value
//! that passed [`Params::validate`] can never make the engine index out of
//! bounds or grow without limit.

use core::fmt;

/// How the engine learns which kernel is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// DeepUM's design: a runtime reports an execution id before every kernel
    /// launch; one block table per execution id.
    ExecId,
    /// Unmodified jobs: no execution ids at all, one global block table learnt
    /// from the fault stream alone.
    Transparent,
}

/// Tunable parameters of the engine. See `docs/engine.md` for what each does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Rows (sets) per block correlation table. Power of two.
    pub rows: u32,
    /// Ways per row.
    pub assoc: u32,
    /// Successor blocks kept per entry, MRU first.
    pub succs: u32,
    /// Kernels predicted ahead of the running one (chaining depth).
    pub lookahead: u32,
    /// Block tables in the pool (one per execution id while the budget lasts).
    pub max_tables: u32,
    /// Execution ids the execution-id table can hold. Power of two, >= 8.
    pub exec_ids: u32,
    /// Records (history -> next) kept per execution id.
    pub exec_records: u32,
    /// Blocks the residency ledger can track (GPU capacity / 2 MB).
    pub max_resident_blocks: u32,
    /// Most blocks emitted in one prediction window.
    pub window_blocks: u32,
    /// Pre-eviction keeps at least this many blocks free (the watermark's floor).
    pub free_min: u32,
    /// ... and never aims for more than this many (the watermark's ceiling).
    pub free_max: u32,
    /// Where the engine learns kernel boundaries from.
    pub mode: Mode,
}

impl Params {
    /// DeepUM's best configuration (its Table 7.7, Config9): 2048 rows,
    /// 2-way, 4 successors; the rest sized for a 40 GiB GPU.
    pub const DEEPUM: Params = Params {
        rows: 2048,
        assoc: 2,
        succs: 4,
        lookahead: 16,
        max_tables: 4096,
        exec_ids: 8192,
        exec_records: 4,
        max_resident_blocks: 20480,
        window_blocks: 8192,
        free_min: 512,
        free_max: 10240,
        mode: Mode::ExecId,
    };

    /// DeepUM's table configuration with the memory-dependent parameters
    /// scaled to a GPU of `gpu_blocks` 2 MB blocks: the prediction window
    /// may hold 40% of the GPU, pre-eviction keeps between 2.5% and 50% free
    /// (measured on the G10 traces, BENCHMARKS.md).
    pub fn for_gpu(gpu_blocks: u32) -> Params {
        let cap = gpu_blocks.clamp(8, Self::MAX_RESIDENT_BLOCKS);
        Params {
            max_resident_blocks: cap,
            window_blocks: (cap / 5 * 2).clamp(1, Self::MAX_WINDOW_BLOCKS),
            free_min: cap / 40,
            free_max: cap / 2,
            ..Self::DEEPUM
        }
    }

    /// Parameters for a process held under a residency budget of
    /// `budget_blocks` on a GPU of `gpu_blocks`: the window and the
    /// pre-eviction watermarks follow the budget; the residency ledger and
    /// the history are sized for the GPU.
    ///
    /// The ledger must hold every block that can be resident at once, not
    /// just the budget's worth: a fault counts its block at once, and
    /// between two pre-eviction rounds the resident set runs past the
    /// budget. A block the ledger cannot hold is invisible to pre-eviction,
    /// so it never leaves and the budget left to everything else shrinks
    /// (the user-space backend sized it by the budget until run 26). The
    /// history must hold an iteration's faults, which under a budget are
    /// several times the working set.
    pub fn for_budget(budget_blocks: u32, gpu_blocks: u32) -> Params {
        let b = Self::for_gpu(budget_blocks);
        Params {
            max_resident_blocks: gpu_blocks.clamp(b.max_resident_blocks, Self::MAX_RESIDENT_BLOCKS),
            // What `history_window` gives for a ledger of the budget's size.
            window_blocks: b.history_window(),
            ..b
        }
    }

    /// Upper bounds. They keep one table and one window within what a kernel
    /// module may reasonably allocate and what a fault-side step may walk.
    pub const MAX_ROWS: u32 = 1 << 16;
    pub const MAX_ASSOC: u32 = 16;
    pub const MAX_SUCCS: u32 = 16;
    pub const MAX_LOOKAHEAD: u32 = 64;
    pub const MAX_TABLES: u32 = 1 << 16;
    pub const MAX_EXEC_IDS: u32 = 1 << 20;
    /// Lower bound of `exec_ids`: one set of the execution-id table's ways.
    pub const MIN_EXEC_IDS: u32 = 8;
    pub const MAX_EXEC_RECORDS: u32 = 16;
    pub const MAX_RESIDENT_BLOCKS: u32 = 1 << 22;
    pub const MAX_WINDOW_BLOCKS: u32 = 1 << 20;

    /// Checks every parameter; the first violation is returned.
    pub fn validate(&self) -> Result<(), ParamError> {
        check_range(Param::Rows, self.rows, 1, Self::MAX_ROWS)?;
        check_pow2(Param::Rows, self.rows)?;
        check_range(Param::Assoc, self.assoc, 1, Self::MAX_ASSOC)?;
        if self.assoc > self.rows {
            return Err(ParamError {
                param: Param::Assoc,
                value: self.assoc as u64,
                rule: Rule::AtMostRows(self.rows),
            });
        }
        check_range(Param::Succs, self.succs, 1, Self::MAX_SUCCS)?;
        check_range(Param::Lookahead, self.lookahead, 1, Self::MAX_LOOKAHEAD)?;
        check_range(Param::MaxTables, self.max_tables, 1, Self::MAX_TABLES)?;
        check_range(
            Param::ExecIds,
            self.exec_ids,
            Self::MIN_EXEC_IDS,
            Self::MAX_EXEC_IDS,
        )?;
        check_pow2(Param::ExecIds, self.exec_ids)?;
        check_range(
            Param::ExecRecords,
            self.exec_records,
            1,
            Self::MAX_EXEC_RECORDS,
        )?;
        check_range(
            Param::MaxResidentBlocks,
            self.max_resident_blocks,
            1,
            Self::MAX_RESIDENT_BLOCKS,
        )?;
        check_range(
            Param::WindowBlocks,
            self.window_blocks,
            1,
            Self::MAX_WINDOW_BLOCKS,
        )?;
        check_range(Param::FreeMin, self.free_min, 0, self.max_resident_blocks)?;
        check_range(
            Param::FreeMax,
            self.free_max,
            self.free_min,
            self.max_resident_blocks,
        )?;
        Ok(())
    }

    /// Block tables actually allocated: the pool in execution-id mode, none
    /// in transparent mode (its predictor is the history).
    pub fn tables(&self) -> u32 {
        match self.mode {
            Mode::ExecId => self.max_tables,
            Mode::Transparent => 0,
        }
    }

    /// Blocks transparent mode's history window may have in flight at most:
    /// `window_blocks`, but never more than 1/`HISTORY_WINDOW_PART` of the
    /// memory (the window is protected from pre-eviction, and without
    /// kernel boundaries it cannot tell how soon its blocks are needed).
    pub fn history_window(&self) -> u32 {
        self.window_blocks
            .min(self.max_resident_blocks / HISTORY_WINDOW_PART)
            .max(1)
    }

    /// Entries of transparent mode's history (a power of two; 0 in
    /// execution-id mode). A training iteration's faults must fit in it to
    /// be predicted: 8 entries (runs of up to 16 blocks) per GPU block, at
    /// least 4096.
    pub fn history_entries(&self) -> u32 {
        match self.mode {
            Mode::ExecId => 0,
            Mode::Transparent => (self.max_resident_blocks as u64 * HISTORY_PER_BLOCK)
                .next_power_of_two()
                .clamp(MIN_HISTORY, MAX_HISTORY) as u32,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Self::DEEPUM
    }
}

fn check_range(param: Param, value: u32, min: u32, max: u32) -> Result<(), ParamError> {
    if value < min || value > max {
        return Err(ParamError {
            param,
            value: value as u64,
            rule: Rule::Range(min, max),
        });
    }
    Ok(())
}

fn check_pow2(param: Param, value: u32) -> Result<(), ParamError> {
    if !value.is_power_of_two() {
        return Err(ParamError {
            param,
            value: value as u64,
            rule: Rule::PowerOfTwo,
        });
    }
    Ok(())
}

/// Names of the parameters, as users type them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Rows,
    Assoc,
    Succs,
    Lookahead,
    MaxTables,
    ExecIds,
    ExecRecords,
    MaxResidentBlocks,
    WindowBlocks,
    FreeMin,
    FreeMax,
}

impl Param {
    pub fn name(self) -> &'static str {
        match self {
            Param::Rows => "rows",
            Param::Assoc => "assoc",
            Param::Succs => "succs",
            Param::Lookahead => "lookahead",
            Param::MaxTables => "max-tables",
            Param::ExecIds => "exec-ids",
            Param::ExecRecords => "exec-records",
            Param::MaxResidentBlocks => "max-resident-blocks",
            Param::WindowBlocks => "window-blocks",
            Param::FreeMin => "free-min",
            Param::FreeMax => "free-max",
        }
    }
}

/// The rule a rejected value broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Range(u32, u32),
    PowerOfTwo,
    AtMostRows(u32),
}

/// A parameter that failed validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamError {
    pub param: Param,
    pub value: u64,
    pub rule: Rule,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.param.name();
        match self.rule {
            Rule::Range(lo, hi) => write!(
                f,
                "parameter {name} = {} is out of range: it must be between {lo} and {hi}",
                self.value
            ),
            Rule::PowerOfTwo => write!(
                f,
                "parameter {name} = {} must be a power of two",
                self.value
            ),
            Rule::AtMostRows(rows) => write!(
                f,
                "parameter {name} = {} must not exceed rows = {rows}",
                self.value
            ),
        }
    }
}

/// History entries per GPU block (transparent mode).
pub const HISTORY_PER_BLOCK: u64 = 8;
/// Fewest history entries (transparent mode).
pub const MIN_HISTORY: u64 = 1 << 12;
/// Most history entries (transparent mode).
pub const MAX_HISTORY: u64 = 1 << 23;
/// Transparent mode: the window reads the history at most this many
/// windows ahead of the cursor (resident blocks are claimed, not counted).
pub const HISTORY_AHEAD: u64 = 2;
/// Transparent mode re-plans its window from the cursor at every predicted
/// fault on memories of at most this many blocks (`engine/plan.rs`).
pub const REPLAN_MAX_BLOCKS: u32 = 64;
/// The history window holds at most this part of the memory.
pub const HISTORY_WINDOW_PART: u32 = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepum_defaults_are_valid() {
        Params::DEEPUM.validate().unwrap();
        assert_eq!(Params::for_gpu(20480), Params::DEEPUM);
        for blocks in [0, 1, 8, 100, 1 << 30] {
            Params::for_gpu(blocks).validate().unwrap();
        }
    }

    #[test]
    fn a_budget_sizes_the_window_and_the_gpu_the_ledger() {
        // 1 GiB under a 140 GB GPU: the window of a 512-block memory, a
        // ledger and a history for the whole GPU.
        let p = Params {
            mode: Mode::Transparent,
            ..Params::for_budget(512, 71_680)
        };
        p.validate().unwrap();
        let by_budget = Params {
            mode: Mode::Transparent,
            ..Params::for_gpu(512)
        };
        assert_eq!(p.history_window(), by_budget.history_window());
        assert_eq!(p.history_window(), 64);
        assert_eq!(
            (p.free_min, p.free_max),
            (by_budget.free_min, by_budget.free_max)
        );
        assert_eq!(p.max_resident_blocks, 71_680);
        assert!(p.history_entries() >= 8 * 71_680);
        // Never a ledger smaller than the budget, whatever the GPU says.
        for (budget, gpu) in [(0, 0), (8, 1), (4096, 512), (u32::MAX, u32::MAX)] {
            let p = Params::for_budget(budget, gpu);
            p.validate().unwrap();
            assert!(p.max_resident_blocks >= Params::for_gpu(budget).max_resident_blocks);
        }
    }

    #[test]
    fn rejects_each_bad_value_by_name() {
        let bad = [
            (
                Params {
                    rows: 0,
                    ..Params::DEEPUM
                },
                Param::Rows,
            ),
            (
                Params {
                    rows: 1000,
                    ..Params::DEEPUM
                },
                Param::Rows,
            ),
            (
                Params {
                    assoc: 0,
                    ..Params::DEEPUM
                },
                Param::Assoc,
            ),
            (
                Params {
                    rows: 4,
                    assoc: 8,
                    ..Params::DEEPUM
                },
                Param::Assoc,
            ),
            (
                Params {
                    succs: 0,
                    ..Params::DEEPUM
                },
                Param::Succs,
            ),
            (
                Params {
                    succs: 17,
                    ..Params::DEEPUM
                },
                Param::Succs,
            ),
            (
                Params {
                    lookahead: 0,
                    ..Params::DEEPUM
                },
                Param::Lookahead,
            ),
            (
                Params {
                    max_tables: 0,
                    ..Params::DEEPUM
                },
                Param::MaxTables,
            ),
            (
                Params {
                    exec_ids: 6,
                    ..Params::DEEPUM
                },
                Param::ExecIds,
            ),
            (
                Params {
                    exec_records: 0,
                    ..Params::DEEPUM
                },
                Param::ExecRecords,
            ),
            (
                Params {
                    max_resident_blocks: 0,
                    ..Params::DEEPUM
                },
                Param::MaxResidentBlocks,
            ),
            (
                Params {
                    window_blocks: 0,
                    ..Params::DEEPUM
                },
                Param::WindowBlocks,
            ),
        ];
        for (p, which) in bad {
            let err = p.validate().unwrap_err();
            assert_eq!(err.param, which, "{err}");
        }
    }

    #[test]
    fn error_message_names_parameter_and_rule() {
        let err = Params {
            rows: 4,
            assoc: 8,
            ..Params::DEEPUM
        }
        .validate()
        .unwrap_err();
        let mut buf = [0u8; 128];
        let msg = fmt_into(&mut buf, &err);
        assert_eq!(msg, "parameter assoc = 8 must not exceed rows = 4");
    }

    fn fmt_into<'a>(buf: &'a mut [u8], e: &ParamError) -> &'a str {
        use core::fmt::Write;
        struct W<'b>(&'b mut [u8], usize);
        impl Write for W<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                let end = self.1 + s.len();
                self.0[self.1..end].copy_from_slice(s.as_bytes());
                self.1 = end;
                Ok(())
            }
        }
        let mut w = W(buf, 0);
        write!(w, "{e}").unwrap();
        let n = w.1;
        core::str::from_utf8(&buf[..n]).unwrap()
    }
}
