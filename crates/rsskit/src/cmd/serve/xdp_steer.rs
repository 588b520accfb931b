//! `rsskit xdp-steer`: software RSS in XDP. Attaches rsskit's XDP program
//! to an interface (native mode, generic as the fallback), which hashes
//! every IPv4/IPv6 frame with the configured Toeplitz key and hash types
//! and redirects it through a CPUMAP to the CPU its bucket maps to; prints
//! the per-CPU counters once a second and detaches on exit.

use crate::cmd::common::{cpu_list_arg, int_in, print_json, seconds_arg, stop_on_signals, worker_cpus};
use crate::cmd::common::{KeyCheck, PolicyArgs, Workers};
use anyhow::{anyhow, bail, Result};
use rsskit_core::{CpuId, HashConfig, HashType};
use rsskit_linux::xdp_steer::{self, Counters, ModeRequest, XdpSteer, DEFAULT_QUEUE_SIZE, MAX_QUEUE_SIZE};
use serde_json::json;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "\
Needs root (CAP_BPF and CAP_NET_ADMIN) and a kernel with XDP and CPUMAP (5.9+ for the BPF link that \
detaches the program when rsskit exits in any way, even when killed). veth and most 10G+ drivers \
run it natively; other devices in generic (SKB) mode, which is reported.

Counters: `redirected` = frames sent to that CPU's cpumap queue, `delivered` = frames that CPU's \
cpumap thread handed to the stack there; redirected - delivered = dropped at a full queue (or in \
flight). seen = redirected + passed (non-IP, malformed, no cpumap entry).

--detach removes an rsskit XDP program left attached to IF the netlink way (found by its name, \
rsskit_xdp_cpum); one attached by a running `rsskit xdp-steer` goes when that process exits.

Example:
  rsskit xdp-steer --iface veth0 --cpus 0-3 --hash-types all --duration 60";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
#[command(mut_args(PolicyArgs::key(|a| a.help("RSS key: default (Microsoft), symmetric, random, nic:IF or 40+ bytes of hex"))))]
pub struct Args {
    /// The interface to attach to.
    #[arg(long, value_name = "IF")]
    pub iface: String,
    /// CPUs the buckets are spread over (a list such as 0-3,8; default every online CPU).
    #[arg(long, value_name = "LIST", value_parser = cpu_list_arg)]
    pub cpus: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Hash types: default (ipv4,tcp-ipv4,ipv6,tcp-ipv6), all, or a comma list of
    /// ipv4,tcp-ipv4,udp-ipv4,ipv6,tcp-ipv6,udp-ipv6.
    #[arg(long, value_name = "LIST", default_value = "default", value_parser = hash_types_arg)]
    pub hash_types: HashConfig,
    /// Bucket bits (1-7); default FreeBSD's fls(ncpus-1)+1.
    #[arg(long, value_parser = int_in(1u32, 7))]
    pub bits: Option<u32>,
    /// Frames queued per target CPU before the cpumap drops (1-16384).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_QUEUE_SIZE, value_parser = int_in(1u32, MAX_QUEUE_SIZE))]
    pub queue_size: u32,
    /// XDP mode: auto (native, else generic), native or generic.
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: Mode,
    /// Stop after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S", value_parser = seconds_arg)]
    pub duration: Option<f64>,
    /// Remove an rsskit XDP program left attached to IF, then exit.
    #[arg(long)]
    pub detach: bool,
    /// One JSON object per second, one per line; the last has "final": true.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Mode {
    Auto,
    Native,
    Generic,
}

/// `--hash-types`: `default`, `all`, or a comma list of hash type names.
pub fn hash_types_arg(s: &str) -> Result<HashConfig, String> {
    match s.trim() {
        "default" => return Ok(HashConfig::default()),
        "all" => return Ok(HashConfig::all()),
        _ => {}
    }
    let mut hc = HashConfig::empty();
    for name in s.split(',').map(str::trim) {
        let t = HashType::ALL.into_iter().find(|t| t.name() == name).ok_or_else(|| {
            format!("'{name}' is not a hash type: expected default, all, or a list of ipv4,tcp-ipv4,udp-ipv4,ipv6,tcp-ipv6,udp-ipv6")
        })?;
        hc = hc.with(t);
    }
    Ok(hc)
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    if a.detach {
        return match xdp_steer::detach_left(&a.iface)? {
            Some(d) => {
                if a.json {
                    print_json(
                        &json!({"iface": a.iface, "detached": true, "prog_id": d.prog_id, "mode": d.mode}),
                    )
                } else {
                    println!("detached {} (id {}, {} mode) from {}", d.name, d.prog_id, d.mode, a.iface);
                    Ok(())
                }
            }
            None => {
                if a.json {
                    print_json(&json!({"iface": a.iface, "detached": false}))
                } else {
                    println!("no XDP program attached to {}", a.iface);
                    Ok(())
                }
            }
        };
    }
    let cpus: Vec<CpuId> = worker_cpus(a.cpus.as_deref())?.into_iter().map(|c| CpuId(c as u32)).collect();
    if cpus.is_empty() {
        bail!("--cpus: no online CPU in the list");
    }
    let policy = (a.policy)
        .build(a.hash_types, Workers::On(&cpus), a.bits, None, KeyCheck::Policy, allow_weak_key)
        .map_err(|e| e.policy_as(|e| anyhow!("{e}")))?;
    let mode = match a.mode {
        Mode::Auto => ModeRequest::Auto,
        Mode::Native => ModeRequest::Native,
        Mode::Generic => ModeRequest::Generic,
    };
    let stop = stop_on_signals()?;
    let steer = XdpSteer::attach(&a.iface, &policy, a.queue_size, mode)?;
    let types: Vec<&str> = a.hash_types.types().map(|t| t.name()).collect();
    let cpu_list =
        rsskit_linux::cpulist::format(&steer.cpus().iter().map(|&c| c as usize).collect::<Vec<_>>());
    if a.json {
        println!(
            "{}",
            json!({"attached": a.iface, "mode": steer.mode().name(), "fallback": steer.fallback_reason(),
                   "cpus": steer.cpus(), "buckets": policy.buckets(), "hash_types": types,
                   "queue_size": a.queue_size})
        );
    } else {
        println!(
            "xdp-steer: {} in {} mode{}, {} buckets over CPUs {}, hash types {}, queue {}",
            a.iface,
            steer.mode().name(),
            steer.fallback_reason().map(|r| format!(" ({r})")).unwrap_or_default(),
            policy.buckets(),
            cpu_list,
            types.join(","),
            a.queue_size
        );
    }
    let _ = std::io::stdout().flush();

    let start = Instant::now();
    let end = a.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut prev = steer.counters()?;
    let mut prev_t = start;
    let mut next = start + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e) {
            break;
        }
        if now >= next {
            let c = steer.counters()?;
            report(
                &a,
                &c,
                &prev,
                now.duration_since(prev_t).as_secs_f64(),
                start.elapsed().as_secs_f64(),
                false,
            );
            prev = c;
            prev_t = now;
            next += Duration::from_secs(1);
        }
        let until = end.map_or(next, |e| e.min(next));
        std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
    }
    let c = steer.counters()?;
    steer.detach()?;
    report(
        &a,
        &c,
        &prev,
        Instant::now().duration_since(prev_t).as_secs_f64(),
        start.elapsed().as_secs_f64(),
        true,
    );
    Ok(())
}

/// One sample: totals and per-CPU rates since `prev`.
fn report(a: &Args, c: &Counters, prev: &Counters, dt: f64, t: f64, last: bool) {
    let rate = |now: u64, before: u64| if dt > 0.0 { now.saturating_sub(before) as f64 / dt } else { 0.0 };
    if a.json {
        let cpus: Vec<_> = c
            .cpus
            .iter()
            .zip(&prev.cpus)
            .map(|(n, p)| {
                json!({"cpu": n.cpu, "redirected": n.redirected, "delivered": n.delivered,
                       "redirected_per_s": rate(n.redirected, p.redirected).round()})
            })
            .collect();
        println!(
            "{}",
            json!({"t": (t * 1000.0).round() / 1000.0, "final": last, "iface": a.iface, "cpus": cpus,
                   "seen": c.seen, "redirected": c.redirected(), "delivered": c.delivered(),
                   "not_delivered": c.not_delivered(), "passed_non_ip": c.passed_non_ip,
                   "err_malformed": c.err_malformed, "err_redirect": c.err_redirect,
                   "frag_2tuple": c.frag_2tuple})
        );
    } else {
        println!(
            "{:>7.1}s{} seen {} redirected {} delivered {} passed: non-IP {} malformed {} no-cpumap {}; fragments on 2-tuple {}",
            t,
            if last { " final" } else { "" },
            c.seen,
            c.redirected(),
            c.delivered(),
            c.passed_non_ip,
            c.err_malformed,
            c.err_redirect,
            c.frag_2tuple
        );
        for (n, p) in c.cpus.iter().zip(&prev.cpus) {
            println!(
                "  cpu {:>4}  redirected {:>12} ({:>10.0}/s)  delivered {:>12}",
                n.cpu,
                n.redirected,
                rate(n.redirected, p.redirected),
                n.delivered
            );
        }
    }
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_types_parse() {
        assert_eq!(hash_types_arg("default").unwrap(), HashConfig::default());
        assert_eq!(hash_types_arg("all").unwrap(), HashConfig::all());
        let hc = hash_types_arg("ipv4,udp-ipv4").unwrap();
        assert!(hc.contains(HashType::UdpIpv4) && hc.contains(HashType::Ipv4));
        assert!(!hc.contains(HashType::TcpIpv4));
        assert!(hash_types_arg("ipv4,bogus").unwrap_err().contains("'bogus'"));
    }
}
