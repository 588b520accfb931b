//! CPU-local HTTP/1.1: a per-bucket server (`rsskit http-serve`) and a load
//! tester (`rsskit http-load`).
//!
//! Both follow the runtime's model: one pinned worker per CPU, each with its
//! own epoll loop ([`event`]) and its own connections; nothing is shared on
//! the request path (counters are published by their owner with relaxed
//! stores and only read by the reporting thread).
//!
//! The event loop is `epoll` (`rsskit_linux::epoll`) rather than `mio`: the accept cap
//! (at most `--accept-batch` connections per wake-up, DragonFly's fix) needs
//! a *level-triggered* listener, so that a listener left with pending
//! connections is reported again on the next wake-up; mio registers
//! everything edge-triggered. The wrapper is small and its unsafe blocks
//! are annotated.

pub mod conn;
pub mod counters;
pub mod files;
/// The latency histograms moved to [`crate::hist`] (UDP reports use them too).
pub use crate::hist;
pub mod load;
pub mod request;
pub mod server;

/// Monotonic nanoseconds, the HTTP code's clock.
pub use rsskit_linux::clock::monotonic_ns as now_ns;
/// The epoll wrapper lives in the platform layer; the HTTP code names it `event`.
pub use rsskit_linux::epoll as event;
pub use rsskit_linux::process::raise_nofile;

/// An HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`) for `secs` since the epoch.
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let t = rsskit_linux::clock::utc(secs);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[t.weekday as usize],
        t.day,
        MONTHS[t.month as usize - 1],
        t.year,
        t.hour,
        t.minute,
        t.second
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
