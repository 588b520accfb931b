//! Adrian Chadd's packet classification experiment on this machine (IPv4 source/destination lookups in a large
//! hash table; batch x prefetch; per-worker tables, one shared table read
//! without a lock, and one behind a read-write lock; 1 and 2 workers),
//! printed as a matrix in Mpps.
//!
//! A benchmark, not a feature: it lives here as an example of the crate it
//! measures (the frame pool and netisr's prefetch), not in the shipped
//! binary. `cargo build --release -p rsskit-dataplane --example classify`,
//! then `target/release/examples/classify --help`; `bench/all` runs it.

mod experiment;

use clap::Parser;
use experiment::{run_matrix, Cell, ClassifyParams, TableMode, BUCKET_KEYS};
use rsskit_core::netparse::int_in;
use rsskit_dataplane::netisr::Prefetch;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(
    name = "classify",
    about = "Packet classification matrix: batch x prefetch x table mode x workers",
    after_help = "Each packet's IPv4 source and destination are looked up in an open-addressing table \
of 64-byte buckets (16 addresses each). Table modes: per-worker (a copy per worker, no lock), shared (one \
table, no lock), rwlock (one table, read lock per packet). Rows: table mode x workers x batch; columns: prefetch. Each figure \
is the median of ROUNDS runs of PACKETS packets per worker. 'total' is all workers together, 'per worker' \
each worker's own rate."
)]
struct Args {
    /// Addresses in the table (1-60000000; at most 90% of the buckets' room).
    #[arg(long, default_value_t = 6_000_000, value_parser = int_in(1usize, 60_000_000))]
    entries: usize,
    /// Buckets (a power of two; rounded up), 1-4194304 (64 bytes each).
    #[arg(long, default_value_t = 524_288, value_parser = int_in(1usize, 1 << 22))]
    buckets: usize,
    /// Packets per worker per measurement (1-1000000000).
    #[arg(long, default_value_t = 2_000_000, value_parser = int_in(1u64, 1_000_000_000))]
    packets: u64,
    /// Packet buffers per worker (the "RX ring"), 1-65536; --ring x --stride
    /// at most 256 MiB.
    #[arg(long, default_value_t = 8192, value_parser = int_in(1usize, 1 << 16))]
    ring: usize,
    /// Buffer stride in bytes (128-65536).
    #[arg(long, default_value_t = 1920, value_parser = int_in(128usize, 1 << 16))]
    stride: usize,
    /// Rounds per cell, 1-100 (median reported).
    #[arg(long, default_value_t = 3, value_parser = int_in(1u32, 100))]
    rounds: u32,
    /// Batch sizes, comma separated (each 1-256).
    #[arg(long, default_value = "1,2,4,16", value_delimiter = ',', value_parser = int_in(1usize, 256))]
    batch: Vec<usize>,
    /// Worker counts, comma separated (each 1-64).
    #[arg(long, default_value = "1,2", value_delimiter = ',', value_parser = int_in(1usize, 64))]
    workers: Vec<usize>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Fresh random addresses on every pass over the packet ring (default:
    /// each pass repeats the ring's addresses).
    #[arg(long)]
    fresh: bool,
}

/// A clear message and a non-zero exit for bad arguments.
type Result<T> = std::result::Result<T, String>;

macro_rules! bail {
    ($($t:tt)*) => { return Err(format!($($t)*)) };
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v).map_err(|e| format!("encoding JSON: {e}"))?);
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("classify: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<()> {
    if a.entries == 0 || a.buckets == 0 || a.packets == 0 || a.ring == 0 {
        bail!("--entries, --buckets, --packets and --ring must be at least 1");
    }
    let cap = a.buckets.next_power_of_two().saturating_mul(BUCKET_KEYS) * 9 / 10;
    if a.entries > cap {
        bail!(
            "{} entries do not fit in {} buckets of {BUCKET_KEYS} (at most {cap} at 90% load)",
            a.entries,
            a.buckets
        );
    }
    if a.batch.iter().any(|b| !(1..=256).contains(b)) {
        bail!("--batch sizes must be 1..=256");
    }
    if a.workers.iter().any(|w| !(1..=64).contains(w)) {
        bail!("--workers must be 1..=64");
    }
    if a.stride < 128 {
        bail!("--stride must be at least 128");
    }
    if a.ring * a.stride > 256 << 20 {
        bail!("--ring {} x --stride {} is over 256 MiB of buffers per worker", a.ring, a.stride);
    }
    let cpus = rsskit_linux::cpulist::online();
    let p = ClassifyParams {
        entries: a.entries,
        buckets: a.buckets,
        packets: a.packets,
        ring: a.ring,
        stride: a.stride,
        rounds: a.rounds as usize,
        batches: a.batch.clone(),
        prefetches: Prefetch::ALL.to_vec(),
        workers: a.workers.clone(),
        modes: vec![TableMode::PerWorker, TableMode::Shared, TableMode::RwLock],
        cpus,
        seed: 1,
        fresh: a.fresh,
    };
    if !a.json {
        eprintln!(
            "building a table of {} addresses in {} buckets ({:.1} per bucket, {} MiB)...",
            a.entries,
            a.buckets.next_power_of_two(),
            a.entries as f64 / a.buckets.next_power_of_two() as f64,
            (a.buckets.next_power_of_two() * 64) >> 20
        );
    }
    let quiet = a.json;
    let (table, cells) = run_matrix(&p, |c| {
        if !quiet {
            eprintln!(
                "  {:<10} workers={} batch={:<3} prefetch={:<6} {:6.2} Mpps ({:.2} per worker CPU-second)",
                c.mode.name(),
                c.workers,
                c.batch,
                c.prefetch.name(),
                c.mpps,
                c.mpps_per_cpu_second
            );
        }
    });
    if a.json {
        return print_json(&json!({
            "entries": table.len(),
            "buckets": table.buckets(),
            "table_bytes": table.bytes(),
            "packets_per_worker": a.packets,
            "ring": a.ring,
            "stride": a.stride,
            "rounds": a.rounds,
            "cells": cells,
        }));
    }
    println!(
        "classify: {} addresses, {} buckets ({:.1}/bucket, {} MiB), 64-byte UDP packets, stride {}, {} packets/worker, median of {}",
        table.len(),
        table.buckets(),
        table.len() as f64 / table.buckets() as f64,
        table.bytes() >> 20,
        a.stride,
        a.packets,
        a.rounds
    );
    println!("Mpps, wall clock: total over the workers (per worker in brackets)");
    print_matrix(&cells, &a.workers, &a.batch, 15, |c| {
        if c.workers > 1 {
            format!("{:>6.2} ({:>5.2})", c.mpps, c.mpps_per_worker)
        } else {
            format!("{:>15.2}", c.mpps)
        }
    });
    println!();
    println!("Mpps per worker per CPU-second of its thread (insensitive to other load on the machine)");
    print_matrix(&cells, &a.workers, &a.batch, 8, |c| format!("{:>8.2}", c.mpps_per_cpu_second));
    // The target: lock-free >= 2x read-locked at 2 workers, batch 4, bucket prefetch.
    let find = |m: TableMode| find_cell(&cells, m, 2, 4, Prefetch::Bucket);
    for (mode, label) in [(TableMode::Shared, "shared lock-free"), (TableMode::PerWorker, "per-worker")] {
        if let (Some(l), Some(r)) = (find(mode), find(TableMode::RwLock)) {
            println!(
                "2 workers, batch 4, bucket prefetch: {label} {:.2} Mpps vs rwlock {:.2} Mpps = {:.2}x (wall); \
                 {:.2} vs {:.2} Mpps per CPU-second = {:.2}x",
                l.mpps,
                r.mpps,
                l.mpps / r.mpps,
                l.mpps_per_cpu_second,
                r.mpps_per_cpu_second,
                l.mpps_per_cpu_second / r.mpps_per_cpu_second
            );
        }
    }
    Ok(())
}

fn find_cell(
    cells: &[Cell],
    mode: TableMode,
    workers: usize,
    batch: usize,
    prefetch: Prefetch,
) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.mode == mode && c.workers == workers && c.batch == batch && c.prefetch == prefetch)
}

/// One matrix: a row per table mode x workers x batch, a column per
/// prefetch, each cell `width` wide as `fmt` prints it ("-" where none).
fn print_matrix(
    cells: &[Cell],
    workers: &[usize],
    batches: &[usize],
    width: usize,
    fmt: impl Fn(&Cell) -> String,
) {
    print!("{:<11} {:>7} {:>5}", "table", "workers", "batch");
    for pf in Prefetch::ALL {
        print!(" {:>width$}", pf.name());
    }
    println!();
    for mode in [TableMode::PerWorker, TableMode::Shared, TableMode::RwLock] {
        for &w in workers {
            for &b in batches {
                print!("{:<11} {:>7} {:>5}", mode.name(), w, b);
                for pf in Prefetch::ALL {
                    match find_cell(cells, mode, w, b, pf) {
                        Some(c) => print!(" {}", fmt(c)),
                        None => print!(" {:>width$}", "-"),
                    }
                }
                println!();
            }
        }
    }
}
