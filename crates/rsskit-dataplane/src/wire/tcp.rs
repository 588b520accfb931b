//! TCP header view (RFC 9293).

use super::field::{get16, get32, set16, set32, Field};
use super::DropReason;

/// TCP field ranges.
pub mod field {
    use super::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Sequence number.
    pub const SEQ: Field = 4..8;
    /// Acknowledgment number.
    pub const ACK: Field = 8..12;
    /// Data offset (high nibble, in 32-bit words).
    pub const DATA_OFFSET: usize = 12;
    /// Flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10...).
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: Field = 14..16;
    /// Checksum.
    pub const CHECKSUM: Field = 16..18;
    /// Urgent pointer.
    pub const URGENT: Field = 18..20;
}

/// Header length without options.
pub const HEADER_LEN: usize = 20;

/// A view of a TCP segment.
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// A view without checks: accessors panic on a short buffer.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// A view of a buffer that holds the header with its options: shorter
    /// than 20 bytes is [`DropReason::L4Truncated`]; a data offset below 5
    /// or past the buffer is [`DropReason::TcpBadDataOffset`].
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let d = buffer.as_ref();
        if d.len() < HEADER_LEN {
            return Err(DropReason::L4Truncated);
        }
        let hl = usize::from(d[field::DATA_OFFSET] >> 4) * 4;
        if hl < HEADER_LEN || hl > d.len() {
            return Err(DropReason::TcpBadDataOffset);
        }
        Ok(TcpPacket { buffer })
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

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        get32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        get32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset * 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// Flag byte.
    #[inline(always)]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        get16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum as stored.
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// Everything after the header with its options.
    #[inline(always)]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, p: u16) {
        set16(self.buffer.as_mut(), field::SRC_PORT, p);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, p: u16) {
        set16(self.buffer.as_mut(), field::DST_PORT, p);
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        set32(self.buffer.as_mut(), field::SEQ, v);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack(&mut self, v: u32) {
        set32(self.buffer.as_mut(), field::ACK, v);
    }

    /// Sets the header length in bytes (a multiple of 4), reserved bits 0.
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((len / 4) as u8) << 4;
    }

    /// Sets the flag byte.
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Sets the window.
    pub fn set_window(&mut self, w: u16) {
        set16(self.buffer.as_mut(), field::WINDOW, w);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, sum: u16) {
        set16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, u: u16) {
        set16(self.buffer.as_mut(), field::URGENT, u);
    }
}
