//! rsskit runtime: pinned per-bucket workers and the tools built on them.
pub mod http;
pub mod proto;
pub mod udp_load;
pub mod stats;
pub mod steer;
pub mod worker;
pub mod udp_echo;
pub mod demo;
