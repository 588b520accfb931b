//! `rsskit table`: DragonFly's ringmap for a NIC: the grid, ring -> CPU
//! binding, the redirect table, and its mismatches beside the plain
//! replicated table's.

use crate::cmd::common::{int_in, print_json, MAX_CPUS};
use anyhow::{anyhow, Result};
use rsskit_core::ringmap::{is_mismatch, PlanSpec, RingmapPlan, HOST_TABLE_LEN};
use serde_json::json;

#[derive(clap::Args, Debug)]
#[command(after_help = "A mismatch is a table entry whose ring is bound to another CPU than the host \
picks for that hash, (hash & 127) % CPUS: each costs an IPI.\n\nExample (the DragonFly paper's \
Figure 4):\n  rsskit table --cpus 24 --rings 16")]
pub struct Args {
    /// CPUs the host spreads flows over (1-8192).
    #[arg(long, value_parser = int_in(1usize, MAX_CPUS))]
    cpus: usize,
    /// RX rings of the NIC, 1-8192 (capped at the CPU count).
    #[arg(long, value_parser = int_in(1usize, MAX_CPUS))]
    rings: usize,
    /// Device unit: NIC number (0-65535); each unit starts on its own CPU set.
    #[arg(long, default_value_t = 0, value_parser = int_in(0usize, 65535))]
    unit: usize,
    /// The NIC needs a power-of-two ring count (if_ringmap_alloc2).
    #[arg(long)]
    pow2: bool,
    /// Separate TX ring count (1-8192), spread to match the RX rings (if_ringmap_match).
    #[arg(long, value_parser = int_in(1usize, MAX_CPUS))]
    tx_rings: Option<usize>,
    /// Redirect table entries: a multiple of 128, at most 65536.
    #[arg(long, default_value_t = HOST_TABLE_LEN, value_parser = table_size)]
    size: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Most redirect table entries `--size` takes (real NICs have 64-2048).
const MAX_TABLE: usize = 1 << 16;

/// `--size`: a multiple of 128 from 128 to [`MAX_TABLE`].
fn table_size(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n % HOST_TABLE_LEN == 0 && (HOST_TABLE_LEN..=MAX_TABLE).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a multiple of {HOST_TABLE_LEN} from {HOST_TABLE_LEN} to {MAX_TABLE}")),
    }
}

pub fn run(a: Args) -> Result<()> {
    let spec = PlanSpec {
        ncpus: a.cpus,
        rings: a.rings,
        unit: a.unit,
        pow2: a.pow2,
        tx_rings: a.tx_rings,
        table_len: a.size,
    };
    let p = RingmapPlan::new(spec).map_err(|e| anyhow!("{e}"))?;
    let ncpus = p.rx.ncpus();
    let mut cpu_entries = vec![0usize; ncpus];
    for &r in &p.table {
        cpu_entries[p.rx.cpus()[r]] += 1;
    }
    if a.json {
        let mut v = json!({
            "cpus": ncpus,
            "unit": a.unit,
            "size": a.size,
            "pow2": a.pow2,
            "grid": p.rx.grid(),
            "rings": p.rx.count(),
            "ring_cpus": p.rx.cpus(),
            "table": p.table,
            "histogram": p.ring_entries,
            "cpu_entries": cpu_entries,
            "mismatches": p.mismatches,
            "replicate_mismatches": p.replicate_mismatches,
            "min_mismatches": p.min_mismatches,
        });
        if let Some(tx) = &p.tx {
            v["tx_rings"] = json!(tx.count());
            v["tx_ring_cpus"] = json!(tx.cpus());
        }
        return print_json(&v);
    }
    if ncpus < a.cpus {
        println!("note: the host picks (hash & 127) % cpus, so only {ncpus} CPUs take part");
    }
    if p.rx.count() < a.rings {
        let why = if a.pow2 {
            "capped at the CPU count and rounded down to a power of two"
        } else {
            "capped at the CPU count"
        };
        println!("note: {} rings asked for, {} used ({why})", a.rings, p.rx.count());
    }
    println!(
        "cpus {ncpus}  rings {}  unit {}  grid {}  table {} entries",
        p.rx.count(),
        a.unit,
        p.rx.grid(),
        a.size
    );
    println!("ring -> cpu:    {}", pairs(p.rx.cpus()));
    if let Some(tx) = &p.tx {
        println!("tx ring -> cpu: {}", pairs(tx.cpus()));
    }
    println!("redirect table (entry i: ring; host cpu = (i & 127) % {ncpus}; * = mismatch):");
    let (ring_cpus, host_cpus) = p.rx.mismatch_view();
    for (row, chunk) in p.table.chunks(16).enumerate() {
        let cells: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(j, &r)| {
                let i = row * 16 + j;
                let mark = if is_mismatch(i, r, &ring_cpus, &host_cpus) { '*' } else { ' ' };
                format!("{r:>3}{mark}")
            })
            .collect();
        println!("  {:>4}: {}", row * 16, cells.join(""));
    }
    println!("entries per ring: {}", pairs(&p.ring_entries));
    println!(
        "mismatches: {} of {} (replicated table: {}; fewest possible with this binding: {})",
        p.mismatches, a.size, p.replicate_mismatches, p.min_mismatches
    );
    Ok(())
}

/// `0:4 1:5 ...`
fn pairs(v: &[usize]) -> String {
    v.iter().enumerate().map(|(i, x)| format!("{i}:{x}")).collect::<Vec<_>>().join(" ")
}
