//! The monotonic clock every tool stamps with, and the calendar date of
//! wall-clock seconds (for file stamps and HTTP dates).

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

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch: the wall-clock
/// stamp of a received frame where the kernel gives none (AF_XDP), as
/// AF_PACKET and pcap records carry one.
#[inline]
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A UTC calendar time (proleptic Gregorian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    /// Year, e.g. 2026.
    pub year: i64,
    /// Month, 1-12.
    pub month: u32,
    /// Day of the month, 1-31.
    pub day: u32,
    /// Hour, 0-23.
    pub hour: u32,
    /// Minute, 0-59.
    pub minute: u32,
    /// Second, 0-59 (no leap seconds: Unix time has none).
    pub second: u32,
    /// Day of the week, 0 = Sunday.
    pub weekday: u32,
}

/// What `secs` seconds since the Unix epoch read as in UTC (Howard
/// Hinnant's `civil_from_days`).
pub fn utc(secs: u64) -> Utc {
    let days = (secs / 86400) as i64;
    let rem = (secs % 86400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    Utc {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4) % 7) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::Utc;

    #[test]
    fn calendar() {
        let u = |year, month, day, hour, minute, second, weekday| Utc {
            year,
            month,
            day,
            hour,
            minute,
            second,
            weekday,
        };
        assert_eq!(super::utc(0), u(1970, 1, 1, 0, 0, 0, 4));
        assert_eq!(super::utc(784_111_777), u(1994, 11, 6, 8, 49, 37, 0));
        assert_eq!(super::utc(951_782_400 + 3661), u(2000, 2, 29, 1, 1, 1, 2));
        assert_eq!(super::utc(1_798_070_400), u(2026, 12, 24, 0, 0, 0, 4));
    }

    #[test]
    fn monotonic() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::monotonic_ns() >= a + 1_000_000);
    }
}
