//! `rsskit run`: start a server and steer its `SO_REUSEPORT` group as
//! soon as it is complete (every socket served by a pinned worker, the
//! same for three looks in a row), then wait for the server, forwarding
//! SIGINT/SIGTERM/SIGHUP, steer again when its workers change (a reload),
//! and exit with its status. Steering happens after start-up: until then
//! the kernel's hash spreads connections.

use super::takeover::{find_groups, report, steer, survey, SteerOpts};
use crate::cmd::common::seconds;
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
    #[arg(long, default_value_t = 30.0, value_parser = crate::cmd::common::seconds_arg)]
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

/// The server: the child we started, or the daemon it left behind (its
/// parent exited 0 and the daemon, orphaned, became our child because
/// rsskit run is a child subreaper).
enum Server {
    Started(Child),
    Adopted(i32),
}

impl Server {
    fn pid(&self) -> i32 {
        match self {
            Server::Started(c) => c.id() as i32,
            Server::Adopted(p) => *p,
        }
    }

    /// Its exit code (128 + signal) and how it ended, once it has.
    fn try_wait(&mut self) -> Result<Option<(i32, String)>> {
        match self {
            Server::Started(c) => Ok(c.try_wait()?.map(|st| (exit_code(st), st.to_string()))),
            Server::Adopted(p) => Ok(rsskit_linux::process::try_wait_child(*p)?.map(|c| {
                (c, if c < 128 { format!("exit status: {c}") } else { format!("signal: {}", c - 128) })
            })),
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid (started or adopted, not yet reaped).
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Terminates it (SIGTERM, then SIGKILL after 5 s) and reaps it.
    fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        let t = Instant::now();
        while self.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGKILL);
            match self {
                Server::Started(c) => {
                    let _ = c.wait();
                }
                Server::Adopted(p) => {
                    let mut st = 0;
                    // SAFETY: reaps our own (adopted) child.
                    unsafe { libc::waitpid(*p, &mut st, 0) };
                }
            }
        }
    }
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Sockets per group of the server (whatever their state), to report a
/// change of its worker count.
fn group_sizes(pid: i32, o: &SteerOpts) -> Option<Vec<(String, usize)>> {
    let (_, groups) = find_groups(pid, o).ok()?;
    Some(groups.iter().map(|g| (g.name(), g.members.len())).collect())
}

fn sizes_text(s: &[(String, usize)]) -> String {
    s.iter()
        .map(|(n, k)| format!("{n}: {k} socket{}", if *k == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn run(a: Args, allow_weak_key: bool) -> Result<()> {
    let timeout = seconds("--timeout", a.timeout)?;
    a.opts.vet_key(allow_weak_key)?;
    let got = forward_signals()?;
    // A server that daemonises (forks, its parent exits 0) is then our
    // child, and is followed.
    rsskit_linux::process::become_subreaper().context("PR_SET_CHILD_SUBREAPER")?;
    let name = a.command[0].clone();
    let child = Command::new(&a.command[0])
        .args(&a.command[1..])
        .spawn()
        .with_context(|| format!("starting {name:?}"))?;
    let mut server = Server::Started(child);
    let t = Instant::now();
    let mut last: Option<Result<Vec<_>, String>> = None;
    let mut same = 0;
    loop {
        if let Some((code, how)) = server.try_wait()? {
            let adopted = rsskit_linux::process::own_children().unwrap_or_default();
            if code == 0 && matches!(server, Server::Started(_)) && adopted.len() == 1 {
                let d = adopted[0];
                eprintln!(
                    "rsskit run: {name} (pid {}) exited 0 and left process {d} running: it went to the background \
                     (daemonised); following pid {d}. Better: keep the server in the foreground (nginx: \
                     `daemon off;` or -g 'daemon off;') so that rsskit run is its parent",
                    server.pid()
                );
                server = Server::Adopted(d);
                (last, same) = (None, 0);
                continue;
            }
            let why = match &last {
                Some(Err(e)) => format!(" (last look: {e})"),
                _ => String::new(),
            };
            if !adopted.is_empty() {
                // Several processes left behind: none is known to be the server.
                let mut left: Vec<Server> = adopted.into_iter().map(Server::Adopted).collect();
                left.iter_mut().for_each(Server::stop);
                bail!(
                    "{name} exited ({how}) before its reuseport group was complete and left processes behind, \
                     now stopped (keep the server in the foreground: nginx `daemon off;`){why}"
                );
            }
            bail!("{name} exited ({how}) before its reuseport group was complete{why}");
        }
        let sig = got.swap(0, Ordering::Relaxed);
        if sig != 0 {
            server.stop();
            bail!("signal {sig} before the server's group was complete: server stopped");
        }
        let now = survey(server.pid(), &a.opts).map_err(|e| crate::flags::chain(&e));
        same = if now.is_ok() && last.as_ref() == Some(&now) { same + 1 } else { 0 };
        last = Some(now);
        if same >= 2 {
            break;
        }
        if t.elapsed() > timeout {
            server.stop();
            let e = match last {
                Some(Err(e)) => e,
                _ => "the group kept changing".into(),
            };
            bail!("the server's reuseport group was not ready within {timeout:?}, server stopped: {e}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = server.pid();
    match steer(pid, &a.opts) {
        Ok(s) => {
            eprintln!("rsskit run: {name} steered (pid {pid})");
            report(&s, &a.opts, &mut std::io::stderr())?;
        }
        Err(e) => {
            server.stop();
            return Err(e.context("steering the server (server stopped)"));
        }
    }
    // Watch the group: when its workers change (a reload: nginx SIGHUP forks
    // new workers) and it is complete again, steer again; say so whenever
    // its size changes, steerable or not.
    let mut steered = last.and_then(|l| l.ok());
    let mut sizes = group_sizes(pid, &a.opts);
    let (mut seen, mut stable, mut looked) = (None, 0, Instant::now());
    let (mut seen_sizes, mut sizes_stable) = (sizes.clone(), 0);
    let code = loop {
        if let Some((code, _)) = server.try_wait()? {
            break code;
        }
        let sig = got.swap(0, Ordering::Relaxed);
        if sig != 0 {
            server.signal(sig as i32);
        }
        if looked.elapsed() >= Duration::from_millis(200) {
            looked = Instant::now();
            let now_sizes = group_sizes(pid, &a.opts);
            sizes_stable = if now_sizes == seen_sizes { sizes_stable + 1 } else { 0 };
            seen_sizes = now_sizes;
            let resized = sizes_stable >= 2 && seen_sizes.is_some() && seen_sizes != sizes;
            let now = survey(pid, &a.opts);
            if resized {
                let (was, is) =
                    (sizes.as_deref().unwrap_or_default(), seen_sizes.as_deref().unwrap_or_default());
                let state = match &now {
                    Ok(_) => "steering again".to_string(),
                    Err(e) if is.iter().all(|g| g.1 < 2) => format!(
                        "one worker per group: nothing to steer, the kernel gives it every connection ({})",
                        crate::flags::chain(e)
                    ),
                    Err(e) => format!("cannot steer it now: {}", crate::flags::chain(e)),
                };
                eprintln!(
                    "rsskit run: {name}'s workers changed: {} (was {}); {state}",
                    sizes_text(is),
                    sizes_text(was)
                );
                sizes = seen_sizes.clone();
            }
            let now = now.ok();
            stable = if now.is_some() && now == seen { stable + 1 } else { 0 };
            seen = now;
            if stable >= 2 && seen != steered {
                match steer(pid, &a.opts) {
                    Ok(s) => {
                        eprintln!("rsskit run: {name}'s workers changed: steered again");
                        report(&s, &a.opts, &mut std::io::stderr())?;
                        steered = seen.clone();
                    }
                    Err(e) => {
                        // Not retried until the group changes again.
                        eprintln!("rsskit run: warning: steering again failed: {}", crate::flags::chain(&e));
                        steered = seen.clone();
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::exit(code);
}
