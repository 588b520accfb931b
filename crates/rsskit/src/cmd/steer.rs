//! `rsskit steer`: attach a steering program to an unmodified, running
//! server's `SO_REUSEPORT` group (nginx with `listen ... reuseport`, any
//! server whose workers each serve one socket of the group). The arguments
//! and the printing; the algorithm (finding the group, mapping its workers,
//! probing its order) is `rsskit_runtime::takeover`'s.

use super::common::{key_arg, print_json};
use anyhow::{bail, Result};
use rsskit_core::{HashConfig, RssKey};
use rsskit_linux::procnet::SockProto;
use rsskit_runtime::takeover::{self, Group, Spec, Steered, Survey};
use serde_json::json;

const ABOUT: &str = "Steer an unmodified running server's SO_REUSEPORT group: each connection (datagram) \
goes to the worker pinned to the CPU that processed it (cpu), or to the worker owning its Toeplitz bucket \
(toeplitz).\n\nrsskit finds the group's sockets in PID and its children, maps each socket to the worker \
process that serves it and that worker to the CPU it is pinned to, measures the group's socket order, and \
attaches a classic BPF program built from that map.\n\nExample (nginx: worker_cpu_affinity auto; listen 80 \
reuseport;):\n  rsskit steer --pid $(cat /run/nginx.pid) --port 80\n  rsskit steer --pid $(cat /run/nginx.pid) \
--port 80 --detach";

/// Steering mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The socket of the worker pinned to the CPU processing the packet.
    Cpu,
    /// The worker owning the packet's Toeplitz bucket.
    Toeplitz,
}

impl SteerOpts {
    /// Judges `--key` (used by `--steer toeplitz` only) before anything is
    /// touched: for its hash types and `--bits`, or the full 128-entry table
    /// when the group sizes are not known yet (a key reaching every one of
    /// 128 buckets reaches every one of fewer).
    pub fn vet_key(&self, allow_weak_key: bool) -> Result<()> {
        if self.steer != Mode::Toeplitz {
            return Ok(());
        }
        let hash = HashConfig::default().with_udp_4tuple(self.udp_4tuple);
        let bits = self.bits.unwrap_or(rsskit_core::rss::MAX_BITS);
        let key_use = rsskit_core::keycheck::KeyUse::of_config(hash, bits);
        super::common::check_key(&self.key, key_use, allow_weak_key)
    }

    /// What the library takes over, from the arguments.
    pub fn spec(&self) -> Spec {
        Spec {
            port: self.port,
            proto: self.proto.map(|p| match p {
                super::common::Proto::Tcp => SockProto::Tcp,
                super::common::Proto::Udp => SockProto::Udp,
            }),
            mode: match self.steer {
                Mode::Cpu => takeover::Mode::Cpu,
                Mode::Toeplitz => takeover::Mode::Toeplitz,
            },
            workers: self.workers,
            key: self.key.clone(),
            bits: self.bits,
            udp_4tuple: self.udp_4tuple,
        }
    }
}

/// What to steer and how (shared with `rsskit run`).
#[derive(clap::Args, Debug, Clone)]
pub struct SteerOpts {
    /// Only sockets on this local port, 1-65535 (default: every reuseport group of the process tree).
    #[arg(long, value_parser = super::common::int_in(1u16, u16::MAX))]
    pub port: Option<u16>,
    /// Only this transport (default: both).
    #[arg(long, value_enum)]
    pub proto: Option<super::common::Proto>,
    /// Steering program.
    #[arg(long, value_enum, default_value = "cpu")]
    pub steer: Mode,
    /// The number of workers expected per group, 1-8192 (refuse otherwise).
    #[arg(long, value_parser = super::common::int_in(1usize, 8192))]
    pub workers: Option<usize>,
    /// RSS key for --steer toeplitz: default (Microsoft), symmetric, random, or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_arg)]
    pub key: RssKey,
    /// Bucket bits for --steer toeplitz (1-7); default FreeBSD's fls(workers-1)+1.
    #[arg(long, value_parser = super::common::int_in(1u32, 7))]
    pub bits: Option<u32>,
    /// Hash UDP on addresses and ports (--steer toeplitz); default addresses only.
    #[arg(long)]
    pub udp_4tuple: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
#[command(about = ABOUT, long_about = ABOUT)]
pub struct Args {
    /// The server's process id (nginx: the master), 1-4194304; its children are searched too.
    #[arg(long, value_parser = super::common::int_in(1i32, 1 << 22))]
    pub pid: i32,
    #[command(flatten)]
    pub opts: SteerOpts,
    /// Detach the program: the kernel's reuseport hash picks sockets again.
    #[arg(long)]
    pub detach: bool,
}

/// The tree's pids and its groups ([`takeover::find_groups`]).
pub fn find_groups(pid: i32, o: &SteerOpts) -> Result<(Vec<i32>, Vec<Group>)> {
    Ok(takeover::find_groups(pid, &o.spec())?)
}

/// Finds, maps, measures and steers every group ([`takeover::steer`]).
pub fn steer(pid: i32, o: &SteerOpts) -> Result<Vec<Steered>> {
    Ok(takeover::steer(pid, &o.spec())?)
}

/// The groups as they would be steered now ([`takeover::survey`]).
pub fn survey(pid: i32, o: &SteerOpts) -> Result<Vec<Survey>> {
    Ok(takeover::survey(pid, &o.spec())?)
}

/// Prints what `steer` did (JSON on stdout, or lines on `w`).
pub fn report(steered: &[Steered], o: &SteerOpts, w: &mut dyn std::io::Write) -> Result<()> {
    let mode = o.spec().mode.name();
    if o.json {
        let groups: Vec<_> = steered
            .iter()
            .map(|s| {
                json!({
                    "proto": s.group.proto.name(),
                    "local": s.group.local.to_string(),
                    "steer": mode,
                    "hash_type": s.hash_type,
                    "program_insns": s.program_len,
                    "sockets": s.group.members.iter().enumerate().map(|(i, m)| {
                        let (pid, cpu) = m.owner.expect("resolved");
                        json!({"index": i, "inode": m.inode, "cookie": m.cookie, "pid": pid, "cpu": cpu})
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        return print_json(&json!({ "groups": groups }));
    }
    for s in steered {
        let ht = s.hash_type.map(|h| format!(", hash {h}")).unwrap_or_default();
        writeln!(
            w,
            "{}: {} sockets, steer {mode}{ht} ({} BPF instructions)",
            s.group.name(),
            s.group.members.len(),
            s.program_len
        )?;
        for (i, m) in s.group.members.iter().enumerate() {
            let (pid, cpu) = m.owner.expect("resolved");
            let cookie = m.cookie.map(|c| format!(", cookie {c}")).unwrap_or_default();
            writeln!(w, "  socket {i} (inode {}{cookie}): worker {pid} on CPU {cpu}", m.inode)?;
        }
    }
    Ok(())
}

/// Detaches the program of every group of the tree.
fn detach(pid: i32, o: &SteerOpts) -> Result<()> {
    for (name, had) in takeover::detach(pid, &o.spec())? {
        println!(
            "{name}: {}",
            if had {
                "program detached, the kernel's reuseport hash picks sockets"
            } else {
                "no program was attached"
            }
        );
    }
    Ok(())
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    if a.detach {
        return detach(a.pid, &a.opts);
    }
    // While the server is stopped for the probes, SIGINT/SIGTERM must not
    // kill rsskit before it continues the server: they only set a flag.
    let interrupted = super::common::stop_on_signals()?;
    a.opts.vet_key(allow_weak_key)?;
    let s = steer(a.pid, &a.opts)?;
    report(&s, &a.opts, &mut std::io::stdout())?;
    if interrupted.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("interrupted (the steering above was completed)");
    }
    Ok(())
}
