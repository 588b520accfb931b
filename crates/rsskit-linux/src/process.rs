//! Process and thread limits and scheduling.

use std::io;

/// Raises `RLIMIT_NOFILE` to at least `want` descriptors if it can: the soft
/// limit up to the hard one, and the hard one too when privileged
/// (`CAP_SYS_RESOURCE`, up to `fs.nr_open`). Returns the soft limit in force.
pub fn raise_nofile(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < want {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(1 << 20);
        let hard = want.min(nr_open);
        let up = libc::rlimit { rlim_cur: hard, rlim_max: hard };
        // SAFETY: `up` is a valid rlimit; failure (no privilege) is handled below.
        if hard > lim.rlim_max && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } == 0 {
            return Ok(hard);
        }
    }
    let soft = want.min(lim.rlim_max);
    let up = libc::rlimit { rlim_cur: soft, rlim_max: lim.rlim_max };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(soft)
}

/// Puts the calling thread under `SCHED_BATCH` (priority 0; needs no
/// privilege): no wakeup preemption of whatever shares its CPU.
pub fn set_sched_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a live sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the calling thread runs under `SCHED_BATCH`.
pub fn is_sched_batch() -> bool {
    // SAFETY: plain query of the calling thread's policy.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_BATCH }
}

/// Makes the calling process a child subreaper (`PR_SET_CHILD_SUBREAPER`):
/// a descendant orphaned by its parent (a server that daemonises: fork,
/// parent exits) becomes our child instead of init's, so it can be found,
/// waited for and signalled.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling process's children (`/proc/self/task/*/children`), sorted.
pub fn own_children() -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task")?.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("children")) else { continue };
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// How a child ended, without blocking (`waitpid(pid, WNOHANG)`):
/// `Some(exit code, or 128 + signal)` once it has, and it is reaped.
pub fn try_wait_child(pid: i32) -> io::Result<Option<i32>> {
    let mut st = 0;
    // SAFETY: waitpid on one pid with a live status word.
    let rc = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc == 0 {
        return Ok(None);
    }
    Ok(Some(if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) }))
}

/// This process's effective user id (`geteuid(2)`).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by try_wait_child, which the lint does not know
    fn own_children_and_try_wait() {
        let c = std::process::Command::new("sh")
            .args(["-c", "read x; exit 3"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = c.id() as i32;
        assert!(own_children().unwrap().contains(&pid));
        assert_eq!(try_wait_child(pid).unwrap(), None, "still running");
        drop(c.stdin);
        let t = std::time::Instant::now();
        let code = loop {
            if let Some(code) = try_wait_child(pid).unwrap() {
                break code;
            }
            assert!(t.elapsed().as_secs() < 10);
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(code, 3);
        assert!(!own_children().unwrap().contains(&pid), "reaped");
    }

    #[test]
    fn sched_batch_applies_to_the_calling_thread_only() {
        let batch = std::thread::spawn(|| {
            set_sched_batch().unwrap();
            is_sched_batch()
        })
        .join()
        .unwrap();
        assert!(batch);
        assert!(!is_sched_batch());
    }
}
