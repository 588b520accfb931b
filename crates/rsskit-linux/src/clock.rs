//! The monotonic clock every tool stamps with.

/// `CLOCK_MONOTONIC` in nanoseconds: probe timestamps, event-loop deadlines,
/// the data plane's packet clock. One clock, so stamps taken in different
/// modules compare.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::monotonic_ns() >= a + 1_000_000);
    }
}
