//! G10's `kernels.config` format (../shared/traces/g10/README.md), and the
//! two memory layouts the simulator can give its tensors.

use crate::workload::{exec_id, Kernel, Range, Touch, Workload};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

/// G10's clock: `Execution Time` is in cycles at 1.2 GHz.
pub const G10_GHZ: f64 = 1.2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub size: u64,
    /// G10's range (one range per tensor, no reuse).
    pub addr: u64,
    pub len: u64,
    pub weight: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct G10Kernel {
    pub name: String,
    pub cycles: u64,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct G10Trace {
    pub tensors: Vec<Tensor>,
    pub kernels: Vec<G10Kernel>,
}

/// How tensors get addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// G10's own ranges: every tensor its own range, nothing reused.
    G10,
    /// A caching allocator like PyTorch's: freed ranges are reused, best fit.
    Caching,
}

enum Section {
    Header,
    Inputs,
    Outputs,
}

/// Parses a kernels.config stream. `origin` names the file in errors.
pub fn parse(reader: impl BufRead, origin: &str) -> Result<G10Trace> {
    let mut p = G10Parser::new(origin);
    let mut last_line = 0;
    for (i, line) in reader.lines().enumerate() {
        let lineno = i + 1;
        last_line = lineno;
        let line = line.with_context(|| format!("{origin}:{lineno}: cannot read"))?;
        p.line(line.trim_end(), lineno)?;
    }
    p.finish(last_line)
}

/// The parser's state between lines: the trace so far and the open kernel.
struct G10Parser<'a> {
    /// The file's name, for errors.
    origin: &'a str,
    trace: G10Trace,
    /// Tensor ids by name: a tensor appears once per kernel that uses it.
    by_name: HashMap<String, usize>,
    /// The kernel between its `Kernel ID:` line and its `____` line.
    cur: Option<G10Kernel>,
    section: Section,
}

impl<'a> G10Parser<'a> {
    fn new(origin: &'a str) -> Self {
        G10Parser {
            origin,
            trace: G10Trace::default(),
            by_name: HashMap::new(),
            cur: None,
            section: Section::Header,
        }
    }

    /// The place of line `lineno` in errors, formatted only when one occurs.
    fn at(&self, lineno: usize) -> String {
        format!("{}:{lineno}", self.origin)
    }

    /// Takes one line, trailing blanks already trimmed.
    fn line(&mut self, line: &str, lineno: usize) -> Result<()> {
        if line.is_empty() {
            return Ok(());
        }
        if let Some(rest) = line.strip_prefix("Kernel ID:") {
            return self.kernel_start(rest, lineno);
        }
        let Some(k) = self.cur.as_mut() else {
            return Err(self.outside_kernel(line, lineno));
        };
        if line.starts_with("____") {
            self.trace
                .kernels
                .push(self.cur.take().expect("checked above"));
        } else if let Some(rest) = line.strip_prefix("Execution Time:") {
            let origin = self.origin;
            k.cycles = rest.trim().parse().with_context(|| {
                format!("{origin}:{lineno}: bad execution time {:?}", rest.trim())
            })?;
        } else if line.starts_with("Parent ") || line.starts_with('(') {
            // Layer and shape: informational.
        } else if line == "Input Tensors:" {
            self.section = Section::Inputs;
        } else if line == "Output Tensors:" {
            self.section = Section::Outputs;
        } else if line.starts_with("tensor") {
            self.tensor_line(line, lineno)?;
        } else {
            bail!("{}: unexpected line {:?}", self.at(lineno), truncate(line));
        }
        Ok(())
    }

    /// Opens a kernel from the rest of its `Kernel ID:` line.
    fn kernel_start(&mut self, rest: &str, lineno: usize) -> Result<()> {
        let at = || self.at(lineno);
        if self.cur.is_some() {
            bail!(
                "{}: kernel starts before the previous one ended (missing ____ line)",
                at()
            );
        }
        let name = rest
            .split_once("Name:")
            .map(|(_, n)| n.trim().to_string())
            .with_context(|| format!("{}: kernel line without Name:", at()))?;
        let id: usize = rest
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .parse()
            .with_context(|| format!("{}: bad kernel id", at()))?;
        if id != self.trace.kernels.len() {
            bail!(
                "{}: kernel id {id} out of order (expected {})",
                at(),
                self.trace.kernels.len()
            );
        }
        self.cur = Some(G10Kernel {
            name,
            cycles: 0,
            inputs: vec![],
            outputs: vec![],
        });
        self.section = Section::Header;
        Ok(())
    }

    /// The error for a line other than `Kernel ID:` outside any kernel.
    #[cold]
    fn outside_kernel(&self, line: &str, lineno: usize) -> anyhow::Error {
        anyhow::anyhow!(
            "{}: expected 'Kernel ID:', found {:?}",
            self.at(lineno),
            truncate(line)
        )
    }

    /// Adds a tensor line to the open kernel's inputs or outputs.
    fn tensor_line(&mut self, line: &str, lineno: usize) -> Result<()> {
        let tensor =
            parse_tensor(line).with_context(|| format!("{}: bad tensor line", self.at(lineno)))?;
        let id = self.tensor_id(tensor, lineno)?;
        let k = self.cur.as_mut().expect("only called inside a kernel");
        match self.section {
            Section::Inputs => k.inputs.push(id),
            Section::Outputs => k.outputs.push(id),
            Section::Header => bail!("{}: tensor before 'Input Tensors:'", self.at(lineno)),
        }
        Ok(())
    }

    /// The id of `tensor`, new or seen before with the same range.
    fn tensor_id(&mut self, tensor: Tensor, lineno: usize) -> Result<usize> {
        let t = &mut self.trace;
        match self.by_name.get(&tensor.name) {
            Some(&id) => {
                let known = &t.tensors[id];
                if (known.addr, known.len, known.weight) != (tensor.addr, tensor.len, tensor.weight)
                {
                    bail!(
                        "{}: tensor {} redefined with another range",
                        self.at(lineno),
                        tensor.name
                    );
                }
                Ok(id)
            }
            None => {
                self.by_name.insert(tensor.name.clone(), t.tensors.len());
                t.tensors.push(tensor);
                Ok(t.tensors.len() - 1)
            }
        }
    }

    /// Ends the stream: every kernel closed, at least one kernel.
    fn finish(self, last_line: usize) -> Result<G10Trace> {
        let origin = self.origin;
        if self.cur.is_some() {
            bail!("{origin}:{last_line}: truncated: the last kernel has no closing ____ line");
        }
        if self.trace.kernels.is_empty() {
            bail!("{origin}: no kernels");
        }
        Ok(self.trace)
    }
}

fn truncate(s: &str) -> &str {
    &s[..s.char_indices().nth(60).map_or(s.len(), |(i, _)| i)]
}

fn parse_tensor(line: &str) -> Result<Tensor> {
    // tensor12 Is weight (global)?: 0, Size in byte: 100663296, Range:597352448--698015744
    let (name, rest) = line.split_once(' ').context("no fields")?;
    let weight = field(rest, "Is weight (global)?:")?;
    let size = field(rest, "Size in byte:")?;
    let range = rest
        .split_once("Range:")
        .map(|(_, r)| r.trim())
        .context("no Range:")?;
    let (a, b) = range.split_once("--").context("Range is not a--b")?;
    let addr: u64 = a.trim().parse().context("bad range start")?;
    let end: u64 = b.trim().parse().context("bad range end")?;
    if end < addr {
        bail!("range end {end} before start {addr}");
    }
    if weight > 1 {
        bail!("weight flag {weight} is not 0 or 1");
    }
    Ok(Tensor {
        name: name.to_string(),
        size,
        addr,
        len: end - addr,
        weight: weight == 1,
    })
}

fn field(rest: &str, key: &str) -> Result<u64> {
    let v = rest
        .split_once(key)
        .with_context(|| format!("no {key:?}"))?
        .1
        .split(',')
        .next()
        .unwrap_or("")
        .trim();
    v.parse()
        .with_context(|| format!("bad {key:?} value {v:?}"))
}

/// Reads a kernels.config file, gzipped (".gz") or plain.
pub fn read_file(path: &std::path::Path) -> Result<G10Trace> {
    parse(crate::open_trace(path)?, &path.display().to_string())
}

impl G10Trace {
    /// The iteration as the simulator replays it, with tensors laid out by
    /// `layout`. Weights live for ever; every other tensor lives from its
    /// first to its last use in the iteration and is declared dead after it.
    pub fn workload(&self, name: &str, layout: Layout) -> Workload {
        let n = self.tensors.len();
        let mut first = vec![usize::MAX; n];
        let mut last = vec![0; n];
        for (k, kernel) in self.kernels.iter().enumerate() {
            for &t in kernel.inputs.iter().chain(&kernel.outputs) {
                first[t] = first[t].min(k);
                last[t] = k;
            }
        }
        let addrs = match layout {
            Layout::G10 => self.tensors.iter().map(|t| t.addr).collect(),
            Layout::Caching => self.caching_layout(&first, &last),
        };
        let range = |t: usize| Range {
            addr: addrs[t],
            len: self.tensors[t].len.max(1),
        };
        let mut kernels = Vec::with_capacity(self.kernels.len());
        for (k, gk) in self.kernels.iter().enumerate() {
            let mut touches: Vec<Touch> = gk
                .inputs
                .iter()
                .map(|&t| Touch {
                    range: range(t),
                    write: false,
                })
                .chain(gk.outputs.iter().map(|&t| Touch {
                    range: range(t),
                    write: true,
                }))
                .collect();
            // A tensor both read and written is one read-modify-write touch.
            touches.sort_by_key(|t| (t.range, !t.write));
            touches.dedup_by_key(|t| t.range);
            // Keep G10's operand order for the access order within a kernel.
            let order: Vec<Range> = gk
                .inputs
                .iter()
                .chain(&gk.outputs)
                .map(|&t| range(t))
                .collect();
            touches.sort_by_key(|t| order.iter().position(|r| *r == t.range));
            let mut dead_after: Vec<Range> = gk
                .inputs
                .iter()
                .chain(&gk.outputs)
                .filter(|&&t| !self.tensors[t].weight && last[t] == k)
                .map(|&t| range(t))
                .collect();
            dead_after.sort();
            dead_after.dedup();
            kernels.push(Kernel {
                exec_id: exec_id(&gk.name, &touches),
                name: gk.name.clone(),
                duration_ns: (gk.cycles as f64 / G10_GHZ).round() as u64,
                touches,
                dead_after,
            });
        }
        Workload {
            name: name.to_string(),
            kernels,
        }
    }

    /// Addresses a best-fit caching allocator would give, PyTorch-style:
    /// sizes round up to 512 B (small, < 1 MiB) or 2 MiB (large); small and
    /// large tensors come from separate pools; a freed range is reused by the
    /// next tensor that fits it best; weights are allocated first, for ever.
    fn caching_layout(&self, first: &[usize], last: &[usize]) -> Vec<u64> {
        let mut heap = CachingAllocator::new();
        let mut addr = vec![None; self.tensors.len()];
        for (t, tensor) in self.tensors.iter().enumerate() {
            if tensor.weight {
                addr[t] = Some(heap.alloc(tensor.len));
            }
        }
        for (k, kernel) in self.kernels.iter().enumerate() {
            let operands = || kernel.inputs.iter().chain(&kernel.outputs);
            for &t in operands() {
                if addr[t].is_none() && first[t] == k {
                    addr[t] = Some(heap.alloc(self.tensors[t].len));
                }
            }
            for &t in operands() {
                if !self.tensors[t].weight && last[t] == k {
                    if let Some(a) = addr[t] {
                        heap.free(a, self.tensors[t].len);
                    }
                }
            }
        }
        addr.into_iter().map(|a| a.unwrap_or(0)).collect()
    }
}

/// PyTorch's two pools, simplified: small requests (< 1 MiB) rounded to
/// 512 B, large ones to 2 MiB, each pool best fit with coalescing.
struct CachingAllocator {
    small: Pool,
    large: Pool,
}

impl CachingAllocator {
    const SMALL: u64 = 1 << 20;

    fn new() -> Self {
        CachingAllocator {
            small: Pool::new(0),
            large: Pool::new(1 << 40),
        }
    }

    fn rounded(len: u64) -> u64 {
        if len < Self::SMALL {
            len.max(1).div_ceil(512) * 512
        } else {
            len.div_ceil(2 << 20) * (2 << 20)
        }
    }

    fn pool(&mut self, size: u64) -> &mut Pool {
        if size < Self::SMALL {
            &mut self.small
        } else {
            &mut self.large
        }
    }

    fn alloc(&mut self, len: u64) -> u64 {
        let size = Self::rounded(len);
        self.pool(size).alloc(size)
    }

    /// Frees a range; freeing one that is not allocated does nothing.
    fn free(&mut self, addr: u64, len: u64) {
        let size = Self::rounded(len);
        self.pool(size).free(addr, size);
    }
}

/// A best-fit free-list allocator over one growing address range.
struct Pool {
    top: u64,
    /// (size, addr) of free ranges, for best fit.
    by_size: std::collections::BTreeSet<(u64, u64)>,
    /// addr -> size of free ranges, for coalescing.
    by_addr: BTreeMap<u64, u64>,
    /// addr -> size of allocated ranges, so a double free is ignored.
    live: HashMap<u64, u64>,
}

impl Pool {
    fn new(base: u64) -> Self {
        Pool {
            // Address 0 stays unused so that 0 can mean "not allocated".
            top: base.max(512),
            by_size: Default::default(),
            by_addr: Default::default(),
            live: Default::default(),
        }
    }

    fn alloc(&mut self, size: u64) -> u64 {
        let found = self.by_size.range((size, 0)..).next().copied();
        let addr = match found {
            Some((fsize, faddr)) => {
                self.by_size.remove(&(fsize, faddr));
                self.by_addr.remove(&faddr);
                if fsize > size {
                    self.insert_free(faddr + size, fsize - size);
                }
                faddr
            }
            None => {
                let a = self.top;
                self.top += size;
                a
            }
        };
        self.live.insert(addr, size);
        addr
    }

    fn insert_free(&mut self, addr: u64, size: u64) {
        self.by_size.insert((size, addr));
        self.by_addr.insert(addr, size);
    }

    fn free(&mut self, mut addr: u64, mut size: u64) -> bool {
        if self.live.remove(&addr).is_none() {
            return false;
        }
        if let Some((&paddr, &psize)) = self.by_addr.range(..addr).next_back() {
            if paddr + psize == addr {
                self.by_addr.remove(&paddr);
                self.by_size.remove(&(psize, paddr));
                addr = paddr;
                size += psize;
            }
        }
        if let Some(&nsize) = self.by_addr.get(&(addr + size)) {
            self.by_addr.remove(&(addr + size));
            self.by_size.remove(&(nsize, addr + size));
            size += nsize;
        }
        if addr + size == self.top {
            self.top = addr;
        } else {
            self.insert_free(addr, size);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two kernels in G10's format; shared with the parser fuzz test.
    const SAMPLE: &str = include_str!("../tests/data/g10_sample.txt");

    #[test]
    fn parses_kernels_tensors_and_times() {
        let t = parse(SAMPLE.as_bytes(), "sample").unwrap();
        assert_eq!(t.kernels.len(), 2);
        assert_eq!(t.tensors.len(), 4);
        assert_eq!(t.kernels[1].inputs, vec![2]);
        let w = t.workload("s", Layout::G10);
        assert_eq!(w.kernels[0].duration_ns, 1000);
        assert_eq!(w.kernels[1].duration_ns, 2000);
        assert_eq!(w.kernels[0].touches.len(), 3);
        assert!(w.kernels[0].touches[2].write);
        // tensor0 dies after kernel 0, tensor1 and tensor3 after kernel 1.
        assert_eq!(
            w.kernels[0].dead_after,
            vec![Range {
                addr: 4194304,
                len: 4194304
            }]
        );
        assert_eq!(w.kernels[1].dead_after.len(), 2);
        assert_eq!(w.ideal_ns(), 3000);
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (
                SAMPLE.replace("Execution Time: 2400", "Execution Time: x"),
                "sample:13",
            ),
            (
                SAMPLE.replace("Range:0--40960", "Range:40960--0"),
                "sample:6",
            ),
            (
                SAMPLE.replace("Kernel ID: 1,", "Kernel ID: 5,"),
                "sample:11",
            ),
            (SAMPLE[..SAMPLE.len() - 70].to_string(), "truncated"),
            ("garbage\n".to_string(), "sample:1"),
            (String::new(), "no kernels"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", parse(text.as_bytes(), "sample").unwrap_err());
            assert!(err.contains(want), "{err:?} should mention {want}");
        }
    }

    #[test]
    fn caching_layout_reuses_freed_ranges() {
        let t = parse(SAMPLE.as_bytes(), "sample").unwrap();
        let w = t.workload("s", Layout::Caching);
        let addr_of = |k: usize, i: usize| w.kernels[k].touches[i].range.addr;
        // tensor0 (dead after kernel 0) is reused by tensor3 in kernel 1.
        assert_eq!(addr_of(1, 1), addr_of(0, 1));
        assert_ne!(addr_of(0, 1), addr_of(0, 2));
    }
}
