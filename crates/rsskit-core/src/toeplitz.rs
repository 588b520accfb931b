//! The Toeplitz hash.
//!
//! Definition (Microsoft RSS spec): for each bit of the input, most
//! significant bit of the first byte first, if the bit is set XOR into the
//! result the 32-bit window of the key that starts at that bit position.
//!
//! Three implementations, which agree bit for bit (property-tested):
//! - [`reference`](fn@reference): that definition, one bit at a time. Slow; the oracle.
//! - [`Toeplitz::hash`]: the fast single hash. Portable path: the hash is
//!   linear over GF(2), so the contribution of each input byte is
//!   precomputed per byte value (one 256-entry `u32` table per input byte
//!   position); a hash of `n` bytes is `n` table loads and XORs, fully
//!   unrolled for the RSS input lengths (8, 12, 32 and 36 bytes). On x86-64
//!   with VPCLMULQDQ, GFNI and AVX-512 (run-time detected), inputs of up to
//!   36 bytes use carry-less multiplication instead ([`Backend::Avx512Clmul`]):
//!   one multiplication per 4 input bytes, 4 per instruction. On x86-64 with
//!   AVX2 and VPCLMULQDQ but not those, the same multiplication without GFNI
//!   ([`Backend::Avx2Clmul`]); on aarch64 with PMULL, [`Backend::Pmull`].
//! - [`Toeplitz::hash_batch`] / [`Toeplitz::hash_inputs`]: many inputs at once.
//!   On x86-64 CPUs with GFNI and AVX-512 (F, BW, VL, VBMI), detected at run
//!   time, 16 inputs are hashed together with `vgf2p8affineqb` (see
//!   [`Backend::Avx512Gfni`]); with AVX2 + VPCLMULQDQ only, 8 at a time by
//!   carry-less multiplication ([`Backend::Avx2Clmul`]); on aarch64 with
//!   PMULL, one at a time with it; elsewhere the batch runs the scalar path.

use crate::hashtype::HashInput;
use crate::key::RssKey;
use alloc::vec::Vec;

// Before the backends: they use its macros.
#[cfg(target_arch = "x86_64")]
include!("toeplitz/features.rs");
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod clmul;
#[cfg(target_arch = "x86_64")]
mod gfni;
#[cfg(target_arch = "aarch64")]
mod pmull;

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

/// Which implementation [`Toeplitz::hash_batch`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The per-byte table path, one input at a time.
    Scalar,
    /// x86-64 GFNI + AVX-512 (F, BW, VL, VBMI): 16 inputs per block. The
    /// inputs are transposed so that one 64-bit lane holds one input byte
    /// position of 8 inputs; `vgf2p8affineqb` multiplies those bytes by the
    /// 8x8 GF(2) matrix that maps an input byte at position `i` to hash byte
    /// `o` (it depends only on `i + o`: the key bits `8(i+o) ..
    /// 8(i+o)+15`), so each instruction computes 64 (input byte, hash byte)
    /// products, all of them useful.
    Avx512Gfni,
    /// Single hashes on x86-64 with VPCLMULQDQ + GFNI + AVX-512: the input's
    /// bytes are bit-reversed (one `vgf2p8affineqb`), and each 32-bit chunk is
    /// carry-less multiplied by the 64 key bits it meets; bits 32..63 of the
    /// XOR of the products are the hash.
    Avx512Clmul,
    /// x86-64 AVX2 + PCLMULQDQ + 256-bit VPCLMULQDQ (no AVX-512 or GFNI
    /// needed, e.g. AMD Zen 3), for both single hashes (inputs of up to 36
    /// bytes) and batches (up to 48 bytes, 8 inputs per step): each 32-bit
    /// chunk of the input, byte-swapped, is carry-less multiplied by the 63
    /// key bits it meets, bit-reversed; bits 32..63 of the XOR of the
    /// products are the hash, bit-reversed.
    Avx2Clmul,
    /// aarch64 NEON + PMULL: the input's bytes bit-reversed (`rbit`), each
    /// 32-bit chunk multiplied (`pmull`) by the 64 key bits it meets, as
    /// [`Backend::Avx2Clmul`]; single hashes and batches of up to 48 bytes.
    Pmull,
}

impl Backend {
    /// Short name: `scalar`, `gfni`, `clmul`, `avx2-clmul` or `pmull`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx512Gfni => "gfni",
            Backend::Avx512Clmul => "clmul",
            Backend::Avx2Clmul => "avx2-clmul",
            Backend::Pmull => "pmull",
        }
    }
}

/// The x86-64 carry-less multiplication backend of a [`Toeplitz`].
#[cfg(target_arch = "x86_64")]
#[derive(Clone)]
enum Vclmul {
    None,
    /// AVX-512 single hashes ([`Backend::Avx512Clmul`]).
    Avx512(clmul::Clmul),
    /// AVX2 single hashes and batches ([`Backend::Avx2Clmul`]).
    Avx2(avx2::Avx2Clmul),
}

/// Fast Toeplitz hasher for one key: one 256-entry table per input byte
/// position, plus the GFNI matrices when the CPU has them.
#[derive(Clone)]
pub struct Toeplitz {
    key: RssKey,
    /// `tables[i][v]`: contribution of value `v` at input byte `i`.
    tables: Vec<[u32; 256]>,
    #[cfg(target_arch = "x86_64")]
    gfni: Option<gfni::Gfni>,
    /// The carry-less multiplication backend, if any (one or the other:
    /// they share the space).
    #[cfg(target_arch = "x86_64")]
    vclmul: Vclmul,
    #[cfg(target_arch = "aarch64")]
    pmull: Option<pmull::Pmull>,
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.key)
            .field("backend", &self.backend())
            .field("single_backend", &self.single_backend())
            .finish()
    }
}

impl Toeplitz {
    /// Precomputes tables for inputs of up to `key.len() - 4` bytes, and picks
    /// the fastest backends this CPU supports. This costs ~10 µs and ~40 KB
    /// (40-byte key): build one per key and keep it, never one per packet.
    pub fn new(key: &RssKey) -> Self {
        #[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_mut))]
        let mut t = Self::scalar(key);
        #[cfg(target_arch = "aarch64")]
        {
            t.pmull = pmull::Pmull::new(key.as_bytes());
        }
        #[cfg(target_arch = "x86_64")]
        {
            t.gfni = gfni::Gfni::new(key.as_bytes());
            // The AVX2 backend only where the AVX-512 ones are missing:
            // they are faster.
            t.vclmul = match clmul::Clmul::new(key.as_bytes()) {
                Some(c) if t.gfni.is_some() => Vclmul::Avx512(c),
                avx512 => match (avx2::Avx2Clmul::new(key.as_bytes()), avx512) {
                    (Some(c), _) => Vclmul::Avx2(c),
                    (None, Some(c)) => Vclmul::Avx512(c),
                    (None, None) => Vclmul::None,
                },
            };
        }
        t
    }

    /// Like [`Toeplitz::new`], but always uses the portable scalar backend.
    pub fn scalar(key: &RssKey) -> Self {
        let k = key.as_bytes();
        let max_input = k.len() - 4;
        let mut tables = Vec::with_capacity(max_input);
        for i in 0..max_input {
            let mut t = [0u32; 256];
            // Linear: table(bit | v) = table(v) ^ window(bit) for v < bit,
            // built from the least significant bit up.
            for b in (0..8).rev() {
                let w = key_window(k, i * 8 + b);
                let bit = 0x80usize >> b;
                for v in 0..bit {
                    t[bit | v] = t[v] ^ w;
                }
            }
            tables.push(t);
        }
        Toeplitz {
            key: key.clone(),
            tables,
            #[cfg(target_arch = "x86_64")]
            gfni: None,
            #[cfg(target_arch = "x86_64")]
            vclmul: Vclmul::None,
            #[cfg(target_arch = "aarch64")]
            pmull: None,
        }
    }

    /// The per-byte tables (`[i][v]`: the hash contribution of value `v` at
    /// input byte `i`), for hashers outside this process that XOR one entry
    /// per input byte, such as the eBPF programs (`bpf/toeplitz.h`).
    pub fn byte_tables(&self) -> &[[u32; 256]] {
        &self.tables
    }

    /// The key this hasher was built from.
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// Longest input this hasher accepts.
    pub fn max_input_len(&self) -> usize {
        self.tables.len()
    }

    /// The backend [`Toeplitz::hash_batch`] uses.
    pub fn backend(&self) -> Backend {
        #[cfg(target_arch = "x86_64")]
        {
            if self.gfni.is_some() {
                return Backend::Avx512Gfni;
            }
            if let Vclmul::Avx2(_) = self.vclmul {
                return Backend::Avx2Clmul;
            }
        }
        #[cfg(target_arch = "aarch64")]
        if self.pmull.is_some() {
            return Backend::Pmull;
        }
        Backend::Scalar
    }

    /// The backend [`Toeplitz::hash`] uses for inputs of up to 36 bytes
    /// (longer ones: [`Backend::Scalar`]).
    pub fn single_backend(&self) -> Backend {
        #[cfg(target_arch = "x86_64")]
        match self.vclmul {
            Vclmul::Avx512(_) => return Backend::Avx512Clmul,
            Vclmul::Avx2(_) => return Backend::Avx2Clmul,
            Vclmul::None => {}
        }
        #[cfg(target_arch = "aarch64")]
        if self.pmull.is_some() {
            return Backend::Pmull;
        }
        Backend::Scalar
    }

    /// Hash of `input`.
    ///
    /// # Panics
    /// If `input` is longer than [`Self::max_input_len`] (key length - 4).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        match &self.vclmul {
            Vclmul::Avx512(c) if input.len() <= clmul::MAX_LEN => return c.hash(input),
            Vclmul::Avx2(c) if c.single_handles(input.len()) => return c.hash(input),
            _ => {}
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(p) = self.pmull.as_ref().filter(|p| p.handles(input.len())) {
            return p.hash(input);
        }
        self.hash_table(input)
    }

    /// [`Self::hash`] on the portable table path, whatever the CPU.
    #[inline]
    pub fn hash_table(&self, input: &[u8]) -> u32 {
        match input.len() {
            12 => self.hash_array::<12>(input.try_into().unwrap()),
            36 => self.hash_array::<36>(input.try_into().unwrap()),
            8 => self.hash_array::<8>(input.try_into().unwrap()),
            32 => self.hash_array::<32>(input.try_into().unwrap()),
            _ => self.hash_slice(input),
        }
    }

    /// Hash of an RSS hash input.
    #[inline]
    pub fn hash_input(&self, input: &HashInput) -> u32 {
        self.hash(input.as_bytes())
    }

    /// Hash of a fixed-length input on the table path, the loop unrolled at
    /// compile time.
    ///
    /// # Panics
    /// If `N` is larger than [`Self::max_input_len`].
    #[inline]
    pub fn hash_array<const N: usize>(&self, input: &[u8; N]) -> u32 {
        let tables: &[[u32; 256]; N] = self.tables[..N].try_into().unwrap();
        let mut h = 0u32;
        for i in 0..N {
            h ^= tables[i][usize::from(input[i])];
        }
        h
    }

    #[inline(never)]
    fn hash_slice(&self, input: &[u8]) -> u32 {
        assert!(input.len() <= self.tables.len(), "Toeplitz input longer than key allows");
        let mut h = 0u32;
        for (t, &b) in self.tables.iter().zip(input) {
            h ^= t[usize::from(b)];
        }
        h
    }

    /// Hashes of many fixed-length inputs: `out[i] = hash(inputs[i])`.
    ///
    /// Uses [`Self::backend`].
    ///
    /// # Panics
    /// If `out.len() != inputs.len()` or `N` is larger than
    /// [`Self::max_input_len`].
    pub fn hash_batch<const N: usize>(&self, inputs: &[[u8; N]], out: &mut [u32]) {
        assert_eq!(inputs.len(), out.len(), "hash_batch: one output per input");
        assert!(N <= self.tables.len(), "Toeplitz input longer than key allows");
        #[cfg(target_arch = "x86_64")]
        if let Some(g) = self.gfni.as_ref().filter(|g| g.handles(N)) {
            g.hash_batch(inputs, out);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if let Vclmul::Avx2(c) = &self.vclmul {
            if c.batch_handles(N) {
                c.hash_batch(inputs, out);
                return;
            }
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(p) = self.pmull.as_ref().filter(|p| p.handles(N)) {
            p.hash_batch(inputs, out);
            return;
        }
        self.hash_batch_scalar(inputs, out);
    }

    /// [`Self::hash_batch`] on the scalar path, whatever the CPU.
    pub fn hash_batch_scalar<const N: usize>(&self, inputs: &[[u8; N]], out: &mut [u32]) {
        assert_eq!(inputs.len(), out.len(), "hash_batch: one output per input");
        for (o, i) in out.iter_mut().zip(inputs) {
            *o = self.hash_array(i);
        }
    }

    /// Hashes of many RSS hash inputs (any mix of lengths):
    /// `out[i] = hash(inputs[i].as_bytes())`.
    ///
    /// Runs of IPv4 (8 or 12 bytes) and IPv6 (32 or 36 bytes) inputs go
    /// through [`Self::hash_batch`] 16 at a time (a shorter input is the
    /// longer one with zero bytes appended, which add nothing to the hash).
    ///
    /// # Panics
    /// If `out.len() != inputs.len()`, or an input is longer than
    /// [`Self::max_input_len`].
    pub fn hash_inputs(&self, inputs: &[HashInput], out: &mut [u32]) {
        assert_eq!(inputs.len(), out.len(), "hash_inputs: one output per input");
        const BLOCK: usize = 16;
        let mut i = 0;
        while i < inputs.len() {
            let n = (inputs.len() - i).min(BLOCK);
            let chunk = &inputs[i..i + n];
            let dst = &mut out[i..i + n];
            let max = chunk.iter().map(|x| x.as_bytes().len()).max().unwrap_or(0);
            if max <= 12 {
                self.hash_padded::<12>(chunk, dst);
            } else if max <= 36 && self.tables.len() >= 36 {
                self.hash_padded::<36>(chunk, dst);
            } else {
                for (o, x) in dst.iter_mut().zip(chunk) {
                    *o = self.hash(x.as_bytes());
                }
            }
            i += n;
        }
    }

    fn hash_padded<const N: usize>(&self, chunk: &[HashInput], out: &mut [u32]) {
        let mut buf = [[0u8; N]; 16];
        for (b, x) in buf.iter_mut().zip(chunk) {
            let s = x.as_bytes();
            b[..s.len()].copy_from_slice(s);
        }
        self.hash_batch(&buf[..chunk.len()], out);
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

    fn inputs<const N: usize>(count: usize, seed: u64) -> Vec<[u8; N]> {
        let mut s = seed;
        (0..count)
            .map(|_| {
                core::array::from_fn(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (s >> 56) as u8
                })
            })
            .collect()
    }

    fn check_batch<const N: usize>(t: &Toeplitz) {
        for count in [0usize, 1, 7, 15, 16, 17, 33, 100] {
            let ins = inputs::<N>(count, count as u64 + N as u64);
            let mut out = alloc::vec![0u32; count];
            t.hash_batch(&ins, &mut out);
            for (x, h) in ins.iter().zip(&out) {
                assert_eq!(*h, reference(t.key().as_bytes(), x), "N={N} count={count}");
            }
        }
    }

    /// `Toeplitz::new` picks the fastest backend this CPU runs.
    #[test]
    #[cfg(feature = "std")]
    fn picks_the_cpu_backend() {
        let t = Toeplitz::new(&RssKey::microsoft());
        #[allow(unused_mut, unused_assignments)]
        let (mut batch, mut single) = (Backend::Scalar, Backend::Scalar);
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx512 = has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("gfni");
            let gfni = avx512 && has!("avx512vbmi");
            let clmul512 = avx512 && has!("vpclmulqdq") && has!("pclmulqdq");
            let avx2 = has!("avx2") && has!("pclmulqdq") && has!("vpclmulqdq");
            // AVX-512 for both where it has both; else AVX2 for what it lacks.
            single = if clmul512 && gfni {
                Backend::Avx512Clmul
            } else if avx2 {
                Backend::Avx2Clmul
            } else if clmul512 {
                Backend::Avx512Clmul
            } else {
                Backend::Scalar
            };
            batch = if gfni {
                Backend::Avx512Gfni
            } else if avx2 {
                Backend::Avx2Clmul
            } else {
                Backend::Scalar
            };
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("pmull") {
            (batch, single) = (Backend::Pmull, Backend::Pmull);
        }
        assert_eq!((t.backend(), t.single_backend()), (batch, single));
        let s = Toeplitz::scalar(&RssKey::microsoft());
        assert_eq!((s.backend(), s.single_backend()), (Backend::Scalar, Backend::Scalar));
    }

    #[test]
    fn batch_matches_reference_every_length() {
        let t = Toeplitz::new(&RssKey::microsoft());
        check_batch::<1>(&t);
        check_batch::<2>(&t);
        check_batch::<4>(&t);
        check_batch::<7>(&t);
        check_batch::<8>(&t);
        check_batch::<9>(&t);
        check_batch::<12>(&t);
        check_batch::<13>(&t);
        check_batch::<16>(&t);
        check_batch::<17>(&t);
        check_batch::<24>(&t);
        check_batch::<31>(&t);
        check_batch::<32>(&t);
        check_batch::<35>(&t);
        check_batch::<36>(&t);
    }
}
