//! Execution ids: a 64-bit hash of a kernel launch's identity, as DeepUM's
//! runtime computes them (function and arguments), plus the launch shape.
//!
//! The same launch in the next training step must get the same id, and
//! different launches should not: the function handle, grid, block and
//! shared memory size identify the kernel and its shape; the arguments
//! that point into managed memory tell apart the same kernel on different
//! tensors, and stay the same across steps as long as PyTorch's caching
//! allocator hands the same blocks out again (it does in steady state).
//! Other argument bytes (a time step, a random-number offset) are left
//! out by default: they change on every launch (config::IdArgs says
//! which modes PRESCIENT_ID_ARGS picks).

/// The launch-identity part of an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub function: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
}

/// An incremental 64-bit hash (FNV-1a over 8-byte words, then a
/// splitmix64 finaliser so that nearby inputs spread over all 48 bits the
/// page keeps).
#[derive(Clone, Copy, Debug)]
pub struct Hasher(u64);

impl Default for Hasher {
    fn default() -> Self {
        Hasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher {
    /// Adds one word.
    pub fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0000_0100_0000_01B3);
    }

    /// Adds bytes (length first, so that splits differ).
    pub fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        if !rest.is_empty() {
            self.word(u64::from_le_bytes(last));
        }
    }

    /// Adds a launch shape.
    pub fn shape(&mut self, s: &Shape) {
        self.word(s.function);
        self.word(u64::from(s.grid[0]) | u64::from(s.grid[1]) << 32);
        self.word(u64::from(s.grid[2]) | u64::from(s.block[0]) << 32);
        self.word(u64::from(s.block[1]) | u64::from(s.block[2]) << 32);
        self.word(u64::from(s.shared_mem));
    }

    /// The id.
    pub fn finish(self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The id of a launch whose parameters hold these bytes (one slice per
/// parameter), as launch.rs computes it.
pub fn id_of<'a>(shape: &Shape, params: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = Hasher::default();
    h.shape(shape);
    for p in params {
        h.bytes(p);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prescient_uapi::execpage::{decode, encode, ID_MASK};
    use proptest::prelude::*;

    fn shape() -> impl Strategy<Value = Shape> {
        (
            any::<u64>(),
            any::<[u32; 3]>(),
            any::<[u32; 3]>(),
            any::<u32>(),
        )
            .prop_map(|(function, grid, block, shared_mem)| Shape {
                function,
                grid,
                block,
                shared_mem,
            })
    }

    proptest! {
        /// The same launch gets the same id every time (across steps).
        #[test]
        fn ids_are_deterministic(s in shape(), args in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(id_of(&s, [&args[..]]), id_of(&s, [&args[..]]));
            let id = id_of(&s, [&args[..]]);
            prop_assert_eq!(decode(encode(id)), Some((id & ID_MASK).max(1)));
        }

        /// Changing any one field or one argument byte changes the id's 48
        /// bits the page keeps (a collision would be a 2^-48 event).
        #[test]
        fn any_change_changes_the_id(s in shape(), args in proptest::collection::vec(any::<u8>(), 1..64),
                                     field in 0usize..6, flip in 1u32..u32::MAX, byte in any::<prop::sample::Index>()) {
            let base = id_of(&s, [&args[..]]) & ID_MASK;
            let mut t = s;
            match field {
                0 => t.function ^= u64::from(flip),
                1 => t.grid[0] ^= flip,
                2 => t.grid[2] ^= flip,
                3 => t.block[1] ^= flip,
                4 => t.shared_mem ^= flip,
                _ => {}
            }
            let mut a = args.clone();
            if field == 5 {
                let i = byte.index(a.len());
                a[i] ^= (flip as u8).max(1);
            }
            prop_assert_ne!(id_of(&t, [&a[..]]) & ID_MASK, base);
        }

        /// Trailing zero bytes are not the same arguments.
        #[test]
        fn argument_length_counts(s in shape(), args in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut longer = args.clone();
            longer.push(0);
            prop_assert_ne!(id_of(&s, [&args[..]]), id_of(&s, [&longer[..]]));
        }
    }
}
