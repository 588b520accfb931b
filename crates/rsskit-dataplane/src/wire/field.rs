//! Byte ranges of header fields and big-endian reads and writes of them:
//! the one place the views below turn a named field into bytes.

/// A header field: its byte range from the start of the header.
pub type Field = core::ops::Range<usize>;

#[inline(always)]
pub(crate) fn get16(d: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([d[f.start], d[f.start + 1]])
}

#[inline(always)]
pub(crate) fn set16(d: &mut [u8], f: Field, v: u16) {
    d[f].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn get32(d: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([d[f.start], d[f.start + 1], d[f.start + 2], d[f.start + 3]])
}

#[inline(always)]
pub(crate) fn set32(d: &mut [u8], f: Field, v: u32) {
    d[f].copy_from_slice(&v.to_be_bytes());
}
