//! Transport headers (UDP, TCP, ICMP, ICMPv6) on top of an [`IpLayer`].
//!
//! UDP and TCP are read through the [`super::udp`] and [`super::tcp`] views;
//! ICMP and ICMPv6 through etherparse's `Icmpv4Slice` / `Icmpv6Slice` (their
//! per-type length checks are part of what the parser accepts). The checks
//! that depend on the IP layer (first fragments, the UDP length vs. the IP
//! payload) are here.

use super::ip::{proto, IpLayer};
use super::DropReason;
use super::{udp, TcpPacket, UdpPacket};
use etherparse::{Icmpv4Slice, Icmpv6Slice};

/// What follows the innermost IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport<'a> {
    /// UDP.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Datagram payload present in this packet (for a first fragment:
        /// the part in this fragment).
        payload: &'a [u8],
    },
    /// TCP.
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Flag byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10...).
        flags: u8,
        /// Segment payload present in this packet.
        payload: &'a [u8],
    },
    /// ICMP.
    Icmpv4 {
        /// Type.
        icmp_type: u8,
        /// Code.
        code: u8,
    },
    /// ICMPv6.
    Icmpv6 {
        /// Type.
        icmp_type: u8,
        /// Code.
        code: u8,
    },
    /// A fragment other than the first: no transport header.
    Fragment,
    /// Any other protocol (ESP, SCTP, no next header, tunnels not decapsulated...).
    Other(u8),
}

impl Transport<'_> {
    /// Source and destination port for TCP and UDP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match *self {
            Transport::Udp { src_port, dst_port, .. } | Transport::Tcp { src_port, dst_port, .. } => {
                Some((src_port, dst_port))
            }
            _ => None,
        }
    }
}

/// Parses the transport header of `ip`. For a first fragment the transport
/// header must be complete in it (RFC 1858 / RFC 3128 tiny fragments, RFC 7112
/// for IPv6), else [`DropReason::L4Truncated`].
#[inline]
pub fn parse_transport<'a>(ip: &IpLayer<'a>) -> Result<Transport<'a>, DropReason> {
    if ip.is_later_fragment() {
        return Ok(Transport::Fragment);
    }
    let first_fragment = ip.is_fragment();
    let p = ip.payload();
    match ip.proto {
        proto::UDP => {
            let u = UdpPacket::new_checked(p)?;
            let payload = if first_fragment {
                u.payload()
            } else {
                let len = usize::from(u.len());
                // RFC 768 length; 0 is allowed for IPv6 jumbograms only (unsupported).
                if len < udp::HEADER_LEN || len > p.len() {
                    return Err(DropReason::UdpBadLength);
                }
                &p[udp::HEADER_LEN..len]
            };
            Ok(Transport::Udp { src_port: u.src_port(), dst_port: u.dst_port(), payload })
        }
        proto::TCP => {
            let t = TcpPacket::new_checked(p)?;
            Ok(Transport::Tcp {
                src_port: t.src_port(),
                dst_port: t.dst_port(),
                flags: t.flags(),
                payload: t.payload(),
            })
        }
        proto::ICMP if !ip.is_ipv6() => {
            let i = Icmpv4Slice::from_slice(p).map_err(|_| DropReason::L4Truncated)?;
            Ok(Transport::Icmpv4 { icmp_type: i.type_u8(), code: i.code_u8() })
        }
        proto::ICMPV6 if ip.is_ipv6() => {
            let i = Icmpv6Slice::from_slice(p).map_err(|_| DropReason::L4Truncated)?;
            Ok(Transport::Icmpv6 { icmp_type: i.type_u8(), code: i.code_u8() })
        }
        n => Ok(Transport::Other(n)),
    }
}
