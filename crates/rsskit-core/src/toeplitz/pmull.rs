//! Toeplitz hashing with carry-less multiplication on aarch64 (NEON + PMULL,
//! the `aes` extension), chosen at run time.
//!
//! The same arithmetic as the x86-64 kernels (see `avx2.rs`): reverse the
//! bits of every input byte (`rbit`, one instruction per 16 bytes), so input
//! bit `q` of a 32-bit little-endian chunk sits at bit `q`; multiply the chunk
//! by the 64 key bits from bit `32c` (big-endian, key bit `32c + m` at bit
//! `63 - m`): the product's bits 32..63 are the chunk's contribution, hash
//! bit `r` (MSB first) at bit `63 - r`. XOR the products of all chunks.
//!
//! Built and tested here only under emulation (`qemu-aarch64`): correct bit
//! for bit, speed unmeasured.

use super::key_window;
use core::arch::aarch64::*;

/// Longest input the kernel takes (three 16-byte loads).
const MAX_LEN: usize = 48;

/// Per-key constants.
#[derive(Clone)]
pub(super) struct Pmull {
    /// Key bits `32c .. 32c + 64`, big-endian; zero past the key.
    k: [u64; MAX_LEN / 4],
    /// Longest input taken: `key.len() - 4`, at most 48.
    max: usize,
}

/// Whether this CPU runs the kernel.
fn detected() -> bool {
    #[cfg(feature = "std")]
    {
        std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(target_feature = "neon", target_feature = "aes"))
    }
}

impl Pmull {
    /// The constants for `key`, or `None` when the CPU lacks PMULL.
    pub(super) fn new(key: &[u8]) -> Option<Self> {
        if !detected() {
            return None;
        }
        let k = core::array::from_fn(|c| {
            (u64::from(key_window(key, 32 * c)) << 32) | u64::from(key_window(key, 32 * c + 32))
        });
        Some(Pmull { k, max: key.len().saturating_sub(4).min(MAX_LEN) })
    }

    /// Whether inputs of `n` bytes are taken.
    #[inline]
    pub(super) fn handles(&self, n: usize) -> bool {
        n <= self.max
    }

    /// Hash of `input`; the caller checked [`Self::handles`].
    #[inline]
    pub(super) fn hash(&self, input: &[u8]) -> u32 {
        debug_assert!(self.handles(input.len()));
        let mut buf = [0u8; MAX_LEN];
        buf[..input.len()].copy_from_slice(input);
        // SAFETY: `Pmull` only exists when `detected()` found NEON and PMULL.
        unsafe { kernel(&self.k, &buf, input.len().div_ceil(4)) }
    }

    /// `out[i] = hash(inputs[i])`; the caller checked lengths.
    pub(super) fn hash_batch<const N: usize>(&self, inputs: &[[u8; N]], out: &mut [u32]) {
        for (o, x) in out.iter_mut().zip(inputs) {
            *o = self.hash(x);
        }
    }
}

/// Hash of the first `chunks` (at most 12) 32-bit chunks of `buf`.
///
/// # Safety
/// NEON and PMULL (`aes`) must be available.
#[target_feature(enable = "neon,aes")]
unsafe fn kernel(k: &[u64; MAX_LEN / 4], buf: &[u8; MAX_LEN], chunks: usize) -> u32 {
    let mut acc: u128 = 0;
    for b in 0..chunks.div_ceil(4) {
        // SAFETY: bytes 16b .. 16b + 16 of the 48 in `buf` (b < 3).
        let v = vrbitq_u8(unsafe { vld1q_u8(buf.as_ptr().add(16 * b)) });
        let mut lanes = [0u32; 4];
        // SAFETY: 16 bytes written into `lanes`.
        unsafe { vst1q_u32(lanes.as_mut_ptr(), vreinterpretq_u32_u8(v)) };
        for (j, &x) in lanes.iter().enumerate().take(chunks - 4 * b) {
            acc ^= vmull_p64(u64::from(x), k[4 * b + j]);
        }
    }
    (acc >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toeplitz::reference;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn backend(key: &[u8]) -> Pmull {
        Pmull::new(key).expect("this aarch64 CPU (or emulator) lacks PMULL")
    }

    #[test]
    #[cfg_attr(rsskit_no_pmull, ignore = "this CPU lacks PMULL")]
    fn matches_reference_every_length() {
        let key = crate::key::MICROSOFT_KEY;
        let p = backend(&key);
        let data: Vec<u8> = (0..36u32).map(|i| (i * 97 + 13) as u8).collect();
        for n in 0..=36 {
            assert_eq!(p.hash(&data[..n]), reference(&key, &data[..n]), "len {n}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        #[cfg_attr(rsskit_no_pmull, ignore = "this CPU lacks PMULL")]
        fn random_keys_and_inputs(
            key in (40usize..=60).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n)),
            data in proptest::collection::vec(any::<u8>(), 48),
        ) {
            let p = backend(&key);
            for n in 0..=p.max {
                prop_assert_eq!(p.hash(&data[..n]), reference(&key, &data[..n]), "len {}", n);
            }
        }
    }
}
