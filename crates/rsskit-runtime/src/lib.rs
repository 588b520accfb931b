//! rsskit runtime: pinned per-bucket workers and the tools built on them.
//!
//! No `unsafe` here: every system call goes through `rsskit_linux`.
#![forbid(unsafe_code)]
pub mod demo;
pub mod http;
pub mod proto;
pub mod rebalance;
pub mod stats;
pub mod steer;
pub mod udp_echo;
pub mod udp_load;
pub mod worker;
