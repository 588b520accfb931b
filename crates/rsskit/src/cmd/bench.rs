//! `rsskit bench ...`: micro-benchmarks.
//!
//! `rsskit bench toeplitz`: ns per Toeplitz hash of the bitwise reference,
//! the fast single-hash path and the batch path, for the IPv4 and IPv6
//! 4-tuples, measured side by side in one run (rounds interleaved, median
//! reported). The inputs come from a seeded splitmix64 generator that
//! `bench/peers/dpdk/thash_bench.c` reproduces, so the DPDK harness hashes exactly
//! the same bytes with the same key.

use crate::cmd::common::{int_in, key_arg, median, print_json, SplitMix};
use anyhow::{bail, Context, Result};
use rsskit_core::{toeplitz::reference, FlowTuple, HashType, L4Proto, RssKey, Toeplitz};
use serde_json::json;
use std::hint::black_box;
use std::time::Instant;

mod firewall;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// ns per Toeplitz hash for each implementation (reference, fast, batch).
    Toeplitz(ToeplitzArgs),
    /// Firewall: short-lived TCP flows, per-worker state tables vs the locked table.
    Firewall(firewall::Args),
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Inputs: COUNT tuples from splitmix64(SEED), bytes taken little-endian from each \
64-bit output in order (bench/peers/dpdk/thash_bench.c uses the same generator). The reference runs \
ITERS/64 hashes per round (it is ~100x slower). Each figure is the median of ROUNDS rounds; the \
rounds of all implementations are interleaved.")]
pub struct ToeplitzArgs {
    /// Hashes per round for the fast and batch paths (1024-1073741824).
    #[arg(long, default_value_t = 1 << 22, value_parser = int_in(1024u64, 1 << 30))]
    iters: u64,
    /// Rounds (1-1000); the median is reported.
    #[arg(long, default_value_t = 7, value_parser = int_in(1u32, 1000))]
    rounds: u32,
    /// Distinct pre-generated inputs cycled through (a power of two, 16-1048576).
    #[arg(long, default_value_t = 1024, value_parser = pow2_count)]
    count: usize,
    /// Seed of the input generator (0-18446744073709551615).
    #[arg(long, default_value_t = 1, value_parser = int_in(0u64, u64::MAX))]
    seed: u64,
    /// RSS key: default (Microsoft), symmetric, random, or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_arg)]
    key: RssKey,
    /// Merge a peer harness's results (JSON of the same shape, e.g. from
    /// bench/peers/dpdk/thash_bench.c); its "check" must match ours.
    #[arg(long, value_name = "FILE")]
    peers: Option<std::path::PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `--count`: a power of two from 16 to 2^20.
fn pow2_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n.is_power_of_two() && (16..=1 << 20).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a power of two from 16 to 1048576")),
    }
}

pub fn run(c: BenchCommand, allow_weak_key: bool) -> Result<()> {
    match c {
        BenchCommand::Toeplitz(a) => toeplitz(a, allow_weak_key),
        BenchCommand::Firewall(a) => firewall::run(a),
    }
}

/// `count` inputs of `N` bytes: the generator's bytes, little-endian, in order.
pub fn gen_inputs<const N: usize>(count: usize, seed: u64) -> Vec<[u8; N]> {
    let mut g = SplitMix(seed);
    let mut pending: Vec<u8> = Vec::new();
    (0..count)
        .map(|_| {
            core::array::from_fn(|_| {
                if pending.is_empty() {
                    pending = g.next_u64().to_le_bytes().into_iter().rev().collect();
                }
                pending.pop().unwrap()
            })
        })
        .collect()
}

/// A result: impl, input, median ns per hash, fastest round's ns per hash.
type Row = (String, String, f64, Option<f64>);

/// One benchmark: a closure running `n` hashes, returning a value to sink.
struct Case<'a> {
    imp: &'static str,
    input: &'static str,
    n: u64,
    run: Box<dyn FnMut(u64) -> u32 + 'a>,
    samples: Vec<f64>,
}

fn single<'a, const N: usize>(
    f: impl Fn(&[u8]) -> u32 + 'a,
    inputs: &'a [[u8; N]],
) -> Box<dyn FnMut(u64) -> u32 + 'a> {
    let mask = inputs.len() - 1;
    Box::new(move |n| {
        let mut acc = 0u32;
        for i in 0..n as usize {
            acc ^= f(black_box(&inputs[i & mask]));
        }
        acc
    })
}

fn batch<'a, const N: usize>(t: &'a Toeplitz, inputs: &'a [[u8; N]]) -> Box<dyn FnMut(u64) -> u32 + 'a> {
    let mut out = vec![0u32; inputs.len()];
    Box::new(move |n| {
        let mut acc = 0u32;
        let mut done = 0u64;
        while done < n {
            t.hash_batch(black_box(inputs), &mut out);
            acc ^= black_box(&out)[done as usize & (inputs.len() - 1)];
            done += inputs.len() as u64;
        }
        acc
    })
}

fn toeplitz(a: ToeplitzArgs, allow_weak_key: bool) -> Result<()> {
    if !a.count.is_power_of_two() || a.count < 16 {
        bail!("--count must be a power of two, at least 16 (got {})", a.count);
    }
    let key = a.key.clone();
    crate::cmd::common::check_key(&key, rsskit_core::keycheck::KeyUse::full(), allow_weak_key)?;
    let kb = key.as_bytes();
    let t = Toeplitz::new(&key);
    let v4 = gen_inputs::<12>(a.count, a.seed);
    let v6 = gen_inputs::<36>(a.count, a.seed);
    // Cross-check before timing: every path agrees on every input.
    let mut o4 = vec![0u32; v4.len()];
    let mut o6 = vec![0u32; v6.len()];
    t.hash_batch(&v4, &mut o4);
    t.hash_batch(&v6, &mut o6);
    for (x, h) in v4.iter().zip(&o4) {
        if reference(kb, x) != *h || t.hash(x) != *h || t.hash_table(x) != *h {
            bail!("implementations disagree on input {x:02x?}");
        }
    }
    for (x, h) in v6.iter().zip(&o6) {
        if reference(kb, x) != *h || t.hash(x) != *h || t.hash_table(x) != *h {
            bail!("implementations disagree on input {x:02x?}");
        }
    }
    // What a peer harness must reproduce to be compared honestly.
    let spec = FlowTuple::new("66.9.149.187".parse()?, 2794, "161.142.100.80".parse()?, 1766, L4Proto::Tcp);
    let spec_hash = t.hash_input(&spec.input(HashType::TcpIpv4)?);
    let check = json!({
        "spec_vector_tcp_ipv4": spec_hash,
        "xor_ipv4-4tuple": o4.iter().fold(0, |a, h| a ^ h),
        "xor_ipv6-4tuple": o6.iter().fold(0, |a, h| a ^ h),
    });
    let peers = match &a.peers {
        Some(path) => Some(read_peers(path, &check)?),
        None => None,
    };
    let ref_n = (a.iters / 64).max(1024);
    let case = |imp, input, n, run| Case { imp, input, n, run, samples: vec![] };
    let mut cases = vec![
        case("reference", "ipv4-4tuple", ref_n, single(|x| reference(kb, x), &v4)),
        case("reference", "ipv6-4tuple", ref_n, single(|x| reference(kb, x), &v6)),
        case("fast", "ipv4-4tuple", a.iters, single(|x| t.hash(x), &v4)),
        case("fast", "ipv6-4tuple", a.iters, single(|x| t.hash(x), &v6)),
        case("fast_scalar", "ipv4-4tuple", a.iters, single(|x| t.hash_table(x), &v4)),
        case("fast_scalar", "ipv6-4tuple", a.iters, single(|x| t.hash_table(x), &v6)),
        case("batch", "ipv4-4tuple", a.iters, batch(&t, &v4)),
        case("batch", "ipv6-4tuple", a.iters, batch(&t, &v6)),
    ];
    // Warm up, then interleave the rounds.
    for c in cases.iter_mut() {
        black_box((c.run)(c.n / 8));
    }
    for _ in 0..a.rounds {
        for c in cases.iter_mut() {
            let t0 = Instant::now();
            black_box((c.run)(c.n));
            let dt = t0.elapsed().as_nanos() as f64;
            // The batch closure rounds up to whole passes over the inputs.
            let n = if c.imp == "batch" { c.n.div_ceil(a.count as u64) * a.count as u64 } else { c.n };
            c.samples.push(dt / n as f64);
        }
    }
    // (impl, input, median, fastest round): the median is the figure; the
    // minimum shows how much a shared machine disturbed the run.
    let mut results: Vec<Row> = cases
        .into_iter()
        .map(|c| {
            let min = c.samples.iter().copied().fold(f64::INFINITY, f64::min);
            (c.imp.to_string(), c.input.to_string(), median(c.samples), Some(min))
        })
        .collect();
    if let Some((peer_results, _)) = &peers {
        results.extend(peer_results.iter().cloned());
    }
    let backend = t.backend().name();
    if a.json {
        let rs: Vec<_> = results
            .iter()
            .map(|(i, inp, ns, min)| json!({"impl": i, "input": inp, "ns_per_hash": ns, "ns_min": min}))
            .collect();
        let mut check = check;
        if let Some((_, pc)) = &peers {
            check["peer"] = pc.clone();
            check["peer_agrees"] = json!(true);
        }
        return print_json(&json!({
            "check": check,
            "batch_backend": backend,
            "fast_backend": t.single_backend().name(),
            "iters": a.iters,
            "rounds": a.rounds,
            "count": a.count,
            "seed": a.seed,
            "key": key.to_hex(),
            "results": rs,
        }));
    }
    println!(
        "Toeplitz hash, ns per hash (median of {} rounds; fast path: {}, batch path: {backend})",
        a.rounds,
        t.single_backend().name()
    );
    println!("{:<16} {:>14} {:>10} {:>14} {:>10}", "impl", "ipv4-4tuple", "vs ref", "ipv6-4tuple", "vs ref");
    let get = |i: &str, inp: &str| results.iter().find(|r| r.0 == i && r.1 == inp).map(|r| r.2);
    let mut imps: Vec<&str> = Vec::new();
    for r in &results {
        if !imps.contains(&r.0.as_str()) {
            imps.push(&r.0);
        }
    }
    let cell = |v: Option<f64>, r: Option<f64>| match (v, r) {
        (Some(v), Some(r)) => format!("{v:>14.3} {:>9.1}x", r / v),
        _ => format!("{:>14} {:>10}", "-", "-"),
    };
    for imp in imps {
        println!(
            "{imp:<16} {} {}",
            cell(get(imp, "ipv4-4tuple"), get("reference", "ipv4-4tuple")),
            cell(get(imp, "ipv6-4tuple"), get("reference", "ipv6-4tuple"))
        );
    }
    if peers.is_some() {
        println!("peer harness check: same spec-vector hash and same hashes of every input");
    }
    Ok(())
}

/// Reads a peer harness's JSON, checks that it hashed the same inputs to the
/// same values, and returns its results and its check object.
fn read_peers(path: &std::path::Path, ours: &serde_json::Value) -> Result<(Vec<Row>, serde_json::Value)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let pc = &v["check"];
    for field in ["spec_vector_tcp_ipv4", "xor_ipv4-4tuple", "xor_ipv6-4tuple"] {
        if pc[field] != ours[field] {
            bail!("peer harness disagrees on {field}: {} vs ours {}", pc[field], ours[field]);
        }
    }
    if pc["dpdk_paths_disagree"].as_u64().unwrap_or(0) != 0 {
        bail!("peer harness: its own implementations disagree ({})", pc["dpdk_paths_disagree"]);
    }
    let mut out = Vec::new();
    for r in v["results"].as_array().context("peer JSON has no \"results\" list")? {
        match (r["impl"].as_str(), r["input"].as_str(), r["ns_per_hash"].as_f64()) {
            (Some(i), Some(inp), Some(ns)) => {
                out.push((i.to_string(), inp.to_string(), ns, r["ns_min"].as_f64()))
            }
            _ => bail!("peer result is not {{impl, input, ns_per_hash}}: {r}"),
        }
    }
    Ok((out, pc.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_splitmix64_le() {
        // splitmix64(seed 1) first output: 0x910a2dec89025cc1.
        let x = gen_inputs::<8>(1, 1);
        assert_eq!(u64::from_le_bytes(x[0]), 0x910a_2dec_8902_5cc1);
        let y = gen_inputs::<12>(2, 1);
        assert_eq!(&y[0][..8], &x[0][..]);
    }
}
