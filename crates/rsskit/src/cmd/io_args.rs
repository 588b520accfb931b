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
        let mut kinds = vec!["pcap:FILE", "afpacket:IFNAME"];
        if k.gen {
            kinds.push("gen[:SIZE]");
        }
        format!("'{s}' is not an input: use {}", or_list(&kinds))
    };
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(InSpec::Pcap(f.into())),
        Some(("pcapng", f)) if k.pcapng && !f.is_empty() => Ok(InSpec::Pcap(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(InSpec::AfPacket(i.into())),
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
        kinds.extend(["afpacket:IFNAME", "null"]);
        format!("'{s}' is not an output: use {}", or_list(&kinds))
    };
    match s.split_once(':') {
        Some(("pcap", f)) if !f.is_empty() => Ok(OutSpec::Pcap(f.into())),
        Some(("pcapng", f)) if k.pcapng && !f.is_empty() => Ok(OutSpec::PcapNg(f.into())),
        Some(("afpacket", i)) if !i.is_empty() => Ok(OutSpec::AfPacket(i.into())),
        None if s == "null" => Ok(OutSpec::Null),
        _ => Err(usage()),
    }
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
            "'gen' is not an input: use pcap:FILE or afpacket:IFNAME"
        );
        assert_eq!(
            parse_in("eth0", all).unwrap_err(),
            "'eth0' is not an input: use pcap:FILE, afpacket:IFNAME or gen[:SIZE]"
        );
        assert_eq!(parse_in("pcapng:a", all), Ok(InSpec::Pcap("a".into())));
        assert!(parse_in("pcapng:a", fw).is_err());
        assert_eq!(
            parse_out("nul", OutKinds { pcapng: true }).unwrap_err(),
            "'nul' is not an output: use pcap:FILE, pcapng:FILE, afpacket:IFNAME or null"
        );
        assert_eq!(
            parse_out("pcapng:x", OutKinds { pcapng: false }).unwrap_err(),
            "'pcapng:x' is not an output: use pcap:FILE, afpacket:IFNAME or null"
        );
    }
}
