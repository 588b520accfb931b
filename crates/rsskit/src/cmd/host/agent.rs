//! `rsskit agent`: keeps every persisted plan true. The loop and its
//! decisions are `rsskit_host::agent`'s; this is the shell: flags, signals
//! (SIGHUP reloads the plans, SIGTERM/SIGINT stop), sd_notify for
//! `Type=notify`, the log on stderr and the `/metrics` thread.

use crate::cmd::host::HostArgs;
use anyhow::{anyhow, Context, Result};
use rsskit_host::agent::{self, Agent, Notify};
use rsskit_host::keeper::Cause;
use rsskit_host::metrics::Snapshot;
use rsskit_host::metrics_server;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const AFTER_HELP: &str = "\
Reads the plans `rsskit apply --persist` stored (/etc/rsskit/devices/) and
keeps them applied on the devices present: on a new link or a link coming up
(rtnetlink), when the queue count changed, and every --interval seconds it
reads every planned setting (channels, table, key, hashed fields, IRQ
affinity, XPS, RPS) and puts back what drifted, logging the setting, the old
and new value and the cause; hashed fields put back are followed by the
device's key written again (virtio_net takes fields only with it). A setting put back 3 times within 5 minutes is
reported as contested (with irqbalance named when it runs) and left alone
for a back-off that doubles up to an hour; a setting the kernel or driver
refuses is reported once and retried only when the device appears again or
on SIGHUP. Bans pinned IRQs in irqbalance's options when it is installed.

--once checks and corrects once and exits: 1 if a device is not aligned,
could not be checked (the host lock busy, the device unreadable) or a plan
file could not be read or is refused; 'all aligned' counts only devices
actually checked.

Signals: SIGHUP reloads the plans; SIGTERM or SIGINT stops. With
NOTIFY_SOCKET set (systemd Type=notify) it sends READY=1 after the first
check. Each check takes the host lock (/run/rsskit.lock) while it writes.
Plan files must be regular files owned by root, writable by no one else, in
a directory with the same properties (or a sticky one of root's, like /tmp);
anything else is refused by name.

--metrics ADDR:PORT serves Prometheus text at /metrics: rsskit_device_aligned,
rsskit_device_problems, rsskit_corrections_total, rsskit_rx_queue_packets_total,
rsskit_nic_rx_dropped_total, rsskit_rx_queue_imbalance_ratio,
rsskit_softnet_{processed,dropped}_packets_total,
rsskit_softnet_time_squeeze_total, rsskit_plans, rsskit_plans_invalid. It
serves many clients at once: each connection has 2 s from accept to the
answer, at most 64 are open (a new one closes the oldest).

Examples:
  rsskit agent
  rsskit agent --interval 10 --metrics 127.0.0.1:9469";

#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    host: HostArgs,
    /// Re-check every S seconds (besides link events), 1-86400.
    #[arg(long, value_name = "S", default_value_t = 30.0, value_parser = crate::cmd::common::float_from(1.0, 86400.0, "seconds"))]
    interval: f64,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// Check and correct once, then exit (0: every persisted device checked and aligned, 1: not).
    #[arg(long)]
    once: bool,
    /// Read a tree shaped like /sys and /proc under DIR instead (tests; no link events there).
    #[arg(long, value_name = "DIR", hide = true)]
    sysroot: Option<PathBuf>,
}

fn log(line: &str) {
    // One line per event on stderr (unbuffered); journald stamps it.
    eprintln!("rsskit agent: {line}");
}

/// `sd_notify(3)` without libsystemd: one datagram to $NOTIFY_SOCKET.
fn sd_notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else { return };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt as _;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
    } else {
        sock.send_to(msg.as_bytes(), &path)
    };
    if let Err(e) = r {
        eprintln!("rsskit: warning: sd_notify to {}: {e}", path.to_string_lossy());
    }
}

pub fn run(a: Args) -> Result<()> {
    let sys = crate::cmd::host::sysroot(a.sysroot.as_ref())?;
    let stop = crate::cmd::common::stop_on_signals()?;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(libc::SIGHUP, hup.clone()).context("installing the SIGHUP handler")?;
    let interval = Duration::from_secs_f64(a.interval);
    let shared = Arc::new(Mutex::new(Snapshot::default()));
    let metrics_thread = match a.metrics {
        Some(addr) => {
            let l = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}: cannot listen"))?;
            log(&format!("metrics at http://{}/metrics", l.local_addr().unwrap_or(addr)));
            let (s, d, st) = (shared.clone(), sys.roots.proc.clone(), stop.clone());
            Some(std::thread::spawn(move || {
                if let Err(e) = metrics_server::serve(l, &st, || agent::scrape(&s, &d)) {
                    log(&format!("metrics: {e}; /metrics is not served"));
                }
            }))
        }
        None => None,
    };
    let files = a.host.with_fixture(a.sysroot.as_ref()).files();
    let mut agent = Agent::new(sys, files, stop.clone(), shared, Box::new(log));
    agent.load();
    let r = if a.once {
        agent.pass(Cause::Start, None);
        match agent.once_verdict() {
            Ok(n) => {
                log(&format!("{n} persisted device(s) present and checked, all aligned"));
                Ok(())
            }
            Err(problems) => Err(anyhow!("{problems} (see the lines above)")),
        }
    } else {
        agent
            .run(interval, &hup, &mut |n| match n {
                Notify::Ready { plans, .. } => sd_notify(&format!("READY=1\nSTATUS=keeping {plans} plan(s)")),
                Notify::Reloading => sd_notify("RELOADING=1"),
                Notify::Reloaded => sd_notify("READY=1"),
                Notify::Stopping => sd_notify("STOPPING=1"),
            })
            .context("opening the rtnetlink socket")
    };
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = metrics_thread {
        let _ = t.join();
    }
    r
}
