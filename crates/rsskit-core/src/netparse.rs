//! The command line's network arguments, parsed here (sans I/O) so they can
//! be fuzzed: `ADDR/LEN` networks (a bare address is one host) and `A-B`
//! port ranges; and whole numbers in a range ([`int_in`], the parser the
//! CLI and the benchmark examples give clap).

use alloc::format;
use alloc::string::{String, ToString};
use core::fmt;
use core::net::IpAddr;

/// Why a network or port range was refused; the text names what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetParseError {
    /// `addr` (in `input`) is not an IP address.
    NotAnAddress {
        /// The address part as given.
        addr: String,
        /// The whole argument.
        input: String,
    },
    /// The prefix length is not a number up to `max`.
    BadPrefix {
        /// The prefix length as given (after the `/`).
        len: String,
        /// The whole argument.
        input: String,
        /// Largest length allowed: 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// `port` (in `input`) is not 0-65535.
    NotAPort {
        /// The port as given.
        port: String,
        /// The whole argument.
        input: String,
    },
    /// `A-B` with A > B.
    EmptyRange {
        /// The whole argument.
        input: String,
        /// First port of the range (A).
        lo: u16,
        /// Last port of the range (B).
        hi: u16,
    },
}

impl fmt::Display for NetParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetParseError::NotAnAddress { addr, input } => {
                write!(f, "'{addr}' in '{input}' is not an IP address; expected ADDR/LEN")
            }
            NetParseError::BadPrefix { len, input, max } => {
                write!(f, "prefix length '/{len}' in '{input}' is not 0-{max}")
            }
            NetParseError::NotAPort { port, input } => {
                write!(f, "'{port}' in '{input}' is not a port (0-65535); expected A-B")
            }
            NetParseError::EmptyRange { input, lo, hi } => {
                write!(f, "port range '{input}' is empty: {lo} > {hi}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for NetParseError {}

/// `ADDR/LEN` (or a bare address: one host, /32 or /128).
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8), NetParseError> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| NetParseError::NotAnAddress { addr: addr.to_string(), input: s.to_string() })?;
    let max = if addr.is_ipv6() { 128 } else { 32 };
    let len = match len {
        None => max,
        Some(l) => l.parse::<u8>().ok().filter(|&l| l <= max).ok_or_else(|| NetParseError::BadPrefix {
            len: l.to_string(),
            input: s.to_string(),
            max,
        })?,
    };
    Ok((addr, len))
}

/// `A-B` or `A`, ports 0-65535, A <= B.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), NetParseError> {
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map_err(|_| NetParseError::NotAPort { port: p.to_string(), input: s.to_string() })
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let p = port(s)?;
            (p, p)
        }
    };
    if a > b {
        return Err(NetParseError::EmptyRange { input: s.to_string(), lo: a, hi: b });
    }
    Ok((a, b))
}

/// A value parser (for clap): a whole number in `lo..=hi`; the error names
/// the range (also for `-1` and for numbers too large for the type).
pub fn int_in<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: core::str::FromStr + PartialOrd + Copy + fmt::Display + Send + Sync + 'static,
{
    move |s: &str| match s.trim().parse::<T>() {
        Ok(n) if n < lo => Err(format!("must be at least {lo} (range {lo}-{hi})")),
        Ok(n) if n > hi => Err(format!("must be at most {hi} (range {lo}-{hi})")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number in the range {lo}-{hi}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_a_range() {
        let p = int_in(1u16, 100);
        assert_eq!(p(" 42 "), Ok(42));
        assert_eq!(p("0"), Err("must be at least 1 (range 1-100)".to_string()));
        assert_eq!(p("101"), Err("must be at most 100 (range 1-100)".to_string()));
        // Outside the type (negative, too large) or no number: the range is still named.
        for bad in ["-1", "70000", "4x", ""] {
            assert_eq!(p(bad), Err(format!("'{bad}' is not a whole number in the range 1-100")));
        }
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("1024-2048"), Ok((1024, 2048)));
        assert_eq!(parse_port_range("80"), Ok((80, 80)));
        assert!(parse_port_range("2048-1024").unwrap_err().to_string().contains("empty"));
        assert!(parse_port_range("1-70000").is_err());
        assert!(parse_port_range("a-b").is_err());
        assert!(parse_port_range("-1").is_err());
    }

    #[test]
    fn cidrs() {
        assert_eq!(parse_cidr("10.0.0.0/8"), Ok(("10.0.0.0".parse().unwrap(), 8)));
        assert_eq!(parse_cidr("::1"), Ok(("::1".parse().unwrap(), 128)));
        assert!(parse_cidr("10.0.0.0/33").unwrap_err().to_string().contains("0-32"));
        assert!(parse_cidr("::/129").unwrap_err().to_string().contains("0-128"));
        assert!(parse_cidr("10.0.0/8").is_err());
    }
}
