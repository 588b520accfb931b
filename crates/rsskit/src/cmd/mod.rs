//! One module per subcommand; shared argument parsing in [`common`].

pub mod apply;
pub mod bench;
pub mod bench_classify;
pub mod bench_firewall;
pub mod check;
pub mod classify_experiment;
pub mod common;
pub mod demo;
pub mod find;
pub mod firewall;
pub mod hash;
pub mod hash_nic;
pub mod http_load;
pub mod http_serve;
pub mod info;
pub mod io_args;
pub mod pipeline;
pub mod plan;
pub mod rebalance;
pub mod run;
pub mod steer;
pub mod table;
pub mod top;
pub mod udp_echo;
pub mod udp_load;
pub mod xdp_steer;
