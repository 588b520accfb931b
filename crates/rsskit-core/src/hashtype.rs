//! RSS hash types, the hash input layout, and the rule that picks a hash
//! type for a packet (FreeBSD's `rss_proto_software_hash_v4/v6`).
//!
//! Input layout (Microsoft RSS spec): source address, destination address,
//! then for the 4-tuple types source port and destination port, all in
//! network byte order: 8, 12, 32 or 36 bytes.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The six RSS hash types of the Microsoft spec (FreeBSD `RSS_HASHTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashType {
    /// IPv4 2-tuple: source and destination address.
    Ipv4,
    /// TCP over IPv4: addresses and ports.
    TcpIpv4,
    /// UDP over IPv4: addresses and ports.
    UdpIpv4,
    /// IPv6 2-tuple.
    Ipv6,
    /// TCP over IPv6.
    TcpIpv6,
    /// UDP over IPv6.
    UdpIpv6,
}

impl HashType {
    /// All six, in the order above.
    pub const ALL: [HashType; 6] = [
        HashType::Ipv4,
        HashType::TcpIpv4,
        HashType::UdpIpv4,
        HashType::Ipv6,
        HashType::TcpIpv6,
        HashType::UdpIpv6,
    ];

    /// Whether the ports are part of the hash input.
    pub fn has_ports(self) -> bool {
        !matches!(self, HashType::Ipv4 | HashType::Ipv6)
    }

    /// Whether this is an IPv6 type.
    pub fn is_ipv6(self) -> bool {
        matches!(self, HashType::Ipv6 | HashType::TcpIpv6 | HashType::UdpIpv6)
    }

    /// Bytes of hash input: 8, 12, 32 or 36.
    pub fn input_len(self) -> usize {
        let addrs = if self.is_ipv6() { 32 } else { 8 };
        addrs + if self.has_ports() { 4 } else { 0 }
    }

    /// The 2-tuple type of the same family.
    pub fn two_tuple(self) -> HashType {
        if self.is_ipv6() {
            HashType::Ipv6
        } else {
            HashType::Ipv4
        }
    }

    /// Bit for [`HashConfig`].
    const fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// Short name as used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            HashType::Ipv4 => "ipv4",
            HashType::TcpIpv4 => "tcp-ipv4",
            HashType::UdpIpv4 => "udp-ipv4",
            HashType::Ipv6 => "ipv6",
            HashType::TcpIpv6 => "tcp-ipv6",
            HashType::UdpIpv6 => "udp-ipv6",
        }
    }
}

impl fmt::Display for HashType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Transport protocol of a flow, as far as RSS cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// Any other IP protocol number: always hashed on addresses only.
    Other(u8),
}

impl L4Proto {
    /// From an IP protocol number.
    pub fn from_number(n: u8) -> Self {
        match n {
            6 => L4Proto::Tcp,
            17 => L4Proto::Udp,
            n => L4Proto::Other(n),
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => 6,
            L4Proto::Udp => 17,
            L4Proto::Other(n) => n,
        }
    }
}

/// Which hash types are enabled: what the NIC (or the software fallback) is
/// configured to hash on. A packet whose 4-tuple type is not enabled is
/// hashed on its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashConfig {
    bits: u8,
}

impl Default for HashConfig {
    /// FreeBSD's default: IPv4, TCP/IPv4, IPv6, TCP/IPv6. UDP is hashed on
    /// addresses only, so that fragmented and unfragmented datagrams of one
    /// flow land in the same bucket.
    fn default() -> Self {
        HashConfig::empty()
            .with(HashType::Ipv4)
            .with(HashType::TcpIpv4)
            .with(HashType::Ipv6)
            .with(HashType::TcpIpv6)
    }
}

impl HashConfig {
    /// Nothing enabled (every packet then hashes to 0 in FreeBSD terms; here
    /// [`HashConfig::pick`] still falls back to the 2-tuple).
    pub const fn empty() -> Self {
        HashConfig { bits: 0 }
    }

    /// All six types enabled (UDP 4-tuple on).
    pub const fn all() -> Self {
        HashConfig { bits: 0x3f }
    }

    /// This config with `t` enabled.
    pub const fn with(self, t: HashType) -> Self {
        HashConfig { bits: self.bits | t.bit() }
    }

    /// This config with `t` disabled.
    pub const fn without(self, t: HashType) -> Self {
        HashConfig { bits: self.bits & !t.bit() }
    }

    /// Whether `t` is enabled.
    pub const fn contains(self, t: HashType) -> bool {
        self.bits & t.bit() != 0
    }

    /// The default with UDP 4-tuple hashing switched on or off.
    pub fn with_udp_4tuple(self, on: bool) -> Self {
        if on {
            self.with(HashType::UdpIpv4).with(HashType::UdpIpv6)
        } else {
            self.without(HashType::UdpIpv4).without(HashType::UdpIpv6)
        }
    }

    /// The hash type for a packet: TCP with TCP enabled -> 4-tuple; UDP with
    /// UDP enabled -> 4-tuple; otherwise the 2-tuple. Fragments never use the
    /// 4-tuple (only the first fragment carries the ports).
    pub fn pick(self, ipv6: bool, proto: L4Proto, is_fragment: bool) -> HashType {
        let (two, tcp, udp) = if ipv6 {
            (HashType::Ipv6, HashType::TcpIpv6, HashType::UdpIpv6)
        } else {
            (HashType::Ipv4, HashType::TcpIpv4, HashType::UdpIpv4)
        };
        if is_fragment {
            return two;
        }
        match proto {
            L4Proto::Tcp if self.contains(tcp) => tcp,
            L4Proto::Udp if self.contains(udp) => udp,
            _ => two,
        }
    }

    /// Enabled types, in [`HashType::ALL`] order.
    pub fn types(self) -> impl Iterator<Item = HashType> {
        HashType::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

/// A flow as seen by the receiver: packets travel from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// Source address (the sender).
    pub src: IpAddr,
    /// Destination address (the receiver).
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Transport protocol.
    pub proto: L4Proto,
}

/// Why a tuple cannot be hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TupleError {
    /// Source and destination are of different address families.
    MixedFamilies,
    /// The hash type is IPv6 and the addresses IPv4 or the other way round.
    FamilyMismatch,
}

impl fmt::Display for TupleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TupleError::MixedFamilies => {
                f.write_str("source and destination are of different address families")
            }
            TupleError::FamilyMismatch => f.write_str("hash type does not match the address family"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TupleError {}

impl FlowTuple {
    /// A new tuple.
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr, dst_port: u16, proto: L4Proto) -> Self {
        FlowTuple { src, dst, src_port, dst_port, proto }
    }

    /// Whether both addresses are IPv6 (mixed families are rejected when hashing).
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// The same flow seen from the other end: what a sender must hash to
    /// predict the hash the receiver's NIC computes for the replies (FreeBSD's
    /// `xps_proto_software_hash_v4` swaps the roles the same way).
    pub fn reversed(&self) -> Self {
        FlowTuple {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }

    /// The hash type `config` picks for this flow (not a fragment).
    pub fn hash_type(&self, config: HashConfig) -> HashType {
        config.pick(self.is_ipv6(), self.proto, false)
    }

    /// The hash input for hash type `t`.
    pub fn input(&self, t: HashType) -> Result<HashInput, TupleError> {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) if !t.is_ipv6() => Ok(HashInput::v4(s, d, self.ports(t))),
            (IpAddr::V6(s), IpAddr::V6(d)) if t.is_ipv6() => Ok(HashInput::v6(s, d, self.ports(t))),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                Err(TupleError::FamilyMismatch)
            }
            _ => Err(TupleError::MixedFamilies),
        }
    }

    fn ports(&self, t: HashType) -> Option<(u16, u16)> {
        t.has_ports().then_some((self.src_port, self.dst_port))
    }
}

/// The bytes fed to the Toeplitz hash: at most 36, kept inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashInput {
    buf: [u8; 36],
    len: u8,
}

impl HashInput {
    /// IPv4 input: 8 bytes, or 12 with ports.
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, ports: Option<(u16, u16)>) -> Self {
        let mut buf = [0u8; 36];
        buf[0..4].copy_from_slice(&src.octets());
        buf[4..8].copy_from_slice(&dst.octets());
        let len = Self::put_ports(&mut buf, 8, ports);
        HashInput { buf, len }
    }

    /// IPv6 input: 32 bytes, or 36 with ports.
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, ports: Option<(u16, u16)>) -> Self {
        let mut buf = [0u8; 36];
        buf[0..16].copy_from_slice(&src.octets());
        buf[16..32].copy_from_slice(&dst.octets());
        let len = Self::put_ports(&mut buf, 32, ports);
        HashInput { buf, len }
    }

    fn put_ports(buf: &mut [u8; 36], at: usize, ports: Option<(u16, u16)>) -> u8 {
        match ports {
            Some((s, d)) => {
                buf[at..at + 2].copy_from_slice(&s.to_be_bytes());
                buf[at + 2..at + 4].copy_from_slice(&d.to_be_bytes());
                (at + 4) as u8
            }
            None => at as u8,
        }
    }

    /// The input bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// The input bytes, to transform in place ([`crate::xfrm`]).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len as usize]
    }
}

impl fmt::Debug for HashInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HashInput(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_lengths() {
        for t in HashType::ALL {
            let (s, d): (IpAddr, IpAddr) = if t.is_ipv6() {
                ("::1".parse().unwrap(), "::2".parse().unwrap())
            } else {
                ("1.2.3.4".parse().unwrap(), "5.6.7.8".parse().unwrap())
            };
            let tuple = FlowTuple::new(s, 1, d, 2, L4Proto::Tcp);
            assert_eq!(tuple.input(t).unwrap().as_bytes().len(), t.input_len());
        }
    }

    #[test]
    fn pick_follows_freebsd() {
        let c = HashConfig::default();
        assert_eq!(c.pick(false, L4Proto::Tcp, false), HashType::TcpIpv4);
        assert_eq!(c.pick(false, L4Proto::Udp, false), HashType::Ipv4);
        assert_eq!(c.pick(true, L4Proto::Tcp, true), HashType::Ipv6);
        let u = c.with_udp_4tuple(true);
        assert_eq!(u.pick(true, L4Proto::Udp, false), HashType::UdpIpv6);
        assert_eq!(u.pick(false, L4Proto::Udp, true), HashType::Ipv4);
        assert_eq!(u.pick(false, L4Proto::Other(1), false), HashType::Ipv4);
    }

    #[test]
    fn mixed_families_rejected() {
        let t = FlowTuple::new("1.2.3.4".parse().unwrap(), 1, "::1".parse().unwrap(), 2, L4Proto::Udp);
        assert_eq!(t.input(HashType::Ipv4), Err(TupleError::MixedFamilies));
        let t4 = FlowTuple::new("1.2.3.4".parse().unwrap(), 1, "1.2.3.5".parse().unwrap(), 2, L4Proto::Udp);
        assert_eq!(t4.input(HashType::Ipv6), Err(TupleError::FamilyMismatch));
    }
}
