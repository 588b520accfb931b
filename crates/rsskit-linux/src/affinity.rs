//! CPU affinity of the calling thread: pin it to one CPU, ask which CPU it
//! runs on; spawn a named thread already pinned ([`spawn_pinned`]); its
//! scheduling policy ([`ThreadPolicy`]).

use std::io;
use std::sync::mpsc;
use std::thread::{self, JoinHandle, Scope, ScopedJoinHandle};

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

/// Scheduling policy of a worker thread (sched(7)); both at nice 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadPolicy {
    /// `SCHED_OTHER`: a wake-up may preempt the task running on the CPU.
    #[default]
    Normal,
    /// `SCHED_BATCH`: the same fair share, but a wake-up never preempts the
    /// running task: the thread runs when that task blocks or its slice
    /// ends, and finds more work queued by then (fewer wake-ups and
    /// context switches per datagram; up to a slice of added latency when
    /// the CPU is shared with a busy task).
    Batch,
}

impl ThreadPolicy {
    /// `normal` or `batch`.
    pub fn name(self) -> &'static str {
        match self {
            ThreadPolicy::Normal => "normal",
            ThreadPolicy::Batch => "batch",
        }
    }

    fn raw(self) -> libc::c_int {
        match self {
            ThreadPolicy::Normal => libc::SCHED_OTHER,
            ThreadPolicy::Batch => libc::SCHED_BATCH,
        }
    }
}

impl std::fmt::Display for ThreadPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ThreadPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "normal" => Ok(ThreadPolicy::Normal),
            "batch" => Ok(ThreadPolicy::Batch),
            _ => Err(format!("unknown scheduling policy '{s}' (expected normal, batch)")),
        }
    }
}

/// Sets the calling thread's policy (`sched_setscheduler(0, ...)`, priority
/// 0: neither needs privileges).
pub fn set_current_thread_policy(p: ThreadPolicy) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 = calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, p.raw(), &param) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setting scheduling policy {p}: {e}")));
    }
    Ok(())
}

/// The policy of thread `tid` (0: the calling thread); `None` for one that
/// is neither (real-time, idle, deadline).
pub fn thread_policy(tid: libc::pid_t) -> io::Result<Option<ThreadPolicy>> {
    // SAFETY: plain system call on a thread id.
    let rc = unsafe { libc::sched_getscheduler(tid) };
    match rc {
        _ if rc < 0 => Err(io::Error::last_os_error()),
        libc::SCHED_OTHER => Ok(Some(ThreadPolicy::Normal)),
        libc::SCHED_BATCH => Ok(Some(ThreadPolicy::Batch)),
        _ => Ok(None),
    }
}

/// Spawns a thread called `name`, pins it to `cpu` (no pinning for `None`)
/// and only then runs `f` on it. Returns once the thread is pinned, so a CPU
/// that cannot be used is an error here, naming the CPU, and `f` never runs
/// on the wrong one. The one "spawn and pin" of the workspace: workers and
/// benchmarks use it rather than pinning from inside their closures.
pub fn spawn_pinned<T, F>(name: impl Into<String>, cpu: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    let h = thread::Builder::new().name(name.into()).spawn(move || pinned_body(cpu, tx, f))?;
    match settle(rx) {
        Ok(()) => Ok(h),
        Err(e) => {
            let _ = h.join();
            Err(e)
        }
    }
}

/// [`spawn_pinned`] inside a [`std::thread::scope`], for workers that
/// borrow from the caller's stack.
pub fn spawn_pinned_scoped<'scope, 'env, T, F>(
    scope: &'scope Scope<'scope, 'env>,
    name: impl Into<String>,
    cpu: Option<usize>,
    f: F,
) -> io::Result<ScopedJoinHandle<'scope, T>>
where
    T: Send + 'scope,
    F: FnOnce() -> T + Send + 'scope,
{
    let (tx, rx) = mpsc::sync_channel(1);
    let h = thread::Builder::new().name(name.into()).spawn_scoped(scope, move || pinned_body(cpu, tx, f))?;
    match settle(rx) {
        Ok(()) => Ok(h),
        Err(e) => {
            let _ = h.join();
            Err(e)
        }
    }
}

/// The thread side: pin, report, then run `f` (or end without running it).
fn pinned_body<T>(cpu: Option<usize>, tx: mpsc::SyncSender<io::Result<()>>, f: impl FnOnce() -> T) -> T {
    let pinned = cpu.map_or(Ok(()), pin_current_thread);
    let ok = pinned.is_ok();
    let _ = tx.send(pinned);
    if !ok {
        // No `T` to return: unwind without the panic hook (no message);
        // the spawner joins this thread and returns the pinning error.
        std::panic::resume_unwind(Box::new(NotPinned));
    }
    f()
}

/// The spawner side: the thread's pinning result. On an error the thread
/// is ending without running `f`; the caller joins it so nothing is left
/// behind.
fn settle(rx: mpsc::Receiver<io::Result<()>>) -> io::Result<()> {
    rx.recv().unwrap_or_else(|_| Err(io::Error::other("the new thread ended before it was pinned")))
}

/// Unwind payload of a thread that could not be pinned.
struct NotPinned;

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

/// Sets the CPUs another task may run on (`sched_setaffinity(pid, ...)`):
/// a kernel thread such as `napi/eth0-8193`. The caller verifies that `pid`
/// is the task it means (a PID read from the kernel can be reused).
pub fn set_task_affinity(pid: u32, cpus: &[usize]) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    if pid <= 0 {
        // 0 would be the calling thread: never meant here.
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: set is a live cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
    fn spawn_pinned_runs_on_the_cpu_or_fails_without_running() {
        let allowed = current_affinity().unwrap();
        let target = *allowed.last().unwrap();
        let h = spawn_pinned("pin-test", Some(target), move || {
            (current_affinity().unwrap(), thread::current().name().map(String::from))
        })
        .unwrap();
        let (aff, name) = h.join().unwrap();
        assert_eq!(aff, vec![target]);
        assert_eq!(name.as_deref(), Some("pin-test"));
        // Unpinned: the spawner's affinity is kept.
        let h = spawn_pinned("free", None, current_affinity).unwrap();
        assert_eq!(h.join().unwrap().unwrap(), allowed);
        // A CPU that does not exist: an error naming it, and `f` never ran.
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = ran.clone();
        let e =
            spawn_pinned("bad", Some(100_000), move || r2.store(true, std::sync::atomic::Ordering::SeqCst))
                .unwrap_err();
        assert!(e.to_string().contains("100000"), "{e}");
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        // Scoped: borrows from the caller.
        let v = [1u32, 2, 3];
        let sum = thread::scope(|s| {
            let h = spawn_pinned_scoped(s, "scoped", Some(target), || v.iter().sum::<u32>()).unwrap();
            assert!(spawn_pinned_scoped(s, "scoped-bad", Some(100_000), || v.len()).is_err());
            h.join().unwrap()
        });
        assert_eq!(sum, 6);
    }

    #[test]
    fn thread_policy_is_set_per_thread() {
        let main_before = thread_policy(0).unwrap();
        let (in_thread, after) = thread::spawn(|| {
            set_current_thread_policy(ThreadPolicy::Batch).unwrap();
            let batch = thread_policy(0).unwrap();
            set_current_thread_policy(ThreadPolicy::Normal).unwrap();
            (batch, thread_policy(0).unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(in_thread, Some(ThreadPolicy::Batch));
        assert_eq!(after, Some(ThreadPolicy::Normal));
        // The spawning thread is untouched.
        assert_eq!(thread_policy(0).unwrap(), main_before);
        assert_eq!("batch".parse::<ThreadPolicy>(), Ok(ThreadPolicy::Batch));
        assert!("fifo".parse::<ThreadPolicy>().unwrap_err().contains("normal, batch"));
        assert!(thread_policy(i32::MAX).is_err());
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
