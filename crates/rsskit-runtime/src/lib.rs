//! rsskit runtime: pinned per-bucket workers and the tools built on them.
//!
//! No `unsafe` here: every system call goes through `rsskit_linux`.
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
pub mod config;
pub mod demo;
pub mod hist;
pub mod http;
pub mod proto;
pub mod rebalance;
pub mod stats;
pub mod steer;
pub mod takeover;
pub mod udp_echo;
pub mod udp_load;
pub mod worker;

/// An error and its causes on one line, `outer: inner: innermost`, as the
/// CLI prints them: for errors that must travel as text (from a worker
/// thread) or be shown whole by a caller without `anyhow`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
