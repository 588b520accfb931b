//! IPv6 header view (RFC 8200) and views of the extension headers the
//! parser walks: generic (hop-by-hop, routing, destination options,
//! mobility, HIP, shim6), fragment, and AH (RFC 4302).

use super::field::{get16, get32, set16, set32, Field};
use super::DropReason;
use core::net::Ipv6Addr;

/// IPv6 fixed-header field ranges.
pub mod field {
    use super::Field;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Field = 0..4;
    /// Payload length (everything after the fixed header).
    pub const PAYLOAD_LEN: Field = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Field = 8..24;
    /// Destination address.
    pub const DST_ADDR: Field = 24..40;
}

/// Fixed header length.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without checks: accessors panic on a short buffer.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// A view of a packet whose fixed header and payload length fit the
    /// buffer, version 6. A payload length of 0 means the fixed header alone
    /// (jumbograms are not supported).
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let d = buffer.as_ref();
        if d.len() < HEADER_LEN {
            return Err(DropReason::Ipv6Truncated);
        }
        if d[field::VER_TC_FLOW.start] >> 4 != 6 {
            return Err(DropReason::BadIpVersion);
        }
        if HEADER_LEN + usize::from(get16(d, field::PAYLOAD_LEN)) > d.len() {
            return Err(DropReason::Ipv6Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW.start] >> 4
    }

    /// Payload length field.
    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Length of the packet: fixed header plus payload length.
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// Next header of the fixed header.
    #[inline(always)]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline(always)]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// Source then destination address as stored: the first 32 bytes of
    /// the Toeplitz input (Microsoft RSS layout).
    #[inline(always)]
    pub fn addrs_raw(&self) -> &'a [u8; 32] {
        let d = &self.buffer.as_ref()[field::SRC_ADDR.start..field::DST_ADDR.end];
        d.try_into().expect("the address fields are 32 bytes")
    }

    /// Everything after the fixed header up to the payload length.
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Everything after the fixed header up to the payload length, to write.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Sets version 6, traffic class 0 and flow label 0.
    pub fn set_version(&mut self) {
        set32(self.buffer.as_mut(), field::VER_TC_FLOW, 6 << 28);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        set16(self.buffer.as_mut(), field::PAYLOAD_LEN, len);
    }

    /// Sets the next header of the fixed header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Replaces the source (`dst == false`) or destination address; returns
    /// the old one's bytes for the transport checksum's update (IPv6 has no
    /// header checksum).
    pub fn rewrite_addr(&mut self, dst: bool, a: Ipv6Addr) -> [u8; 16] {
        let f = if dst { field::DST_ADDR } else { field::SRC_ADDR };
        let d = self.buffer.as_mut();
        let mut old = [0u8; 16];
        old.copy_from_slice(&d[f.clone()]);
        d[f].copy_from_slice(&a.octets());
        old
    }
}

/// Extension header field ranges.
pub mod ext_field {
    use super::Field;
    /// Next header: the first byte of every extension header.
    pub const NEXT_HEADER: usize = 0;
    /// Length: 8-byte units after the first 8 (AH: 4-byte units minus 2).
    pub const LENGTH: usize = 1;
    /// Routing header: routing type.
    pub const ROUTING_TYPE: usize = 2;
    /// Routing header: segments left.
    pub const SEGMENTS_LEFT: usize = 3;
    /// Fragment header: offset (13 bits, in 8-byte units), reserved (2), M (1).
    pub const FRAG_OFFSET_M: Field = 2..4;
    /// Fragment header: identification.
    pub const FRAG_IDENT: Field = 4..8;
}

/// Fragment header length.
pub const FRAG_HEADER_LEN: usize = 8;

/// A view of one extension header. `new_checked` (generic layout),
/// `new_checked_ah` and `new_checked_fragment` check that the header's
/// length fits the buffer; every failure is [`DropReason::Ipv6BadExtHeader`].
#[derive(Debug, Clone, Copy)]
pub struct Ipv6ExtHeader<T> {
    buffer: T,
    len: usize,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// A generic extension header: `(LENGTH + 1) * 8` bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let d = buffer.as_ref();
        let len = match d.get(ext_field::LENGTH) {
            Some(&l) if d.len() >= 8 => (usize::from(l) + 1) * 8,
            _ => return Err(DropReason::Ipv6BadExtHeader),
        };
        Self::fits(buffer, len)
    }

    /// An authentication header: `(LENGTH + 2) * 4` bytes, at least 12
    /// (a zero length is malformed).
    #[inline]
    pub fn new_checked_ah(buffer: T) -> Result<Self, DropReason> {
        let d = buffer.as_ref();
        let len = match d.get(ext_field::LENGTH) {
            Some(&l) if d.len() >= 12 && l != 0 => (usize::from(l) + 2) * 4,
            _ => return Err(DropReason::Ipv6BadExtHeader),
        };
        Self::fits(buffer, len)
    }

    /// A fragment header: 8 bytes.
    #[inline]
    pub fn new_checked_fragment(buffer: T) -> Result<Self, DropReason> {
        Self::fits(buffer, FRAG_HEADER_LEN)
    }

    #[inline(always)]
    fn fits(buffer: T, len: usize) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < len {
            return Err(DropReason::Ipv6BadExtHeader);
        }
        Ok(Ipv6ExtHeader { buffer, len })
    }

    /// The header's length in bytes.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        self.len
    }

    /// Next header.
    #[inline(always)]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[ext_field::NEXT_HEADER]
    }

    /// Routing header: routing type.
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[ext_field::ROUTING_TYPE]
    }

    /// Routing header: segments left.
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[ext_field::SEGMENTS_LEFT]
    }

    /// Fragment header: offset of the data in bytes.
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        get16(self.buffer.as_ref(), ext_field::FRAG_OFFSET_M) & !7
    }

    /// Fragment header: more-fragments flag.
    #[inline(always)]
    pub fn more_frags(&self) -> bool {
        get16(self.buffer.as_ref(), ext_field::FRAG_OFFSET_M) & 1 != 0
    }

    /// Fragment header: identification.
    #[inline(always)]
    pub fn frag_ident(&self) -> u32 {
        get32(self.buffer.as_ref(), ext_field::FRAG_IDENT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6ExtHeader<T> {
    /// Sets the next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[ext_field::NEXT_HEADER] = nh;
    }

    /// Fragment header: sets the offset (bytes, multiple of 8) and M.
    pub fn set_frag_offset_more(&mut self, offset: u16, more: bool) {
        set16(self.buffer.as_mut(), ext_field::FRAG_OFFSET_M, (offset & !7) | u16::from(more));
    }

    /// Fragment header: sets the identification.
    pub fn set_frag_ident(&mut self, id: u32) {
        set32(self.buffer.as_mut(), ext_field::FRAG_IDENT, id);
    }
}
