//! CPU affinity of the calling thread: pin it to one CPU, ask which CPU it
//! runs on.

use std::io;

/// Pins the calling thread to `cpu` (`sched_setaffinity(0, ...)`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE, checked above, so CPU_SET stays in bounds.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 = calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("pinning thread to CPU {cpu}: {e}")));
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: as above, zeroed cpu_set_t is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = calling thread; the kernel writes at most size_of::<cpu_set_t>() bytes.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads within the set for every index < CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// The CPU the calling thread is running on right now (`sched_getcpu`), or
/// `None` if the kernel cannot say.
#[inline]
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments, no memory touched.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// CPU time consumed by the calling thread so far (`CLOCK_THREAD_CPUTIME_ID`):
/// benchmarks report cost per packet from it, which other load on the
/// machine does not inflate the way it inflates wall-clock time.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_and_observe() {
        let cpus = crate::cpulist::online();
        let allowed = current_affinity().unwrap();
        assert!(!allowed.is_empty());
        let target = *cpus.iter().rev().find(|c| allowed.contains(c)).unwrap();
        std::thread::spawn(move || {
            pin_current_thread(target).unwrap();
            assert_eq!(current_affinity().unwrap(), vec![target]);
            for _ in 0..100 {
                assert_eq!(current_cpu(), Some(target));
                std::thread::yield_now();
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn bad_cpu_is_an_error() {
        assert!(pin_current_thread(100_000).is_err());
        // A CPU id inside the set size but not present on this machine.
        let e = std::thread::spawn(|| pin_current_thread(libc::CPU_SETSIZE as usize - 1)).join().unwrap();
        if crate::cpulist::online().len() < libc::CPU_SETSIZE as usize {
            assert!(e.is_err());
        }
    }
}
