//! The Internet checksum (RFC 1071), its incremental update (RFC 1624) and
//! the TCP/UDP pseudo-header sums: shared by parsing, `craft`, reassembly
//! and the firewall's rewrite.

/// One's-complement sum of 16-bit big-endian words (odd byte padded), 32
/// bits at a time into a 64-bit accumulator (folded later).
#[inline]
pub(crate) fn ones_sum(data: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        sum += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 2 {
        sum += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let [b] = rest {
        sum += u64::from(*b) << 8;
    }
    sum
}

#[inline]
pub(crate) fn fold(sum: u64) -> u16 {
    // The sum of a 64 KiB packet fits in 46 bits: 64 -> 33 -> 18 -> 17 -> 16.
    let s = (sum & 0xffff_ffff) + (sum >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// Internet checksum of `data` (with the checksum field zeroed, this is the
/// value to store; over a header with a correct checksum it is 0).
#[inline]
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(ones_sum(data))
}

/// Incremental checksum update (RFC 1624, eqn. 3) replacing the 16-bit
/// words of `old` by those of `new` (equal, even lengths).
pub fn replace(sum: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut acc: u32 = u32::from(!sum);
    for c in old.chunks_exact(2) {
        acc += u32::from(!u16::from_be_bytes([c[0], c[1]]));
    }
    for c in new.chunks_exact(2) {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Unfolded sum of the TCP/UDP pseudo-header: addresses (4 or 16 bytes
/// each), protocol and upper-layer length (RFC 768, RFC 8200 8.1). The
/// IPv4 and IPv6 layouts sum alike: zero bytes add nothing.
pub fn pseudo_header_sum(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u64 {
    ones_sum(src) + ones_sum(dst) + u64::from(proto) + u64::from(l4_len >> 16) + u64::from(l4_len & 0xffff)
}

/// The TCP/UDP checksum over a pseudo-header and `l4` (the transport header
/// with its checksum field as it is): 0 when a stored checksum verifies, the
/// value to store when the field is zeroed.
pub fn l4_checksum(src: &[u8], dst: &[u8], proto: u8, l4: &[u8]) -> u16 {
    !fold(pseudo_header_sum(src, dst, proto, l4.len() as u32) + ones_sum(l4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_matches_recompute() {
        let mut h = [0x45u8, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let c = internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let c2 = replace(c, &h[16..20], &[192, 168, 7, 9]);
        h[16..20].copy_from_slice(&[192, 168, 7, 9]);
        h[10..12].copy_from_slice(&c2.to_be_bytes());
        assert_eq!(internet_checksum(&h), 0);
    }

    #[test]
    fn pseudo_header_sum_equals_the_spelled_out_header() {
        let (s, d, l4) = ([10u8, 0, 0, 1], [10u8, 0, 0, 2], [0x12u8, 0x34, 0, 53, 0, 9, 0, 0, 7]);
        let mut ph = Vec::new();
        ph.extend_from_slice(&s);
        ph.extend_from_slice(&d);
        ph.extend_from_slice(&[0, 17, 0, 9]);
        ph.extend_from_slice(&l4);
        assert_eq!(l4_checksum(&s, &d, 17, &l4), internet_checksum(&ph));
        let (s6, d6) = ([1u8; 16], [2u8; 16]);
        let mut ph = Vec::new();
        ph.extend_from_slice(&s6);
        ph.extend_from_slice(&d6);
        ph.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 17]);
        ph.extend_from_slice(&l4);
        assert_eq!(l4_checksum(&s6, &d6, 17, &l4), internet_checksum(&ph));
    }
}
