//! The input and output arguments of the data-plane commands (`pipeline`,
//! `firewall`): one parser each for `--in` and `--out`, told which kinds
//! the command takes, and the error of an input that ended early.

use anyhow::{bail, Result};
pub use rsskit_dataplane::io::spec::{InSpec, OutSpec};

/// The kinds of `--in` a command takes (the data plane's [`InSpec`]
/// variants; the parser refuses the others with the command's own list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InKinds {
    /// `pcapng:FILE` accepted as a synonym of `pcap:FILE`.
    pub pcapng: bool,
    /// `gen[:SIZE]`.
    pub gen: bool,
}

/// The kinds of `--out` a command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutKinds {
    /// `pcapng:FILE`.
    pub pcapng: bool,
}

/// Parses `--in`.
pub fn parse_in(s: &str, k: InKinds) -> Result<InSpec, String> {
    let usage = || {
        let mut kinds = vec!["pcap:FILE", "afpacket:IFNAME", "xdp:IFNAME[:QUEUES]"];
        if k.gen {
            kinds.push("gen[:SIZE]");
        }
        format!("'{s}' is not an input: use {}", or_list(&kinds))
    };
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(InSpec::Pcap(f.into())),
        Some(("pcapng", f)) if k.pcapng && !f.is_empty() => Ok(InSpec::Pcap(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(InSpec::AfPacket(i.into())),
        Some(("xdp", rest)) => parse_xdp_in(rest).map(|(i, q)| InSpec::Xdp(i, q)),
        Some(("gen", n)) if k.gen => match n.parse::<usize>() {
            Ok(n) if (60..=1514).contains(&n) => Ok(InSpec::Gen(n)),
            _ => Err(format!("gen:SIZE needs a frame size 60..=1514, not {n:?}")),
        },
        None if k.gen && s == "gen" => Ok(InSpec::Gen(64)),
        _ => Err(usage()),
    }
}

/// Parses `--out`.
pub fn parse_out(s: &str, k: OutKinds) -> Result<OutSpec, String> {
    let usage = || {
        let mut kinds = vec!["pcap:FILE"];
        if k.pcapng {
            kinds.push("pcapng:FILE");
        }
        kinds.extend(["afpacket:IFNAME", "xdp:IFNAME", "null"]);
        format!("'{s}' is not an output: use {}", or_list(&kinds))
    };
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(OutSpec::Pcap(f.into())),
        Some(("pcapng", f)) if k.pcapng && !f.is_empty() => Ok(OutSpec::PcapNg(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(OutSpec::AfPacket(i.into())),
        Some(("xdp", i)) if !i.is_empty() && !i.contains(':') => Ok(OutSpec::Xdp(i.into())),
        None if s == "null" => Ok(OutSpec::Null),
        _ => Err(usage()),
    }
}

/// Parses the `IFNAME[:QUEUES]` of `xdp:IFNAME[:QUEUES]` (QUEUES a list
/// like `0-3` or `0,2`).
fn parse_xdp_in(s: &str) -> Result<(String, Option<Vec<u32>>), String> {
    let (ifname, queues) = match s.split_once(':') {
        Some((i, q)) => (i, Some(q)),
        None => (s, None),
    };
    if ifname.is_empty() {
        return Err(format!("'xdp:{s}' needs an interface: xdp:IFNAME[:QUEUES]"));
    }
    let queues = queues
        .map(|q| {
            rsskit_linux::cpulist::parse(q)
                .map_err(|e| format!("'xdp:{s}': bad queue list {q:?} (like 0-3 or 0,2): {e}"))?
                .into_iter()
                .map(|x| u32::try_from(x).map_err(|_| format!("'xdp:{s}': queue {x} is out of range")))
                .collect::<Result<Vec<u32>, String>>()
        })
        .transpose()?;
    Ok((ifname.to_string(), queues))
}

/// "a, b or c".
fn or_list(kinds: &[&str]) -> String {
    match kinds {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// An input that ended early (a corrupt capture record) fails the run,
/// after the counters of what was processed were printed.
pub fn input_errors(errors: &[String]) -> Result<()> {
    match errors {
        [] => Ok(()),
        [e] => bail!("{e} (the counters cover the frames before it)"),
        [e, rest @ ..] => {
            bail!("{e} (the counters cover the frames before it; {} more input errors)", rest.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_messages_list_what_the_command_takes() {
        let all = InKinds { pcapng: true, gen: true };
        let fw = InKinds { pcapng: false, gen: false };
        assert_eq!(
            parse_in("gen", fw).unwrap_err(),
            "'gen' is not an input: use pcap:FILE, afpacket:IFNAME or xdp:IFNAME[:QUEUES]"
        );
        assert_eq!(
            parse_in("eth0", all).unwrap_err(),
            "'eth0' is not an input: use pcap:FILE, afpacket:IFNAME, xdp:IFNAME[:QUEUES] or gen[:SIZE]"
        );
        assert_eq!(parse_in("pcapng:a", all), Ok(InSpec::Pcap("a".into())));
        assert!(parse_in("pcapng:a", fw).is_err());
        assert_eq!(
            parse_out("nul", OutKinds { pcapng: true }).unwrap_err(),
            "'nul' is not an output: use pcap:FILE, pcapng:FILE, afpacket:IFNAME, xdp:IFNAME or null"
        );
        assert_eq!(
            parse_out("pcapng:x", OutKinds { pcapng: false }).unwrap_err(),
            "'pcapng:x' is not an output: use pcap:FILE, afpacket:IFNAME, xdp:IFNAME or null"
        );
    }

    #[test]
    fn xdp_specs() {
        let out = OutKinds { pcapng: true };
        for k in [InKinds { pcapng: true, gen: true }, InKinds { pcapng: false, gen: false }] {
            assert_eq!(parse_in("xdp:veth0", k), Ok(InSpec::Xdp("veth0".into(), None)));
            assert_eq!(parse_in("xdp:veth0:1", k), Ok(InSpec::Xdp("veth0".into(), Some(vec![1]))));
            assert_eq!(parse_in("xdp:veth0:0-2", k), Ok(InSpec::Xdp("veth0".into(), Some(vec![0, 1, 2]))));
            assert_eq!(parse_in("xdp:eth0:0,2", k), Ok(InSpec::Xdp("eth0".into(), Some(vec![0, 2]))));
        }
        let k = InKinds { pcapng: true, gen: true };
        assert_eq!(parse_in("xdp:", k).unwrap_err(), "'xdp:' needs an interface: xdp:IFNAME[:QUEUES]");
        assert!(parse_in("xdp::1", k).unwrap_err().contains("needs an interface"));
        let e = parse_in("xdp:veth0:x", k).unwrap_err();
        assert!(e.starts_with("'xdp:veth0:x': bad queue list \"x\" (like 0-3 or 0,2): "), "{e}");
        assert!(parse_in("xdp:eth0:", k).unwrap_err().contains("bad queue list"));
        assert_eq!(parse_out("xdp:veth1", out), Ok(OutSpec::Xdp("veth1".into())));
        assert_eq!(parse_out("xdp:veth1", OutKinds { pcapng: false }), Ok(OutSpec::Xdp("veth1".into())));
        assert!(parse_out("xdp:", out).unwrap_err().contains("is not an output"));
        assert!(parse_out("xdp:veth1:0", out).unwrap_err().contains("is not an output"));
    }
}
