//! Prescient's native trace format, version 1. Specified in docs/trace-format.md.
//!
//! A byte stream (optionally gzipped: name ends in `.gz`): the magic
//! `PRSCTRC\n`, the format version and the workload name, then records, each
//! a tag byte and LEB128 varints:
//! `0x01 KERNEL exec_id duration_ns name`, `0x02 TOUCH addr len flags`
//! (bit 0: write), `0x03 DEAD addr len`, and `0x00 END kernel_count`.
//! TOUCH and DEAD belong to the KERNEL before them. END is mandatory, so a
//! truncated file is an error, never a shorter trace.

pub mod recording;

use crate::workload::{Kernel, Range, Touch, Workload};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, Write};

pub const MAGIC: &[u8; 8] = b"PRSCTRC\n";
pub const VERSION: u64 = 1;

const END: u8 = 0x00;
const KERNEL: u8 = 0x01;
const TOUCH: u8 = 0x02;
const DEAD: u8 = 0x03;
const FLAG_WRITE: u64 = 1;
/// Longest name accepted: a sanity bound against corrupt lengths.
const MAX_NAME: u64 = 4096;

pub fn write(w: &mut impl Write, wl: &Workload) -> std::io::Result<()> {
    w.write_all(MAGIC)?;
    put_varint(w, VERSION)?;
    put_str(w, &wl.name)?;
    for k in &wl.kernels {
        w.write_all(&[KERNEL])?;
        put_varint(w, k.exec_id as u64)?;
        put_varint(w, k.duration_ns)?;
        put_str(w, &k.name)?;
        for t in &k.touches {
            w.write_all(&[TOUCH])?;
            put_varint(w, t.range.addr)?;
            put_varint(w, t.range.len)?;
            put_varint(w, if t.write { FLAG_WRITE } else { 0 })?;
        }
        for d in &k.dead_after {
            w.write_all(&[DEAD])?;
            put_varint(w, d.addr)?;
            put_varint(w, d.len)?;
        }
    }
    w.write_all(&[END])?;
    put_varint(w, wl.kernels.len() as u64)
}

fn put_varint(w: &mut impl Write, mut v: u64) -> std::io::Result<()> {
    let mut buf = [0u8; 10];
    let mut n = 0;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = byte;
            n += 1;
            break;
        }
        buf[n] = byte | 0x80;
        n += 1;
    }
    w.write_all(&buf[..n])
}

fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    put_varint(w, s.len() as u64)?;
    w.write_all(s.as_bytes())
}

/// A reader that knows its byte offset, for error messages.
struct Cursor<R> {
    r: R,
    at: u64,
    origin: String,
}

impl<R: BufRead> Cursor<R> {
    fn byte(&mut self) -> Result<Option<u8>> {
        let mut b = [0u8; 1];
        match self.r.read(&mut b) {
            Ok(0) => Ok(None),
            Ok(_) => {
                self.at += 1;
                Ok(Some(b[0]))
            }
            Err(e) => {
                Err(e).with_context(|| format!("{}: read error at byte {}", self.origin, self.at))
            }
        }
    }

    fn need(&mut self, what: &str) -> Result<u8> {
        match self.byte()? {
            Some(b) => Ok(b),
            None => bail!(
                "{}: truncated at byte {} (inside {what})",
                self.origin,
                self.at
            ),
        }
    }

    fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.at;
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.need(what)?;
            if shift == 63 && b > 1 {
                bail!(
                    "{}: byte {start}: {what} does not fit in 64 bits",
                    self.origin
                );
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!(
            "{}: byte {start}: {what} is not a valid varint",
            self.origin
        )
    }

    /// Reads the magic and the version, and returns the workload name.
    fn header(&mut self) -> Result<String> {
        let origin = self.origin.clone();
        let mut magic = [0u8; 8];
        for m in magic.iter_mut() {
            *m = self
                .byte()?
                .with_context(|| format!("{origin}: too short to be a native trace"))?;
        }
        if &magic != MAGIC {
            bail!("{origin}: not a Prescient native trace (bad magic); for G10's kernels.config use --format g10");
        }
        let version = self.varint("version")?;
        if version != VERSION {
            bail!("{origin}: native trace format version {version} is not supported (this build reads version {VERSION})");
        }
        self.string("workload name")
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let start = self.at;
        let len = self.varint(what)?;
        if len > MAX_NAME {
            bail!(
                "{}: byte {start}: {what} length {len} exceeds {MAX_NAME}",
                self.origin
            );
        }
        let mut buf = vec![0u8; len as usize];
        self.r.read_exact(&mut buf).with_context(|| {
            format!(
                "{}: truncated at byte {} (inside {what})",
                self.origin, self.at
            )
        })?;
        self.at += len;
        String::from_utf8(buf)
            .with_context(|| format!("{}: byte {start}: {what} is not UTF-8", self.origin))
    }
}

/// Parses a native trace from `r`; `origin` names it in errors.
pub fn read(r: impl BufRead, origin: &str) -> Result<Workload> {
    let mut c = Cursor {
        r,
        at: 0,
        origin: origin.to_string(),
    };
    let name = c.header()?;
    let mut kernels: Vec<Kernel> = Vec::new();
    loop {
        let at = c.at;
        let tag = c.need("record tag")?;
        match tag {
            KERNEL => {
                let exec_id = c.varint("exec id")?;
                let exec_id = u32::try_from(exec_id)
                    .ok()
                    .filter(|&e| e != u32::MAX)
                    .with_context(|| {
                        format!("{origin}: byte {at}: exec id {exec_id} out of range")
                    })?;
                let duration_ns = c.varint("duration")?;
                let name = c.string("kernel name")?;
                kernels.push(Kernel {
                    name,
                    exec_id,
                    duration_ns,
                    touches: vec![],
                    dead_after: vec![],
                });
            }
            TOUCH | DEAD => {
                let addr = c.varint("address")?;
                let len = c.varint("length")?;
                if len == 0 || addr.checked_add(len).is_none() {
                    bail!("{origin}: byte {at}: range {addr:#x}+{len:#x} is empty or overflows");
                }
                let flags = if tag == TOUCH { c.varint("flags")? } else { 0 };
                if flags & !FLAG_WRITE != 0 {
                    bail!("{origin}: byte {at}: unknown touch flags {flags:#x}");
                }
                let k = kernels.last_mut().with_context(|| {
                    format!("{origin}: byte {at}: range record before the first kernel")
                })?;
                let range = Range { addr, len };
                if tag == TOUCH {
                    k.touches.push(Touch {
                        range,
                        write: flags & FLAG_WRITE != 0,
                    });
                } else {
                    k.dead_after.push(range);
                }
            }
            END => {
                let count = c.varint("kernel count")?;
                if count != kernels.len() as u64 {
                    bail!(
                        "{origin}: byte {at}: END says {count} kernels, the file has {}",
                        kernels.len()
                    );
                }
                if kernels.is_empty() {
                    bail!("{origin}: no kernels");
                }
                if c.byte()?.is_some() {
                    bail!("{origin}: byte {}: data after END", c.at - 1);
                }
                return Ok(Workload { name, kernels });
            }
            other => bail!("{origin}: byte {at}: unknown record tag {other:#04x}"),
        }
    }
}

/// Reads a native trace file, gzipped (".gz") or plain.
pub fn read_file(path: &std::path::Path) -> Result<Workload> {
    read(crate::open_trace(path)?, &path.display().to_string())
}

/// Writes a native trace file, gzipped if the name ends in ".gz".
pub fn write_file(path: &std::path::Path, wl: &Workload) -> Result<()> {
    let f = std::fs::File::create(path)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::best());
        write(&mut gz, wl)?;
        gz.finish()?.flush()?;
    } else {
        write(&mut w, wl)?;
        w.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Workload {
        Workload {
            name: "t".into(),
            kernels: vec![Kernel {
                name: "k0".into(),
                exec_id: 7,
                duration_ns: 1500,
                touches: vec![Touch {
                    range: Range {
                        addr: 1 << 40,
                        len: 3 << 20,
                    },
                    write: true,
                }],
                dead_after: vec![Range {
                    addr: 4096,
                    len: 512,
                }],
            }],
        }
    }

    fn bytes(w: &Workload) -> Vec<u8> {
        let mut v = Vec::new();
        write(&mut v, w).unwrap();
        v
    }

    #[test]
    fn round_trips() {
        let w = sample();
        assert_eq!(read(&bytes(&w)[..], "x").unwrap(), w);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let b = bytes(&sample());
        for cut in 0..b.len() {
            let err = read(&b[..cut], "x.trace").unwrap_err().to_string();
            assert!(err.starts_with("x.trace"), "{err}");
        }
    }

    #[test]
    fn unknown_version_is_refused_by_number() {
        let mut b = bytes(&sample());
        b[8] = 9;
        let err = read(&b[..], "x").unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
    }

    #[test]
    fn g10_text_gets_a_hint() {
        let err = read(&b"Kernel ID: 0, Name: x\n"[..], "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--format g10"), "{err}");
    }
}
