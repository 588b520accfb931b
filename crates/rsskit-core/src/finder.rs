//! The tuple finder: source ports (in a range) or source addresses (in a
//! CIDR) whose flow to a given destination hashes into a wanted bucket.
//!
//! The Toeplitz hash is linear over GF(2): every input bit that is set XORs
//! one 32-bit key window into the result. With everything fixed but `n`
//! bits `x` of the input (the source port, or the host part of the source
//! address),
//!
//! ```text
//! hash(x) = hash(x = 0) ^ (W · x),   W = the n key windows of those bits,
//! ```
//!
//! so `(hash & mask) == value` is a linear system `A x = b` over GF(2): one
//! equation per mask bit, `n` unknowns. [`Solutions`] brings it to reduced
//! row-echelon form, taking the columns least significant bit first. Then
//! every pivot bit depends only on free bits *more* significant than it,
//! and counting the free bits up in binary enumerates the solutions `x` in
//! ascending order; a binary search over that counter finds the first
//! solution in a range. There is no search over the candidates: each
//! solution costs `O(n)` word operations.

use crate::hashtype::HashType;
use crate::key::RssKey;
use crate::toeplitz::{key_window, reference};
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::ops::RangeInclusive;

/// One flow the finder found, `src:src_port -> dst:dst_port`, and the hash
/// the NIC computes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Found {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dst_port: u16,
    /// The flow's full 32-bit Toeplitz hash.
    pub hash: u32,
}

/// Why the finder found nothing or refused the question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    /// No source in the given range gives the wanted hash bits.
    NoSolution {
        /// What varied: "source port" or "source address".
        what: &'static str,
        /// Whether the bits could be reached at all (outside the range):
        /// false when the key windows of the varying bits cannot produce
        /// them, e.g. a 2-tuple hash that does not depend on the port.
        reachable: bool,
    },
    /// A prefix length longer than the address.
    BadPrefix {
        /// The prefix length given.
        prefix_len: u8,
        /// Bits in the address: 32 or 128.
        max: u8,
    },
    /// Source, destination and hash type are not all of one family.
    FamilyMismatch,
    /// `value` has bits outside `mask`: no hash can match.
    ValueOutsideMask {
        /// Hash bits that must match.
        mask: u32,
        /// Value wanted in those bits.
        value: u32,
    },
    /// An empty port range.
    EmptyRange,
    /// The key is too short for the hash input.
    KeyTooShort {
        /// Key length, in bytes.
        len: usize,
        /// Key bytes the hash input needs (input length + 4).
        need: usize,
    },
}

impl fmt::Display for FindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindError::NoSolution { what, reachable: true } => {
                write!(f, "no {what} in the given range lands there (solutions exist outside it)")
            }
            FindError::NoSolution { what, reachable: false } => {
                write!(f, "no {what} lands there: the hash bits cannot be reached by varying the {what}")
            }
            FindError::BadPrefix { prefix_len, max } => {
                write!(f, "prefix length /{prefix_len} is longer than the address ({max} bits)")
            }
            FindError::FamilyMismatch => {
                f.write_str("source, destination and hash type are not all of one address family")
            }
            FindError::ValueOutsideMask { mask, value } => {
                write!(f, "wanted value {value:#x} has bits outside the mask {mask:#x}")
            }
            FindError::EmptyRange => f.write_str("the source port range is empty"),
            FindError::KeyTooShort { len, need } => {
                write!(f, "RSS key of {len} bytes is too short for this input ({need} bytes needed)")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FindError {}

/// The solution set of `(h0 ^ W·x) & mask == value` over `n`-bit `x`: an
/// affine subspace, enumerable in ascending order of `x`.
#[derive(Debug, Clone)]
pub struct Solutions {
    n: u32,
    /// The solution with every free bit zero.
    base: u128,
    /// One vector per free bit, ascending bit order: setting free bit `f`
    /// flips `f` and the pivot bits that depend on it (all below `f`).
    basis: Vec<u128>,
}

impl Solutions {
    /// Solves `(h0 ^ XOR_{j: x_j = 1} windows[j]) & mask == value`, where
    /// `windows[j]` is what bit `j` of `x` (bit 0 least significant)
    /// XORs into the hash. `None` when there is no solution.
    pub fn solve(windows: &[u32], h0: u32, mask: u32, value: u32) -> Option<Solutions> {
        let n = windows.len() as u32;
        assert!(n <= 128, "at most 128 varying bits");
        // Row per mask bit: coefficients over the columns (bit j of x) and
        // the right-hand side.
        let mut rows: Vec<(u128, bool)> = (0..32)
            .filter(|b| mask >> b & 1 == 1)
            .map(|b| {
                let coeffs =
                    windows.iter().enumerate().fold(0u128, |acc, (j, w)| acc | (u128::from(w >> b & 1) << j));
                (coeffs, ((h0 ^ value) >> b) & 1 == 1)
            })
            .collect();
        // Reduced row-echelon form, columns in ascending bit order.
        let mut pivots: Vec<(u32, usize)> = Vec::new(); // (column, row)
        let mut next_row = 0;
        for col in 0..n {
            let bit = 1u128 << col;
            let Some(p) = (next_row..rows.len()).find(|&r| rows[r].0 & bit != 0) else { continue };
            rows.swap(next_row, p);
            let pivot = rows[next_row];
            for (r, row) in rows.iter_mut().enumerate() {
                if r != next_row && row.0 & bit != 0 {
                    row.0 ^= pivot.0;
                    row.1 ^= pivot.1;
                }
            }
            pivots.push((col, next_row));
            next_row += 1;
        }
        // Rows left without a pivot are 0 = rhs: inconsistent if rhs is 1.
        if rows[next_row..].iter().any(|&(_, rhs)| rhs) {
            return None;
        }
        let mut base = 0u128;
        for &(col, r) in &pivots {
            if rows[r].1 {
                base |= 1u128 << col;
            }
        }
        let pivot_cols: u128 = pivots.iter().fold(0, |a, &(c, _)| a | 1u128 << c);
        let basis = (0..n)
            .filter(|&f| pivot_cols >> f & 1 == 0)
            .map(|f| {
                let mut v = 1u128 << f;
                for &(col, r) in &pivots {
                    if rows[r].0 >> f & 1 == 1 {
                        v |= 1u128 << col;
                    }
                }
                v
            })
            .collect();
        Some(Solutions { n, base, basis })
    }

    /// Number of varying bits.
    pub fn bits(&self) -> u32 {
        self.n
    }

    /// Number of free bits: there are `2^free_bits()` solutions.
    pub fn free_bits(&self) -> u32 {
        self.basis.len() as u32
    }

    /// Largest counter value, `2^free_bits - 1`.
    fn max_counter(&self) -> u128 {
        match self.basis.len() {
            0 => 0,
            k => u128::MAX >> (128 - k),
        }
    }

    /// The `k`-th smallest solution (`k < 2^free_bits`).
    pub fn nth(&self, k: u128) -> u128 {
        let mut x = self.base;
        let mut k = k;
        let mut i = 0;
        while k != 0 {
            if k & 1 == 1 {
                x ^= self.basis[i];
            }
            k >>= 1;
            i += 1;
        }
        x
    }

    /// Index of the first solution `>= lo`, if any.
    fn first_at_least(&self, lo: u128) -> Option<u128> {
        let max = self.max_counter();
        if self.nth(max) < lo {
            return None;
        }
        // nth is strictly increasing: binary search.
        let (mut a, mut b) = (0u128, max);
        while a < b {
            let mid = a + (b - a) / 2;
            if self.nth(mid) < lo {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        Some(a)
    }

    /// Solutions in `lo..=hi`, ascending, at most `max` of them.
    pub fn in_range(&self, lo: u128, hi: u128, max: usize) -> Vec<u128> {
        let mut out = Vec::new();
        if lo > hi || max == 0 {
            return out;
        }
        let Some(mut k) = self.first_at_least(lo) else { return out };
        let last = self.max_counter();
        loop {
            let x = self.nth(k);
            if x > hi {
                break;
            }
            out.push(x);
            if out.len() == max || k == last {
                break;
            }
            k += 1;
        }
        out
    }
}

/// Hash input of `ht` with the given tuple, checking families.
fn input_for(
    ht: HashType,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
) -> Result<crate::HashInput, FindError> {
    crate::FlowTuple::new(src, src_port, dst, dst_port, crate::L4Proto::Other(0))
        .input(ht)
        .map_err(|_| FindError::FamilyMismatch)
}

fn check_target(key: &RssKey, ht: HashType, mask: u32, value: u32) -> Result<(), FindError> {
    if value & !mask != 0 {
        return Err(FindError::ValueOutsideMask { mask, value });
    }
    if key.len() < ht.input_len() + 4 {
        return Err(FindError::KeyTooShort { len: key.len(), need: ht.input_len() + 4 });
    }
    Ok(())
}

/// The linear model of the hash around a base input: `h0` and the window
/// of each varying bit (`bit_pos(j)`: input bit position of bit `j` of x).
fn windows(key: &RssKey, n: u32, bit_pos: impl Fn(u32) -> usize) -> Vec<u32> {
    (0..n).map(|j| key_window(key.as_bytes(), bit_pos(j))).collect()
}

/// `h0 ^ XOR of windows[j] for set bits j of x`: the hash of the input with x filled in.
fn hash_of(h0: u32, windows: &[u32], x: u128) -> u32 {
    windows.iter().enumerate().filter(|(j, _)| x >> j & 1 == 1).fold(h0, |h, (_, w)| h ^ w)
}

/// The tuple field a [`TupleQuery`] varies; every other field stays fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vary {
    /// The source address: every address of `src/prefix_len` (host bits
    /// set in `src` are ignored; the first and last address included).
    SrcAddr {
        /// Bits of `src` that stay fixed.
        prefix_len: u8,
    },
    /// The destination address: every address of `dst/prefix_len`.
    DstAddr {
        /// Bits of `dst` that stay fixed.
        prefix_len: u8,
    },
    /// The source port, within the range.
    SrcPort(RangeInclusive<u16>),
    /// The destination port, within the range (e.g. our port in a reply
    /// `remote -> us`).
    DstPort(RangeInclusive<u16>),
}

impl Vary {
    fn what(&self) -> &'static str {
        match self {
            Vary::SrcAddr { .. } => "source address",
            Vary::DstAddr { .. } => "destination address",
            Vary::SrcPort(_) => "source port",
            Vary::DstPort(_) => "destination port",
        }
    }
}

/// One question to the finder: which values of one field of the flow
/// `src:src_port -> dst:dst_port` (hash type `hash_type`) give
/// `(hash & mask)` equal to one of `values`. The fields the query varies
/// are ignored in the flow given.
///
/// ```
/// use rsskit_core::finder::{TupleQuery, Vary};
/// use rsskit_core::{HashType, RssKey};
/// let key = RssKey::microsoft();
/// let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
/// let found = TupleQuery::new(&key, HashType::TcpIpv4, a, 0, b, 80)
///     .vary(Vary::SrcPort(32768..=60999))
///     .buckets(127, &[5, 9])
///     .max(4)
///     .find()?;
/// assert_eq!(found.len(), 4);
/// assert!(found.iter().all(|f| [5, 9].contains(&(f.hash & 127))));
/// # Ok::<(), rsskit_core::finder::FindError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TupleQuery<'a> {
    key: &'a RssKey,
    hash_type: HashType,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
    vary: Vary,
    mask: u32,
    values: Vec<u32>,
    max: usize,
}

impl<'a> TupleQuery<'a> {
    /// A query about the flow `src:src_port -> dst:dst_port`; by default
    /// it varies the source port over all ports, wants bucket 0 under
    /// mask 0 (any hash) and returns every result.
    pub fn new(
        key: &'a RssKey,
        hash_type: HashType,
        src: IpAddr,
        src_port: u16,
        dst: IpAddr,
        dst_port: u16,
    ) -> Self {
        TupleQuery {
            key,
            hash_type,
            src,
            src_port,
            dst,
            dst_port,
            vary: Vary::SrcPort(0..=u16::MAX),
            mask: 0,
            values: alloc::vec![0],
            max: usize::MAX,
        }
    }

    /// The field to vary.
    pub fn vary(mut self, vary: Vary) -> Self {
        self.vary = vary;
        self
    }

    /// Wants `(hash & mask) == value`.
    pub fn bucket(self, mask: u32, value: u32) -> Self {
        self.buckets(mask, &[value])
    }

    /// Wants `(hash & mask)` to be any of `values` (e.g. all buckets of
    /// one worker).
    pub fn buckets(mut self, mask: u32, values: &[u32]) -> Self {
        self.mask = mask;
        self.values = values.to_vec();
        self
    }

    /// At most `max` results.
    pub fn max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// The matching flows, ascending in the varied field, at most `max`.
    /// [`FindError::NoSolution`] when there is none (and `max > 0`).
    pub fn find(&self) -> Result<Vec<Found>, FindError> {
        let what = self.vary.what();
        for &v in &self.values {
            check_target(self.key, self.hash_type, self.mask, v)?;
        }
        let model = self.model()?;
        if self.max == 0 {
            return Ok(Vec::new());
        }
        let mut xs = Vec::new();
        let mut reachable = false;
        for &v in &self.values {
            if let Some(s) = Solutions::solve(&model.windows, model.h0, self.mask, v) {
                reachable = true;
                xs.extend(s.in_range(model.lo, model.hi, self.max));
            }
        }
        // Distinct values have disjoint solutions; duplicates do not count twice.
        xs.sort_unstable();
        xs.dedup();
        xs.truncate(self.max);
        if xs.is_empty() {
            return Err(FindError::NoSolution { what, reachable });
        }
        Ok(xs.into_iter().map(|x| self.found(&model, x)).collect())
    }

    /// The linear model of the hash in the varied field's value bits.
    fn model(&self) -> Result<Model, FindError> {
        let ht = self.hash_type;
        let (mut src, mut src_port, mut dst, mut dst_port) =
            (self.src, self.src_port, self.dst, self.dst_port);
        // Host part of an address field: the bits that vary.
        let host = |addr: IpAddr, prefix_len: u8| -> Result<(u32, u128, IpAddr), FindError> {
            let addr_bits: u8 = if addr.is_ipv6() { 128 } else { 32 };
            if prefix_len > addr_bits {
                return Err(FindError::BadPrefix { prefix_len, max: addr_bits });
            }
            let host_bits = u32::from(addr_bits - prefix_len);
            let host_mask: u128 = if host_bits == 0 { 0 } else { u128::MAX >> (128 - host_bits) };
            Ok((host_bits, host_mask, u128_to_addr(addr_to_u128(addr) & !host_mask, addr.is_ipv6())))
        };
        // (input bit offset of the field, field width, varying bits, lo, hi)
        let addr_bits = if ht.is_ipv6() { 128 } else { 32 };
        let (off, width, n, lo, hi, hashed) = match &self.vary {
            Vary::SrcAddr { prefix_len } => {
                let (n, m, base) = host(src, *prefix_len)?;
                src = base;
                (0, addr_bits, n, 0, m, true)
            }
            Vary::DstAddr { prefix_len } => {
                let (n, m, base) = host(dst, *prefix_len)?;
                dst = base;
                (addr_bits, addr_bits, n, 0, m, true)
            }
            Vary::SrcPort(r) => {
                src_port = 0;
                (2 * addr_bits, 16, 16, u128::from(*r.start()), u128::from(*r.end()), ht.has_ports())
            }
            Vary::DstPort(r) => {
                dst_port = 0;
                (2 * addr_bits + 16, 16, 16, u128::from(*r.start()), u128::from(*r.end()), ht.has_ports())
            }
        };
        let input = input_for(ht, src, src_port, dst, dst_port)?;
        if lo > hi {
            return Err(FindError::EmptyRange);
        }
        let h0 = reference(self.key.as_bytes(), input.as_bytes());
        // Fields are big-endian in the input: value bit j of the field
        // sits at input bit `off + width - 1 - j`. A port that the hash
        // type does not hash changes nothing.
        let windows = if hashed {
            windows(self.key, n, |j| off + width - 1 - j as usize)
        } else {
            alloc::vec![0; n as usize]
        };
        Ok(Model { h0, windows, lo, hi, base: Found { src, src_port, dst, dst_port, hash: h0 } })
    }

    fn found(&self, model: &Model, x: u128) -> Found {
        let mut f = model.base;
        f.hash = hash_of(model.h0, &model.windows, x);
        match self.vary {
            Vary::SrcAddr { .. } => f.src = u128_to_addr(addr_to_u128(f.src) | x, f.src.is_ipv6()),
            Vary::DstAddr { .. } => f.dst = u128_to_addr(addr_to_u128(f.dst) | x, f.dst.is_ipv6()),
            Vary::SrcPort(_) => f.src_port = x as u16,
            Vary::DstPort(_) => f.dst_port = x as u16,
        }
        f
    }
}

/// The hash around the query's base flow (varied field all zero).
struct Model {
    h0: u32,
    windows: Vec<u32>,
    lo: u128,
    hi: u128,
    base: Found,
}

fn addr_to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

fn u128_to_addr(x: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(x.into())
    } else {
        IpAddr::V4((x as u32).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solutions_ascend_and_satisfy() {
        // 8 varying bits, arbitrary windows; brute force as the oracle.
        let w = [0x8000_0001, 0x3, 0x5, 0x4000_0000, 0x9, 0x11, 0x2, 0x7];
        let (h0, mask) = (0x1234_5678, 0x7);
        for value in 0..8 {
            let brute: Vec<u128> = (0u128..256).filter(|&x| (hash_of(h0, &w, x) & mask) == value).collect();
            let s = Solutions::solve(&w, h0, mask, value).unwrap();
            assert_eq!(s.in_range(0, 255, usize::MAX), brute);
            assert_eq!(
                s.in_range(100, 200, 3),
                brute.iter().copied().filter(|&x| (100..=200).contains(&x)).take(3).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn unreachable_system() {
        // No window touches bit 4: wanting it flipped is impossible.
        let w = [0x1, 0x2];
        assert!(Solutions::solve(&w, 0, 0x10, 0x10).is_none());
        assert_eq!(Solutions::solve(&w, 0, 0x10, 0).unwrap().free_bits(), 2);
    }
}
