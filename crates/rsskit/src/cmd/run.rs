//! `rsskit run`: start a server and steer its `SO_REUSEPORT` group as
//! soon as it is complete (every socket served by a pinned worker, the
//! same for three looks in a row), then wait for the server, forwarding
//! SIGINT/SIGTERM/SIGHUP, steer again when its workers change (a reload),
//! and exit with its status. Steering happens after start-up: until then
//! the kernel's hash spreads connections.

use super::common::seconds;
use super::steer::{report, steer, survey, SteerOpts};
use anyhow::{bail, Context, Result};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ABOUT: &str = "Start a server and steer its SO_REUSEPORT group once its workers are up and pinned \
(see `rsskit steer`); then wait for it, forward SIGINT, SIGTERM and SIGHUP, and exit with its status.\n\n\
Example:\n  rsskit run --port 8080 --steer cpu -- nginx -c /etc/nginx/steered.conf -g 'daemon off;'";

#[derive(clap::Args, Debug)]
#[command(about = ABOUT, long_about = ABOUT)]
pub struct Args {
    #[command(flatten)]
    pub opts: SteerOpts,
    /// Give up (and stop the server) if its group is not complete after this
    /// many seconds (above 0, below 10^7).
    #[arg(long, default_value_t = 30.0, value_parser = super::common::seconds_arg)]
    pub timeout: f64,
    /// The server command and its arguments (after `--`). It must stay in
    /// the foreground (nginx: `daemon off;`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The signal last received (0: none), forwarded to the server.
fn forward_signals() -> Result<Arc<AtomicUsize>> {
    let got = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(sig, got.clone(), sig as usize)
            .context("installing a signal handler")?;
    }
    Ok(got)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, sig) };
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Terminates the server we started (SIGTERM, then SIGKILL after 5 s).
fn stop(child: &mut Child) {
    signal(child, libc::SIGTERM);
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub fn run(a: Args) -> Result<()> {
    let timeout = seconds("--timeout", a.timeout)?;
    a.opts.vet_key()?;
    let got = forward_signals()?;
    let mut child = Command::new(&a.command[0])
        .args(&a.command[1..])
        .spawn()
        .with_context(|| format!("starting {:?}", a.command[0]))?;
    let pid = child.id() as i32;
    let t = Instant::now();
    let mut last: Option<Result<Vec<_>, String>> = None;
    let mut same = 0;
    loop {
        if let Some(st) = child.try_wait()? {
            let why = match &last {
                Some(Err(e)) => format!(" (last look: {e})"),
                _ => String::new(),
            };
            bail!("{} exited ({st}) before its reuseport group was complete{why}", a.command[0]);
        }
        let sig = got.swap(0, Ordering::Relaxed);
        if sig != 0 {
            stop(&mut child);
            bail!("signal {sig} before the server's group was complete: server stopped");
        }
        let now = survey(pid, &a.opts).map_err(|e| format!("{e:#}"));
        same = if now.is_ok() && last.as_ref() == Some(&now) { same + 1 } else { 0 };
        last = Some(now);
        if same >= 2 {
            break;
        }
        if t.elapsed() > timeout {
            stop(&mut child);
            let e = match last {
                Some(Err(e)) => e,
                _ => "the group kept changing".into(),
            };
            bail!("the server's reuseport group was not ready within {timeout:?}, server stopped: {e}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    match steer(pid, &a.opts) {
        Ok(s) => {
            eprintln!("rsskit run: {} steered (pid {pid})", a.command[0]);
            report(&s, &a.opts, &mut std::io::stderr())?;
        }
        Err(e) => {
            stop(&mut child);
            return Err(e.context("steering the server (server stopped)"));
        }
    }
    // Watch the group: when its workers change (a reload: nginx SIGHUP forks
    // new workers) and it is complete again, steer again.
    let mut steered = last.and_then(|l| l.ok());
    let (mut seen, mut stable, mut looked) = (None, 0, Instant::now());
    let st = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        let sig = got.swap(0, Ordering::Relaxed);
        if sig != 0 {
            signal(&child, sig as i32);
        }
        if looked.elapsed() >= Duration::from_millis(200) {
            looked = Instant::now();
            let now = survey(pid, &a.opts).ok();
            stable = if now.is_some() && now == seen { stable + 1 } else { 0 };
            seen = now;
            if stable >= 2 && seen != steered {
                match steer(pid, &a.opts) {
                    Ok(s) => {
                        eprintln!("rsskit run: {}'s workers changed: steered again", a.command[0]);
                        report(&s, &a.opts, &mut std::io::stderr())?;
                        steered = seen.clone();
                    }
                    Err(e) => {
                        // Not retried until the group changes again.
                        eprintln!("rsskit run: warning: steering again failed: {e:#}");
                        steered = seen.clone();
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::exit(exit_code(st));
}
