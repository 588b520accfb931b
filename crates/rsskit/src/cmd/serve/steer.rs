//! `rsskit steer`: attach a steering program to an unmodified, running
//! server's `SO_REUSEPORT` group (nginx with `listen ... reuseport`, any
//! server whose workers each serve one socket of the group). The arguments
//! and the printing; the algorithm (finding the group, mapping its workers,
//! probing its order) is `rsskit_runtime::takeover`'s.

use anyhow::{bail, Result};
use rsskit_runtime::takeover::{self};

use super::takeover::{report, steer, SteerOpts};
const ABOUT: &str = "Steer an unmodified running server's SO_REUSEPORT group: each connection (datagram) \
goes to the worker pinned to the CPU that processed it (cpu), or to the worker owning its Toeplitz bucket \
(toeplitz).\n\nrsskit finds the group's sockets in PID and its children, maps each socket to the worker \
process that serves it and that worker to the CPU it is pinned to, measures the group's socket order, and \
attaches a classic BPF program built from that map.\n\nExample (nginx: worker_cpu_affinity auto; listen 80 \
reuseport;):\n  rsskit steer --pid $(cat /run/nginx.pid) --port 80\n  rsskit steer --pid $(cat /run/nginx.pid) \
--port 80 --detach";

#[derive(clap::Args, Debug)]
#[command(about = ABOUT, long_about = ABOUT)]
pub struct Args {
    /// The server's process id (nginx: the master), 1-4194304; its children are searched too.
    #[arg(long, value_parser = crate::cmd::common::int_in(1i32, 1 << 22))]
    pub pid: i32,
    #[command(flatten)]
    pub opts: SteerOpts,
    /// Detach the program: the kernel's reuseport hash picks sockets again.
    #[arg(long)]
    pub detach: bool,
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
    let interrupted = crate::cmd::common::stop_on_signals()?;
    a.opts.vet_key(allow_weak_key)?;
    let s = steer(a.pid, &a.opts)?;
    report(&s, &a.opts, &mut std::io::stdout())?;
    if interrupted.load(std::sync::atomic::Ordering::Relaxed) {
        bail!("interrupted (the steering above was completed)");
    }
    Ok(())
}
