//! Checking an RSS key for the way a command uses it.
//!
//! The Toeplitz hash is linear over GF(2): input bit `j` XORs the 32-bit key
//! window starting at key bit `j` into the hash. Varying a set of input bits
//! (the rest fixed) therefore reaches an affine subspace of bucket values:
//! a coset of the span of those bits' windows masked to the bucket bits, and
//! when the varied bits run over all their values every reachable bucket is
//! hit equally often. Reachability and evenness are rank questions, answered
//! exactly here by Gaussian elimination over GF(2); nothing is sampled.
//!
//! A key is judged for a [`KeyUse`]: the hash types the command hashes with
//! and its bucket bits (buckets = `hash & (2^bits - 1)`). For every input
//! layout in use (IPv4 or IPv6, 2- or 4-tuple) the fields that differ between
//! the flows a receiver sees are the source address and, in a 4-tuple, the
//! source port; the destination is the receiver's own and only adds a
//! constant. Then:
//!
//! 1. **Refused** ([`KeyProblem::unreachable_buckets`]): the varying fields
//!    together reach fewer than all `2^bits` buckets. No traffic can then use
//!    the whole table (the all-zero key is the plain case: bucket 0 only).
//! 2. **Warned**, naming the field: in a 4-tuple, the source port alone or
//!    the source address alone cannot reach every bucket (one client's
//!    connections, or many clients on one port, then use part of the table).
//!    This is an exact property of the key, not a statistical guess; for a
//!    random key the port (16 windows) falls short with probability
//!    `~(2^bits - 1) / 2^16` per layout (0.19% at 7 bits), the address never
//!    in practice.
//! 3. **Warned**: consecutive source ports pile up. An aligned block of
//!    `2^m` consecutive ports reaches `2^r` buckets evenly, `r` the rank of
//!    its `m` low port bits' windows; with `m = bits + 6` (8192 ports for
//!    128 buckets, see [`port_block_bits`]) the key is flagged when
//!    `r <= bits - 4` (at most a sixteenth of the buckets). Those windows
//!    are the `bits`-bit slices of `m + bits - 1` consecutive key bits (a
//!    Hankel matrix), whose rank is at most `t` with probability about
//!    `2^(2t - m - bits + 1)` for a random key: here `2^-13` per layout,
//!    whatever `bits` (`random_keys_rarely_warn` measures it). The sampled
//!    chi-square test this replaces warned on a third of good keys: its
//!    consecutive-port sample is not independent, so its bound did not fit.
//! 4. **Warned**: the windows of a family's inputs in use span fewer than
//!    32 hash bits (tables larger than 128 entries or hash-based steering
//!    get fewer distinct values). The symmetric key does this on purpose
//!    (windows repeating every 16 bits: 16 independent bits, the price of
//!    hash(a->b) == hash(b->a)); [`vet`] does not report it for that key.
//! 5. **Warned**: a window of an input bit in use is all zeros (the bit is
//!    ignored) or all ones.

use crate::hashtype::{HashConfig, HashType, L4Proto};
use crate::key::RssKey;
use crate::toeplitz::key_window;
use crate::xfrm::InputXfrm;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Port bits of the consecutive-port block of test 3 for `bits` bucket
/// bits: `bits + 6`, at most the 16 of a port.
pub fn port_block_bits(bits: u32) -> u32 {
    (bits + 6).min(16)
}

/// Test 3 flags a block reaching at most `2^(bits - PILE_DEFICIT)` buckets.
const PILE_DEFICIT: u32 = 4;

/// Address family of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    Ipv4,
    /// IPv6.
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

    fn addr_bits(self) -> usize {
        match self {
            Family::Ipv4 => 32,
            Family::Ipv6 => 128,
        }
    }

    fn of(t: HashType) -> Family {
        if t.is_ipv6() {
            Family::Ipv6
        } else {
            Family::Ipv4
        }
    }
}

/// One input layout: a family, with or without the ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Address family.
    pub family: Family,
    /// Whether the ports are hashed (a 4-tuple).
    pub ports: bool,
}

impl Layout {
    const ALL: [Layout; 4] = [
        Layout { family: Family::Ipv4, ports: false },
        Layout { family: Family::Ipv4, ports: true },
        Layout { family: Family::Ipv6, ports: false },
        Layout { family: Family::Ipv6, ports: true },
    ];

    fn of(t: HashType) -> Layout {
        Layout { family: Family::of(t), ports: t.has_ports() }
    }

    /// Input bits: addresses, then the ports.
    fn input_bits(self) -> usize {
        2 * self.family.addr_bits() + if self.ports { 32 } else { 0 }
    }

    /// Input bits of the source address.
    fn src_addr(self) -> core::ops::Range<usize> {
        0..self.family.addr_bits()
    }

    /// Input bits of the source port (most significant first).
    fn src_port(self) -> core::ops::Range<usize> {
        let start = 2 * self.family.addr_bits();
        start..start + 16
    }
}

/// What a key is judged for: the hash types whose inputs the command hashes
/// and its bucket bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUse {
    /// Hash types in use.
    pub types: HashConfig,
    /// Bucket bits (1..=32).
    pub bits: u32,
}

impl KeyUse {
    /// Exactly these hash types, `bits` bucket bits.
    pub fn new(types: impl IntoIterator<Item = HashType>, bits: u32) -> Self {
        let types = types.into_iter().fold(HashConfig::empty(), HashConfig::with);
        KeyUse { types, bits: bits.clamp(1, 32) }
    }

    /// The types [`HashConfig::pick`] can choose under `hash`: the enabled
    /// 4-tuple types, and both 2-tuples (fragments and other protocols are
    /// always hashed on their addresses).
    pub fn of_config(hash: HashConfig, bits: u32) -> Self {
        let types = hash.with(HashType::Ipv4).with(HashType::Ipv6);
        KeyUse { types, bits: bits.clamp(1, 32) }
    }

    /// The types `hash` picks for `proto` packets, fragments included, of
    /// IPv4 and, when `ipv6`, IPv6 too (an IPv6 socket also sees IPv4): a
    /// TCP or UDP server's or client's use.
    pub fn of_proto(hash: HashConfig, proto: L4Proto, ipv6: bool, bits: u32) -> Self {
        let families: &[bool] = if ipv6 { &[false, true] } else { &[false] };
        let types = families.iter().flat_map(|&v6| [hash.pick(v6, proto, false), hash.pick(v6, proto, true)]);
        KeyUse::new(types, bits)
    }

    /// The hash types and bucket bits of `policy`.
    pub fn of_policy(policy: &crate::RssPolicy) -> Self {
        Self::of_config(policy.hash_config(), policy.bits())
    }

    /// Every hash type and the full 128-entry table: the most demanding use,
    /// for a key whose use is not known (a NIC's key, a fresh random key).
    pub fn full() -> Self {
        KeyUse { types: HashConfig::all(), bits: crate::rss::MAX_BITS }
    }

    /// Only the types of one family (a command that only sees IPv4, or
    /// only IPv6).
    pub fn only_ipv6(self, ipv6: bool) -> Self {
        let types = self.types.types().filter(|t| t.is_ipv6() == ipv6);
        KeyUse::new(types, self.bits)
    }

    /// The in-use types of `layout`, as `tcp-ipv4/udp-ipv4`.
    fn names(self, layout: Layout) -> String {
        let names: Vec<&str> =
            self.types.types().filter(|t| Layout::of(*t) == layout).map(HashType::name).collect();
        names.join("/")
    }

    fn layouts(self) -> impl Iterator<Item = Layout> {
        Layout::ALL.into_iter().filter(move |l| self.types.types().any(|t| Layout::of(t) == *l))
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

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::SrcAddr => "source address",
            Field::SrcPort => "source port",
        }
    }
}

/// One reason a key is refused or warned about. `types` names the hash
/// types in use of the layout concerned (`tcp-ipv4/udp-ipv4`).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyProblem {
    /// The varying fields together (source address, and port in a 4-tuple)
    /// reach only `2^rank` of the `2^bits` buckets: refused.
    Unreachable {
        /// Hash types concerned.
        types: String,
        /// Whether the source port varies too (a 4-tuple).
        ports: bool,
        /// Rank of the varying fields' windows on the bucket bits.
        rank: u32,
        /// Bucket bits.
        bits: u32,
    },
    /// Varying only `field` reaches `2^rank` of the `2^bits` buckets.
    FieldRank {
        /// Hash types concerned.
        types: String,
        /// The field varied.
        field: Field,
        /// Rank of the field's windows on the bucket bits.
        rank: u32,
        /// Bucket bits.
        bits: u32,
    },
    /// `2^(bits + 6)` consecutive source ports ([`port_block_bits`]) reach
    /// only `2^rank` buckets.
    ConsecutivePorts {
        /// Hash types concerned.
        types: String,
        /// Rank of the block's port bits' windows on the bucket bits.
        rank: u32,
        /// Bucket bits.
        bits: u32,
    },
    /// The family's inputs in use reach only `2^rank` hash values (rank < 32).
    HashRank {
        /// Address family.
        family: Family,
        /// Rank of its windows on the 32 hash bits.
        rank: u32,
    },
    /// The window of input bit `bit` is all zeros or all ones.
    DegenerateWindow {
        /// Index of the input bit.
        bit: usize,
        /// Its 32-bit key window.
        window: u32,
    },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::Unreachable { types, ports, rank, bits } => {
                let what = if *ports { "source address and port" } else { "source address" };
                write!(f, "{types}: varying the {what} reaches only 2^{rank} of 2^{bits} buckets")
            }
            KeyProblem::FieldRank { types, field, rank, bits } => write!(
                f,
                "{types}: varying the {} alone reaches only 2^{rank} of 2^{bits} buckets",
                field.name()
            ),
            KeyProblem::ConsecutivePorts { types, rank, bits } => write!(
                f,
                "{types}: {} consecutive source ports reach only 2^{rank} of 2^{bits} buckets \
                 (they pile up)",
                1u32 << port_block_bits(*bits)
            ),
            KeyProblem::HashRank { family, rank } => {
                write!(f, "{}: only {rank} of 32 hash bits are independent", family.name())
            }
            KeyProblem::DegenerateWindow { bit, window } => {
                write!(f, "key window at input bit {bit} is degenerate (0x{window:08x})")
            }
        }
    }
}

impl KeyProblem {
    /// Whether this problem leaves buckets unreachable for every flow the
    /// command hashes: such a key is refused unless the user insists
    /// ([`vet`]).
    pub fn unreachable_buckets(&self) -> bool {
        matches!(self, KeyProblem::Unreachable { .. })
    }
}

/// Exact figures of one layout in use.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutReport {
    /// The layout.
    pub layout: Layout,
    /// Rank of the varying fields' windows on the bucket bits (want `bits`).
    pub reach_rank: u32,
    /// Rank of the source address's windows on the bucket bits.
    pub src_addr_rank: u32,
    /// Rank of the source port's windows on the bucket bits (4-tuple).
    pub src_port_rank: Option<u32>,
    /// Rank of the consecutive-port block's bits on the bucket bits (4-tuple).
    pub port_block_rank: Option<u32>,
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeyReport {
    /// What the key was judged for.
    pub key_use: KeyUse,
    /// One entry per layout in use.
    pub layouts: Vec<LayoutReport>,
    /// Why the key is refused or warned about; empty when it passes.
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

/// Checks `key` for `key_use` (see the module documentation for the tests).
pub fn check(key: &RssKey, key_use: KeyUse) -> KeyReport {
    check_under(key, key_use, InputXfrm::None)
}

/// The window a varying source bit `j` of `layout` XORs into the hash when
/// the NIC applies `xfrm` first: both copies of the field carry the bit
/// (`j` and its twin in the destination's place). `dst_ones`, for
/// symmetric-or-xor: the destination's bit is 1, so the OR copy is fixed
/// and only the XOR copy (the twin) varies.
fn src_window(k: &[u8], layout: Layout, xfrm: InputXfrm, dst_ones: bool, j: usize) -> u32 {
    let a = layout.family.addr_bits();
    let twin = if j < a { j + a } else { j + 16 };
    match xfrm {
        InputXfrm::None => key_window(k, j),
        InputXfrm::SymOrXor if dst_ones => key_window(k, twin),
        InputXfrm::SymXor | InputXfrm::SymOrXor => key_window(k, j) ^ key_window(k, twin),
    }
}

/// [`check`] of the hash the NIC computes after its input transform
/// `xfrm`. A symmetric transform feeds each source bit to two windows, so
/// a key good for the plain hash can be useless under it (a key repeating
/// every 4 bytes cancels every address bit under symmetric-xor) and the
/// other way round. Symmetric-or-xor depends on the destination: judged
/// at both of its extremes (all zeros: OR and XOR copies vary; all ones:
/// the XOR copy alone), the lower rank kept. The degenerate-window test
/// stays on the raw windows (every input bit is still fed to the hash).
pub fn check_under(key: &RssKey, key_use: KeyUse, xfrm: InputXfrm) -> KeyReport {
    let k = key.as_bytes();
    let bits = key_use.bits;
    let mask = if bits >= 32 { !0 } else { (1u32 << bits) - 1 };
    let ends: &[bool] = if xfrm == InputXfrm::SymOrXor { &[false, true] } else { &[false] };
    // The rank of the windows of source bits `js`, the lower of both ends.
    let min_rank = |layout: Layout, mask: u32, js: &[usize]| {
        ends.iter()
            .map(|&d| rank(js.iter().map(|&j| src_window(k, layout, xfrm, d, j) & mask)))
            .min()
            .unwrap_or(0)
    };
    let mut problems = Vec::new();
    let mut layouts = Vec::new();
    for layout in key_use.layouts() {
        let types = key_use.names(layout);
        let masked_rank = |r: core::ops::Range<usize>| min_rank(layout, mask, &r.collect::<Vec<_>>());
        let src_addr_rank = masked_rank(layout.src_addr());
        let (reach_rank, src_port_rank, port_block_rank) = if layout.ports {
            let port = layout.src_port();
            let block = port.end - port_block_bits(bits) as usize..port.end;
            let reach = min_rank(layout, mask, &layout.src_addr().chain(port.clone()).collect::<Vec<_>>());
            (reach, Some(masked_rank(port.clone())), Some(masked_rank(block)))
        } else {
            (src_addr_rank, None, None)
        };
        if reach_rank < bits {
            problems.push(KeyProblem::Unreachable {
                types: types.clone(),
                ports: layout.ports,
                rank: reach_rank,
                bits,
            });
        }
        if let Some(port_rank) = src_port_rank {
            for (field, r) in [(Field::SrcAddr, src_addr_rank), (Field::SrcPort, port_rank)] {
                if r < bits {
                    problems.push(KeyProblem::FieldRank { types: types.clone(), field, rank: r, bits });
                }
            }
        }
        if let Some(r) = port_block_rank.filter(|r| r + PILE_DEFICIT <= bits) {
            problems.push(KeyProblem::ConsecutivePorts { types, rank: r, bits });
        }
        layouts.push(LayoutReport { layout, reach_rank, src_addr_rank, src_port_rank, port_block_rank });
    }
    // The longest input in use per family: hash rank and degenerate windows.
    let mut longest = 0;
    for family in [Family::Ipv4, Family::Ipv6] {
        let Some(n) =
            layouts.iter().filter(|l| l.layout.family == family).map(|l| l.layout.input_bits()).max()
        else {
            continue;
        };
        longest = longest.max(n);
        let r = match xfrm {
            InputXfrm::None => rank((0..n).map(|j| key_window(k, j))),
            // Under a transform the source bits are the independent inputs.
            _ => {
                let layout = Layout { family, ports: n > 2 * family.addr_bits() };
                let port = if layout.ports { layout.src_port() } else { 0..0 };
                min_rank(layout, !0, &layout.src_addr().chain(port).collect::<Vec<_>>())
            }
        };
        if r < 32 {
            problems.push(KeyProblem::HashRank { family, rank: r });
        }
    }
    for bit in 0..longest {
        let w = key_window(k, bit);
        if w == 0 || w == !0 {
            problems.push(KeyProblem::DegenerateWindow { bit, window: w });
        }
    }
    KeyReport { key_use, layouts, problems }
}

/// [`check`] for [`KeyUse::full`]: every hash type, the 128-entry table.
pub fn check_default(key: &RssKey) -> KeyReport {
    check(key, KeyUse::full())
}

/// Whether the key is one 2-byte pattern repeated (DragonFly's symmetric
/// key and its kin): their 16 independent hash bits are the price of
/// hash(a->b) == hash(b->a), not a defect.
pub fn is_symmetric(key: &RssKey) -> bool {
    let k = key.as_bytes();
    k.iter().enumerate().all(|(i, b)| *b == k[i % 2])
}

/// Whether a flow and its reverse land in the same bucket with `key` when
/// the NIC applies `xfrm` first. A symmetric transform feeds the hash the
/// same input for both directions, so then every key is symmetric (a random
/// key included: judging it "asymmetric" would be wrong); without one only
/// a symmetric key ([`is_symmetric`]) is.
pub fn symmetric_under(key: &RssKey, xfrm: InputXfrm) -> bool {
    xfrm.is_symmetric() || is_symmetric(key)
}

/// A key that cannot reach every bucket, refused by [`vet`].
#[derive(Debug, Clone, PartialEq)]
pub struct WeakKey {
    /// Bucket bits it was judged for.
    pub bits: u32,
    /// Every problem of the key, the unreachable-bucket ones first.
    pub problems: Vec<KeyProblem>,
}

impl fmt::Display for WeakKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weak RSS key: it cannot reach every one of the {} buckets in use (", 1u64 << self.bits)?;
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
/// or a named one), for the way it is used: `Err` when buckets are
/// unreachable (unless `allow_weak`), else the problems worth a warning. An
/// empty list: the key is good for this use.
pub fn vet(key: &RssKey, key_use: KeyUse, allow_weak: bool) -> Result<Vec<KeyProblem>, WeakKey> {
    let mut problems = check(key, key_use).problems;
    if is_symmetric(key) {
        problems.retain(|p| !matches!(p, KeyProblem::HashRank { rank: 16, .. }));
    }
    if !allow_weak && problems.iter().any(KeyProblem::unreachable_buckets) {
        problems.sort_by_key(|p| !p.unreachable_buckets());
        return Err(WeakKey { bits: key_use.bits, problems });
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn random_key(rng: &mut SplitMix64) -> RssKey {
        let b: Vec<u8> = (0..40).map(|_| rng.next_u64() as u8).collect();
        RssKey::from_bytes(&b).unwrap()
    }

    /// Brute force: the buckets hit when the masked windows of `bits_in`
    /// run over all combinations (small sets only).
    fn reached(key: &RssKey, input_bits: &[usize], bits: u32) -> usize {
        let mask = (1u32 << bits) - 1;
        let ws: Vec<u32> = input_bits.iter().map(|&j| key_window(key.as_bytes(), j) & mask).collect();
        let mut seen = alloc::vec![false; 1 << bits];
        for combo in 0u32..1 << ws.len() {
            let h = ws.iter().enumerate().filter(|(i, _)| combo >> i & 1 == 1).fold(0, |h, (_, w)| h ^ w);
            seen[h as usize] = true;
        }
        seen.iter().filter(|s| **s).count()
    }

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
    fn rank_is_reachability() {
        // 2^rank == buckets reached, checked by enumeration on 16 port bits.
        let mut rng = SplitMix64(3);
        for _ in 0..20 {
            let key = random_key(&mut rng);
            for bits in [3, 7] {
                let port: Vec<usize> = (64..80).collect();
                let r = check(&key, KeyUse::new([HashType::TcpIpv4], bits)).layouts[0].src_port_rank.unwrap();
                assert_eq!(reached(&key, &port, bits), 1 << r);
            }
        }
    }

    #[test]
    fn microsoft_key_passes() {
        let r = check_default(&RssKey::microsoft());
        assert!(r.passed(), "{:?}", r.problems);
        assert_eq!(r.layouts.len(), 4);
        assert!(r.layouts.iter().all(|l| l.reach_rank == 7));
    }

    #[test]
    fn all_zero_key_is_refused_for_every_use() {
        let zero = RssKey::from_bytes(&[0; 40]).unwrap();
        for ht in HashType::ALL {
            for bits in 1..=7 {
                let e = vet(&zero, KeyUse::new([ht], bits), false).unwrap_err();
                assert!(e.problems[0].unreachable_buckets(), "{ht} {bits}: {e}");
                let msg = e.to_string();
                assert!(msg.contains(&alloc::format!("reaches only 2^0 of 2^{bits} buckets")), "{msg}");
                assert!(msg.contains(ht.name()), "{msg}");
            }
        }
        // Allowed on request: then the problems come back as warnings.
        let w = vet(&zero, KeyUse::full(), true).unwrap();
        assert!(w.iter().any(KeyProblem::unreachable_buckets));
        assert!(w.iter().any(|p| matches!(p, KeyProblem::DegenerateWindow { window: 0, .. })));
    }

    #[test]
    fn all_ones_key_fails() {
        let r = check_default(&RssKey::from_bytes(&[0xff; 40]).unwrap());
        assert!(r
            .problems
            .iter()
            .any(|p| matches!(p, KeyProblem::DegenerateWindow { window: u32::MAX, .. })));
        assert!(r.problems.iter().any(|p| matches!(p, KeyProblem::HashRank { rank: 1, .. })));
        assert!(r.problems.iter().any(KeyProblem::unreachable_buckets));
    }

    #[test]
    fn symmetric_key_has_16_independent_bits() {
        let r = check_default(&RssKey::symmetric());
        assert!(r.problems.contains(&KeyProblem::HashRank { family: Family::Ipv4, rank: 16 }));
        assert_eq!(vet(&RssKey::symmetric(), KeyUse::full(), false).unwrap(), Vec::new());
    }

    /// The Microsoft key with the windows of the IPv6 source port zeroed on
    /// the low 7 bucket bits: key bits 256+j+25..256+j+32 for j in 0..16,
    /// i.e. bits 281..304 (bytes 35-37, beyond the IPv4 inputs' windows).
    fn ipv6_port_dead_key() -> RssKey {
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        // key bit i is byte i/8, bit 7 - i%8; clear 281..=303.
        for i in 281..304 {
            b[i / 8] &= !(0x80u8 >> (i % 8));
        }
        RssKey::from_bytes(&b).unwrap()
    }

    #[test]
    fn a_key_is_judged_only_for_its_use() {
        let key = ipv6_port_dead_key();
        assert!((256..272).all(|j| key_window(key.as_bytes(), j) & 0x7f == 0), "construction");
        // Hashing IPv4 (2- or 4-tuple) or IPv6 2-tuples: nothing to say.
        for use_ in [
            KeyUse::new([HashType::Ipv4], 7),
            KeyUse::new([HashType::TcpIpv4, HashType::UdpIpv4], 7),
            KeyUse::of_config(HashConfig::default(), 7).only_ipv6(false),
            KeyUse::new([HashType::Ipv6], 7),
        ] {
            assert_eq!(vet(&key, use_, false).unwrap(), Vec::new(), "{use_:?}");
        }
        // The IPv6 4-tuple: every bucket is still reachable (the address
        // varies too), so accepted, but the port alone reaches one bucket.
        let w = vet(&key, KeyUse::new([HashType::TcpIpv6], 7), false).unwrap();
        assert!(
            w.contains(&KeyProblem::FieldRank {
                types: "tcp-ipv6".into(),
                field: Field::SrcPort,
                rank: 0,
                bits: 7
            }),
            "{w:?}"
        );
        assert!(w
            .iter()
            .any(|p| p.to_string()
                == "tcp-ipv6: varying the source port alone reaches only 2^0 of 2^7 buckets"));
        assert!(w.iter().any(|p| matches!(p, KeyProblem::ConsecutivePorts { rank: 0, .. })), "{w:?}");
    }

    #[test]
    fn refused_only_when_the_varying_fields_cannot_reach_every_bucket() {
        // IPv4 source-address windows dead on the bucket bits (key bits
        // 25..63), ports fine: a 2-tuple hash cannot move a flow between
        // buckets (refused); a 4-tuple still can through the port (warned).
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        for i in 25..64 {
            b[i / 8] &= !(0x80u8 >> (i % 8));
        }
        let key = RssKey::from_bytes(&b).unwrap();
        let e = vet(&key, KeyUse::new([HashType::Ipv4], 7), false).unwrap_err();
        assert_eq!(
            e.problems[0],
            KeyProblem::Unreachable { types: "ipv4".into(), ports: false, rank: 0, bits: 7 }
        );
        let w = vet(&key, KeyUse::new([HashType::TcpIpv4], 7), false).unwrap();
        assert!(
            w.iter().any(|p| p.to_string()
                == "tcp-ipv4: varying the source address alone reaches only 2^0 of 2^7 buckets"),
            "{w:?}"
        );
        // With fewer buckets a weaker key suffices: bucket bits decide. Key
        // bits 25..63 alternating: every 7-bit slice of them (the masked
        // source-address windows) is one of two patterns, rank 2.
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        b[3..8].fill(0x55);
        let key = RssKey::from_bytes(&b).unwrap();
        assert_eq!(check(&key, KeyUse::new([HashType::Ipv4], 7)).layouts[0].reach_rank, 2, "construction");
        assert!(vet(&key, KeyUse::new([HashType::Ipv4], 7), false).is_err());
        assert!(vet(&key, KeyUse::new([HashType::Ipv4], 3), false).is_err());
        let w = vet(&key, KeyUse::new([HashType::Ipv4], 2), false).unwrap();
        assert!(!w.iter().any(KeyProblem::unreachable_buckets), "{w:?}");
    }

    /// The Microsoft key with key bits 95..111 cleared (see below).
    pub(crate) fn pile_up_key() -> RssKey {
        let mut b = RssKey::microsoft().as_bytes().to_vec();
        for i in 95..111 {
            b[i / 8] &= !(0x80u8 >> (i % 8));
        }
        RssKey::from_bytes(&b).unwrap()
    }

    #[test]
    fn consecutive_ports_piling_up_are_warned() {
        // Full rank, but the windows of the low 10 IPv4 source-port bits
        // are zero on the bucket bits (key bits 95..111): 1024 consecutive
        // ports share one bucket, 8192 reach at most 8.
        let key = pile_up_key();
        assert!((70..80).all(|j| key_window(key.as_bytes(), j) & 0x7f == 0), "construction");
        let w = vet(&key, KeyUse::new([HashType::TcpIpv4], 7), false).unwrap();
        assert!(w.iter().any(|p| matches!(p, KeyProblem::ConsecutivePorts { .. })), "{w:?}");
        assert!(!w.iter().any(KeyProblem::unreachable_buckets), "{w:?}");
        // The rank is exact: the block reaches exactly 2^rank buckets.
        let r = check(&key, KeyUse::new([HashType::TcpIpv4], 7)).layouts[0].port_block_rank.unwrap();
        assert!(r <= 3, "{r}");
        assert_eq!(reached(&key, &(67..80).collect::<Vec<_>>(), 7), 1 << r);
    }

    /// Issue 22: the sampled chi-square test warned on ~35% of random keys,
    /// and 1 in 100-300 was refused for a property of another hash type.
    /// Now: no random key is refused, and the warnings other than the exact
    /// single-field ones (test 2, whose rate is the rank law's, asserted
    /// separately) come less than once in 1,000 keys, for every bucket
    /// count.
    #[test]
    fn random_keys_rarely_warn() {
        const KEYS: usize = 10_000;
        let mut rng = SplitMix64(0x0069_7373_7565_3232);
        let (mut refused, mut other, mut field, mut two_tuple_warned) = (0, 0, 0, 0);
        let mut any_bits_other = 0;
        for i in 0..KEYS {
            let key = random_key(&mut rng);
            // Every hash type, 128 buckets: the most demanding use.
            match vet(&key, KeyUse::full(), false) {
                Err(_) => refused += 1,
                Ok(ps) => {
                    other += ps.iter().any(|p| !matches!(p, KeyProblem::FieldRank { .. })) as usize;
                    field += ps.iter().any(|p| matches!(p, KeyProblem::FieldRank { .. })) as usize;
                }
            }
            // Every bucket count.
            let use_ = KeyUse::new(HashType::ALL, (i % 7) as u32 + 1);
            match vet(&key, use_, false) {
                Err(_) => refused += 1,
                Ok(ps) => {
                    any_bits_other += ps.iter().any(|p| !matches!(p, KeyProblem::FieldRank { .. })) as usize
                }
            }
            // The case: an IPv4 2-tuple.
            two_tuple_warned +=
                !vet(&key, KeyUse::new([HashType::Ipv4], 7), false).unwrap().is_empty() as usize;
        }
        assert_eq!(refused, 0);
        assert!(other * 1000 < KEYS, "{other} of {KEYS} random keys warned (128 buckets)");
        assert!(any_bits_other * 1000 < KEYS, "{any_bits_other} of {KEYS} random keys warned");
        assert_eq!(two_tuple_warned, 0);
        // The exact single-field warning (the port alone short of full rank:
        // a 16 x 7 Hankel matrix of 22 random key bits, rank < 7 with
        // probability about 2^-10 per 4-tuple layout): 15 of 10,000 keys
        // with this seed. Far more, or none, would mean wrong ranks.
        assert!((5..=40).contains(&field), "{field} of {KEYS} random keys have a short single field");
    }

    /// `symmetric_under` agrees with hashing both directions through the
    /// transform: with one, a random key is symmetric; without, it is not.
    #[test]
    fn symmetric_under_matches_hashing_both_ways() {
        use crate::hashtype::HashInput;
        use crate::xfrm::InputXfrm;
        use core::net::Ipv4Addr;
        let mut rng = SplitMix64(37);
        let key = random_key(&mut rng);
        let mut both_ways = |x: InputXfrm| {
            (0..200).all(|_| {
                let (a, b) = (Ipv4Addr::from(rng.next_u64() as u32), Ipv4Addr::from(rng.next_u64() as u32));
                let (pa, pb) = (rng.next_u64() as u16, rng.next_u64() as u16);
                let h = |i: &HashInput| crate::toeplitz::reference(key.as_bytes(), x.apply(i).as_bytes());
                h(&HashInput::v4(a, b, Some((pa, pb)))) == h(&HashInput::v4(b, a, Some((pb, pa))))
            })
        };
        for x in [InputXfrm::None, InputXfrm::SymXor, InputXfrm::SymOrXor] {
            assert_eq!(symmetric_under(&key, x), both_ways(x), "{x}");
        }
        assert!(!symmetric_under(&key, InputXfrm::None));
        assert!(symmetric_under(&RssKey::symmetric(), InputXfrm::None));
    }

    /// Under symmetric-xor each address bit XORs two windows 32 bits
    /// apart: a key repeating every 4 bytes passes the plain check but
    /// cancels them all (every flow hashes to 0), and `check_under` says
    /// so; hashing through the transform confirms it.
    #[test]
    fn a_key_is_judged_under_the_transform() {
        use crate::hashtype::HashInput;
        use core::net::Ipv4Addr;
        let key = RssKey::from_bytes(&[0x3a, 0x91, 0xc4, 0x57].repeat(10)).unwrap();
        let use2 = KeyUse::new([HashType::Ipv4], 7);
        assert!(check(&key, use2).passed(), "plain: {:?}", check(&key, use2).problems);
        let under = check_under(&key, use2, InputXfrm::SymXor);
        assert!(under.problems.iter().any(KeyProblem::unreachable_buckets), "{:?}", under.problems);
        assert_eq!(under.layouts[0].reach_rank, 0);
        let mut rng = SplitMix64(5);
        for _ in 0..100 {
            let i = HashInput::v4(Ipv4Addr::from(rng.next_u64() as u32), Ipv4Addr::new(10, 0, 0, 1), None);
            assert_eq!(crate::toeplitz::reference(key.as_bytes(), InputXfrm::SymXor.apply(&i).as_bytes()), 0);
        }
    }

    /// The reach rank under a transform is what hashing through it reaches:
    /// 2^rank distinct buckets over many sources (4 bucket bits, so a few
    /// thousand samples see every reachable bucket).
    #[test]
    fn reach_under_a_transform_matches_sampled_buckets() {
        use crate::hashtype::HashInput;
        use core::net::Ipv4Addr;
        let mut rng = SplitMix64(11);
        for x in [InputXfrm::None, InputXfrm::SymXor, InputXfrm::SymOrXor] {
            for _ in 0..20 {
                // Sparse keys so that some fall short of 4 bits.
                let b: Vec<u8> =
                    (0..40).map(|_| (rng.next_u64() & rng.next_u64() & rng.next_u64()) as u8).collect();
                let key = RssKey::from_bytes(&b).unwrap();
                for dst in [Ipv4Addr::new(0, 0, 0, 0), Ipv4Addr::new(255, 255, 255, 255)] {
                    let mut seen = [false; 16];
                    for _ in 0..4000 {
                        let i = HashInput::v4(Ipv4Addr::from(rng.next_u64() as u32), dst, None);
                        seen[(crate::toeplitz::reference(&b, x.apply(&i).as_bytes()) & 15) as usize] = true;
                    }
                    let got = seen.iter().filter(|s| **s).count();
                    let r = check_under(&key, KeyUse::new([HashType::Ipv4], 4), x).layouts[0].reach_rank;
                    if x == InputXfrm::SymOrXor {
                        // The lower of both ends: at most what this end reaches.
                        assert!(1 << r <= got, "{x} {dst}: rank {r}, {got} buckets");
                    } else {
                        assert_eq!(1 << r, got, "{x}: rank {r}, {got} buckets");
                    }
                }
            }
        }
    }
}
