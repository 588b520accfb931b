//! The Toeplitz hash.
//!
//! Definition (Microsoft RSS spec): for each bit of the input, most
//! significant bit of the first byte first, if the bit is set XOR into the
//! result the 32-bit window of the key that starts at that bit position.
//!
//! [`reference`] is that definition, one bit at a time. [`Toeplitz`] is the
//! fast path: the hash is linear over GF(2), so the contribution of each
//! input byte can be precomputed per byte value from the key.

use crate::key::RssKey;
use alloc::vec::Vec;

/// The 32-bit key window starting at bit `bit` of `key` (MSB-first bit order).
///
/// Bits past the end of the key read as zero.
#[inline]
pub fn key_window(key: &[u8], bit: usize) -> u32 {
    let byte = bit / 8;
    let shift = bit % 8;
    let mut w: u64 = 0;
    for i in 0..5 {
        w = (w << 8) | u64::from(key.get(byte + i).copied().unwrap_or(0));
    }
    // w holds 40 bits; take the 32 that start `shift` bits in.
    ((w >> (8 - shift)) & 0xffff_ffff) as u32
}

/// Bitwise Toeplitz hash, straight from the definition. Slow; the oracle the
/// other implementations are tested against.
pub fn reference(key: &[u8], input: &[u8]) -> u32 {
    let mut result = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte & (0x80 >> b) != 0 {
                result ^= key_window(key, i * 8 + b);
            }
        }
    }
    result
}

/// Fast Toeplitz hasher for one key: one 256-entry table per input byte
/// position, so a hash of `n` bytes is `n` table loads and XORs.
#[derive(Clone)]
pub struct Toeplitz {
    key: RssKey,
    /// `tables[i][v]`: contribution of value `v` at input byte `i`.
    tables: Vec<[u32; 256]>,
}

impl Toeplitz {
    /// Precomputes tables for inputs of up to `key.len() - 4` bytes.
    pub fn new(key: &RssKey) -> Self {
        let k = key.as_bytes();
        let max_input = k.len() - 4;
        let mut tables = Vec::with_capacity(max_input);
        for i in 0..max_input {
            let mut t = [0u32; 256];
            let windows: [u32; 8] = core::array::from_fn(|b| key_window(k, i * 8 + b));
            for (v, slot) in t.iter_mut().enumerate() {
                let mut h = 0;
                for (b, w) in windows.iter().enumerate() {
                    if v & (0x80 >> b) != 0 {
                        h ^= w;
                    }
                }
                *slot = h;
            }
            tables.push(t);
        }
        Toeplitz { key: key.clone(), tables }
    }

    /// The key this hasher was built from.
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// Longest input this hasher accepts.
    pub fn max_input_len(&self) -> usize {
        self.tables.len()
    }

    /// Hash of `input`.
    ///
    /// # Panics
    /// If `input` is longer than [`Self::max_input_len`] (key length - 4).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        assert!(input.len() <= self.tables.len(), "Toeplitz input longer than key allows");
        let mut h = 0u32;
        for (t, &b) in self.tables.iter().zip(input) {
            h ^= t[b as usize];
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_of_microsoft_key() {
        let k = crate::key::MICROSOFT_KEY;
        assert_eq!(key_window(&k, 0), 0x6d5a56da);
        assert_eq!(key_window(&k, 8), 0x5a56da25);
        assert_eq!(key_window(&k, 4), 0xd5a56da2);
    }

    #[test]
    fn fast_matches_reference_on_small_inputs() {
        let key = RssKey::microsoft();
        let t = Toeplitz::new(&key);
        for n in 0..=36usize {
            let input: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(37).wrapping_add(11)).collect();
            assert_eq!(t.hash(&input), reference(key.as_bytes(), &input), "len {n}");
        }
    }
}
