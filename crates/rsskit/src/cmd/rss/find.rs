//! `rsskit find`: source ports or source addresses whose flow to a given
//! destination lands in a chosen bucket or on a chosen CPU, solved over
//! GF(2) (see `rsskit_core::finder`).

use crate::cmd::common::{int_in, same_family, BucketArgs, Endpoint, Proto, MAX_CPUS};
use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::finder::{Found, TupleQuery, Vary};
use rsskit_core::keycheck::KeyUse;
use rsskit_core::ringmap::{PlanSpec, RingmapPlan, HOST_TABLE_LEN};
use rsskit_core::{rss::RssError, HashType, RssPolicy, WorkerId};
use serde_json::json;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("source").required(true).args(["src_ports", "src_net"])),
    group(clap::ArgGroup::new("target").required(true).args(["bucket", "cpu", "ring"])),
    after_help = "With --proto the 4-tuple of that protocol is hashed (UDP too: an explicit request); \
without it the 2-tuple (addresses only), where only --src-net can move the hash.\n\n--bucket and --cpu \
use FreeBSD's buckets (bucket = hash & (2^bits - 1), buckets round-robin over the CPUs); --ring uses \
DragonFly's ringmap for --cpus and --rings (see `rsskit table`): a tuple's bucket is then its \
128-entry redirect table index, hash & 127.\n\nExamples:\n  \
rsskit find --dst 127.0.0.1:9000 --src-ports 1024-65535 --bucket 3 --proto udp --cpus 4\n  \
rsskit find --dst 10.0.0.1:80 --src-net 10.0.1.0/24 --src-port 4000 --cpu 1 --proto tcp --cpus 2"
)]
pub struct Args {
    /// Destination ADDR:PORT ([IPV6]:PORT).
    #[arg(long)]
    dst: Endpoint,
    /// Source port range A-B (or one port); the source address is --src.
    #[arg(long, value_parser = parse_port_range)]
    src_ports: Option<(u16, u16)>,
    /// Source network ADDR/LEN; the source port is --src-port.
    #[arg(long, value_parser = parse_cidr)]
    src_net: Option<(IpAddr, u8)>,
    /// Wanted bucket (hash & (buckets - 1)): 0-127.
    #[arg(long, value_parser = int_in(0u32, 127))]
    bucket: Option<u32>,
    /// Wanted CPU (0-8191): any bucket that CPU owns.
    #[arg(long, value_parser = int_in(0usize, MAX_CPUS - 1))]
    cpu: Option<usize>,
    /// Wanted NIC ring (0-8191): any redirect table entry of that ring (needs --rings).
    #[arg(long, requires = "rings", value_parser = int_in(0usize, MAX_CPUS - 1))]
    ring: Option<usize>,
    /// RX rings of the NIC (1-8192), for --ring (DragonFly ringmap, 128-entry table).
    #[arg(long, value_parser = int_in(1usize, MAX_CPUS), requires = "ring")]
    rings: Option<usize>,
    /// How many tuples to print, 1-1000000 (the lowest ports or addresses).
    #[arg(long, default_value = "8", value_parser = int_in(1usize, MAX_COUNT))]
    count: usize,
    /// Transport protocol: hash its 4-tuple.
    #[arg(long, value_enum)]
    proto: Option<Proto>,
    #[command(flatten)]
    table: BucketArgs,
    /// Fixed source address with --src-ports (default 127.0.0.1, or ::1 for an IPv6 --dst).
    #[arg(long, conflicts_with = "src_net")]
    src: Option<IpAddr>,
    /// Fixed source port (0-65535) with --src-net (needed with --proto).
    #[arg(long, conflicts_with = "src_ports", value_parser = int_in(0u16, u16::MAX))]
    src_port: Option<u16>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Most tuples `--count` asks for (the output is streamed; the finder keeps
/// this many in memory).
const MAX_COUNT: usize = 1_000_000;

/// `A-B` or `A` (see [`rsskit_core::netparse`]).
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    rsskit_core::netparse::parse_port_range(s).map_err(|e| e.to_string())
}

/// `ADDR/LEN` or a bare address (see [`rsskit_core::netparse`]).
fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    rsskit_core::netparse::parse_cidr(s).map_err(|e| e.to_string())
}

fn hash_type(v6: bool, proto: Option<Proto>) -> HashType {
    match (v6, proto) {
        (false, None) => HashType::Ipv4,
        (false, Some(Proto::Tcp)) => HashType::TcpIpv4,
        (false, Some(Proto::Udp)) => HashType::UdpIpv4,
        (true, None) => HashType::Ipv6,
        (true, Some(Proto::Tcp)) => HashType::TcpIpv6,
        (true, Some(Proto::Udp)) => HashType::UdpIpv6,
    }
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let Some(dst_port) = a.dst.port else {
        bail!("--dst {} needs a port: ADDR:PORT or [IPV6]:PORT", a.dst.addr)
    };
    let dst = a.dst.addr;
    let ht = hash_type(dst.is_ipv6(), a.proto);
    let ncpus = a.table.ncpus();
    let model = Model::new(&a, ncpus)?;
    let (mask, buckets, target, want) = model.target(&a, ncpus)?;
    // Judged for the hash type of the tuples searched and the buckets asked for.
    crate::cmd::common::check_key(&a.table.key.key, KeyUse::new([ht], mask.count_ones()), allow_weak_key)?;
    if let Some(n) = a.table.key.nic.as_ref().filter(|n| n.xfrm.is_symmetric()) {
        bail!(
            "{} hashes with input transform {}: find solves plain Toeplitz, whose tuples would land \
             elsewhere on it",
            n.iface,
            n.xfrm
        );
    }
    let found: Vec<Found> = match (a.src_ports, a.src_net) {
        (Some((lo, hi)), _) => {
            let src = a.src.unwrap_or(if dst.is_ipv6() {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            });
            same_family(src, dst)?;
            if a.proto.is_none() {
                bail!(
                    "--src-ports needs --proto: without it the 2-tuple (addresses only) is hashed and the \
                     source port changes nothing; use --src-net to vary the address"
                );
            }
            TupleQuery::new(&a.table.key.key, ht, src, 0, dst, dst_port)
                .vary(Vary::SrcPort(lo..=hi))
                .buckets(mask, &buckets)
                .max(a.count)
                .find()
                .map_err(|e| anyhow!("{e} (ports {lo}-{hi}, {ht} hash)"))?
        }
        (None, Some((net, len))) => {
            if net.is_ipv4() != dst.is_ipv4() {
                bail!("--src-net {net}/{len} and --dst {dst} are of different address families");
            }
            let src_port = match (a.src_port, a.proto) {
                (Some(p), _) => p,
                (None, None) => 0,
                (None, Some(_)) => bail!("--src-net with --proto needs --src-port: the 4-tuple hashes it"),
            };
            TupleQuery::new(&a.table.key.key, ht, net, src_port, dst, dst_port)
                .vary(Vary::SrcAddr { prefix_len: len })
                .buckets(mask, &buckets)
                .max(a.count)
                .find()
                .map_err(|e| anyhow!("{e} ({net}/{len}, {ht} hash)"))?
        }
        (None, None) => bail!("give --src-ports or --src-net"),
    };
    // Streamed: one tuple at a time, never the whole answer as JSON values.
    let tuple = |f: &Found| {
        let (bucket, cpu, ring) = model.place(f.hash);
        let mut t = json!({
            "src": SocketAddr::new(f.src, f.src_port).to_string(),
            "hash": f.hash,
            "bucket": bucket,
            "cpu": cpu,
        });
        if let Some(r) = ring {
            t["ring"] = json!(r);
        }
        t
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.json {
        let mut v = json!({
            "dst": SocketAddr::new(dst, dst_port).to_string(),
            "hash_type": ht.name(),
            "cpus": ncpus,
            "target_buckets": buckets,
        });
        for (k, val) in target.into_iter().chain(model.describe()) {
            v[k] = val;
        }
        let serde_json::Value::Object(head) = v else { unreachable!("json! of an object") };
        serde_json::to_writer_pretty(&mut out, &Answer { head, found: &found, tuple: &tuple })
            .context("encoding JSON")?;
        writeln!(out)?;
        return out.flush().context("writing stdout");
    }
    writeln!(out, "{ht} hash to {}; {}; want {want}", SocketAddr::new(dst, dst_port), model.summary(ncpus))?;
    for f in &found {
        let (bucket, cpu, ring) = model.place(f.hash);
        let ring = ring.map(|r| format!("  ring {r}")).unwrap_or_default();
        writeln!(
            out,
            "{:<24} hash 0x{:08x}  bucket {:<3} cpu {cpu}{ring}",
            SocketAddr::new(f.src, f.src_port).to_string(),
            f.hash,
            bucket,
        )?;
    }
    out.flush().context("writing stdout")
}

/// The JSON answer: `head`'s fields and `tuples`, each tuple made and
/// written one at a time (keys in order, as a `serde_json::Value` prints).
struct Answer<'a, F: Fn(&Found) -> serde_json::Value> {
    head: serde_json::Map<String, serde_json::Value>,
    found: &'a [Found],
    tuple: &'a F,
}

impl<F: Fn(&Found) -> serde_json::Value> serde::Serialize for Answer<'_, F> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Tuples<'a, F>(&'a [Found], &'a F);
        impl<F: Fn(&Found) -> serde_json::Value> serde::Serialize for Tuples<'_, F> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().map(self.1))
            }
        }
        let mut m = s.serialize_map(Some(self.head.len() + 1))?;
        let mut pending = true;
        for (k, v) in &self.head {
            if pending && k.as_str() > "tuples" {
                m.serialize_entry("tuples", &Tuples(self.found, self.tuple))?;
                pending = false;
            }
            m.serialize_entry(k, v)?;
        }
        if pending {
            m.serialize_entry("tuples", &Tuples(self.found, self.tuple))?;
        }
        m.end()
    }
}

/// Where a hash lands: FreeBSD's buckets, or a DragonFly ringmap's table.
enum Model {
    /// Worker i on CPU i.
    Buckets(RssPolicy),
    Rings(RingmapPlan),
}

impl Model {
    fn new(a: &Args, ncpus: usize) -> Result<Self> {
        match a.rings {
            Some(rings) => {
                if a.table.bits.is_some() {
                    bail!("--bits is for --bucket/--cpu; --ring uses the 128-entry redirect table");
                }
                let spec = PlanSpec {
                    ncpus,
                    rings,
                    unit: 0,
                    pow2: false,
                    tx_rings: None,
                    table_len: HOST_TABLE_LEN,
                };
                Ok(Model::Rings(RingmapPlan::new(spec).map_err(|e| anyhow!("{e}"))?))
            }
            None => Ok(Model::Buckets(a.table.policy()?)),
        }
    }

    /// Mask, wanted values under it, the target as JSON fields, and in words.
    #[allow(clippy::type_complexity)]
    fn target(
        &self,
        a: &Args,
        ncpus: usize,
    ) -> Result<(u32, Vec<u32>, Vec<(&'static str, serde_json::Value)>, String)> {
        match (self, a.bucket, a.cpu, a.ring) {
            (Model::Buckets(rss), Some(b), _, _) => {
                if b >= rss.buckets() {
                    bail!("--bucket: {}", RssError::NoSuchBucket { bucket: b, buckets: rss.buckets() });
                }
                Ok((rss.mask(), vec![b], vec![("bucket", json!(b))], format!("bucket {b}")))
            }
            (Model::Buckets(rss), None, Some(c), _) => {
                if c >= ncpus {
                    bail!("--cpu {c} does not exist: there are {ncpus} CPUs (0-{})", ncpus - 1);
                }
                let owned = rss.buckets_of(WorkerId(c as u32));
                if owned.is_empty() {
                    bail!("--cpu {c} owns no bucket: {} buckets over {ncpus} CPUs", rss.buckets());
                }
                let want = format!("cpu {c} (buckets {owned:?})");
                Ok((rss.mask(), owned, vec![("cpu", json!(c))], want))
            }
            (Model::Rings(p), _, _, Some(r)) => {
                if r >= p.rx.count() {
                    bail!(
                        "--ring {r} does not exist: {} rings are in use (0-{})",
                        p.rx.count(),
                        p.rx.count() - 1
                    );
                }
                let entries: Vec<u32> =
                    (0..HOST_TABLE_LEN).filter(|&i| p.table[i] == r).map(|i| i as u32).collect();
                let want = format!("ring {r} on cpu {} ({} table entries)", p.rx.cpus()[r], entries.len());
                Ok(((HOST_TABLE_LEN - 1) as u32, entries, vec![("ring", json!(r))], want))
            }
            _ => bail!("give one of --bucket, --cpu, or --ring with --rings"),
        }
    }

    /// (bucket, cpu, ring) of a hash.
    fn place(&self, hash: u32) -> (u32, usize, Option<usize>) {
        match self {
            Model::Buckets(rss) => (rss.bucket(hash), rss.worker_of_hash(hash).index(), None),
            Model::Rings(p) => {
                let entry = hash & (HOST_TABLE_LEN as u32 - 1);
                let ring = p.table[entry as usize];
                (entry, p.rx.cpus()[ring], Some(ring))
            }
        }
    }

    fn describe(&self) -> Vec<(&'static str, serde_json::Value)> {
        match self {
            Model::Buckets(rss) => vec![("bits", json!(rss.bits())), ("buckets", json!(rss.buckets()))],
            Model::Rings(p) => vec![
                ("buckets", json!(HOST_TABLE_LEN)),
                ("rings", json!(p.rx.count())),
                ("ring_cpus", json!(p.rx.cpus())),
            ],
        }
    }

    fn summary(&self, ncpus: usize) -> String {
        match self {
            Model::Buckets(rss) => format!("{} buckets over {ncpus} CPUs", rss.buckets()),
            Model::Rings(p) => format!("{} rings over {ncpus} CPUs, 128-entry table", p.rx.count()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parsers are `rsskit_core::netparse`'s (tested there, case by
    /// case); these wrappers only pass their answers and error text on.
    #[test]
    fn port_ranges_and_cidrs_come_from_netparse() {
        assert_eq!(parse_port_range("1024-2048"), Ok((1024, 2048)));
        assert!(parse_port_range("2048-1024").unwrap_err().contains("empty"));
        assert_eq!(parse_cidr("10.0.0.0/8"), Ok(("10.0.0.0".parse().unwrap(), 8)));
        assert!(parse_cidr("10.0.0.0/33").unwrap_err().contains("0-32"));
    }
}
