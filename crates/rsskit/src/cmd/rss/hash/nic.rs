//! `rsskit hash --iface IF`: which queue and CPU a flow lands on, on this
//! host: the device's key, its input transform (symmetric-xor...), the
//! fields it hashes for the flow type, its indirection table, the queue's
//! IRQ CPU and RPS CPUs.

use crate::cmd::common::{nic, print_json, same_family, Endpoint, Proto};
use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use rsskit_core::flowrule::RuleAction;
use rsskit_core::{FlowTuple, HashType, InputXfrm, L4Proto};
use rsskit_host::landing::{FlowLanding, NicSteering};
use serde_json::json;
use std::io::BufRead;

/// The NIC's state, read once, with its hash function checked.
fn toeplitz_nic(iface: &str) -> Result<NicSteering> {
    let n = nic(iface)?;
    if !n.hfunc.is_empty() && !n.hfunc.iter().any(|h| h == "toeplitz") {
        bail!("{iface} hashes with {} (not Toeplitz): rsskit cannot compute its hash", n.hfunc.join(","));
    }
    Ok(n)
}

pub fn run(iface: &str, src: Endpoint, dst: Endpoint, proto: Option<Proto>, as_json: bool) -> Result<()> {
    let n = toeplitz_nic(iface)?;
    land(&n, iface, src, dst, proto, as_json, false).map(|_| ())
}

/// `--flows FILE`: one flow per line (`SRC DST [tcp|udp]`, as --src, --dst,
/// --proto; `#` starts a comment), the NIC read once; one answer per flow,
/// a JSON object per line with `--json`. A bad line stops with its number.
pub fn run_flows(iface: &str, path: &str, as_json: bool) -> Result<()> {
    let n = toeplitz_nic(iface)?;
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("--flows {path}"))?,
        ))
    };
    let mut unknown = 0u64;
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("--flows {path}: reading line {}", i + 1))?;
        let words: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let flow = || -> Result<(Endpoint, Endpoint, Option<Proto>)> {
            if !(2..=3).contains(&words.len()) {
                bail!("expected SRC DST [tcp|udp], got {} words", words.len());
            }
            let src: Endpoint = words[0].parse().map_err(|e| anyhow!("source {}: {e}", words[0]))?;
            let dst: Endpoint = words[1].parse().map_err(|e| anyhow!("destination {}: {e}", words[1]))?;
            let proto = match words.get(2) {
                Some(p) => {
                    Some(Proto::from_str(p, true).map_err(|_| anyhow!("protocol {p}: say tcp or udp"))?)
                }
                None => None,
            };
            same_family(src.addr, dst.addr)?;
            Ok((src, dst, proto))
        };
        let (src, dst, proto) = flow().with_context(|| format!("--flows {path}: line {}", i + 1))?;
        let known = land(&n, iface, src, dst, proto, as_json, true)
            .with_context(|| format!("--flows {path}: line {}", i + 1))?;
        unknown += u64::from(!known);
    }
    if unknown > 0 {
        bail!("{unknown} flow(s) of --flows {path}: rsskit cannot tell where they land (see each line)");
    }
    Ok(())
}

/// Prints where one flow lands on `n` (`one_line`: JSON on one line).
/// `Ok(false)`: a `one_line` flow whose landing rsskit cannot know (printed as such).
fn land(
    n: &NicSteering,
    iface: &str,
    src: Endpoint,
    dst: Endpoint,
    proto: Option<Proto>,
    as_json: bool,
    one_line: bool,
) -> Result<bool> {
    let v6 = src.addr.is_ipv6();
    let mut note = None;
    let (hash_type, tuple) = match (src.port, dst.port, proto) {
        (Some(sp), Some(dp), Some(p)) => {
            let flow = match (p, v6) {
                (Proto::Tcp, false) => "tcp4",
                (Proto::Udp, false) => "udp4",
                (Proto::Tcp, true) => "tcp6",
                (Proto::Udp, true) => "udp6",
            };
            let four = match (p, v6) {
                (Proto::Tcp, false) => HashType::TcpIpv4,
                (Proto::Udp, false) => HashType::UdpIpv4,
                (Proto::Tcp, true) => HashType::TcpIpv6,
                (Proto::Udp, true) => HashType::UdpIpv6,
            };
            let two = if v6 { HashType::Ipv6 } else { HashType::Ipv4 };
            let ht = match n.tuple(flow) {
                Some("4-tuple") => four,
                Some("2-tuple") => two,
                Some(other) => bail!(
                    "{iface} hashes {flow} on fields rsskit does not model ({other}): see `rsskit info --iface {iface}`"
                ),
                None => {
                    note = Some(format!("{iface} does not report the fields it hashes for {flow}: assumed 4-tuple"));
                    four
                }
            };
            (ht, FlowTuple::new(src.addr, sp, dst.addr, dp, L4Proto::from(p)))
        }
        (None, None, _) => (
            if v6 { HashType::Ipv6 } else { HashType::Ipv4 },
            FlowTuple::new(src.addr, 0, dst.addr, 0, L4Proto::Other(0)),
        ),
        (Some(_), Some(_), None) => bail!("ports given without --proto: say --proto tcp or --proto udp"),
        _ => bail!("give a port on both --src and --dst, or on neither"),
    };
    let input = tuple.input(hash_type).map_err(|e| anyhow!("{e}"))?;
    if n.napi_threaded {
        let t = format!(
            "threaded NAPI is on for {iface}: a napi/{iface}-N kernel thread polls the queue wherever it \
             runs, maybe not on the IRQ's CPU (rsskit check)"
        );
        note = Some(note.map_or(t.clone(), |n| format!("{n}; {t}")));
    }
    let fl = n.land_flow(&tuple, &input).map_err(|e| anyhow!("{iface}'s key: {e}"))?;
    let ep = |e: &Endpoint| match (e.addr, e.port) {
        (a, Some(p)) => std::net::SocketAddr::new(a, p).to_string(),
        (a, None) => a.to_string(),
    };
    let (src_s, dst_s) = (ep(&src), ep(&dst));
    // What the rules did, and the landing when there is one.
    let (route, rule, context, hash, l, table_size) = match &fl {
        FlowLanding::Table { hash, landing } => {
            ("table", None, None, Some(*hash), Some(landing), n.table.len())
        }
        FlowLanding::RuleQueue { rule, landing } => ("rule-queue", Some(rule), None, None, Some(landing), 0),
        FlowLanding::RuleContext { rule, context, hash, landing } => {
            let size = n.rules.contexts.get(context).map_or(n.table.len(), |c| c.table.len());
            ("rule-context", Some(rule), Some(*context), Some(*hash), Some(landing), size)
        }
        FlowLanding::RuleNoQueue { rule } => ("rule-no-queue", Some(rule), None, None, None, 0),
        FlowLanding::Unknown { reason } => {
            if !one_line {
                bail!("{iface}: cannot tell where {src_s} -> {dst_s} lands: {reason}");
            }
            if as_json {
                println!(
                    "{}",
                    json!({"iface": iface, "src": src_s, "dst": dst_s, "route": "unknown", "reason": reason})
                );
            } else {
                println!("{iface} {src_s} -> {dst_s}: unknown ({reason})");
            }
            return Ok(false);
        }
    };
    let opt = |v: Option<usize>| v.map_or("unknown".to_string(), |c| c.to_string());
    // "rule 3 -> context 1 -> queue 9 -> IRQ 57 -> CPU 9"
    let mut path = Vec::new();
    if let Some(r) = rule {
        path.push(format!("rule {}", r.location));
    }
    if let Some(c) = context {
        path.push(format!("context {c}"));
    }
    match l {
        Some(l) => {
            path.push(format!("queue {}", l.queue));
            if let Some(i) = l.irq {
                path.push(format!("IRQ {i}"));
            }
            path.push(format!("CPU {}", opt(l.cpu)));
        }
        None => path.push(rule.map_or(String::new(), |r| r.action.to_string())),
    }
    let path = path.join(" -> ");
    let key_hex: String = n.key.iter().map(|b| format!("{b:02x}")).collect();
    let v = json!({
            "iface": iface,
            "driver": n.driver,
            "route": route,
            "path": path,
            "rule": rule.map(|r| json!({"location": r.location, "rule": r.to_string(), "action": r.action.to_string()})),
            "context": context,
            "hash": hash,
            "hash_hex": hash.map(|h| format!("0x{h:08x}")),
            "hash_type": hash_type.name(),
            "input_xfrm": n.xfrm.name(),
            "table_index": hash.and(l.map(|l| l.index)),
            "table_size": table_size,
            "queue": l.map(|l| l.queue),
            "irq": l.and_then(|l| l.irq),
            "irq_cpu": l.and_then(|l| l.irq_cpu),
            "rps_cpu": l.and_then(|l| l.rps_cpu),
            "cpu": l.and_then(|l| l.cpu),
            "key": key_hex,
            "note": note,
    });
    if as_json && one_line {
        println!("{v}");
        return Ok(true);
    }
    if as_json {
        print_json(&v)?;
        return Ok(true);
    }
    if one_line {
        match (hash, l) {
            (Some(hash), Some(l)) if rule.is_none() => println!(
                "{iface} {src_s} -> {dst_s}: hash 0x{hash:08x} ({hash_type}) entry {} queue {} cpu {}",
                l.index,
                l.queue,
                opt(l.cpu)
            ),
            _ => println!("{iface} {src_s} -> {dst_s}: {path}"),
        }
        return Ok(true);
    }
    if let Some(r) = rule {
        println!("rule    {} ({r}): {}", r.location, r.action);
    }
    let Some(l) = l else {
        println!("queue   none: the flow reaches no queue of {iface}");
        return Ok(true);
    };
    if let Some(hash) = hash {
        let whose = match context {
            Some(0) | None => format!("{iface}'s key"),
            Some(c) => format!("context {c}'s key"),
        };
        let xfrm = context.and_then(|c| n.rules.contexts.get(&c)).map_or(n.xfrm, |c| c.xfrm);
        match xfrm {
            InputXfrm::None => println!("hash    0x{hash:08x} ({hash_type}, {whose})"),
            x => println!(
                "hash    0x{hash:08x} ({hash_type}, {whose}, input {x}: the reverse flow lands alike)"
            ),
        }
        match (rule.map(|r| r.action), context) {
            (Some(RuleAction::Context { offset, .. }), Some(c)) if offset != 0 => println!(
                "entry   {} of {table_size} (context {c}) -> queue {} + offset {offset} = queue {}",
                l.index,
                l.queue.wrapping_sub(offset),
                l.queue
            ),
            (_, Some(c)) => {
                println!("entry   {} of {table_size} (context {c}) -> queue {}", l.index, l.queue)
            }
            _ => println!("entry   {} of {table_size} -> queue {}", l.index, l.queue),
        }
    } else {
        println!("queue   {} (the rule's)", l.queue);
    }
    println!("irq     {} on CPU {}", l.irq.map_or("none".to_string(), |i| i.to_string()), opt(l.irq_cpu));
    if let Some(c) = l.rps_cpu {
        println!("rps     CPU {c} (the queue's rps_cpus; RFS may move it to the socket's CPU)");
    }
    println!("cpu     {}", opt(l.cpu));
    println!("path    {path}");
    if let Some(n) = note {
        println!("note    {n}");
    }
    Ok(true)
}
