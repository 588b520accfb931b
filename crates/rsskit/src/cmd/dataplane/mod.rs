//! The user-space data plane: `pipeline` and `firewall`, and the
//! `--in`/`--out` flags they share ([`io_args`]).

pub mod firewall;
pub mod io_args;
pub mod pipeline;
