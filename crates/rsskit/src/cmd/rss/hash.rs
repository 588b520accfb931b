//! `rsskit hash`: the Toeplitz hash of one flow, its bucket and its CPU.

use crate::cmd::common::{print_json, same_family, BucketArgs, Endpoint, Proto};
use anyhow::{anyhow, bail, Result};
use rsskit_core::keycheck::KeyUse;
use rsskit_core::{FlowTuple, HashType, L4Proto};
use serde_json::json;

mod nic;

#[derive(clap::Args, Debug)]
#[command(after_help = "Without ports the 2-tuple (addresses) is hashed; with ports and --proto the \
4-tuple (an explicit request, so UDP too).\n\nExample (Microsoft RSS spec vector):\n  rsskit hash \
--src 66.9.149.187:2794 --dst 161.142.100.80:1766 --proto tcp")]
pub struct Args {
    /// Source: ADDR or ADDR:PORT ([IPV6]:PORT).
    #[arg(long, required_unless_present = "flows")]
    src: Option<Endpoint>,
    /// Destination: ADDR or ADDR:PORT ([IPV6]:PORT).
    #[arg(long, required_unless_present = "flows")]
    dst: Option<Endpoint>,
    /// Transport protocol; required with ports.
    #[arg(long, value_enum)]
    proto: Option<Proto>,
    #[command(flatten)]
    table: BucketArgs,
    /// Where the flow lands on this host: interface IF's key, hashed fields,
    /// indirection table, the queue's IRQ CPU and RPS CPUs.
    #[arg(long, value_name = "IF", conflicts_with_all = ["key", "bits", "cpus"])]
    iface: Option<String>,
    /// With --iface: many flows, one per line of FILE (`-`: stdin) as
    /// `SRC DST [tcp|udp]`; one answer per line (with --json, one JSON
    /// object per line).
    #[arg(long, value_name = "FILE", requires = "iface", conflicts_with_all = ["src", "dst", "proto"])]
    flows: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    if let (Some(i), Some(f)) = (&a.iface, &a.flows) {
        return nic::run_flows(i, f, a.json);
    }
    // clap requires both unless --flows, which needs --iface (handled above).
    let (Some(src), Some(dst)) = (a.src, a.dst) else { bail!("give --src and --dst") };
    same_family(src.addr, dst.addr)?;
    if let Some(i) = &a.iface {
        return nic::run(i, src, dst, a.proto, a.json);
    }
    let (hash_type, tuple) = match (src.port, dst.port, a.proto) {
        (Some(sp), Some(dp), Some(p)) => {
            let proto = L4Proto::from(p);
            let t = FlowTuple::new(src.addr, sp, dst.addr, dp, proto);
            let ht = match (t.is_ipv6(), p) {
                (false, Proto::Tcp) => HashType::TcpIpv4,
                (false, Proto::Udp) => HashType::UdpIpv4,
                (true, Proto::Tcp) => HashType::TcpIpv6,
                (true, Proto::Udp) => HashType::UdpIpv6,
            };
            (ht, t)
        }
        (None, None, _) => {
            let t = FlowTuple::new(src.addr, 0, dst.addr, 0, L4Proto::Other(0));
            (HashType::Ipv4, t)
        }
        (Some(_), Some(_), None) => bail!("ports given without --proto: say --proto tcp or --proto udp"),
        _ => bail!("give a port on both --src and --dst, or on neither"),
    };
    let hash_type = if tuple.is_ipv6() && !hash_type.is_ipv6() { HashType::Ipv6 } else { hash_type };
    let ncpus = a.table.ncpus();
    // Worker i on CPU i: FreeBSD's buckets round-robin over the CPUs.
    let rss = a.table.policy()?;
    // Judged for the one hash type this flow uses.
    crate::cmd::common::check_key(rss.key(), KeyUse::new([hash_type], rss.bits()), allow_weak_key)?;
    let input = tuple.input(hash_type).map_err(|e| anyhow!("{e}"))?;
    // Through the policy: `--key nic:IF` brings the NIC's input transform.
    let hash = rss.hash_input(&input);
    let bucket = rss.bucket(hash);
    let cpu = rss.worker_of_hash(hash).index();
    if a.json {
        print_json(&json!({
            "hash": hash,
            "hash_hex": format!("0x{hash:08x}"),
            "hash_type": hash_type.name(),
            "bucket": bucket,
            "buckets": rss.buckets(),
            "cpu": cpu,
            "cpus": ncpus,
            "key": a.table.key.key.to_hex(),
        }))
    } else {
        println!("hash    0x{hash:08x} ({hash_type})");
        println!("bucket  {bucket} of {}", rss.buckets());
        println!("cpu     {cpu} of {ncpus}");
        println!("key     {}", a.table.key.key.to_hex());
        Ok(())
    }
}
