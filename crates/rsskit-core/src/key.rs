//! RSS keys.
//!
//! A Toeplitz key is a bit string; the hash of an input of `n` bytes uses the
//! first `8n + 32` bits, so a key must be at least `n + 4` bytes long. NICs
//! use 40-byte keys (enough for the 36-byte IPv6 4-tuple); some use 52.

use alloc::vec::Vec;
use core::fmt;

/// The Microsoft RSS specification's default key, used by most NIC drivers
/// and by FreeBSD when no key is configured.
pub const MICROSOFT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0,
    0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42,
    0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Length of the keys rsskit makes by default: 40 bytes, as the Microsoft spec.
pub const DEFAULT_KEY_LEN: usize = 40;

/// Longest input any RSS hash type feeds the hash: the IPv6 4-tuple.
pub const MAX_INPUT_LEN: usize = 36;

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key is shorter than the 36-byte IPv6 4-tuple input needs (40 bytes).
    TooShort {
        /// Length of the key given, in bytes.
        len: usize,
        /// Least length accepted, in bytes.
        min: usize,
    },
    /// An odd number of hex digits.
    OddHexLength(usize),
    /// A character that is not a hex digit (position in the string).
    NotHex {
        /// Position of the character in the string.
        pos: usize,
        /// The character.
        ch: char,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::TooShort { len, min } => {
                write!(f, "RSS key is {len} bytes; at least {min} bytes are needed")
            }
            KeyError::OddHexLength(n) => write!(f, "RSS key has an odd number of hex digits ({n})"),
            KeyError::NotHex { pos, ch } => {
                write!(f, "RSS key is not hex: {ch:?} at position {pos}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for KeyError {}

/// An RSS key, at least [`DEFAULT_KEY_LEN`] bytes long.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RssKey {
    bytes: Vec<u8>,
}

impl RssKey {
    /// The Microsoft default key.
    pub fn microsoft() -> Self {
        RssKey { bytes: MICROSOFT_KEY.to_vec() }
    }

    /// DragonFly's symmetric key: the two bytes `6d 5a` repeated.
    ///
    /// Every 32-bit window of this key starting 16 bits apart is the same, so
    /// swapping source and destination address (16 bytes apart in IPv6, 4 in
    /// IPv4 — both multiples of 16 bits) and ports (2 bytes apart) gives the
    /// same hash: hash(a -> b) == hash(b -> a).
    pub fn symmetric() -> Self {
        let bytes = (0..DEFAULT_KEY_LEN).map(|i| if i % 2 == 0 { 0x6d } else { 0x5a }).collect();
        RssKey { bytes }
    }

    /// A key from raw bytes (at least 40 bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() < DEFAULT_KEY_LEN {
            return Err(KeyError::TooShort { len: bytes.len(), min: DEFAULT_KEY_LEN });
        }
        Ok(RssKey { bytes: bytes.to_vec() })
    }

    /// A key from hex digits; `:` separators (as ethtool prints) are allowed.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let mut digits = Vec::with_capacity(s.len());
        for (pos, ch) in s.trim().char_indices() {
            if ch == ':' {
                continue;
            }
            match ch.to_digit(16) {
                Some(d) => digits.push(d as u8),
                None => return Err(KeyError::NotHex { pos, ch }),
            }
        }
        if digits.len() % 2 != 0 {
            return Err(KeyError::OddHexLength(digits.len()));
        }
        let bytes: Vec<u8> = digits.chunks(2).map(|p| (p[0] << 4) | p[1]).collect();
        Self::from_bytes(&bytes)
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Key length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a key has at least 40 bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The key as lowercase hex, no separators.
    pub fn to_hex(&self) -> alloc::string::String {
        use core::fmt::Write;
        let mut s = alloc::string::String::with_capacity(self.bytes.len() * 2);
        for b in &self.bytes {
            let _ = write!(s, "{b:02x}");
        }
        s
    }
}

/// Most keys [`RssKey::random`] draws before giving up. A key from a working
/// random source fails [`crate::keycheck`] with probability well under 1%.
pub const MAX_KEY_DRAWS: u32 = 64;

/// Why no random key was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomKeyError {
    /// The OS random source failed.
    #[cfg(feature = "std")]
    Rng(getrandom::Error),
    /// Every one of `draws` keys failed the key check: the random source is broken.
    NoGoodKey {
        /// How many keys were drawn and refused.
        draws: u32,
    },
}

impl fmt::Display for RandomKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "std")]
            RandomKeyError::Rng(e) => write!(f, "OS random source failed: {e}"),
            RandomKeyError::NoGoodKey { draws } => {
                write!(f, "none of {draws} random keys passed the key check; is the random source broken?")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RandomKeyError {}

impl RssKey {
    /// A random 40-byte key from the OS random source, drawn again until it
    /// passes [`crate::keycheck::check_default`] (see that module for the
    /// tests), at most [`MAX_KEY_DRAWS`] times.
    #[cfg(feature = "std")]
    pub fn random() -> Result<Self, RandomKeyError> {
        Self::random_from(|b| getrandom::getrandom(b).map_err(RandomKeyError::Rng))
    }

    /// Like [`RssKey::random`] with the bytes from `fill` (a seeded generator
    /// in tests, a hardware source without `std`).
    pub fn random_from(
        mut fill: impl FnMut(&mut [u8]) -> Result<(), RandomKeyError>,
    ) -> Result<Self, RandomKeyError> {
        for _ in 0..MAX_KEY_DRAWS {
            let mut bytes = alloc::vec![0u8; DEFAULT_KEY_LEN];
            fill(&mut bytes)?;
            let key = RssKey { bytes };
            if crate::keycheck::check_default(&key).passed() {
                return Ok(key);
            }
        }
        Err(RandomKeyError::NoGoodKey { draws: MAX_KEY_DRAWS })
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RssKey({})", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let k = RssKey::from_hex(
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa",
        )
        .unwrap();
        assert_eq!(k, RssKey::microsoft());
        assert_eq!(RssKey::from_hex(&k.to_hex()).unwrap(), k);
    }

    #[test]
    fn hex_errors() {
        assert!(matches!(RssKey::from_hex("6d5a"), Err(KeyError::TooShort { len: 2, .. })));
        assert!(matches!(RssKey::from_hex("6d5"), Err(KeyError::OddHexLength(3))));
        assert!(matches!(RssKey::from_hex("zz"), Err(KeyError::NotHex { pos: 0, ch: 'z' })));
    }

    #[test]
    fn random_keys_pass_the_check_and_differ() {
        let a = RssKey::random().unwrap();
        let b = RssKey::random().unwrap();
        assert_eq!(a.len(), DEFAULT_KEY_LEN);
        assert_ne!(a, b);
        assert!(crate::keycheck::check_default(&a).passed());
    }

    #[test]
    fn broken_random_source_is_refused() {
        let r = RssKey::random_from(|b| {
            b.fill(0);
            Ok(())
        });
        assert_eq!(r, Err(RandomKeyError::NoGoodKey { draws: MAX_KEY_DRAWS }));
    }

    #[test]
    fn bad_draws_are_redrawn() {
        // First draw all zeros (fails), then the Microsoft key (passes).
        let mut n = 0;
        let k = RssKey::random_from(|b| {
            if n > 0 {
                b.copy_from_slice(&MICROSOFT_KEY);
            }
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(k, RssKey::microsoft());
        assert_eq!(n, 2);
    }

    #[test]
    fn colon_separated() {
        let s: alloc::vec::Vec<alloc::string::String> =
            MICROSOFT_KEY.iter().map(|b| alloc::format!("{b:02x}")).collect();
        assert_eq!(RssKey::from_hex(&s.join(":")).unwrap(), RssKey::microsoft());
    }
}
