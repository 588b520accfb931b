//! `rsskit check`: does this host keep every flow on one CPU? A verdict per
//! device with the reasons; exit 0 when aligned, 1 when not.

use super::common::print_json;
use super::plan::{devices, sysroot};
use anyhow::Result;
use rsskit_linux::hostcheck::{check_device, DeviceVerdict};
use serde_json::json;
use std::io::Write as _;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Problems (each makes the device 'not aligned'): a key that fails the key check
random keys get, table entries naming queues the device lacks, a queue whose
IRQ may run on several CPUs, queues on CPUs off the device's NUMA node while it
has enough CPUs, XPS off or mapping a CPU to several queues or across another
queue's IRQ CPU, RPS on a device with hardware RSS (double steering), queue
IRQs irqbalance will move. Notes do not change the verdict.

Exit status: 0 every device aligned, 1 not (or an error).

Examples:
  rsskit check
  rsskit check --iface eth0 --json";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Interface to check (repeat for several); default: every interface on a device.
    #[arg(long = "iface", value_name = "IF")]
    ifaces: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Read a tree shaped like /sys and /proc under DIR instead (tests).
    #[arg(long, value_name = "DIR", hide = true)]
    sysroot: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let root = sysroot(a.sysroot.as_ref())?;
    let topo = root.topology();
    let devs = devices(&root, &a.ifaces)?;
    let ib = root.irqbalance();
    let verdicts: Vec<DeviceVerdict> = devs.iter().map(|d| check_device(&topo, d, ib.as_ref())).collect();
    let aligned = verdicts.iter().all(|v| v.aligned);
    if a.json {
        print_json(&json!({ "aligned": aligned, "irqbalance": ib, "devices": verdicts }))?;
    } else {
        for v in &verdicts {
            println!("{}: {}", v.name, if v.aligned { "aligned" } else { "NOT aligned" });
            for p in &v.problems {
                println!("  - {p}");
            }
            for n in &v.notes {
                println!("  note: {n}");
            }
        }
        let bad = verdicts.iter().filter(|v| !v.aligned).count();
        if aligned {
            println!("verdict: aligned: every flow stays on one CPU");
        } else {
            println!(
                "verdict: not aligned: {} problem(s) on {bad} of {} device(s) (rsskit plan / rsskit apply fix most)",
                verdicts.iter().map(|v| v.problems.len()).sum::<usize>(),
                verdicts.len()
            );
        }
    }
    if !aligned {
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}
