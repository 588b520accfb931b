//! What the `rsskit steer` tests (on the reuseport fixture and on nginx)
//! share: running the command, and measuring locality from pinned clients.

use super::netns::rsskit;
use std::process::{Command, Output};

/// `rsskit steer ARGS`, its output.
pub fn steer(args: &[&str]) -> Output {
    Command::new(rsskit()).arg("steer").args(args).output().unwrap()
}

/// For each CPU of `cpus`, `n` requests from a thread pinned there (after
/// `enter`, e.g. joining the server's network namespace): (requests, those
/// `ask` says were answered by `want(cpu)`, the server worker on that CPU).
pub fn locality<E, A>(
    cpus: &[usize],
    n: usize,
    want: impl Fn(usize) -> u32,
    enter: E,
    ask: A,
) -> (usize, usize)
where
    E: Fn() + Send + Clone + 'static,
    A: Fn() -> u32 + Send + Clone + 'static,
{
    let mut total = (0, 0);
    for &cpu in cpus {
        let want = want(cpu);
        let (enter, ask) = (enter.clone(), ask.clone());
        let hits = std::thread::spawn(move || {
            enter();
            rsskit_linux::affinity::pin_current_thread(cpu).unwrap();
            (0..n).filter(|_| ask() == want).count()
        })
        .join()
        .unwrap();
        total.0 += n;
        total.1 += hits;
    }
    total
}
