//! Tuning the host: `info`, `plan`, `apply`, `check`, `persist`, `agent`,
//! `top`. The workflows are `rsskit_host`'s; these modules parse flags and
//! print. What several of them share is here: the host to read
//! ([`sysroot`], [`devices`]), where rsskit keeps its files ([`HostArgs`]),
//! and the planning flags ([`planning`]).

pub mod agent;
pub mod apply;
pub mod capture;
pub mod check;
pub mod info;
pub mod persist;
pub mod plan;
pub mod planning;
pub mod report;
pub mod top;

use anyhow::{bail, Context, Result};
use rsskit_host::apply::HostFiles;
use rsskit_host::sysroot::{DeviceState, Sysroot};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The host to read: a capture (`--from DIR`, read-only), a fixture tree
/// (`--sysroot DIR`, tests) or the live host.
pub fn source(from: Option<&PathBuf>, fixture: Option<&PathBuf>) -> Result<Sysroot> {
    match (from, fixture) {
        (Some(_), Some(_)) => bail!("--from and --sysroot: give one"),
        (Some(d), None) => {
            let (root, _) = Sysroot::capture(d)
                .with_context(|| format!("--from {}: not a capture rsskit reads", d.display()))?;
            Ok(root)
        }
        (None, f) => sysroot(f),
    }
}

pub fn sysroot(dir: Option<&PathBuf>) -> Result<Sysroot> {
    match dir {
        None => Ok(Sysroot::live()),
        Some(d) if d.join("sys").is_dir() && d.join("proc").is_dir() => {
            Ok(Sysroot::fixture_tree(d).context("--sysroot")?)
        }
        Some(d) => bail!("--sysroot {}: needs sys/ and proc/ directories in it", d.display()),
    }
}

/// The devices named (a bond or VLAN: the NICs below it), or every
/// interface on a device.
pub fn devices(root: &Sysroot, names: &[String]) -> Result<Vec<DeviceState>> {
    if !names.is_empty() {
        let mut out: Vec<DeviceState> = Vec::new();
        for n in names {
            if !root.exists(n) {
                bail!("interface '{n}' does not exist");
            }
            let members = root.members(n);
            if !members.is_empty() {
                eprintln!("rsskit: {n} is carried by {}: planning each of them", members.join(", "));
            }
            let each = if members.is_empty() { vec![n.clone()] } else { members };
            for m in each {
                if !out.iter().any(|d| d.name == m) {
                    out.push(root.device(&m).with_context(|| format!("reading {m}"))?);
                }
            }
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for n in root.interfaces()? {
        if n == "lo" {
            continue;
        }
        match root.device(&n) {
            Ok(d) if d.facts.has_device => out.push(d),
            Ok(_) => {}
            Err(e) => eprintln!("rsskit: warning: {n}: {e}"),
        }
    }
    if out.is_empty() {
        bail!(
            "no interface on a device found (virtual ones are left out by default): name them with --iface"
        );
    }
    Ok(out)
}

/// Where rsskit keeps its files, and how long a writer waits for another.
#[derive(clap::Args, Debug, Clone)]
pub struct HostArgs {
    /// Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance's options) with DIR.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Seconds to wait for another rsskit writer (apply, persist, agent) before refusing.
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = crate::cmd::common::float_in(-1.0, 3600.0, "seconds"))]
    pub lock_wait: f64,
}

impl HostArgs {
    /// With a fixture tree (`--sysroot DIR`) and no `--root`, rsskit's own
    /// files (lock, plans) live in the tree too, never on the real host.
    pub fn with_fixture(mut self, sysroot: Option<&PathBuf>) -> HostArgs {
        if let Some(d) = sysroot.filter(|_| self.is_host_root()) {
            self.root = d.clone();
        }
        self
    }

    /// rsskit's files and the lock wait, as the library takes them.
    pub fn files(&self) -> HostFiles {
        HostFiles { root: self.root.clone(), lock_wait: Duration::from_secs_f64(self.lock_wait.max(0.0)) }
    }

    /// Whether this is the live host's own root (only then is irqbalance restarted).
    pub fn is_host_root(&self) -> bool {
        self.root == Path::new("/")
    }
}
