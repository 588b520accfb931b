//! Checking an RSS key before use.
//!
//! A key from the OS random source is almost always good, but "almost" is
//! not a property; the question is how a key made at boot
//! should be verified. [`check`] answers with four tests; a key passes when
//! all hold for both the IPv4 and the IPv6 4-tuple layouts, with
//! `bits` bucket bits (buckets = `hash & (2^bits - 1)`, at most 7 = the
//! 128-entry indirection table):
//!
//! 1. **No degenerate windows.** Input bit `j` contributes the 32-bit key
//!    window starting at key bit `j`. No window of the 288 input bits of the
//!    longest input may be all zeros (that input bit would be ignored) or all
//!    ones.
//! 2. **Every bucket is reachable from the source port alone, and from the
//!    source address alone.** The hash is linear over GF(2), so the buckets a
//!    field can reach are the span of its bits' windows restricted to the
//!    bucket bits. The rank of the 16 source-port windows (and of the 32 or
//!    128 source-address windows) masked to the low `bits` bits must be
//!    `bits`: a client varying only its port (or an operator varying only
//!    client addresses) can then hit every bucket, evenly: a linear map
//!    onto all `2^bits` buckets is balanced.
//! 3. **The whole hash is used.** The windows of all input bits must span
//!    all 32 hash bits (rank 32); otherwise some hash values never occur and
//!    tables larger than 128 entries or hash-based steering get fewer
//!    distinct values than they expect. The symmetric key fails this on
//!    purpose: its windows repeat every 16 bits, so only 16 hash bits are
//!    independent (and the hash depends only on the XOR of the 16-bit
//!    halves of the tuple) -- the price of hash(a->b) == hash(b->a).
//! 4. **A realistic sample spreads evenly.** 8192 flows towards one server
//!    (`192.0.2.1:443`, resp. `[2001:db8::1]:443`): 32 random client addresses,
//!    each with 256 consecutive source ports from a random base (ephemeral
//!    port allocation). Pearson's chi-square statistic of the bucket counts
//!    (expected 8192 / 2^bits each, `2^bits - 1` degrees of freedom) must
//!    not exceed the critical value at significance 0.001 ([`chi2_bound`]).
//!    The sample comes from a fixed-seed generator, so a key's verdict is
//!    reproducible. A good random key fails this with probability ~0.001
//!    per family; [`crate::key::RssKey::random`] then draws another key.
//!
//! Tests 2 and 3 are exact (Gaussian elimination over GF(2)); test 4 guards
//! against structure that exact rank checks miss (e.g. a key that reaches
//! every bucket but piles consecutive ports into a few of them).

use crate::key::RssKey;
use crate::toeplitz::{key_window, Toeplitz};
use alloc::vec::Vec;
use core::fmt;

/// Flows in the spread sample, per address family.
pub const SAMPLE_FLOWS: usize = 8192;
/// Significance level of the spread test.
pub const SIGNIFICANCE: f64 = 0.001;
/// Seed of the spread sample's generator.
const SAMPLE_SEED: u64 = 0x5253_534b_6b65_7931;

/// Chi-square critical values at significance 0.001 for 2^bits - 1
/// degrees of freedom, bits = 1..=7 (1, 3, 7, 15, 31, 63, 127 df).
const CHI2_CRIT: [f64; 7] = [10.828, 16.266, 24.322, 37.697, 61.098, 103.442, 181.993];

/// The chi-square bound the spread test uses for `bits` bucket bits.
pub fn chi2_bound(bits: u32) -> f64 {
    CHI2_CRIT[(bits.clamp(1, 7) - 1) as usize]
}

/// Address family of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4: a 96-bit 4-tuple input.
    Ipv4,
    /// IPv6: a 288-bit 4-tuple input.
    Ipv6,
}

impl Family {
    /// `ipv4` or `ipv6`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }

    /// Input bits of the 4-tuple: 96 or 288.
    fn input_bits(self) -> usize {
        match self {
            Family::Ipv4 => 96,
            Family::Ipv6 => 288,
        }
    }

    /// First input bit and width of the source address, and of the source port.
    fn src_addr(self) -> (usize, usize) {
        match self {
            Family::Ipv4 => (0, 32),
            Family::Ipv6 => (0, 128),
        }
    }

    fn src_port(self) -> (usize, usize) {
        match self {
            Family::Ipv4 => (64, 16),
            Family::Ipv6 => (256, 16),
        }
    }
}

/// A field of the hash input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The source address.
    SrcAddr,
    /// The source port.
    SrcPort,
}

/// One reason a key fails.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyProblem {
    /// The window of input bit `bit` is all zeros or all ones.
    DegenerateWindow {
        /// Index of the input bit.
        bit: usize,
        /// Its 32-bit key window.
        window: u32,
    },
    /// Varying only `field` reaches `2^rank` of the `2^bits` buckets.
    FieldRank {
        /// Address family of the input.
        family: Family,
        /// The field varied.
        field: Field,
        /// Rank of the field's windows on the bucket bits.
        rank: u32,
        /// Bucket bits checked.
        bits: u32,
    },
    /// All input bits together reach only `2^rank` hash values (rank < 32).
    HashRank {
        /// Address family of the input.
        family: Family,
        /// Rank of all windows on the 32 hash bits.
        rank: u32,
    },
    /// The sample's chi-square statistic exceeds the bound.
    Spread {
        /// Address family of the sample.
        family: Family,
        /// Chi-square statistic of the sample over the buckets.
        chi2: f64,
        /// The bound it exceeds ([`chi2_bound`]).
        bound: f64,
    },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::DegenerateWindow { bit, window } => {
                write!(f, "key window at input bit {bit} is degenerate (0x{window:08x})")
            }
            KeyProblem::FieldRank { family, field, rank, bits } => {
                let what = match field {
                    Field::SrcAddr => "source address",
                    Field::SrcPort => "source port",
                };
                write!(
                    f,
                    "{}: varying the {what} alone reaches only 2^{rank} of 2^{bits} buckets",
                    family.name()
                )
            }
            KeyProblem::HashRank { family, rank } => {
                write!(f, "{}: only {rank} of 32 hash bits are independent", family.name())
            }
            KeyProblem::Spread { family, chi2, bound } => write!(
                f,
                "{}: sample of {SAMPLE_FLOWS} flows spreads unevenly (chi-square {chi2:.1} > {bound:.1})",
                family.name()
            ),
        }
    }
}

/// Per-family figures of a check.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyReport {
    /// Address family these figures are for.
    pub family: Family,
    /// Rank of the source-port windows on the bucket bits (want `bits`).
    pub src_port_rank: u32,
    /// Rank of the source-address windows on the bucket bits (want `bits`).
    pub src_addr_rank: u32,
    /// Rank of all windows on all 32 hash bits (want 32).
    pub hash_rank: u32,
    /// Chi-square statistic of the sample over the buckets.
    pub chi2: f64,
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeyReport {
    /// Bucket bits checked.
    pub bits: u32,
    /// Chi-square bound (significance [`SIGNIFICANCE`], `2^bits - 1` df).
    pub chi2_bound: f64,
    /// Figures for IPv4 inputs.
    pub ipv4: FamilyReport,
    /// Figures for IPv6 inputs.
    pub ipv6: FamilyReport,
    /// Why the key fails; empty when it passes.
    pub problems: Vec<KeyProblem>,
}

impl KeyReport {
    /// Whether the key passed every test.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Rank over GF(2) of `vs`.
pub fn rank(vs: impl IntoIterator<Item = u32>) -> u32 {
    // basis[b]: a vector whose highest set bit is b, or 0.
    let mut basis = [0u32; 32];
    let mut r = 0;
    for mut v in vs {
        while v != 0 {
            let top = 31 - v.leading_zeros() as usize;
            if basis[top] == 0 {
                basis[top] = v;
                r += 1;
                break;
            }
            v ^= basis[top];
        }
    }
    r
}

/// Chi-square statistic of the sample for `family`.
fn spread(t: &Toeplitz, family: Family, bits: u32) -> f64 {
    let buckets = 1usize << bits;
    let mask = buckets as u32 - 1;
    let mut counts = alloc::vec![0u64; buckets];
    let mut rng = crate::rng::SplitMix64(SAMPLE_SEED ^ family.input_bits() as u64);
    const CLIENTS: usize = 32;
    const PORTS: usize = SAMPLE_FLOWS / CLIENTS;
    match family {
        Family::Ipv4 => {
            let mut inputs = Vec::with_capacity(SAMPLE_FLOWS);
            for _ in 0..CLIENTS {
                let client = (rng.next_u64() as u32).to_be_bytes();
                let base = 1024 + (rng.next_u64() % (65536 - 1024 - PORTS as u64)) as u16;
                for p in 0..PORTS as u16 {
                    let mut x = [0u8; 12];
                    x[0..4].copy_from_slice(&client);
                    x[4..8].copy_from_slice(&[192, 0, 2, 1]);
                    x[8..10].copy_from_slice(&(base + p).to_be_bytes());
                    x[10..12].copy_from_slice(&443u16.to_be_bytes());
                    inputs.push(x);
                }
            }
            let mut out = alloc::vec![0u32; inputs.len()];
            t.hash_batch(&inputs, &mut out);
            out.iter().for_each(|h| counts[(h & mask) as usize] += 1);
        }
        Family::Ipv6 => {
            let mut inputs = Vec::with_capacity(SAMPLE_FLOWS);
            let server: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            for _ in 0..CLIENTS {
                let client = ((u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())).to_be_bytes();
                let base = 1024 + (rng.next_u64() % (65536 - 1024 - PORTS as u64)) as u16;
                for p in 0..PORTS as u16 {
                    let mut x = [0u8; 36];
                    x[0..16].copy_from_slice(&client);
                    x[16..32].copy_from_slice(&server);
                    x[32..34].copy_from_slice(&(base + p).to_be_bytes());
                    x[34..36].copy_from_slice(&443u16.to_be_bytes());
                    inputs.push(x);
                }
            }
            let mut out = alloc::vec![0u32; inputs.len()];
            t.hash_batch(&inputs, &mut out);
            out.iter().for_each(|h| counts[(h & mask) as usize] += 1);
        }
    }
    let expected = SAMPLE_FLOWS as f64 / buckets as f64;
    counts.iter().map(|&c| (c as f64 - expected) * (c as f64 - expected) / expected).sum()
}

fn family_report(
    key: &[u8],
    t: &Toeplitz,
    family: Family,
    bits: u32,
    problems: &mut Vec<KeyProblem>,
) -> FamilyReport {
    let mask = if bits >= 32 { !0 } else { (1u32 << bits) - 1 };
    let field_rank =
        |(start, width): (usize, usize)| rank((start..start + width).map(|j| key_window(key, j) & mask));
    let src_port_rank = field_rank(family.src_port());
    let src_addr_rank = field_rank(family.src_addr());
    let hash_rank = rank((0..family.input_bits()).map(|j| key_window(key, j)));
    let chi2 = spread(t, family, bits);
    for (field, r) in [(Field::SrcAddr, src_addr_rank), (Field::SrcPort, src_port_rank)] {
        if r < bits {
            problems.push(KeyProblem::FieldRank { family, field, rank: r, bits });
        }
    }
    if hash_rank < 32 {
        problems.push(KeyProblem::HashRank { family, rank: hash_rank });
    }
    let bound = chi2_bound(bits);
    if chi2 > bound {
        problems.push(KeyProblem::Spread { family, chi2, bound });
    }
    FamilyReport { family, src_port_rank, src_addr_rank, hash_rank, chi2 }
}

/// Checks `key` for `bits` bucket bits (clamped to 1..=7). See the module
/// documentation for the tests.
pub fn check(key: &RssKey, bits: u32) -> KeyReport {
    let bits = bits.clamp(1, 7);
    let k = key.as_bytes();
    let mut problems = Vec::new();
    for bit in 0..Family::Ipv6.input_bits() {
        let w = key_window(k, bit);
        if w == 0 || w == !0 {
            problems.push(KeyProblem::DegenerateWindow { bit, window: w });
        }
    }
    let t = Toeplitz::new(key);
    let ipv4 = family_report(k, &t, Family::Ipv4, bits, &mut problems);
    let ipv6 = family_report(k, &t, Family::Ipv6, bits, &mut problems);
    KeyReport { bits, chi2_bound: chi2_bound(bits), ipv4, ipv6, problems }
}

/// [`check`] with 7 bucket bits: the full 128-entry indirection table.
pub fn check_default(key: &RssKey) -> KeyReport {
    check(key, 7)
}

impl KeyProblem {
    /// Whether this problem leaves buckets unreachable (a rank test failed):
    /// such a key is refused unless the user insists ([`vet`]). The all-zero
    /// key is the plain case: every flow hashes to bucket 0.
    pub fn unreachable_buckets(&self) -> bool {
        matches!(self, KeyProblem::FieldRank { .. })
    }
}

/// Whether the key is one 2-byte pattern repeated (DragonFly's symmetric
/// key and its kin): their 16 independent hash bits are the price of
/// hash(a->b) == hash(b->a), not a defect.
pub fn is_symmetric(key: &RssKey) -> bool {
    let k = key.as_bytes();
    k.iter().enumerate().all(|(i, b)| *b == k[i % 2])
}

/// A key that cannot reach every bucket, refused by [`vet`].
#[derive(Debug, Clone, PartialEq)]
pub struct WeakKey {
    /// Every problem of the key, the unreachable-bucket ones first.
    pub problems: Vec<KeyProblem>,
}

impl fmt::Display for WeakKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weak RSS key: it cannot reach every bucket of the 128-entry table (")?;
        let reasons: Vec<&KeyProblem> = self.problems.iter().filter(|p| p.unreachable_buckets()).collect();
        for (i, p) in reasons.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        f.write_str("), so flows would pile into a few buckets")
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WeakKey {}

/// The check every key given to rsskit goes through (by hand, from a NIC,
/// or a named one), for the full 128-entry table: `Err` when buckets are
/// unreachable (unless `allow_weak`), else the problems worth a warning (a
/// failed spread test, degenerate windows, fewer than 32 independent hash
/// bits; the last is expected of a [symmetric](is_symmetric) key and not
/// reported for one). An empty list: the key is good.
pub fn vet(key: &RssKey, allow_weak: bool) -> Result<Vec<KeyProblem>, WeakKey> {
    let mut problems = check_default(key).problems;
    if is_symmetric(key) {
        problems.retain(|p| !matches!(p, KeyProblem::HashRank { rank: 16, .. }));
    }
    if !allow_weak && problems.iter().any(KeyProblem::unreachable_buckets) {
        problems.sort_by_key(|p| !p.unreachable_buckets());
        return Err(WeakKey { problems });
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_basics() {
        assert_eq!(rank([]), 0);
        assert_eq!(rank([0, 0]), 0);
        assert_eq!(rank([1, 2, 3]), 2);
        assert_eq!(rank((0..32).map(|i| 1u32 << i)), 32);
        assert_eq!(rank((0..32).map(|i| (1u32 << i) | 1)), 32);
        assert_eq!(rank([0xff, 0x0f, 0xf0]), 2);
    }

    #[test]
    fn microsoft_key_passes() {
        let r = check_default(&RssKey::microsoft());
        assert!(r.passed(), "{:?}", r.problems);
        assert_eq!(r.ipv4.src_port_rank, 7);
        assert_eq!(r.ipv4.hash_rank, 32);
        assert!(r.ipv4.chi2 <= r.chi2_bound && r.ipv6.chi2 <= r.chi2_bound);
    }

    #[test]
    fn all_zero_ish_key_fails() {
        let mut b = [0u8; 40];
        b[39] = 1;
        let r = check_default(&RssKey::from_bytes(&b).unwrap());
        assert!(!r.passed());
        assert!(r.problems.iter().any(|p| matches!(p, KeyProblem::DegenerateWindow { window: 0, .. })));
        assert!(r.problems.iter().any(|p| matches!(
            p,
            KeyProblem::FieldRank { family: Family::Ipv4, field: Field::SrcPort, rank: 0, .. }
        )));
        assert!(r.problems.iter().any(|p| matches!(p, KeyProblem::Spread { family: Family::Ipv4, .. })));
    }

    #[test]
    fn all_ones_key_fails() {
        let r = check_default(&RssKey::from_bytes(&[0xff; 40]).unwrap());
        assert!(r
            .problems
            .iter()
            .any(|p| matches!(p, KeyProblem::DegenerateWindow { window: u32::MAX, .. })));
        assert!(r.problems.iter().any(|p| matches!(p, KeyProblem::HashRank { rank: 1, .. })));
    }

    #[test]
    fn symmetric_key_has_16_independent_bits() {
        let r = check_default(&RssKey::symmetric());
        assert_eq!(r.ipv4.hash_rank, 16);
        assert!(r.problems.contains(&KeyProblem::HashRank { family: Family::Ipv4, rank: 16 }));
    }

    #[test]
    fn port_only_key_fails_address_rank() {
        // Windows over the IPv4 source address all zero, ports fine: the
        // source address alone cannot move a flow between buckets.
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        b[..4].fill(0);
        b[4] = 0;
        b[5] = 0;
        b[6] = 0;
        b[7] = 0;
        let r = check_default(&RssKey::from_bytes(&b).unwrap());
        assert!(r.problems.contains(&KeyProblem::FieldRank {
            family: Family::Ipv4,
            field: Field::SrcAddr,
            rank: 0,
            bits: 7
        }));
        assert_eq!(r.ipv4.src_port_rank, 7);
    }

    #[test]
    fn spread_catches_low_port_bits_ignored() {
        // A key whose windows over the low 7 source-port bits are zero on the
        // bucket bits still reaches every bucket through the high port bits
        // (rank 7), but consecutive ports pile up: the spread test must fail.
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        // Input bits 73..80 (IPv4 src port low 7 bits) use key bits 73..111;
        // their windows' low 7 bits are key bits 98..111 (bytes 12-13).
        b[12] &= 0xc0;
        b[13] = 0;
        let key = RssKey::from_bytes(&b).unwrap();
        let mask = 0x7f;
        assert!(
            (73..80).all(|j| key_window(key.as_bytes(), j) & mask == 0),
            "construction: low port bits ignored on buckets"
        );
        let r = check_default(&key);
        assert!(
            r.problems.iter().any(|p| matches!(p, KeyProblem::Spread { family: Family::Ipv4, .. })),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn vet_refuses_unreachable_buckets_and_warns_on_spread() {
        // All zero: every flow in bucket 0. Refused, saying why.
        let zero = RssKey::from_bytes(&[0; 40]).unwrap();
        let e = vet(&zero, false).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("cannot reach every bucket"), "{msg}");
        assert!(msg.contains("varying the source port alone reaches only 2^0 of 2^7 buckets"), "{msg}");
        assert!(e.problems[0].unreachable_buckets());
        // Allowed on request: then the problems come back as warnings.
        let w = vet(&zero, true).unwrap();
        assert!(w.iter().any(KeyProblem::unreachable_buckets));
        // Good keys: nothing to say, the symmetric one included.
        assert_eq!(vet(&RssKey::microsoft(), false).unwrap(), Vec::new());
        assert_eq!(vet(&RssKey::symmetric(), false).unwrap(), Vec::new());
        // Full rank but uneven (the low port bits ignored): accepted, warned.
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        b[12] &= 0xc0;
        b[13] = 0;
        let w = vet(&RssKey::from_bytes(&b).unwrap(), false).unwrap();
        assert!(w.iter().any(|p| matches!(p, KeyProblem::Spread { .. })), "{w:?}");
        assert!(!w.iter().any(KeyProblem::unreachable_buckets), "{w:?}");
    }

    #[test]
    fn bounds_table() {
        assert_eq!(chi2_bound(7), 181.993);
        assert_eq!(chi2_bound(0), chi2_bound(1));
        assert_eq!(chi2_bound(9), chi2_bound(7));
    }
}
