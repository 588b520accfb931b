//! `rsskit capture DIR`: the host facts rsskit reads, copied into a new
//! directory for `plan`, `check` and `info --from DIR` elsewhere (a bug
//! report, a test). The format and what is copied: `rsskit_host::capture`
//! and docs/capture.md.

use crate::cmd::common::print_json;
use anyhow::{Context, Result};
use rsskit_host::capture;
use rsskit_linux::netdev::Roots;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

const AFTER_HELP: &str = "\
Copies into DIR (a new directory) what plan, check and info read, and nothing
else: CPUs online, isolated and nohz_full; each CPU's core and package; NUMA
nodes; per interface its operstate, MTU, NUMA node, IRQ numbers, queues with
their RPS/XPS masks and RFS sizes, bond/VLAN members, and the ethtool answers
(driver, channels, RSS key and table, hashed fields); /proc/interrupts and each
IRQ's affinity; the RFS and default RSS key settings. No MAC or IP address, no
process, no traffic. The NIC's RSS key is in it (plans need it).

Without root some facts cannot be read: they are listed in DIR/capture.json
(`skipped`) and printed here. The format: docs/capture.md.

Examples:
  rsskit capture /tmp/host-capture
  rsskit plan --from /tmp/host-capture
  rsskit check --from /tmp/host-capture --json";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The new directory to write the capture into.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the manifest as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let r = capture::take(&Roots::default(), &a.dir, now).context("rsskit capture")?;
    if a.json {
        return print_json(&serde_json::to_value(&r)?);
    }
    let m = &r.manifest;
    println!("captured {} files, interfaces {}, into {}", r.files, m.interfaces.join(", "), a.dir.display());
    if m.skipped.is_empty() {
        println!("nothing skipped");
    } else {
        println!("skipped (listed in {}):", capture::MANIFEST);
        for s in &m.skipped {
            println!("  {}: {}", s.what, s.why);
        }
    }
    println!(
        "read it with: rsskit plan --from {0}; rsskit check --from {0}; rsskit info --from {0}",
        a.dir.display()
    );
    Ok(())
}
