//! CPU-local HTTP/1.1: a per-bucket server (`rsskit http-serve`) and a load
//! tester (`rsskit http-load`).
//!
//! Both follow the runtime's model: one pinned worker per CPU, each with its
//! own epoll loop ([`event`]) and its own connections; nothing is shared on
//! the request path (counters are published by their owner with relaxed
//! stores and only read by the reporting thread).
//!
//! The event loop is `epoll` through `libc` rather than `mio`: the accept cap
//! (at most `--accept-batch` connections per wake-up, DragonFly's fix) needs
//! a *level-triggered* listener, so that a listener left with pending
//! connections is reported again on the next wake-up; mio registers
//! everything edge-triggered. The wrapper is small and its unsafe blocks
//! are annotated.

pub mod event;
pub mod files;
pub mod hist;
pub mod load;
pub mod request;
pub mod server;

use std::io;

/// Monotonic clock in nanoseconds (`CLOCK_MONOTONIC`).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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

/// An HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`) for `secs` since the epoch.
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Seconds since the epoch, now.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn nofile_is_at_least_what_it_was() {
        let got = raise_nofile(1024).unwrap();
        assert!(got >= 1024);
    }
}
