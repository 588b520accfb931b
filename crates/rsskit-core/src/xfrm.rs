//! RSS input transforms (`input_xfrm`, kernel 6.8+): what a NIC does to the
//! tuple's fields before the Toeplitz hash so that both directions of a
//! flow hash alike.
//!
//! Sources: `include/uapi/linux/ethtool.h` (`RXH_XFRM_SYM_XOR` = bit 0,
//! `RXH_XFRM_SYM_OR_XOR` = bit 1, `RXH_XFRM_NO_CHANGE` = 0xff, a set request
//! only) and `Documentation/networking/scaling.rst`, which gives the fields
//! in input order:
//! - symmetric-xor: `(SRC_IP ^ DST_IP, SRC_IP ^ DST_IP, SRC_PORT ^ DST_PORT, SRC_PORT ^ DST_PORT)`;
//! - symmetric-or-xor: `(SRC_IP | DST_IP, SRC_IP ^ DST_IP, SRC_PORT | DST_PORT, SRC_PORT ^ DST_PORT)`.
//!
//! ice reports `RXH_XFRM_SYM_XOR` (`ice_get_rxfh`), mlx5 `RXH_XFRM_SYM_OR_XOR`
//! (`mlx5e_get_rxfh`, kernel 6.15). The kernel only accepts a transform when
//! every flow type hashes source and destination fields in pairs
//! (`ethtool_rxfh_config_is_sym`), which the 2- and 4-tuple inputs here are.

use crate::hashtype::HashInput;
use core::fmt;

/// `RXH_XFRM_SYM_XOR`.
pub const RXH_XFRM_SYM_XOR: u8 = 1 << 0;
/// `RXH_XFRM_SYM_OR_XOR`.
pub const RXH_XFRM_SYM_OR_XOR: u8 = 1 << 1;

/// The input transform a NIC applies before hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InputXfrm {
    /// The fields as they are (Microsoft RSS).
    #[default]
    None,
    /// `RXH_XFRM_SYM_XOR` (ice, `ethtool -X IF xfrm symmetric-xor`).
    SymXor,
    /// `RXH_XFRM_SYM_OR_XOR` (mlx5).
    SymOrXor,
}

/// An `input_xfrm` value rsskit does not model: a bit it does not know, or
/// both transforms at once (which the kernel never reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownXfrm(pub u8);

impl fmt::Display for UnknownXfrm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "input transform 0x{:02x} is not one rsskit models (0x01 symmetric-xor, 0x02 symmetric-or-xor)",
            self.0
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for UnknownXfrm {}

impl InputXfrm {
    /// The transform of an `input_xfrm` byte as the driver reports it.
    pub fn from_bits(bits: u8) -> Result<InputXfrm, UnknownXfrm> {
        match bits {
            0 => Ok(InputXfrm::None),
            RXH_XFRM_SYM_XOR => Ok(InputXfrm::SymXor),
            RXH_XFRM_SYM_OR_XOR => Ok(InputXfrm::SymOrXor),
            b => Err(UnknownXfrm(b)),
        }
    }

    /// The `input_xfrm` byte.
    pub fn bits(self) -> u8 {
        match self {
            InputXfrm::None => 0,
            InputXfrm::SymXor => RXH_XFRM_SYM_XOR,
            InputXfrm::SymOrXor => RXH_XFRM_SYM_OR_XOR,
        }
    }

    /// The name ethtool gives it (`ethtool -x`): `none`, `symmetric-xor`, `symmetric-or-xor`.
    pub fn name(self) -> &'static str {
        match self {
            InputXfrm::None => "none",
            InputXfrm::SymXor => "symmetric-xor",
            InputXfrm::SymOrXor => "symmetric-or-xor",
        }
    }

    /// Whether a flow and its reverse hash alike.
    pub fn is_symmetric(self) -> bool {
        self != InputXfrm::None
    }

    /// `input` (addresses, then ports if any, in Toeplitz input order) as the
    /// NIC feeds it to the hash after this transform.
    pub fn apply(self, input: &HashInput) -> HashInput {
        let mut out = *input;
        if self == InputXfrm::None {
            return out;
        }
        let b = input.as_bytes();
        // 8 or 12 bytes: IPv4; 32 or 36: IPv6. Ports, if any, are the last 4.
        let addr = if b.len() >= 32 { 16 } else { 4 };
        let ports = b.len() == 2 * addr + 4;
        let buf = out.bytes_mut();
        let pair = |first: usize, width: usize, buf: &mut [u8]| {
            for i in 0..width {
                let (s, d) = (b[first + i], b[first + width + i]);
                buf[first + i] = if self == InputXfrm::SymXor { s ^ d } else { s | d };
                buf[first + width + i] = s ^ d;
            }
        };
        pair(0, addr, buf);
        if ports {
            pair(2 * addr, 2, buf);
        }
        out
    }
}

impl fmt::Display for InputXfrm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn bits_round_trip_and_unknown_refused() {
        for x in [InputXfrm::None, InputXfrm::SymXor, InputXfrm::SymOrXor] {
            assert_eq!(InputXfrm::from_bits(x.bits()), Ok(x));
        }
        assert_eq!(InputXfrm::from_bits(3), Err(UnknownXfrm(3)));
        assert_eq!(InputXfrm::from_bits(0x80), Err(UnknownXfrm(0x80)));
    }

    #[test]
    fn fields_are_combined_in_place() {
        let i =
            HashInput::v4(Ipv4Addr::new(1, 2, 3, 0xf0), Ipv4Addr::new(1, 2, 3, 0x0f), Some((0x0100, 0x0001)));
        assert_eq!(InputXfrm::None.apply(&i).as_bytes(), i.as_bytes());
        assert_eq!(InputXfrm::SymXor.apply(&i).as_bytes(), [0, 0, 0, 0xff, 0, 0, 0, 0xff, 1, 1, 1, 1]);
        assert_eq!(InputXfrm::SymOrXor.apply(&i).as_bytes(), [1, 2, 3, 0xff, 0, 0, 0, 0xff, 1, 1, 1, 1]);
        let two = HashInput::v4(Ipv4Addr::new(8, 0, 0, 1), Ipv4Addr::new(4, 0, 0, 1), None);
        assert_eq!(InputXfrm::SymOrXor.apply(&two).as_bytes(), [12, 0, 0, 1, 12, 0, 0, 0]);
    }
}
