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

#[cfg(test)]
mod tests {
    use super::*;

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
