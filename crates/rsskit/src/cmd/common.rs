//! Argument types shared by several subcommands: keys, endpoints, protocols,
//! CPU counts, JSON output.

use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::RssKey;
use std::net::{IpAddr, SocketAddr};

/// `--key default|microsoft|symmetric|random|HEX`. `random`: a fresh key from
/// the OS random source that passed `rsskit_core::keycheck`.
pub fn parse_key(s: &str) -> Result<RssKey> {
    match s {
        "default" | "microsoft" => Ok(RssKey::microsoft()),
        "symmetric" => Ok(RssKey::symmetric()),
        "random" => RssKey::random().map_err(|e| anyhow!("--key random: {e}")),
        hex => RssKey::from_hex(hex).map_err(|e| anyhow!("--key: {e}")),
    }
}

/// Clap value parser for `--key`.
pub fn key_arg(s: &str) -> Result<RssKey, String> {
    parse_key(s).map_err(|e| format!("{e:#}"))
}

/// `ADDR` or `ADDR:PORT` (`[V6]:PORT` for IPv6 with a port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: Option<u16>,
}

impl std::str::FromStr for Endpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(addr) = s.parse::<IpAddr>() {
            return Ok(Endpoint { addr, port: None });
        }
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Ok(Endpoint { addr: sa.ip(), port: Some(sa.port()) });
        }
        Err(format!("'{s}' is not an address: expected ADDR, ADDR:PORT or [IPV6]:PORT with PORT 0-65535"))
    }
}

/// Transport protocol on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Proto {
    Tcp,
    Udp,
}

impl From<Proto> for rsskit_core::L4Proto {
    fn from(p: Proto) -> Self {
        match p {
            Proto::Tcp => rsskit_core::L4Proto::Tcp,
            Proto::Udp => rsskit_core::L4Proto::Udp,
        }
    }
}

/// Online CPU count of this machine.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A positive count (CPUs, rings...).
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// Prints one JSON object on stdout.
pub fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v).context("encoding JSON")?);
    Ok(())
}

/// Checks that both ends are of one address family.
pub fn same_family(a: IpAddr, b: IpAddr) -> Result<()> {
    if a.is_ipv4() != b.is_ipv4() {
        bail!("--src {a} and --dst {b} are of different address families");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e: Endpoint = "1.2.3.4:80".parse().unwrap();
        assert_eq!(e.port, Some(80));
        let e: Endpoint = "::1".parse().unwrap();
        assert_eq!(e.port, None);
        let e: Endpoint = "[::1]:9".parse().unwrap();
        assert_eq!(e.port, Some(9));
        assert!("1.2.3.4:99999".parse::<Endpoint>().is_err());
        assert!("300.1.1.1".parse::<Endpoint>().is_err());
    }
}
