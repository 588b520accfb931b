//! `rsskit`: the command-line front end. Each subcommand is a small module
//! under `cmd/FAMILY/` (rss, host, serve, dataplane, bench), with its own
//! clap `Args` and a `run` function.

mod cmd;
mod flags;
mod plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Receive-side scaling toolkit: compute, inspect and prove per-CPU flow steering.
#[derive(Parser, Debug)]
#[command(name = "rsskit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Use a --key that cannot reach every RSS bucket (e.g. all zero: every
    /// flow in bucket 0) instead of refusing it.
    #[arg(long, global = true)]
    allow_weak_key: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Toeplitz hash of a flow: hash, bucket and CPU.
    Hash(cmd::rss::hash::Args),
    /// DragonFly ringmap: ring -> CPU binding and the NIC redirect table.
    Table(cmd::rss::table::Args),
    /// Find source ports or addresses whose flows land in a chosen bucket or CPU.
    Find(cmd::rss::find::Args),
    /// The host's RSS setup: CPUs, NUMA, per-interface queues, keys, tables, IRQs, RPS.
    Info(cmd::host::info::Args),
    /// Copy the host facts rsskit reads into DIR, for `plan`, `check` and `info --from DIR` offline.
    Capture(cmd::host::capture::Args),
    /// Tuning plan per device: CPUs, queue -> CPU (ringmap), table, key, IRQ affinity, XPS, RPS, steering.
    Plan(cmd::host::plan::Args),
    /// Apply a plan (diff, --dry-run, save, read back) or --restore a saved state.
    Apply(cmd::host::apply::Args),
    /// Does this host keep every flow on one CPU? Verdict and reasons per device (exit 1 if not).
    Check(cmd::host::check::Args),
    /// Persisted plans (from `apply --persist`): list, apply one device's, remove.
    Persist(cmd::host::persist::Args),
    /// Keep every persisted plan applied: watches link events, re-checks, puts back what drifted; Prometheus metrics.
    Agent(cmd::host::agent::Args),
    /// Per-CPU UDP echo/sink server: pinned workers, steered reuseport sockets, per-worker counters.
    UdpEcho(cmd::serve::udp_echo::Args),
    /// UDP load generator: N streams spread over the server's buckets, RTT, per-stream steering check.
    UdpLoad(cmd::serve::udp_load::Args),
    /// Loopback demo: echo server (one pinned worker per CPU, toeplitz steering) + spread load.
    Demo(cmd::serve::demo::Args),
    /// CPU-local HTTP/1.1 server: pinned worker per CPU, steered reuseport listeners, accept cap.
    HttpServe(cmd::serve::http_serve::Args),
    /// HTTP/1.1 load tester: pinned workers, tens of thousands of connections, latency histogram.
    HttpLoad(cmd::serve::http_load::Args),
    /// Per-CPU stateful firewall (ipfw-style rules, per-worker state tables, redirect) on pcap or AF_PACKET.
    Firewall(cmd::dataplane::firewall::Args),
    /// User-space data plane: NIC-style hash, netisr dispatch to per-CPU workers, reassembly, re-injection.
    Pipeline(cmd::dataplane::pipeline::Args),
    /// Steer a running server's SO_REUSEPORT group (nginx, ...) to its CPU-pinned workers.
    Steer(cmd::serve::steer::Args),
    /// Start a server and steer its SO_REUSEPORT group once its workers are up.
    Run(cmd::serve::run::Args),
    /// Live per-CPU NET_RX softirqs and packets/s, queue IRQs/s, imbalance (like top, for the network).
    Top(cmd::host::top::Args),
    /// Software RSS in XDP: Toeplitz-hash each frame and redirect it to its bucket's CPU (cpumap).
    XdpSteer(cmd::serve::xdp_steer::Args),
    /// Micro-benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Print the shell completion script (bash, zsh, fish, ...) to stdout.
    Completions(cmd::docs::CompletionsArgs),
}

fn main() -> ExitCode {
    // Maintainers' generator, kept out of `Cli` so that it appears in no
    // man page or completion script (clap completes hidden subcommands too).
    if std::env::args_os().nth(1).is_some_and(|a| a == cmd::docs::GEN_DOCS) {
        let args = cmd::docs::GenDocsCli::parse_from(std::env::args_os().skip(1));
        return exit_code(cmd::docs::run_gen_docs(args.args));
    }
    let cli = Cli::parse();
    // `--key` is judged by each command once it knows how it uses the key,
    // a weak one refused unless `--allow-weak-key`.
    let weak = cli.allow_weak_key;
    let result = match cli.command {
        Command::Hash(a) => cmd::rss::hash::run(a, weak),
        Command::Table(a) => cmd::rss::table::run(a),
        Command::Find(a) => cmd::rss::find::run(a, weak),
        Command::Info(a) => cmd::host::info::run(a),
        Command::Capture(a) => cmd::host::capture::run(a),
        Command::Plan(mut a) => {
            a.p.allow_weak_key = weak;
            cmd::host::plan::run(a)
        }
        Command::Apply(mut a) => {
            a.p.allow_weak_key = weak;
            cmd::host::apply::run(a)
        }
        Command::Check(a) => cmd::host::check::run(a),
        Command::Persist(a) => cmd::host::persist::run(a),
        Command::Agent(a) => cmd::host::agent::run(a),
        Command::Top(a) => cmd::host::top::run(a),
        Command::Bench(a) => cmd::bench::run(a, weak),
        Command::Pipeline(a) => cmd::dataplane::pipeline::run(a, weak),
        Command::Firewall(a) => cmd::dataplane::firewall::run(a, weak),
        Command::UdpLoad(a) => cmd::serve::udp_load::run(a, weak),
        Command::HttpServe(a) => cmd::serve::http_serve::run(a, weak),
        Command::HttpLoad(a) => cmd::serve::http_load::run(a, weak),
        Command::Demo(a) => cmd::serve::demo::run(a),
        Command::UdpEcho(a) => cmd::serve::udp_echo::run(a, weak),
        Command::Steer(a) => cmd::serve::steer::run(a, weak),
        Command::Run(a) => cmd::serve::run::run(a, weak),
        Command::XdpSteer(a) => cmd::serve::xdp_steer::run(a, weak),
        Command::Completions(a) => cmd::docs::run_completions(a),
    };
    exit_code(result)
}

fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsskit: error: {}", error_line(&e));
            if let Some(h) = hint(&e) {
                eprintln!("rsskit: hint: {h}");
            }
            // A NIC whose hash rsskit does not model: refused like bad input.
            let unmodelled = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<rsskit_host::landing::NicError>(),
                    Some(rsskit_host::landing::NicError::UnknownXfrm { .. })
                )
            });
            if unmodelled {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// One line naming the problem with its whole cause chain, each cause said
/// once: library errors that print their cause in their own message (`{path}:
/// {source}`) are not followed by the same text again.
fn error_line(e: &anyhow::Error) -> String {
    rsskit_host::causes_worded(e.as_ref(), &flags::message)
}

/// The likely fix for the common system errors: not root, a read-only file
/// system, another writer holding the host lock.
fn hint(e: &anyhow::Error) -> Option<&'static str> {
    if e.chain().any(|c| matches!(c.downcast_ref(), Some(rsskit_host::lock::LockError::Busy { .. }))) {
        return Some("--lock-wait S waits longer for the other writer (default 10 s)");
    }
    use rsskit_dataplane::firewall::rules::{ErrorKind, ParseError};
    if e.chain().any(|c| c.downcast_ref::<ParseError>().is_some_and(|p| p.kind == ErrorKind::MeUndefined)) {
        return Some("--me ADDR gives the firewall its own address");
    }
    let os = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>()).and_then(|io| io.raw_os_error())?;
    match os {
        libc::EACCES | libc::EPERM if rsskit_linux::process::effective_uid() != 0 => {
            Some("this needs root: rsskit writes host settings (/sys, /proc) and its own files (/etc/rsskit, /run/rsskit.lock); run it with sudo")
        }
        libc::EROFS => Some(
            "a read-only file system: rsskit writes /sys, /proc/irq and /run; in a container, mount them read-write",
        ),
        _ => None,
    }
}
