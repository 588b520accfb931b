//! Another process's `SO_REUSEPORT` group, as `steer` and `run` take it
//! over: the shared flags ([`SteerOpts`]) and the steps (find the group,
//! steer it, survey it, report), over `rsskit_runtime::takeover`.

use crate::cmd::common::{key_arg, print_json};
use anyhow::Result;
use rsskit_core::{HashConfig, RssKey};
use rsskit_linux::procnet::SockProto;
use rsskit_runtime::takeover::{self, Group, Spec, Steered, Survey};
use serde_json::json;

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
        crate::cmd::common::check_key(&self.key, key_use, allow_weak_key)
    }

    /// What the library takes over, from the arguments.
    pub fn spec(&self) -> Spec {
        Spec {
            port: self.port,
            proto: self.proto.map(|p| match p {
                crate::cmd::common::Proto::Tcp => SockProto::Tcp,
                crate::cmd::common::Proto::Udp => SockProto::Udp,
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
    #[arg(long, value_parser = crate::cmd::common::int_in(1u16, u16::MAX))]
    pub port: Option<u16>,
    /// Only this transport (default: both).
    #[arg(long, value_enum)]
    pub proto: Option<crate::cmd::common::Proto>,
    /// Steering program.
    #[arg(long, value_enum, default_value = "cpu")]
    pub steer: Mode,
    /// The number of workers expected per group, 1-8192 (refuse otherwise).
    #[arg(long, value_parser = crate::cmd::common::int_in(1usize, 8192))]
    pub workers: Option<usize>,
    /// RSS key for --steer toeplitz: default (Microsoft), symmetric, random, or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_arg)]
    pub key: RssKey,
    /// Bucket bits for --steer toeplitz (1-7); default FreeBSD's fls(workers-1)+1.
    #[arg(long, value_parser = crate::cmd::common::int_in(1u32, 7))]
    pub bits: Option<u32>,
    /// Hash UDP on addresses and ports (--steer toeplitz); default addresses only.
    #[arg(long)]
    pub udp_4tuple: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
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
