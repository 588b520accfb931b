//! Batch Toeplitz hashing with GFNI + AVX-512 (x86-64), chosen at run time.
//!
//! # The idea
//! Split the input into bytes `x_i` and the hash into bytes `h_o` (`o = 0`
//! the most significant). Hash bit `8o + r` is the XOR over input bits
//! `8i + p` of `x_{i,p} & k[8i + p + 8o + r]`: so `h_o = XOR_i M_{i+o} x_i`,
//! where `M_m` is the 8x8 GF(2) matrix whose row `r` is the key byte that
//! starts at bit `8m + r`. The matrix depends only on `m = i + o`.
//!
//! `vgf2p8affineqb` multiplies every byte of a vector by the 8x8 matrix held
//! in its 64-bit lane. A block of 16 inputs is transposed into "columns" (one
//! 64-bit lane = byte `i` of 8 inputs); for each input byte `i` one vector
//! holds column `i` of inputs 0-7 in lanes 0-3 and of inputs 8-15 in lanes
//! 4-7, and is multiplied by `[M_i, M_{i+1}, M_{i+2}, M_{i+3}]` twice:
//! lane `o` (and `4 + o`) accumulates hash byte `o` of 8 inputs. So one
//! instruction does 64 useful byte-matrix products, `N` of them hash 16
//! inputs of `N` bytes, and no horizontal reduction is needed: a single
//! byte permutation turns the 8 accumulator lanes into 16 `u32`s.
//!
//! The transposition: inputs of up to 16 bytes (8 inputs = at most 128
//! bytes) come from two masked loads and one two-source byte permutation
//! (`vpermt2b`) per 8 columns; longer inputs are gathered 8 bytes per input
//! (`vpgatherqq`) and transposed with one `vpermb`.

use super::key_window;
use alloc::vec::Vec;
use core::arch::x86_64::*;

/// Longest input the vector kernel handles (longer: scalar).
const MAX_N: usize = 64;
/// Inputs per block.
const BLOCK: usize = 16;

/// Per-key data of the GFNI kernel.
#[derive(Clone)]
pub(super) struct Gfni {
    /// `mats[i]`: `[M_i, M_{i+1}, M_{i+2}, M_{i+3}]` twice.
    mats: Vec<[u64; 8]>,
}

/// Whether this CPU runs the kernel.
fn detected() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vbmi")
            && std::is_x86_feature_detected!("gfni")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(
            target_feature = "avx512f",
            target_feature = "avx512bw",
            target_feature = "avx512vl",
            target_feature = "avx512vbmi",
            target_feature = "gfni"
        ))
    }
}

/// `M_m` as `vgf2p8affineqb` wants it: byte `r` of the lane is the row that
/// computes bit `7 - r` of the result byte, i.e. hash bit `r` of the hash
/// byte (MSB first); its bit `7 - p` is key bit `8m + r + p`.
fn matrix(key: &[u8], m: usize) -> u64 {
    (0..8).fold(0u64, |a, r| a | u64::from((key_window(key, 8 * m + r) >> 24) as u8) << (8 * r))
}

impl Gfni {
    /// The kernel's tables for `key`, or `None` when the CPU lacks the features.
    pub(super) fn new(key: &[u8]) -> Option<Self> {
        if !detected() {
            return None;
        }
        Some(Self::build(key))
    }

    fn build(key: &[u8]) -> Self {
        let max_input = key.len().saturating_sub(4).min(MAX_N);
        let mats = (0..max_input)
            .map(|i| {
                let q: [u64; 4] = core::array::from_fn(|o| matrix(key, i + o));
                [q[0], q[1], q[2], q[3], q[0], q[1], q[2], q[3]]
            })
            .collect();
        Gfni { mats }
    }

    /// Whether the kernel hashes inputs of `n` bytes with this key.
    pub(super) fn handles(&self, n: usize) -> bool {
        n <= self.mats.len()
    }

    /// `out[i] = hash(inputs[i])`; lengths checked by the caller.
    pub(super) fn hash_batch<const N: usize>(&self, inputs: &[[u8; N]], out: &mut [u32]) {
        debug_assert_eq!(inputs.len(), out.len());
        if N == 0 {
            out.fill(0);
            return;
        }
        assert!(N <= self.mats.len(), "Toeplitz input longer than key allows");
        let full = inputs.len() / BLOCK * BLOCK;
        // SAFETY: `Gfni` only exists when `detected()` said the CPU has every
        // feature `batch` is compiled for; `inputs` and `out` hold `full`
        // elements (a multiple of BLOCK).
        unsafe {
            batch::<N>(
                &self.mats[..N],
                inputs[..full].as_ptr().cast(),
                out[..full].as_mut_ptr(),
                full / BLOCK,
            )
        };
        let rest = inputs.len() - full;
        if rest > 0 {
            let mut buf = [[0u8; N]; BLOCK];
            buf[..rest].copy_from_slice(&inputs[full..]);
            let mut o = [0u32; BLOCK];
            // SAFETY: as above; `buf` and `o` hold one block.
            unsafe { batch::<N>(&self.mats[..N], buf.as_ptr().cast(), o.as_mut_ptr(), 1) };
            out[full..].copy_from_slice(&o[..rest]);
        }
    }
}

/// Vector of 64 bytes from an array.
#[inline(always)]
fn bytes(b: [u8; 64]) -> __m512i {
    // SAFETY: same size, any bit pattern is valid for both.
    unsafe { core::mem::transmute::<[u8; 64], __m512i>(b) }
}

/// Mask of the first `n` bytes (n <= 64).
#[inline(always)]
fn first(n: usize) -> __mmask64 {
    if n >= 64 {
        !0
    } else {
        (1u64 << n) - 1
    }
}

/// Hashes `blocks` blocks of 16 inputs of `N` bytes at `src` into `dst`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VBMI and GFNI; `src` must be valid for
/// reading `blocks * 16 * N` bytes and `dst` for writing `blocks * 16` u32s;
/// `mats.len() == N`, `1 <= N <= MAX_N`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,gfni")]
unsafe fn batch<const N: usize>(mats: &[[u64; 8]], src: *const u8, dst: *mut u32, blocks: usize) {
    let nch = N.div_ceil(8);
    // Chunk k covers input bytes start(k) .. start(k) + 8.
    let start = |k: usize| if N >= 8 { (8 * k).min(N - 8) } else { 0 };
    // Which chunk and lane hold input byte i.
    let lane_of = |i: usize| {
        let k = (i / 8).min(nch - 1);
        (k, i - start(k))
    };

    // Transposition constants.
    let mut perm = [_mm512_setzero_si512(); MAX_N / 8];
    for (k, p) in perm.iter_mut().enumerate().take(nch) {
        *p = bytes(core::array::from_fn(|b| {
            let (j, t) = (b / 8, b % 8);
            if N <= 16 {
                // Byte j of chunk k of input t, from two registers of 64 bytes.
                let i = start(k) + j;
                if i < N {
                    (N * t + i) as u8
                } else {
                    0
                }
            } else {
                // Gathered lane t holds 8 bytes of input t: byte j is at 8t + j.
                (8 * t + j) as u8
            }
        }));
    }
    let gather_idx = _mm512_set_epi64(
        7 * N as i64,
        6 * N as i64,
        5 * N as i64,
        4 * N as i64,
        3 * N as i64,
        2 * N as i64,
        N as i64,
        0,
    );
    let bcast: [__m512i; 8] = core::array::from_fn(|j| {
        let j = j as i64;
        _mm512_set_epi64(8 + j, 8 + j, 8 + j, 8 + j, j, j, j, j)
    });
    // Output byte 4t + q is hash byte 3 - q (little-endian u32) of input t,
    // held in lane 4 * (t / 8) + 3 - q at byte t % 8.
    let outperm = bytes(core::array::from_fn(|b| {
        let (t, q) = (b / 4, b % 4);
        ((4 * (t / 8) + 3 - q) * 8 + t % 8) as u8
    }));
    let lo = first(8 * N);
    let hi = first((8 * N).saturating_sub(64));

    for blk in 0..blocks {
        let base = src.add(blk * BLOCK * N);
        let mut cols = [[_mm512_setzero_si512(); MAX_N / 8]; 2];
        for (g, cg) in cols.iter_mut().enumerate() {
            let q = base.add(g * 8 * N);
            if N <= 16 {
                // SAFETY: masked loads touch only the 8N bytes of this group.
                let l0 = _mm512_maskz_loadu_epi8(lo, q.cast());
                let l1 = _mm512_maskz_loadu_epi8(hi, q.add(64).cast());
                for k in 0..nch {
                    cg[k] = _mm512_permutex2var_epi8(l0, perm[k], l1);
                }
            } else {
                for k in 0..nch {
                    // SAFETY: lane t reads bytes start(k)..start(k)+8 of
                    // input t, inside the input since start(k) + 8 <= N.
                    let r = _mm512_i64gather_epi64::<1>(gather_idx, q.add(start(k)).cast());
                    cg[k] = _mm512_permutexvar_epi8(perm[k], r);
                }
            }
        }
        let mut acc = _mm512_setzero_si512();
        for (i, m) in mats.iter().enumerate() {
            let (k, j) = lane_of(i);
            let x = _mm512_permutex2var_epi64(cols[0][k], bcast[j], cols[1][k]);
            let m = _mm512_loadu_si512(m.as_ptr().cast());
            acc = _mm512_xor_si512(acc, _mm512_gf2p8affine_epi64_epi8::<0>(x, m));
        }
        let res = _mm512_permutexvar_epi8(outperm, acc);
        _mm512_storeu_si512(dst.add(blk * BLOCK).cast(), res);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_rows_are_key_bytes() {
        let k = crate::key::MICROSOFT_KEY;
        // Row 0 of M_0 is key byte 0; row 8 would be key byte 1.
        assert_eq!(matrix(&k, 0) as u8, 0x6d);
        assert_eq!(matrix(&k, 1) as u8, 0x5a);
        assert_eq!((matrix(&k, 0) >> 8) as u8, (key_window(&k, 1) >> 24) as u8);
    }
}
