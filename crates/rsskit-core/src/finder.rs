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

/// One tuple the finder found: the source address and port, and the hash
/// the NIC computes for the flow `src:src_port -> dst:dst_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Found {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub src_port: u16,
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

/// Source ports in `ports` whose flow `src:port -> dst:dst_port` (hash type
/// `ht`) has `(hash & mask) == value`. At most `max` results, ascending
/// port order.
///
/// For a 2-tuple hash type the port does not enter the hash: then either
/// every port in the range matches or none does.
#[allow(clippy::too_many_arguments)]
pub fn find_src_ports(
    key: &RssKey,
    ht: HashType,
    src: IpAddr,
    dst: IpAddr,
    dst_port: u16,
    ports: RangeInclusive<u16>,
    mask: u32,
    value: u32,
    max: usize,
) -> Result<Vec<Found>, FindError> {
    let sols = port_solutions(key, ht, src, dst, dst_port, mask, value)?;
    let (lo, hi) = (*ports.start(), *ports.end());
    if lo > hi {
        return Err(FindError::EmptyRange);
    }
    let Some((sols, h0, w)) = sols else {
        return Err(FindError::NoSolution { what: "source port", reachable: false });
    };
    let xs = sols.in_range(u128::from(lo), u128::from(hi), max);
    if xs.is_empty() && max > 0 {
        return Err(FindError::NoSolution { what: "source port", reachable: true });
    }
    Ok(xs.into_iter().map(|x| Found { src, src_port: x as u16, hash: hash_of(h0, &w, x) }).collect())
}

type Model = (Solutions, u32, Vec<u32>);

fn port_solutions(
    key: &RssKey,
    ht: HashType,
    src: IpAddr,
    dst: IpAddr,
    dst_port: u16,
    mask: u32,
    value: u32,
) -> Result<Option<Model>, FindError> {
    check_target(key, ht, mask, value)?;
    let input = input_for(ht, src, 0, dst, dst_port)?;
    let h0 = reference(key.as_bytes(), input.as_bytes());
    let w = if ht.has_ports() {
        // The source port is the 16 bits after both addresses, big-endian:
        // value bit j sits at input bit `off + 15 - j`.
        let off = if ht.is_ipv6() { 256 } else { 64 };
        windows(key, 16, |j| off + 15 - j as usize)
    } else {
        // The port is not hashed: 16 bits that change nothing.
        alloc::vec![0; 16]
    };
    Ok(Solutions::solve(&w, h0, mask, value).map(|s| (s, h0, w)))
}

/// Source addresses in `net/prefix_len` whose flow (`src_port` fixed) has
/// `(hash & mask) == value`. At most `max` results, ascending address order.
/// Host bits set in `net` are ignored. Every address of the prefix is a
/// candidate, including its first and last.
#[allow(clippy::too_many_arguments)]
pub fn find_src_addrs(
    key: &RssKey,
    ht: HashType,
    net: IpAddr,
    prefix_len: u8,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
    mask: u32,
    value: u32,
    max: usize,
) -> Result<Vec<Found>, FindError> {
    check_target(key, ht, mask, value)?;
    let addr_bits: u8 = if net.is_ipv6() { 128 } else { 32 };
    if prefix_len > addr_bits {
        return Err(FindError::BadPrefix { prefix_len, max: addr_bits });
    }
    let host_bits = u32::from(addr_bits - prefix_len);
    let host_mask: u128 = if host_bits == 0 { 0 } else { u128::MAX >> (128 - host_bits) };
    let net_bits = addr_to_u128(net) & !host_mask;
    let base = u128_to_addr(net_bits, net.is_ipv6());
    let input = input_for(ht, base, src_port, dst, dst_port)?;
    let h0 = reference(key.as_bytes(), input.as_bytes());
    // The source address comes first in the input: value bit j of the
    // address sits at input bit `addr_bits - 1 - j`.
    let w = windows(key, host_bits, |j| usize::from(addr_bits) - 1 - j as usize);
    let Some(sols) = Solutions::solve(&w, h0, mask, value) else {
        return Err(FindError::NoSolution { what: "source address", reachable: false });
    };
    let xs = sols.in_range(0, host_mask, max);
    if xs.is_empty() && max > 0 {
        return Err(FindError::NoSolution { what: "source address", reachable: true });
    }
    Ok(xs
        .into_iter()
        .map(|x| Found { src: u128_to_addr(net_bits | x, net.is_ipv6()), src_port, hash: hash_of(h0, &w, x) })
        .collect())
}

/// As [`find_src_ports`] for several wanted values under one mask (e.g. all
/// buckets of one CPU): ports landing in any of them, ascending, at most `max`.
#[allow(clippy::too_many_arguments)]
pub fn find_src_ports_any(
    key: &RssKey,
    ht: HashType,
    src: IpAddr,
    dst: IpAddr,
    dst_port: u16,
    ports: RangeInclusive<u16>,
    mask: u32,
    values: &[u32],
    max: usize,
) -> Result<Vec<Found>, FindError> {
    merge_any(values, max, "source port", |v| {
        find_src_ports(key, ht, src, dst, dst_port, ports.clone(), mask, v, max)
    })
}

/// As [`find_src_addrs`] for several wanted values under one mask.
#[allow(clippy::too_many_arguments)]
pub fn find_src_addrs_any(
    key: &RssKey,
    ht: HashType,
    net: IpAddr,
    prefix_len: u8,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
    mask: u32,
    values: &[u32],
    max: usize,
) -> Result<Vec<Found>, FindError> {
    merge_any(values, max, "source address", |v| {
        find_src_addrs(key, ht, net, prefix_len, src_port, dst, dst_port, mask, v, max)
    })
}

fn merge_any(
    values: &[u32],
    max: usize,
    what: &'static str,
    mut find: impl FnMut(u32) -> Result<Vec<Found>, FindError>,
) -> Result<Vec<Found>, FindError> {
    let mut all = Vec::new();
    let mut reachable = false;
    for &v in values {
        match find(v) {
            Ok(found) => all.extend(found),
            Err(FindError::NoSolution { reachable: r, .. }) => reachable |= r,
            Err(e) => return Err(e),
        }
    }
    if all.is_empty() {
        return Err(FindError::NoSolution { what, reachable });
    }
    all.sort_by_key(|f| (addr_to_u128(f.src), f.src_port));
    all.truncate(max);
    Ok(all)
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
