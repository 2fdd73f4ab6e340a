//! The hasher of the short-lived maps keyed by node IDs and class names
//! (the catalog's interner, the scheduler's per-evaluation maps).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a taken a word (8 bytes) at a time, with a final mix, for the
/// scheduler's short-lived maps keyed by node IDs and class names: a
/// 16-byte node ID (plus its length prefix) is three multiplications
/// instead of twenty-four, several times cheaper than SipHash, and the maps
/// live for one evaluation only, so hash flooding has nothing to build on.
/// The final mix folds the high bits into the low ones the table indexes
/// by, which word-wise multiplication alone would leave depending on the
/// low bytes of each word only.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn mix_word(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(FNV_PRIME);
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for chunk in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix_word(u64::from_le_bytes(word));
        }
        for b in words.remainder() {
            self.mix_word(u64::from(*b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.mix_word(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix_word(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.mix_word(n as u64);
    }

    fn finish(&self) -> u64 {
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }
}

/// A `HashMap` with the [`Fnv`] hasher.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
