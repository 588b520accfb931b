//! UDP header view (RFC 768).

use super::field::{get16, set16, Field};
use super::DropReason;

/// UDP field ranges.
pub mod field {
    use super::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Length of header and payload.
    pub const LENGTH: Field = 4..6;
    /// Checksum (0 = none, IPv4 only).
    pub const CHECKSUM: Field = 6..8;
}

/// UDP header length.
pub const HEADER_LEN: usize = 8;

/// Source then destination port, as TCP and UDP both store them: the last
/// 4 bytes of the Toeplitz input.
pub const PORTS: Field = field::SRC_PORT.start..field::DST_PORT.end;

/// A view of a UDP datagram.
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// A view without checks: accessors panic on a short buffer.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// A view of a buffer that holds the header. The length field is not
    /// checked here: for a first fragment it covers bytes not present.
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DropReason::L4Truncated);
        }
        Ok(UdpPacket { buffer })
    }

    /// Source port.
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field.
    // The header's length field, not the view's size: no `is_empty`.
    #[allow(clippy::len_without_is_empty)]
    #[inline(always)]
    pub fn len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Checksum as stored.
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// Everything after the header in the buffer.
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, p: u16) {
        set16(self.buffer.as_mut(), field::SRC_PORT, p);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, p: u16) {
        set16(self.buffer.as_mut(), field::DST_PORT, p);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        set16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, sum: u16) {
        set16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }
}
