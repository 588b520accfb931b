//! IPv4 header view (RFC 791).

use super::checksum;
use super::field::{get16, set16, Field};
use super::DropReason;
use core::net::Ipv4Addr;

/// IPv4 field ranges.
pub mod field {
    use super::Field;
    /// Version (high nibble) and IHL (low nibble, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN.
    pub const TOS: usize = 1;
    /// Total length of the packet.
    pub const TOTAL_LEN: Field = 2..4;
    /// Identification.
    pub const IDENT: Field = 4..6;
    /// Flags (reserved, DF, MF) and fragment offset in 8-byte units.
    pub const FLAGS_FRAG: Field = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Upper-layer protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SRC_ADDR: Field = 12..16;
    /// Destination address.
    pub const DST_ADDR: Field = 16..20;
}

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;
/// Don't-fragment bit of [`field::FLAGS_FRAG`].
pub const FLAG_DF: u16 = 0x4000;
/// More-fragments bit of [`field::FLAGS_FRAG`].
pub const FLAG_MF: u16 = 0x2000;
/// Fragment offset bits of [`field::FLAGS_FRAG`].
pub const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without checks: accessors panic on a short buffer.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// A view of a well-formed header: version 4, IHL >= 5, the header
    /// with its options in the buffer, `header_len <= total_len <= buffer
    /// length`. The checks and their order are those the parser reports.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let d = buffer.as_ref();
        if d.len() < HEADER_LEN {
            return Err(DropReason::Ipv4Truncated);
        }
        if d[field::VER_IHL] >> 4 != 4 {
            return Err(DropReason::BadIpVersion);
        }
        let hl = usize::from(d[field::VER_IHL] & 0xf) * 4;
        if hl < HEADER_LEN {
            return Err(DropReason::Ipv4BadIhl);
        }
        if d.len() < hl {
            return Err(DropReason::Ipv4Truncated);
        }
        let total = usize::from(get16(d, field::TOTAL_LEN));
        if total < hl || total > d.len() {
            return Err(DropReason::Ipv4BadTotalLen);
        }
        Ok(Ipv4Packet { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field.
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0xf) * 4
    }

    /// Total length field.
    #[inline(always)]
    pub fn total_len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::TOTAL_LEN)
    }

    /// Identification.
    #[inline(always)]
    pub fn ident(&self) -> u16 {
        get16(self.buffer.as_ref(), field::IDENT)
    }

    /// The flags and fragment offset word as stored.
    #[inline(always)]
    pub fn flags_frag(&self) -> u16 {
        get16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    /// More-fragments flag.
    #[inline(always)]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    #[inline(always)]
    pub fn frag_offset(&self) -> usize {
        usize::from(self.flags_frag() & FRAG_OFFSET_MASK) * 8
    }

    /// A fragment (first or later): MF set or a non-zero offset.
    #[inline(always)]
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    /// Time to live.
    #[inline(always)]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Upper-layer protocol.
    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as stored.
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv4Addr {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv4Addr::from(a)
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv4Addr::from(a)
    }

    /// Whether the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::internet_checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// Whether the TCP/UDP checksum of the payload verifies over its
    /// pseudo-header.
    pub fn verify_l4_checksum(&self) -> bool {
        let d = self.buffer.as_ref();
        let l4 = &d[self.header_len()..usize::from(self.total_len())];
        checksum::l4_checksum(&d[field::SRC_ADDR], &d[field::DST_ADDR], self.protocol(), l4) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// Source then destination address as stored: the first 8 bytes of the
    /// Toeplitz input (Microsoft RSS layout).
    #[inline(always)]
    pub fn addrs_raw(&self) -> &'a [u8; 8] {
        let d = &self.buffer.as_ref()[field::SRC_ADDR.start..field::DST_ADDR.end];
        d.try_into().expect("the address fields are 8 bytes")
    }

    /// The header with its options.
    #[inline(always)]
    pub fn header(&self) -> &'a [u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The options (empty for IHL 5).
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The upper-layer bytes: from the end of the header to the total length.
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// The upper-layer bytes, to write.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }

    /// Sets version 4 and the header length in bytes (a multiple of 4).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | (header_len / 4) as u8;
    }

    /// Sets DSCP and ECN.
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::TOS] = tos;
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        set16(self.buffer.as_mut(), field::TOTAL_LEN, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, id: u16) {
        set16(self.buffer.as_mut(), field::IDENT, id);
    }

    /// Sets DF, MF and the fragment offset (bytes, a multiple of 8).
    pub fn set_flags_frag(&mut self, df: bool, mf: bool, offset: u16) {
        let w = (if df { FLAG_DF } else { 0 }) | (if mf { FLAG_MF } else { 0 }) | (offset / 8);
        set16(self.buffer.as_mut(), field::FLAGS_FRAG, w);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the upper-layer protocol.
    pub fn set_protocol(&mut self, proto: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = proto;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, sum: u16) {
        set16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::internet_checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// Replaces the source (`dst == false`) or destination address and
    /// updates the header checksum incrementally (RFC 1624). Returns the old
    /// address's bytes, for the transport checksum's update.
    pub fn rewrite_addr(&mut self, dst: bool, a: Ipv4Addr) -> [u8; 4] {
        let f = if dst { field::DST_ADDR } else { field::SRC_ADDR };
        let d = self.buffer.as_mut();
        let mut old = [0u8; 4];
        old.copy_from_slice(&d[f.clone()]);
        d[f].copy_from_slice(&a.octets());
        let s = checksum::replace(get16(d, field::CHECKSUM), &old, &a.octets());
        set16(d, field::CHECKSUM, s);
        old
    }
}
