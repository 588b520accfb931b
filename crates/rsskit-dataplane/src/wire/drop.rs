//! Why a packet was rejected, and per-reason counters.

use core::fmt;

/// Every reason the data plane rejects a frame. Parsing returns one of these
/// instead of panicking; callers count them in [`DropCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// Frame shorter than an Ethernet II header.
    EthTruncated,
    /// A VLAN tag is cut off.
    VlanTruncated,
    /// More VLAN tags than supported (802.1ad outer + 802.1Q inner = 2).
    TooManyVlans,
    /// Ethertype is neither IPv4 nor IPv6 (ARP, LLDP, 802.3 length field...).
    NotIp,
    /// IP version nibble does not match the ethertype / outer protocol.
    BadIpVersion,
    /// Fewer bytes than the IPv4 header (20, or IHL * 4) needs.
    Ipv4Truncated,
    /// IHL < 5.
    Ipv4BadIhl,
    /// Total length smaller than the header or larger than the bytes present.
    Ipv4BadTotalLen,
    /// Header checksum does not verify.
    Ipv4BadChecksum,
    /// An IPv4 option runs past the header or has a length < 2.
    Ipv4BadOptions,
    /// Fewer than 40 bytes, or the payload length runs past the frame.
    Ipv6Truncated,
    /// An extension header is cut off, misplaced (hop-by-hop not first),
    /// repeated (two fragment headers), or a type 0 routing header with
    /// segments left (deprecated by RFC 5095, which says to drop it).
    Ipv6BadExtHeader,
    /// Longer extension header chain than the configured limit.
    Ipv6ExtChainTooLong,
    /// Fragment offset + length past 65535, or a non-last fragment whose
    /// length is not a multiple of 8.
    BadFragment,
    /// A first fragment (or whole packet) too short for its transport header:
    /// the RFC 1858 / RFC 3128 / RFC 7112 tiny-fragment case.
    L4Truncated,
    /// TCP data offset < 5 or past the end of the segment.
    TcpBadDataOffset,
    /// UDP length field < 8 or larger than the IP payload (unfragmented).
    UdpBadLength,
    /// GRE header cut off, reserved bits set, or version != 0.
    GreMalformed,
    /// More nested tunnels than the configured limit.
    TunnelTooDeep,
}

impl DropReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 19;

    /// All reasons in declaration order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::EthTruncated,
        DropReason::VlanTruncated,
        DropReason::TooManyVlans,
        DropReason::NotIp,
        DropReason::BadIpVersion,
        DropReason::Ipv4Truncated,
        DropReason::Ipv4BadIhl,
        DropReason::Ipv4BadTotalLen,
        DropReason::Ipv4BadChecksum,
        DropReason::Ipv4BadOptions,
        DropReason::Ipv6Truncated,
        DropReason::Ipv6BadExtHeader,
        DropReason::Ipv6ExtChainTooLong,
        DropReason::BadFragment,
        DropReason::L4Truncated,
        DropReason::TcpBadDataOffset,
        DropReason::UdpBadLength,
        DropReason::GreMalformed,
        DropReason::TunnelTooDeep,
    ];

    /// Short snake_case name for status lines and JSON.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::EthTruncated => "eth_truncated",
            DropReason::VlanTruncated => "vlan_truncated",
            DropReason::TooManyVlans => "too_many_vlans",
            DropReason::NotIp => "not_ip",
            DropReason::BadIpVersion => "bad_ip_version",
            DropReason::Ipv4Truncated => "ipv4_truncated",
            DropReason::Ipv4BadIhl => "ipv4_bad_ihl",
            DropReason::Ipv4BadTotalLen => "ipv4_bad_total_len",
            DropReason::Ipv4BadChecksum => "ipv4_bad_checksum",
            DropReason::Ipv4BadOptions => "ipv4_bad_options",
            DropReason::Ipv6Truncated => "ipv6_truncated",
            DropReason::Ipv6BadExtHeader => "ipv6_bad_ext_header",
            DropReason::Ipv6ExtChainTooLong => "ipv6_ext_chain_too_long",
            DropReason::BadFragment => "bad_fragment",
            DropReason::L4Truncated => "l4_truncated",
            DropReason::TcpBadDataOffset => "tcp_bad_data_offset",
            DropReason::UdpBadLength => "udp_bad_length",
            DropReason::GreMalformed => "gre_malformed",
            DropReason::TunnelTooDeep => "tunnel_too_deep",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One counter per [`DropReason`]. Plain `u64`s: each worker owns its own
/// copy (no atomics on the fast path); sum them for totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropCounters {
    counts: [u64; DropReason::COUNT],
}

impl DropCounters {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one drop.
    #[inline]
    pub fn inc(&mut self, r: DropReason) {
        self.counts[r as usize] += 1;
    }

    /// Counts `n` drops (a packet standing for `n` frames).
    #[inline]
    pub fn add(&mut self, r: DropReason, n: u64) {
        self.counts[r as usize] += n;
    }

    /// The count for one reason.
    pub fn get(&self, r: DropReason) -> u64 {
        self.counts[r as usize]
    }

    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another set of counters into this one.
    pub fn merge(&mut self, other: &DropCounters) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// Non-zero counters, in declaration order.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.into_iter().map(|r| (r, self.get(r))).filter(|(_, n)| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_discriminant_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    #[test]
    fn counters_count() {
        let mut c = DropCounters::new();
        c.inc(DropReason::NotIp);
        c.inc(DropReason::NotIp);
        c.inc(DropReason::TunnelTooDeep);
        assert_eq!(c.get(DropReason::NotIp), 2);
        assert_eq!(c.total(), 3);
        let mut d = DropCounters::new();
        d.merge(&c);
        d.merge(&c);
        assert_eq!(d.get(DropReason::TunnelTooDeep), 2);
        assert_eq!(d.nonzero().count(), 2);
    }
}
