//! Serving and loading traffic steered by one RSS policy: `udp-echo`,
//! `udp-load`, `demo`, `http-serve`, `http-load`, `xdp-steer`, and taking
//! over another server's group (`steer`, `run`, through [`takeover`]).

pub mod demo;
pub mod http_load;
pub mod http_serve;
pub mod run;
pub mod steer;
pub mod takeover;
pub mod udp_echo;
pub mod udp_load;
pub mod xdp_steer;

use rsskit_runtime::udp_load::StreamReport;

/// The match column: yes, moved (the server moved the bucket), NO.
pub fn verdict(s: &StreamReport) -> &'static str {
    match (s.matched, s.moved) {
        (true, true) => "moved",
        (true, false) => "yes",
        (false, _) => "NO",
    }
}
