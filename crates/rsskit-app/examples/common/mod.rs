//! What both example servers take on the command line.

use rsskit_app::Steer;
use std::net::SocketAddr;

/// `[BIND] [cpu|toeplitz|kernel|shared]`, default `127.0.0.1:0 cpu`; exits
/// with status 2 and a one-line error on anything else.
pub fn args() -> (SocketAddr, Steer) {
    let mut args = std::env::args().skip(1);
    let bind = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let Ok(bind) = bind.parse() else {
        eprintln!("error: '{bind}' is not an address:port");
        std::process::exit(2);
    };
    let mode: Steer = args.next().unwrap_or_else(|| "cpu".into()).parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    (bind, mode)
}
