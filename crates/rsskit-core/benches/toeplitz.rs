//! Toeplitz paths side by side: `cargo bench -p rsskit-core --bench toeplitz [-- ROUNDS [ITERS] [PATH/INPUT]]`.
//!
//! ns per hash for the IPv4 (12 B) and IPv6 (36 B) 4-tuples of the single
//! hash (`hash`: the CPU's best single backend; `hash_table`: the portable
//! tables) and the batch (`hash_batch`: the CPU's best batch backend;
//! `hash_batch_scalar`: tables). 1024 inputs from splitmix64 (seed 1, the
//! generator of `rsskit bench toeplitz`), the Microsoft key; the rounds of
//! all cases are interleaved; medians and fastest rounds are printed, with
//! the ratios of the scalar paths to the vector ones. No external harness:
//! the figures come from one process, so the ratios are side by side.

use rsskit_core::{RssKey, Toeplitz};
use std::hint::black_box;
use std::time::Instant;

const COUNT: usize = 1024;

fn inputs<const N: usize>(seed: u64) -> Vec<[u8; N]> {
    let mut s = seed;
    let mut pending: Vec<u8> = Vec::new();
    (0..COUNT)
        .map(|_| {
            std::array::from_fn(|_| {
                if pending.is_empty() {
                    s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = s;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    pending = (z ^ (z >> 31)).to_le_bytes().into_iter().rev().collect();
                }
                pending.pop().unwrap()
            })
        })
        .collect()
}

type Run<'a> = Box<dyn FnMut(usize) -> u32 + 'a>;

fn single<'a, const N: usize>(f: impl Fn(&[u8]) -> u32 + 'a, ins: &'a [[u8; N]]) -> Run<'a> {
    Box::new(move |passes| {
        let mut acc = 0;
        for _ in 0..passes {
            for x in ins {
                acc ^= f(black_box(x));
            }
        }
        acc
    })
}

fn batch<'a, const N: usize>(f: impl Fn(&[[u8; N]], &mut [u32]) + 'a, ins: &'a [[u8; N]]) -> Run<'a> {
    let mut out = vec![0u32; ins.len()];
    Box::new(move |passes| {
        let mut acc = 0;
        for p in 0..passes {
            f(black_box(ins), &mut out);
            acc ^= black_box(&out)[p & (COUNT - 1)];
        }
        acc
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are ROUNDS and hashes per round.
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = nums.first().copied().unwrap_or(31).max(1);
    let passes = (nums.get(1).copied().unwrap_or(1 << 20) / COUNT).max(1);
    let key = RssKey::microsoft();
    let t = Toeplitz::new(&key);
    let v4 = inputs::<12>(1);
    let v6 = inputs::<36>(1);
    // Every case must agree before anything is timed.
    for x in &v4 {
        assert_eq!(t.hash(x), t.hash_table(x));
    }
    for x in &v6 {
        assert_eq!(t.hash(x), t.hash_table(x));
    }
    let (mut a, mut b) = (vec![0; COUNT], vec![0; COUNT]);
    t.hash_batch(&v4, &mut a);
    t.hash_batch_scalar(&v4, &mut b);
    assert_eq!(a, b);
    t.hash_batch(&v6, &mut a);
    t.hash_batch_scalar(&v6, &mut b);
    assert_eq!(a, b);

    let mut cases: Vec<(&str, &str, Run, Vec<f64>)> = vec![
        ("hash", "ipv4", single(|x| t.hash(x), &v4), vec![]),
        ("hash_table", "ipv4", single(|x| t.hash_table(x), &v4), vec![]),
        ("hash_batch", "ipv4", batch(|i: &[[u8; 12]], o: &mut [u32]| t.hash_batch(i, o), &v4), vec![]),
        (
            "hash_batch_scalar",
            "ipv4",
            batch(|i: &[[u8; 12]], o: &mut [u32]| t.hash_batch_scalar(i, o), &v4),
            vec![],
        ),
        ("hash", "ipv6", single(|x| t.hash(x), &v6), vec![]),
        ("hash_table", "ipv6", single(|x| t.hash_table(x), &v6), vec![]),
        ("hash_batch", "ipv6", batch(|i: &[[u8; 36]], o: &mut [u32]| t.hash_batch(i, o), &v6), vec![]),
        (
            "hash_batch_scalar",
            "ipv6",
            batch(|i: &[[u8; 36]], o: &mut [u32]| t.hash_batch_scalar(i, o), &v6),
            vec![],
        ),
    ];
    // A `PATH/INPUT` argument (e.g. `hash_batch/ipv4`) runs that case only,
    // for `perf stat` (cycles and instructions per hash do not depend on load).
    if let Some(only) = std::env::args().skip(1).find(|a| a.contains('/')) {
        let c = cases.iter_mut().find(|c| format!("{}/{}", c.0, c.1) == only).expect("no such case");
        let t0 = Instant::now();
        black_box((c.2)(passes * rounds));
        let ns = t0.elapsed().as_nanos() as f64 / (passes * rounds * COUNT) as f64;
        println!("{only}: {} hashes, {ns:.3} ns per hash", passes * rounds * COUNT);
        return;
    }
    for c in cases.iter_mut() {
        black_box((c.2)(passes / 8 + 1));
    }
    for _ in 0..rounds {
        for c in cases.iter_mut() {
            let t0 = Instant::now();
            black_box((c.2)(passes));
            c.3.push(t0.elapsed().as_nanos() as f64 / (passes * COUNT) as f64);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "Toeplitz, ns per hash: median (fastest) of {rounds} rounds of {} hashes; single backend {}, batch backend {}; loadavg {}",
        passes * COUNT,
        t.single_backend().name(),
        t.backend().name(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let res: Vec<(&str, &str, f64, f64)> = cases
        .into_iter()
        .map(|(i, n, _, s)| {
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            (i, n, median(s), min)
        })
        .collect();
    let get = |i: &str, n: &str| res.iter().find(|r| r.0 == i && r.1 == n).map(|r| (r.2, r.3)).unwrap();
    println!("{:<18} {:>18} {:>18} {:>14}", "path", "ipv4-4tuple (12B)", "ipv6-4tuple (36B)", "ipv6/ipv4");
    for imp in ["hash", "hash_table", "hash_batch", "hash_batch_scalar"] {
        let (m4, f4) = get(imp, "ipv4");
        let (m6, f6) = get(imp, "ipv6");
        println!(
            "{imp:<18} {:>18} {:>18} {:>14}",
            format!("{m4:.3} ({f4:.3})"),
            format!("{m6:.3} ({f6:.3})"),
            format!("{:.2}x ({:.2}x)", m6 / m4, f6 / f4)
        );
    }
    for (slow, fast) in [("hash_table", "hash"), ("hash_batch_scalar", "hash_batch")] {
        let r = |n| {
            let (ms, fs) = get(slow, n);
            let (mf, ff) = get(fast, n);
            format!("{:.2}x ({:.2}x)", ms / mf, fs / ff)
        };
        println!("{slow} / {fast}: ipv4 {}, ipv6 {}", r("ipv4"), r("ipv6"));
    }
}
