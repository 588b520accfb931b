//! Single Toeplitz hash with carry-less multiplication (x86-64 VPCLMULQDQ +
//! GFNI + AVX-512), chosen at run time.
//!
//! # The idea
//! Take the input in 32-bit chunks `c`. Reverse the bits of every input byte
//! (one `vgf2p8affineqb`), so that input bit `q` of the chunk (MSB-first
//! numbering) sits at bit `q` of the little-endian word `X_c`. Let `K_c` be
//! the 64 key bits from bit `32c` as a big-endian integer (key bit `32c + m`
//! at bit `63 - m`). The carry-less product `X_c * K_c` has the term
//! `x_q k_m` at bit `q + 63 - m`; for `m = q + r` that is bit `63 - r`. So
//! bits 32..63 of the product are exactly the chunk's Toeplitz contribution,
//! hash bit `r` (MSB first) at bit `63 - r`, and the contributions of all
//! chunks XOR together before the bits are extracted.
//!
//! An IPv4 4-tuple is 3 chunks (two 256-bit `vpclmulqdq`), an IPv6 4-tuple 9
//! (two 512-bit and one 128-bit), so the IPv6 cost is far from 3x.

use super::key_window;
use core::arch::x86_64::*;

/// Longest input the kernels take.
pub(super) const MAX_LEN: usize = 36;

/// Per-key constants: `K_c` for the chunks of the longest input.
#[derive(Clone)]
pub(super) struct Clmul {
    /// `k[c]`: key bits `32c .. 32c + 64`, big-endian; zero past the key.
    k: [u64; 16],
}

/// Whether this CPU runs the kernels.
fn detected() -> bool {
    #[cfg(feature = "std")]
    {
        clmul_features!(cpu_has)
    }
    #[cfg(not(feature = "std"))]
    {
        clmul_features!(target_has)
    }
}

/// `vgf2p8affineqb` matrix that reverses the bits of each byte.
const BIT_REVERSE: i64 = 0x8040_2010_0804_0201_u64 as i64;

impl Clmul {
    /// The constants for `key`, or `None` when the CPU lacks the features or
    /// the key is shorter than the longest input needs.
    pub(super) fn new(key: &[u8]) -> Option<Self> {
        if !detected() || key.len() < MAX_LEN + 4 {
            return None;
        }
        Some(Self::build(key))
    }

    fn build(key: &[u8]) -> Self {
        let k = core::array::from_fn(|c| {
            (u64::from(key_window(key, 32 * c)) << 32) | u64::from(key_window(key, 32 * c + 32))
        });
        Clmul { k }
    }

    /// Hash of `input` (at most [`MAX_LEN`] bytes).
    #[inline]
    pub(super) fn hash(&self, input: &[u8]) -> u32 {
        debug_assert!(input.len() <= MAX_LEN);
        // SAFETY: `Clmul` only exists when `detected()` found every feature
        // the kernels are compiled for; the kernels read only `input`.
        unsafe {
            if input.len() <= 16 {
                hash16(&self.k, input)
            } else {
                hash36(&self.k, input)
            }
        }
    }
}

/// Mask of the first `n` bytes.
#[inline(always)]
fn first(n: usize) -> u64 {
    if n >= 64 {
        !0
    } else {
        (1u64 << n) - 1
    }
}

/// Inputs of up to 16 bytes (4 chunks).
///
/// # Safety
/// AVX-512 F/BW/VL, GFNI and VPCLMULQDQ must be available; `input.len() <= 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,gfni,vpclmulqdq")]
unsafe fn hash16(k: &[u64; 16], input: &[u8]) -> u32 {
    // Masked load: reads only the input's bytes, the rest are zero (and
    // zero bytes add nothing to the hash).
    // SAFETY: the mask covers `input.len() <= 16` bytes, all inside `input`.
    let x = unsafe { _mm_maskz_loadu_epi8(first(input.len()) as __mmask16, input.as_ptr().cast()) };
    let x = _mm_gf2p8affine_epi64_epi8::<0>(x, _mm_set1_epi64x(BIT_REVERSE));
    let x = _mm256_cvtepu32_epi64(x);
    // SAFETY: `k` holds 16 u64s; 32 bytes are read.
    let kv = unsafe { _mm256_loadu_si256(k.as_ptr().cast()) };
    // Lane l: chunk 2l times K_2l (0x00), chunk 2l + 1 times K_2l+1 (0x11).
    let p =
        _mm256_xor_si256(_mm256_clmulepi64_epi128::<0x00>(x, kv), _mm256_clmulepi64_epi128::<0x11>(x, kv));
    let p = _mm_xor_si128(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
    _mm_extract_epi32::<1>(p) as u32
}

/// Inputs of up to 36 bytes (9 chunks).
///
/// # Safety
/// AVX-512 F/BW/VL, GFNI and VPCLMULQDQ must be available; `input.len() <= 36`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,gfni,vpclmulqdq,pclmulqdq")]
unsafe fn hash36(k: &[u64; 16], input: &[u8]) -> u32 {
    // SAFETY: the mask covers `input.len() <= 36` bytes, all inside `input`.
    let x = unsafe { _mm512_maskz_loadu_epi8(first(input.len()), input.as_ptr().cast()) };
    let x = _mm512_gf2p8affine_epi64_epi8::<0>(x, _mm512_set1_epi64(BIT_REVERSE));
    let lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(x));
    let c8 = _mm_cvtepu32_epi64(_mm512_extracti32x4_epi32::<2>(x));
    // SAFETY: `k` holds 16 u64s (128 bytes): bytes 0..64 and 64..80 are read.
    let (k0, k8) =
        unsafe { (_mm512_loadu_si512(k.as_ptr().cast()), _mm_loadu_si128(k.as_ptr().add(8).cast())) };
    let p =
        _mm512_xor_si512(_mm512_clmulepi64_epi128::<0x00>(lo, k0), _mm512_clmulepi64_epi128::<0x11>(lo, k0));
    let p = _mm256_xor_si256(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64::<1>(p));
    let p = _mm_xor_si128(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
    let p = _mm_xor_si128(p, _mm_clmulepi64_si128::<0x00>(c8, k8));
    _mm_extract_epi32::<1>(p) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toeplitz::reference;
    use alloc::vec::Vec;

    #[test]
    #[cfg_attr(rsskit_no_avx512_clmul, ignore = "this CPU lacks VPCLMULQDQ/GFNI/AVX-512")]
    fn matches_reference_every_length() {
        let key = crate::key::MICROSOFT_KEY;
        let c = Clmul::new(&key).expect("the build probe saw VPCLMULQDQ/GFNI/AVX-512 on this CPU");
        let data: Vec<u8> = (0..36u32).map(|i| (i * 97 + 13) as u8).collect();
        for n in 0..=MAX_LEN {
            assert_eq!(c.hash(&data[..n]), reference(&key, &data[..n]), "len {n}");
        }
    }
}
