//! Toeplitz hashing with carry-less multiplication on x86-64 CPUs with AVX2,
//! PCLMULQDQ and 256-bit VPCLMULQDQ but no AVX-512 or GFNI (AMD Zen 3, Intel
//! Ice Lake client without AVX-512, ...), chosen at run time.
//!
//! # The idea
//! Take the input in 32-bit chunks, each loaded big-endian (one byte swap),
//! so input bit `q` of the chunk (MSB-first numbering) sits at bit `31 - q`
//! of a 64-bit word `X_c` whose high half is zero. Let `K_c` hold the key bits
//! `32c + m` (`m < 63`) at bit `m + 1`. The carry-less product `X_c * K_c`
//! has the term `x_q k_m` at bit `32 + (m - q)`, so its bits 32..63 are the
//! terms with `m = q + r`, `r < 32`: exactly the chunk's Toeplitz
//! contribution, hash bit `r` (MSB first) at bit `32 + r`. The products of
//! all chunks XOR together; the hash is bits 32..63 of the sum, bit-reversed
//! once at the end. (Without GFNI, reversing the bits of every input byte
//! takes two `vpshufb` nibble lookups per register, so the batch reverses
//! its 8 results together instead; the single hash reverses the input when
//! it fits one register, up to 16 bytes, and then needs no byte swaps: see
//! [`single`].)
//!
//! One 64x64 multiplication per 32 input bits is the minimum (a 64-bit key
//! operand covers 32 input bits for 32 hash bits), so an IPv4 4-tuple is 3
//! multiplications and an IPv6 4-tuple 9; a 256-bit `vpclmulqdq` does two.
//!
//! The batch kernel hashes 8 inputs per step: input `j` in the low 128-bit
//! lane and input `j + 4` in the high lane of one register, 16 input bytes
//! per load, one byte shuffle per two chunks (byte swap + zero extension), and
//! four independent accumulators; the 8 results are gathered with one blend,
//! one shift and one unpack per pair of accumulators and bit-reversed
//! together (byte swap + nibble tables).

use super::key_window;
use alloc::boxed::Box;
use core::arch::x86_64::*;

/// Longest input the single-hash kernel takes (longer: the table path).
pub(super) const MAX_SINGLE: usize = 36;
/// Longest input the batch kernel takes: 3 loads of 16 bytes.
const MAX_BATCH: usize = 48;
/// Chunks of the longest input.
const MAX_CHUNKS: usize = MAX_BATCH / 4;
/// Inputs per batch step.
const STEP: usize = 8;

/// Per-key constants (128 bytes, the size of the AVX-512 single-hash
/// backend's, so `Toeplitz` holds either in the same space).
#[derive(Clone)]
pub(super) struct Avx2Clmul {
    /// The single-hash kernel's constants: `[K0, K1, K4, K5, K2, K3, K6, K7,
    /// K8]`, then for inputs of up to 16 bytes the plain key windows (64 bits
    /// from bit 32c, big-endian) for c = 0..4.
    ks: [u64; 13],
    /// The batch's `k[c]` = `K_c`: key bits `32c + m` at bit `m + 1`; zero
    /// past the key. Boxed: one pointer load per batch, not per hash.
    k: Box<[u64; MAX_CHUNKS]>,
    /// Longest input the key allows (`key.len() - 4`).
    max_input: u32,
    /// Longest input [`Self::hash`] takes: `max_input`, at most 36.
    max_single: u32,
}

/// Whether this CPU runs the kernels.
fn detected() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("vpclmulqdq")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(target_feature = "avx2", target_feature = "pclmulqdq", target_feature = "vpclmulqdq"))
    }
}

/// Key bits `32c .. 32c + 64`, big-endian (key bit `32c + m` at bit `63 - m`).
fn window64(key: &[u8], c: usize) -> u64 {
    (u64::from(key_window(key, 32 * c)) << 32) | u64::from(key_window(key, 32 * c + 32))
}

/// `K_c` of `key` for chunk `c`.
fn key_word(key: &[u8], c: usize) -> u64 {
    // Key bits 32c .. 32c + 64, big-endian (bit m at 63 - m), reversed so
    // bit m is at m, then moved up one.
    window64(key, c).reverse_bits() << 1
}

impl Avx2Clmul {
    /// The constants for `key`, or `None` when the CPU lacks the features.
    pub(super) fn new(key: &[u8]) -> Option<Self> {
        if !detected() {
            return None;
        }
        Some(Self::build(key))
    }

    fn build(key: &[u8]) -> Self {
        let k: [u64; MAX_CHUNKS] = core::array::from_fn(|c| key_word(key, c));
        let w = |c| window64(key, c);
        let ks = [k[0], k[1], k[4], k[5], k[2], k[3], k[6], k[7], k[8], w(0), w(1), w(2), w(3)];
        // Keys are short (RSS: 40-52 bytes); more than 4 GB is never a key.
        let max_input = u32::try_from(key.len().saturating_sub(4)).unwrap_or(u32::MAX);
        Avx2Clmul { ks, k: Box::new(k), max_input, max_single: max_input.min(MAX_SINGLE as u32) }
    }

    /// Whether [`Self::hash`] takes inputs of `n` bytes.
    #[inline]
    pub(super) fn single_handles(&self, n: usize) -> bool {
        n <= self.max_single as usize
    }

    /// Whether [`Self::hash_batch`] takes inputs of `n` bytes.
    #[inline]
    pub(super) fn batch_handles(&self, n: usize) -> bool {
        n <= MAX_BATCH && n <= self.max_input as usize
    }

    /// Hash of `input`; the caller checked [`Self::single_handles`].
    #[inline(always)]
    pub(super) fn hash(&self, input: &[u8]) -> u32 {
        debug_assert!(self.single_handles(input.len()));
        // The RSS 4-tuples inline, straight to their kernel.
        match input.len() {
            // SAFETY: `Avx2Clmul` only exists when `detected()` found every
            // feature `single` is compiled for; it reads 12 / 36 bytes.
            12 => unsafe { single::<3>(&self.ks, input.as_ptr()) },
            // SAFETY: as above.
            36 => unsafe { single::<9>(&self.ks, input.as_ptr()) },
            _ => self.hash_other(input),
        }
    }

    #[inline(never)]
    fn hash_other(&self, input: &[u8]) -> u32 {
        let n = input.len();
        if n.is_multiple_of(4) {
            // SAFETY: as in `hash`; `dwords` reads the `n / 4 <= 9` dwords
            // of `input`.
            unsafe { self.dwords(input.as_ptr(), n / 4) }
        } else {
            // Zero bytes add nothing: pad to whole dwords.
            let mut buf = [0u8; MAX_SINGLE];
            buf[..n].copy_from_slice(input);
            // SAFETY: as above; `buf` holds `n.div_ceil(4) <= 9` dwords.
            unsafe { self.dwords(buf.as_ptr(), n.div_ceil(4)) }
        }
    }

    /// Hash of the `d <= 9` dwords at `p`.
    ///
    /// # Safety
    /// The features `detected()` checks; `4 d` bytes at `p` readable.
    unsafe fn dwords(&self, p: *const u8, d: usize) -> u32 {
        let ks = &self.ks;
        // SAFETY: the caller's contract, passed on.
        unsafe {
            match d {
                1 => single::<1>(ks, p),
                2 => single::<2>(ks, p),
                3 => single::<3>(ks, p),
                4 => single::<4>(ks, p),
                5 => single::<5>(ks, p),
                6 => single::<6>(ks, p),
                7 => single::<7>(ks, p),
                8 => single::<8>(ks, p),
                9 => single::<9>(ks, p),
                _ => 0,
            }
        }
    }

    /// `out[i] = hash(inputs[i])`; the caller checked lengths and
    /// [`Self::batch_handles`].
    pub(super) fn hash_batch<const N: usize>(&self, inputs: &[[u8; N]], out: &mut [u32]) {
        debug_assert_eq!(inputs.len(), out.len());
        debug_assert!(self.batch_handles(N));
        if N == 0 {
            out.fill(0);
            return;
        }
        // SAFETY: `Avx2Clmul` only exists when `detected()` found every
        // feature `batch` is compiled for; `batch` reads only inside
        // `inputs` (see there) and writes `inputs.len()` outputs.
        unsafe { batch::<N>(&self.k, inputs, out) }
    }
}

/// Byte swap of every dword.
const BSWAP32: [u8; 32] = {
    let mut s = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        s[i] = (i - i % 4 + 3 - i % 4) as u8;
        i += 1;
    }
    s
};

#[target_feature(enable = "avx2")]
#[inline]
fn bytes32(b: &[u8; 32]) -> __m256i {
    // SAFETY: 32 bytes read from a 32-byte array.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// The first `d` (at most 4) dwords at `p`, the rest zero.
///
/// # Safety
/// `4 d` bytes at `p` readable.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load_dwords(p: *const u8, d: usize) -> __m128i {
    // SAFETY: every arm reads `4 d` bytes at `p`, unaligned.
    unsafe {
        match d {
            0 => _mm_setzero_si128(),
            1 => _mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()),
            2 => _mm_loadl_epi64(p.cast()),
            3 => _mm_insert_epi32::<2>(_mm_loadl_epi64(p.cast()), p.add(8).cast::<i32>().read_unaligned()),
            _ => _mm_loadu_si128(p.cast()),
        }
    }
}

/// Per 128-bit lane: dwords 0 and 1 (`ZX01`) or 2 and 3 (`ZX23`),
/// byte-swapped, zero-extended to qwords.
const ZX01: [u8; 32] = zx(0);
const ZX23: [u8; 32] = zx(2);

const fn zx(first: usize) -> [u8; 32] {
    let mut s = [0x80u8; 32];
    let mut j = 0;
    while j < 32 {
        let (q, b) = ((j % 16) / 8, j % 8);
        if b < 4 {
            s[j] = (4 * (first + q) + 3 - b) as u8;
        }
        j += 1;
    }
    s
}

/// Per-byte bit reversal with nibble tables (`vpshufb`).
#[target_feature(enable = "avx2")]
#[inline]
fn reverse_byte_bits(x: __m256i) -> __m256i {
    const REV_LO: [u8; 32] = {
        let mut t = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = ((i % 16) as u8).reverse_bits() >> 4;
            i += 1;
        }
        t
    };
    const REV_HI: [u8; 32] = {
        let mut t = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = ((i % 16) as u8).reverse_bits();
            i += 1;
        }
        t
    };
    let nib = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(x, nib);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nib);
    _mm256_or_si256(_mm256_shuffle_epi8(bytes32(&REV_HI), lo), _mm256_shuffle_epi8(bytes32(&REV_LO), hi))
}

/// Hash of the `D` (at most 9) dwords at `p`.
///
/// # Safety
/// AVX2, PCLMULQDQ and VPCLMULQDQ must be available; `4 D` bytes at `p`
/// must be readable.
#[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
unsafe fn single<const D: usize>(ks: &[u64; 13], p: *const u8) -> u32 {
    if D <= 4 {
        // Up to 16 bytes: cheaper to reverse the bits of each input byte
        // (then input bit q sits at bit q of its little-endian chunk) and
        // multiply by the plain big-endian key windows: the hash comes out
        // in order at bits 32..63, no byte swaps.
        // SAFETY: `4 D` bytes readable.
        let x = unsafe { load_dwords(p, D) };
        let x = _mm256_castsi256_si128(reverse_byte_bits(_mm256_castsi128_si256(x)));
        let x = _mm256_cvtepu32_epi64(x);
        // SAFETY: `ks[9..13]`: the windows from bits 0, 32, 64, 96.
        let k = unsafe { _mm256_loadu_si256(ks.as_ptr().add(9).cast()) };
        let s =
            _mm256_xor_si256(_mm256_clmulepi64_epi128::<0x00>(x, k), _mm256_clmulepi64_epi128::<0x11>(x, k));
        let s = _mm_xor_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        return _mm_extract_epi32::<1>(s) as u32;
    }
    let mut s = {
        // SAFETY: `4 D >= 20` bytes readable: 16, then up to 16 more.
        let x =
            unsafe { _mm256_set_m128i(load_dwords(p.add(16), (D - 4).min(4)), _mm_loadu_si128(p.cast())) };
        // SAFETY: `ks[0..8]` is [K0, K1, K4, K5, K2, K3, K6, K7].
        let (k0145, k2367) = unsafe {
            (_mm256_loadu_si256(ks.as_ptr().cast()), _mm256_loadu_si256(ks.as_ptr().add(4).cast()))
        };
        let a = _mm256_shuffle_epi8(x, bytes32(&ZX01));
        let b = _mm256_shuffle_epi8(x, bytes32(&ZX23));
        let s = _mm256_xor_si256(
            _mm256_xor_si256(
                _mm256_clmulepi64_epi128::<0x00>(a, k0145),
                _mm256_clmulepi64_epi128::<0x11>(a, k0145),
            ),
            _mm256_xor_si256(
                _mm256_clmulepi64_epi128::<0x00>(b, k2367),
                _mm256_clmulepi64_epi128::<0x11>(b, k2367),
            ),
        );
        let mut s = _mm_xor_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        if D > 8 {
            // SAFETY: dword 8 is readable (`D == 9`).
            let c8 = u32::from_be(unsafe { p.add(32).cast::<u32>().read_unaligned() });
            let k8 = _mm_cvtsi64_si128(ks[8] as i64);
            s = _mm_xor_si128(s, _mm_clmulepi64_si128::<0x00>(_mm_cvtsi32_si128(c8 as i32), k8));
        }
        s
    };
    // Bits 32..63: the hash, bit-reversed; reverse the bits of each byte
    // here, the byte order after the extraction.
    s = _mm256_castsi256_si128(reverse_byte_bits(_mm256_castsi128_si256(s)));
    (_mm_extract_epi32::<1>(s) as u32).swap_bytes()
}

/// Shuffle controls for inputs of `N` bytes: `[2b + t]` for the 16-byte
/// block `b`, turning its chunks `4b + 2t` and `4b + 2t + 1` into
/// zero-extended big-endian qwords (bytes past the input: zero).
struct Shuf<const N: usize>;

impl<const N: usize> Shuf<N> {
    const S: [[u8; 32]; 2 * MAX_BATCH / 16] = {
        let mut s = [[0x80u8; 32]; 2 * MAX_BATCH / 16];
        let mut bt = 0;
        while bt < s.len() {
            let (b, t) = (bt / 2, bt % 2);
            let mut j = 0;
            while j < 32 {
                let (qs, p) = ((j % 16) / 8, j % 8);
                let c = 4 * b + 2 * t + qs;
                if p < 4 && 4 * c + 3 - p < N {
                    s[bt][j] = (8 * t + 4 * qs + 3 - p) as u8;
                }
                j += 1;
            }
            bt += 1;
        }
        s
    };
}

/// The key registers: `[K_c, K_c+1]` in both lanes, `c = 2i`.
#[target_feature(enable = "avx2")]
#[inline]
fn key_pairs(k: &[u64; MAX_CHUNKS]) -> [__m256i; MAX_CHUNKS / 2] {
    let mut r = [_mm256_setzero_si256(); MAX_CHUNKS / 2];
    for (i, r) in r.iter_mut().enumerate() {
        let (a, b) = (k[2 * i] as i64, k[2 * i + 1] as i64);
        *r = _mm256_setr_epi64x(a, b, a, b);
    }
    r
}

/// Bit reversal of every dword (byte swap, then nibble tables).
#[target_feature(enable = "avx2")]
#[inline]
fn reverse_dwords(x: __m256i) -> __m256i {
    reverse_byte_bits(_mm256_shuffle_epi8(x, bytes32(&BSWAP32)))
}

/// Hashes of 8 inputs of `N` bytes at `p` (input `i` at `p + i N`) into
/// `out[0..8]`: each result's bits 32..63 of lane 0 (input `j`) and lane 1
/// (input `j + 4`) of accumulator `j`.
///
/// # Safety
/// AVX2, PCLMULQDQ and VPCLMULQDQ; `7 N + 16 ceil(N / 16)` bytes at `p`
/// readable; 8 `u32`s writable at `out`.
#[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
#[inline]
unsafe fn step<const N: usize>(kp: &[__m256i; MAX_CHUNKS / 2], p: *const u8, out: *mut u32) {
    let chunks = N.div_ceil(4);
    let blocks = N.div_ceil(16);
    let mut acc = [_mm256_setzero_si256(); 4];
    for (j, a) in acc.iter_mut().enumerate() {
        for b in 0..blocks {
            // SAFETY: inputs j and j + 4, bytes 16b .. 16b + 16: inside the
            // readable range (the caller's contract).
            let x = unsafe {
                _mm256_loadu2_m128i(p.add((j + 4) * N + 16 * b).cast(), p.add(j * N + 16 * b).cast())
            };
            for t in 0..2 {
                let c = 4 * b + 2 * t;
                if c >= chunks {
                    break;
                }
                let y = _mm256_shuffle_epi8(x, bytes32(&Shuf::<N>::S[2 * b + t]));
                let kk = kp[c / 2];
                *a = _mm256_xor_si256(*a, _mm256_clmulepi64_epi128::<0x00>(y, kk));
                if c + 1 < chunks {
                    *a = _mm256_xor_si256(*a, _mm256_clmulepi64_epi128::<0x11>(y, kk));
                }
            }
        }
    }
    // Per lane: [acc0.d1, acc1.d1, acc2.d1, acc3.d1] = inputs 0..3 (lane 0), 4..7.
    let q01 = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(acc[0]), acc[1]);
    let q23 = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(acc[2]), acc[3]);
    let h = reverse_dwords(_mm256_unpacklo_epi64(q01, q23));
    // SAFETY: 8 u32s writable at `out`.
    unsafe { _mm256_storeu_si256(out.cast(), h) }
}

/// The batch: 8 inputs per step, the last ones from a zero-padded copy.
///
/// # Safety
/// AVX2, PCLMULQDQ and VPCLMULQDQ; `1 <= N <= 48`; `out.len() == inputs.len()`.
#[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq")]
unsafe fn batch<const N: usize>(k: &[u64; MAX_CHUNKS], inputs: &[[u8; N]], out: &mut [u32]) {
    let kp = key_pairs(k);
    // A step reads up to `slack` bytes past its last input.
    let slack = 16 * N.div_ceil(16) - N;
    let total = inputs.len() * N;
    let p = inputs.as_ptr().cast::<u8>();
    let mut i = 0;
    while (i + STEP) * N + slack <= total {
        // SAFETY: inputs i .. i + 8 and `slack` more bytes are inside
        // `inputs`; outputs i .. i + 8 inside `out` (same length).
        unsafe { step::<N>(&kp, p.add(i * N), out.as_mut_ptr().add(i)) };
        i += STEP;
    }
    // The rest (fewer than 8 + slack / N inputs): copied, zero-padded.
    while i < inputs.len() {
        let n = (inputs.len() - i).min(STEP);
        let mut buf = [0u8; STEP * MAX_BATCH + 16];
        let src = &inputs[i..i + n];
        for (d, s) in buf.chunks_exact_mut(N).zip(src) {
            d.copy_from_slice(s);
        }
        let mut o = [0u32; STEP];
        // SAFETY: `buf` holds 8 N + 16 >= 7 N + 16 ceil(N / 16) bytes
        // (N <= 48); `o` holds 8 u32s.
        unsafe { step::<N>(&kp, buf.as_ptr(), o.as_mut_ptr()) };
        out[i..i + n].copy_from_slice(&o[..n]);
        i += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toeplitz::reference;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn key_word_holds_the_window_reversed() {
        let key = crate::key::MICROSOFT_KEY;
        // Bit m + 1 of K_c is key bit 32c + m.
        for c in 0..MAX_CHUNKS {
            let kw = key_word(&key, c);
            for m in 0..63 {
                let bit = 32 * c + m;
                let want = key.get(bit / 8).is_some_and(|b| b & (0x80 >> (bit % 8)) != 0);
                assert_eq!(kw >> (m + 1) & 1 == 1, want, "c {c} m {m}");
            }
            assert_eq!(kw & 1, 0);
        }
    }

    fn backend(key: &[u8]) -> Avx2Clmul {
        Avx2Clmul::new(key).expect("the build probe saw AVX2/PCLMULQDQ/VPCLMULQDQ on this CPU")
    }

    #[test]
    #[cfg_attr(rsskit_no_avx2_clmul, ignore = "this CPU lacks AVX2/PCLMULQDQ/VPCLMULQDQ")]
    fn single_matches_reference_every_length() {
        let key = crate::key::MICROSOFT_KEY;
        let c = backend(&key);
        let data: Vec<u8> = (0..36u32).map(|i| (i * 97 + 13) as u8).collect();
        for n in 0..=MAX_SINGLE {
            assert_eq!(c.hash(&data[..n]), reference(&key, &data[..n]), "len {n}");
        }
    }

    fn check_batch<const N: usize>(key: &[u8], seed: u64, count: usize) -> Result<(), TestCaseError> {
        let c = backend(key);
        if !c.batch_handles(N) {
            return Ok(());
        }
        let mut s = seed | 1;
        let ins: Vec<[u8; N]> = (0..count)
            .map(|_| {
                core::array::from_fn(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
            })
            .collect();
        let mut out = alloc::vec![!0u32; count];
        c.hash_batch(&ins, &mut out);
        for (i, x) in ins.iter().enumerate() {
            let r = reference(key, x);
            prop_assert_eq!(out[i], r, "batch N={} count={} input {}", N, count, i);
            if c.single_handles(N) {
                prop_assert_eq!(c.hash(x), r, "single N={}", N);
            }
        }
        Ok(())
    }

    macro_rules! lengths {
        ($key:expr, $seed:expr, $count:expr; $($n:literal)*) => {
            $(check_batch::<$n>($key, $seed, $count)?;)*
        };
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random keys (40-60 bytes), inputs and batch sizes (every tail
        /// length, and whole steps reading into the next input).
        #[test]
        #[cfg_attr(rsskit_no_avx2_clmul, ignore = "this CPU lacks AVX2/PCLMULQDQ/VPCLMULQDQ")]
        fn batch_and_single_match_reference(
            key in (40usize..=60).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n)),
            seed in any::<u64>(),
            count in 0usize..40,
        ) {
            lengths!(&key, seed, count; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26
                27 28 29 30 31 32 33 34 35 36 37 40 44 47 48);
        }

        /// The RSS lengths with larger batches.
        #[test]
        #[cfg_attr(rsskit_no_avx2_clmul, ignore = "this CPU lacks AVX2/PCLMULQDQ/VPCLMULQDQ")]
        fn rss_lengths_match_reference(
            key in (40usize..=60).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n)),
            seed in any::<u64>(),
            count in 0usize..200,
        ) {
            lengths!(&key, seed, count; 4 8 12 16 32 36);
        }
    }
}
