//! IPv4 and IPv6 network layer views.
//!
//! The headers are read through the views of [`super::ipv4`] and
//! [`super::ipv6`]. The IPv6 extension header *chain walk* is our own (and
//! was before the views, when the headers were read with etherparse's
//! slices): etherparse 0.16's
//! `Ipv6ExtensionsSlice::from_slice` keeps walking past a fragment header
//! whose offset is non-zero, i.e. it reads fragment *data* of a non-first
//! fragment as further extension headers (and rejects valid fragments whose
//! data happens to look like a bad header). Its `Ipv4Slice::from_slice`
//! likewise parses an AH header out of non-first fragment data. A
//! reassembler needs the exact split "unfragmentable part | fragment header |
//! fragment data", which we record in [`FragInfo`]. And etherparse 0.16
//! decodes the IPv6 fragment header's offset and M bits from the wrong
//! positions (its issue #150), so that header is read by hand.

use super::checksum::{self, internet_checksum};
use super::ipv6::{self, Ipv6ExtHeader, Ipv6Packet};
use super::{ipv4, DropReason, Ipv4Packet, ParseConfig};
use core::net::IpAddr;

/// IP protocol numbers used here.
pub mod proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP.
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP (6in4).
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// IPsec ESP.
    pub const ESP: u8 = 50;
    /// IPsec AH.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6: no next header.
    pub const NO_NEXT: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// IPv6 mobility header.
    pub const MOBILITY: u8 = 135;
    /// Host Identity Protocol.
    pub const HIP: u8 = 139;
    /// Shim6.
    pub const SHIM6: u8 = 140;
}

/// Fragmentation fields of a fragment (IPv4 with MF or offset != 0, or IPv6
/// with a fragment header that is not an atomic fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragInfo {
    /// Identification (16 bits for IPv4, 32 for IPv6).
    pub id: u32,
    /// Offset of this fragment's data in the original payload, in bytes.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// IPv6: offset of the fragment header from the start of the IP packet
    /// (the unfragmentable part is `bytes[..frag_hdr_at]`). IPv4: header length.
    pub frag_hdr_at: u16,
    /// IPv6: index (from the start of the IP packet) of the Next Header byte
    /// that names the fragment header (6 when it directly follows the fixed
    /// header). IPv4: unused (9, the protocol field).
    pub nh_at: u16,
}

impl FragInfo {
    /// Whether this is the first fragment (offset 0).
    #[inline]
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// A parsed IP packet (IPv4, or IPv6 with its extension headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpLayer<'a> {
    /// Offset of this IP header from the start of the parsed buffer.
    pub offset: usize,
    /// The whole IP packet, cut to its length field (link padding removed).
    pub bytes: &'a [u8],
    /// Bytes up to the upper-layer header: IPv4 header with options; IPv6
    /// fixed header plus all extension headers present in this packet (for a
    /// non-first fragment: up to and including the fragment header).
    pub header_len: usize,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// TTL / hop limit.
    pub ttl: u8,
    /// Present if this packet is a fragment.
    pub frag: Option<FragInfo>,
}

impl<'a> IpLayer<'a> {
    /// IPv6?
    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// Is this a fragment (first or not)?
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.frag.is_some()
    }

    /// Is this a fragment other than the first one (no transport header)?
    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        self.frag.is_some_and(|f| !f.is_first())
    }

    /// The header bytes (see [`IpLayer::header_len`]).
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        &self.bytes[..self.header_len]
    }

    /// The upper-layer bytes (or the fragment data of a non-first fragment).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.header_len..]
    }

    /// The fragment data: what goes at `frag.offset` in the reassembled
    /// payload. For IPv6 this starts right after the fragment header (so it
    /// includes extension headers that follow it in a first fragment).
    #[inline]
    pub fn fragment_data(&self) -> &'a [u8] {
        match self.frag {
            Some(f) if self.is_ipv6() => &self.bytes[f.frag_hdr_at as usize + 8..],
            _ => self.payload(),
        }
    }
}

/// Whether an IPv4 header's checksum verifies.
#[inline]
pub fn ipv4_checksum_ok(header: &[u8]) -> bool {
    internet_checksum(header) == 0
}

/// Whether the TCP/UDP checksum of an IPv4 packet (`ip` starts at the IP
/// header) verifies over its pseudo-header. Used to check rewritten frames
/// (redirect); the receive path trusts the NIC, as the kernel does.
pub fn ipv4_l4_checksum_ok(ip: &[u8]) -> bool {
    if ip.len() < ipv4::HEADER_LEN {
        return false;
    }
    let v = ipv4::Ipv4Packet::new_unchecked(ip);
    let total = usize::from(v.total_len()).min(ip.len());
    let Some(l4) = ip.get(v.header_len()..total) else { return false };
    checksum::l4_checksum(&ip[ipv4::field::SRC_ADDR], &ip[ipv4::field::DST_ADDR], v.protocol(), l4) == 0
}

/// Parses an IPv4 packet starting at `data[0]`; `offset` is recorded in the result.
#[inline]
pub fn parse_ipv4<'a>(data: &'a [u8], offset: usize, cfg: &ParseConfig) -> Result<IpLayer<'a>, DropReason> {
    let h = Ipv4Packet::new_checked(data)?;
    let hlen = h.header_len();
    let total = usize::from(h.total_len());
    if cfg.verify_ipv4_checksum && !h.verify_checksum() {
        return Err(DropReason::Ipv4BadChecksum);
    }
    if hlen > ipv4::HEADER_LEN && !ipv4_options_ok(h.options()) {
        return Err(DropReason::Ipv4BadOptions);
    }
    let bytes = &data[..total];
    let payload_len = total - hlen;
    let frag_off = h.frag_offset();
    let more = h.more_frags();
    let frag = if more || frag_off != 0 {
        if (more && (payload_len == 0 || payload_len & 7 != 0)) || hlen + frag_off + payload_len > 65535 {
            return Err(DropReason::BadFragment);
        }
        Some(FragInfo {
            id: u32::from(h.ident()),
            offset: frag_off as u16,
            more,
            frag_hdr_at: hlen as u16,
            nh_at: ipv4::field::PROTOCOL as u16,
        })
    } else {
        None
    };
    Ok(IpLayer {
        offset,
        bytes,
        header_len: hlen,
        src: IpAddr::V4(h.src_addr()),
        dst: IpAddr::V4(h.dst_addr()),
        proto: h.protocol(),
        ttl: h.ttl(),
        frag,
    })
}

/// IPv4 options (RFC 791): `(type, data)` of each option up to End of
/// Option List; NOPs are skipped. Stops at the first malformed option (see
/// [`ipv4_options_ok`]).
pub fn ipv4_options(opts: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = opts;
    core::iter::from_fn(move || loop {
        match *rest {
            [] | [0, ..] => return None,
            [1, ..] => rest = &rest[1..],
            [t, len, ..] if usize::from(len) >= 2 && usize::from(len) <= rest.len() => {
                let (o, r) = rest.split_at(usize::from(len));
                rest = r;
                return Some((t, &o[2..]));
            }
            _ => {
                rest = &[];
                return None;
            }
        }
    })
}

/// Whether IPv4 options are well formed: every option other than EOL / NOP
/// has a length byte >= 2 that stays inside the options.
pub fn ipv4_options_ok(opts: &[u8]) -> bool {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return true,
            1 => i += 1,
            _ => {
                let Some(&len) = opts.get(i + 1) else { return false };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    return false;
                }
                i += len;
            }
        }
    }
    true
}

/// Whether `nh` is an IPv6 extension header we walk (RFC 7045 list, minus ESP
/// whose contents are opaque).
fn is_ext_header(nh: u8) -> bool {
    matches!(
        nh,
        proto::HOPOPT
            | proto::ROUTING
            | proto::FRAGMENT
            | proto::AH
            | proto::DSTOPTS
            | proto::MOBILITY
            | proto::HIP
            | proto::SHIM6
    )
}

/// Parses an IPv6 packet starting at `data[0]` including its extension header chain.
pub fn parse_ipv6<'a>(data: &'a [u8], offset: usize, cfg: &ParseConfig) -> Result<IpLayer<'a>, DropReason> {
    let h = Ipv6Packet::new_checked(data)?;
    // Jumbograms (payload length 0 + hop-by-hop jumbo option) are not
    // supported: a 0 length means just the 40-byte header.
    let total = h.total_len();
    let bytes = &data[..total];
    let mut nh = h.next_header();
    let mut nh_at = ipv6::field::NEXT_HEADER;
    let mut pos = ipv6::HEADER_LEN;
    let mut count = 0usize;
    let mut frag: Option<FragInfo> = None;
    // Any fragment header seen, atomic ones included (those leave `frag`
    // empty): a second one is malformed (drop.rs, Ipv6BadExtHeader).
    let mut seen_frag_hdr = false;
    while is_ext_header(nh) {
        count += 1;
        if count > cfg.max_ipv6_ext_headers {
            return Err(DropReason::Ipv6ExtChainTooLong);
        }
        let rest = &bytes[pos..];
        let (len, next) = match nh {
            proto::HOPOPT if pos != ipv6::HEADER_LEN => return Err(DropReason::Ipv6BadExtHeader),
            proto::FRAGMENT => {
                if seen_frag_hdr {
                    return Err(DropReason::Ipv6BadExtHeader);
                }
                seen_frag_hdr = true;
                let x = Ipv6ExtHeader::new_checked_fragment(rest)?;
                // Read by our view: etherparse 0.16's Ipv6FragmentHeaderSlice
                // decodes offset and M from the wrong bits (etherparse issue
                // #150, fixed in 0.20). RFC 8200 4.5: bytes 2..3 are a
                // big-endian word `offset << 3 | res << 1 | M`.
                let off = usize::from(x.frag_offset());
                let more = x.more_frags();
                let id = x.frag_ident();
                let next = x.next_header();
                let data_len = total - (pos + ipv6::FRAG_HEADER_LEN);
                if more || off != 0 {
                    if (more && (data_len == 0 || data_len & 7 != 0)) || off + data_len > 65535 {
                        return Err(DropReason::BadFragment);
                    }
                    frag = Some(FragInfo {
                        id,
                        offset: off as u16,
                        more,
                        frag_hdr_at: pos as u16,
                        nh_at: nh_at as u16,
                    });
                }
                // Atomic fragments (offset 0, M = 0; RFC 6946) are processed
                // as whole packets: no FragInfo.
                (ipv6::FRAG_HEADER_LEN, next)
            }
            proto::AH => {
                let a = Ipv6ExtHeader::new_checked_ah(rest)?;
                (a.header_len(), a.next_header())
            }
            _ => {
                let x = Ipv6ExtHeader::new_checked(rest)?;
                // RFC 5095: a type 0 routing header with segments left is dropped.
                if nh == proto::ROUTING && x.routing_type() == 0 && x.segments_left() != 0 {
                    return Err(DropReason::Ipv6BadExtHeader);
                }
                (x.header_len(), x.next_header())
            }
        };
        nh_at = pos; // the next header field is the first byte of every ext header
        pos += len;
        nh = next;
        if frag.is_some_and(|f| f.offset != 0) {
            // Past the fragment header of a non-first fragment is data.
            break;
        }
    }
    Ok(IpLayer {
        offset,
        bytes,
        header_len: pos,
        src: IpAddr::V6(h.src_addr()),
        dst: IpAddr::V6(h.dst_addr()),
        proto: nh,
        ttl: h.hop_limit(),
        frag,
    })
}

/// Parses an IP packet of either version, chosen by the version nibble.
#[inline]
pub fn parse_ip_any<'a>(data: &'a [u8], offset: usize, cfg: &ParseConfig) -> Result<IpLayer<'a>, DropReason> {
    match data.first().map(|b| b >> 4) {
        Some(4) => parse_ipv4(data, offset, cfg),
        Some(6) => parse_ipv6(data, offset, cfg),
        Some(_) => Err(DropReason::BadIpVersion),
        None => Err(DropReason::Ipv4Truncated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_options_walk() {
        // Router alert, NOP, record route (len 7, pointer 4, one empty slot), EOL.
        let o = [0x94, 4, 0, 0, 1, 7, 7, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(ipv4_options_ok(&o));
        let v: Vec<(u8, usize)> = ipv4_options(&o).map(|(t, d)| (t, d.len())).collect();
        assert_eq!(v, vec![(0x94, 2), (7, 5)]);
        assert!(!ipv4_options_ok(&[0x94, 1, 0, 0]));
        assert!(!ipv4_options_ok(&[0x94, 9, 0, 0]));
        assert!(!ipv4_options_ok(&[1, 1, 1, 0x44]));
        assert_eq!(ipv4_options(&[0x94, 9, 0, 0]).count(), 0);
    }

    #[test]
    fn checksum_known_header() {
        // Wikipedia's example header, checksum 0xb861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01,
            0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(ipv4_checksum_ok(&h));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(internet_checksum(&z), 0xb861);
        z[10] = 0xb8;
        z[11] = 0x62;
        assert!(!ipv4_checksum_ok(&z));
    }
}
