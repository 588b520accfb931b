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
//! Inputs longer than 16 bytes use a second layout that spends fewer
//! shuffles: each register of 8 columns is multiplied as it is, once per
//! hash byte `o` (lane `j` by `M_{8k+j+o}`), into 8 accumulators (2 groups
//! x 4 hash bytes), whose 8 lanes are summed at the end of the block by a
//! 3-step unpack/shuffle/XOR reduction. Every product is still useful.
//!
//! The transposition: inputs of up to 16 bytes (8 inputs = at most 128
//! bytes) come from two masked loads and one two-source byte permutation
//! (`vpermt2b`) per 8 columns; longer inputs are loaded one per register and
//! transposed in 64-bit chunks (`vpunpck[lh]qdq`, `vshufi64x2`), the last step
//! fused with the byte transpose (`vpermt2b`). (`vpgatherqq` was measured:
//! several times slower on this AMD EPYC.)

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
    /// `per_out[k][o]`, lane `j`: `M_{8k + j + o}` (inputs longer than 16 bytes).
    per_out: Vec<[[u64; 8]; 4]>,
}

/// Whether this CPU runs the kernel.
fn detected() -> bool {
    #[cfg(feature = "std")]
    {
        gfni_features!(cpu_has)
    }
    #[cfg(not(feature = "std"))]
    {
        gfni_features!(target_has)
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
        // Every M_m any layout uses, computed once.
        let m: Vec<u64> = (0..MAX_N + 3).map(|m| matrix(key, m)).collect();
        let mats = (0..max_input)
            .map(|i| [m[i], m[i + 1], m[i + 2], m[i + 3], m[i], m[i + 1], m[i + 2], m[i + 3]])
            .collect();
        let per_out = (0..MAX_N / 8)
            .map(|k| core::array::from_fn(|o| core::array::from_fn(|j| m[8 * k + j + o])))
            .collect();
        Gfni { mats, per_out }
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
                &self.per_out,
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
            unsafe { batch::<N>(&self.mats[..N], &self.per_out, buf.as_ptr().cast(), o.as_mut_ptr(), 1) };
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
unsafe fn batch<const N: usize>(
    mats: &[[u64; 8]],
    per_out: &[[[u64; 8]; 4]],
    src: *const u8,
    dst: *mut u32,
    blocks: usize,
) {
    let nch = N.div_ceil(8);

    // Transposition constants: perm[k] puts chunk k (input bytes 8k .. 8k + 8)
    // of 8 inputs in column order: byte 8j + t = byte 8k + j of input t.
    let mut perm = [_mm512_setzero_si512(); MAX_N / 8];
    for (k, p) in perm.iter_mut().enumerate().take(nch) {
        *p = bytes(core::array::from_fn(|b| {
            let (j, t) = (b / 8, b % 8);
            if N <= 16 {
                // From the two registers holding the 8 inputs back to back
                // (bytes past the input are never used: any index will do).
                let i = 8 * k + j;
                if i < N {
                    (N * t + i) as u8
                } else {
                    0
                }
            } else {
                // From the two stage-2 registers of chunk class k % 4 (see
                // below): chunk k of input t is qword
                // 4 * ((t % 4) / 2) + 2 * (k / 4) + t % 2 of register t / 4.
                let qw = 4 * ((t % 4) / 2) + 2 * (k / 4) + t % 2;
                ((t / 4) * 64 + 8 * qw + j) as u8
            }
        }));
    }
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
    let row = first(N);
    let lo = first(8 * N);
    let hi = first((8 * N).saturating_sub(64));

    for blk in 0..blocks {
        // SAFETY: block `blk < blocks` starts inside the caller's `blocks * 16 * N` bytes.
        let base = unsafe { src.add(blk * BLOCK * N) };
        let mut cols = [[_mm512_setzero_si512(); MAX_N / 8]; 2];
        for (g, cg) in cols.iter_mut().enumerate() {
            // SAFETY: group `g` of 8 inputs lies inside the block.
            let q = unsafe { base.add(g * 8 * N) };
            if N <= 16 {
                // Masked loads: only the 8N bytes of this group are read.
                // SAFETY: the masks `lo`/`hi` cover exactly the 8 * N <= 128 bytes of the group.
                let (l0, l1) = unsafe {
                    (_mm512_maskz_loadu_epi8(lo, q.cast()), _mm512_maskz_loadu_epi8(hi, q.add(64).cast()))
                };
                for k in 0..nch {
                    cg[k] = _mm512_permutex2var_epi8(l0, perm[k], l1);
                }
            } else {
                // One masked row per input, then an 8x8 transpose of 64-bit
                // chunks (only of the chunks that exist), its last step fused
                // with the 8x8 byte transpose.
                let mut r = [_mm512_setzero_si512(); 8];
                for (t, rt) in r.iter_mut().enumerate() {
                    // SAFETY: input `t` of the group is N bytes at `q + N * t`; `row` masks N bytes.
                    *rt = unsafe { _mm512_maskz_loadu_epi8(row, q.add(N * t).cast()) };
                }
                // Stage 1: ab[0][p] has the even chunks, ab[1][p] the odd
                // chunks of inputs 2p and 2p + 1 (128-bit lane L: chunk 2L,
                // resp. 2L + 1).
                let mut ab = [[_mm512_setzero_si512(); 4]; 2];
                for p in 0..4 {
                    ab[0][p] = _mm512_unpacklo_epi64(r[2 * p], r[2 * p + 1]);
                    ab[1][p] = _mm512_unpackhi_epi64(r[2 * p], r[2 * p + 1]);
                }
                // Stage 2: chunks of class m = k % 4 (chunks m and m + 4),
                // for inputs 0-3 (h = 0) and 4-7 (h = 1).
                let mut s2 = [[_mm512_setzero_si512(); 2]; 4];
                for (m, sm) in s2.iter_mut().enumerate().take(nch.min(4)) {
                    let src = &ab[m % 2];
                    for (h, sh) in sm.iter_mut().enumerate() {
                        *sh = if m / 2 == 0 {
                            _mm512_shuffle_i64x2::<0x88>(src[2 * h], src[2 * h + 1])
                        } else {
                            _mm512_shuffle_i64x2::<0xdd>(src[2 * h], src[2 * h + 1])
                        };
                    }
                }
                for k in 0..nch {
                    cg[k] = _mm512_permutex2var_epi8(s2[k % 4][0], perm[k], s2[k % 4][1]);
                }
            }
        }
        let acc = if N <= 16 {
            // Broadcast layout: column i of both groups into the lanes of
            // the 4 hash bytes. Four accumulators: the XOR chain would
            // otherwise bound a block to N cycles.
            let mut acc = [_mm512_setzero_si512(); 4];
            let [cols_a, cols_b] = &cols;
            for (k, (&ca, &cb)) in cols_a.iter().zip(cols_b).enumerate().take(nch) {
                for (j, bj) in bcast.iter().enumerate() {
                    let i = 8 * k + j;
                    if i < N {
                        let x = _mm512_permutex2var_epi64(ca, *bj, cb);
                        // SAFETY: `mats[i]` is 8 u64s: exactly one 64-byte load.
                        let m = unsafe { _mm512_loadu_si512(mats[i].as_ptr().cast()) };
                        acc[j % 4] = _mm512_xor_si512(acc[j % 4], _mm512_gf2p8affine_epi64_epi8::<0>(x, m));
                    }
                }
            }
            _mm512_xor_si512(_mm512_xor_si512(acc[0], acc[1]), _mm512_xor_si512(acc[2], acc[3]))
        } else {
            // Per-output layout (fewer shuffles for long inputs): multiply
            // the 8 columns of a chunk, as they are, by the matrices of hash
            // byte o (lane j: M_{8k+j+o}); columns past N are zero. Then sum
            // each accumulator's 8 lanes: x[4g + o] -> lane 4g + o.
            let mut x = [_mm512_setzero_si512(); 8];
            for (g, cg) in cols.iter().enumerate() {
                for (&c, po) in cg.iter().zip(per_out).take(nch) {
                    for (o, m) in po.iter().enumerate() {
                        // SAFETY: `m` is 8 u64s: exactly one 64-byte load.
                        let m = unsafe { _mm512_loadu_si512(m.as_ptr().cast()) };
                        x[4 * g + o] =
                            _mm512_xor_si512(x[4 * g + o], _mm512_gf2p8affine_epi64_epi8::<0>(c, m));
                    }
                }
            }
            // 128-bit lane L of a[p]: [x[2p] lanes 2L^2L+1, x[2p+1] lanes 2L^2L+1].
            let a: [__m512i; 4] = core::array::from_fn(|p| {
                _mm512_xor_si512(
                    _mm512_unpacklo_epi64(x[2 * p], x[2 * p + 1]),
                    _mm512_unpackhi_epi64(x[2 * p], x[2 * p + 1]),
                )
            });
            let fold = |u: __m512i, v: __m512i| {
                _mm512_xor_si512(_mm512_shuffle_i64x2::<0x88>(u, v), _mm512_shuffle_i64x2::<0xdd>(u, v))
            };
            fold(fold(a[0], a[1]), fold(a[2], a[3]))
        };
        let res = _mm512_permutexvar_epi8(outperm, acc);
        // SAFETY: block `blk < blocks` owns `dst[blk * 16..][..16]` u32s (64 bytes).
        unsafe { _mm512_storeu_si512(dst.add(blk * BLOCK).cast(), res) };
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

    /// The kernel itself, every input length it handles, against the
    /// bitwise reference (the property tests reach it only through
    /// `Toeplitz`, which falls back to scalar on CPUs without it).
    #[test]
    #[cfg_attr(rsskit_no_avx512_gfni, ignore = "this CPU lacks GFNI/AVX-512 (F/BW/VL/VBMI)")]
    fn batch_matches_reference() {
        fn check<const N: usize>(g: &Gfni, key: &[u8]) {
            let inputs: Vec<[u8; N]> =
                (0..37u32).map(|i| core::array::from_fn(|j| (i as usize * 131 + j * 29 + 7) as u8)).collect();
            let mut out = alloc::vec![0u32; inputs.len()];
            g.hash_batch(&inputs, &mut out);
            for (i, x) in inputs.iter().enumerate() {
                assert_eq!(out[i], crate::toeplitz::reference(key, x), "N={N} input {i}");
            }
        }
        let key = crate::key::MICROSOFT_KEY;
        let g = Gfni::new(&key).expect("the build probe saw GFNI/AVX-512 on this CPU");
        check::<8>(&g, &key);
        check::<12>(&g, &key);
        check::<16>(&g, &key);
        check::<36>(&g, &key);
        // A 40-byte key hashes at most 36 input bytes; 40 needs a longer key.
        let mut long = [0u8; 52];
        long[..40].copy_from_slice(&key);
        long[40..].copy_from_slice(&key[..12]);
        let g = Gfni::new(&long).expect("the build probe saw GFNI/AVX-512 on this CPU");
        check::<40>(&g, &long);
        check::<48>(&g, &long);
    }
}
