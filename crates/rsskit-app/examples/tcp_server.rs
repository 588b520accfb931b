//! A per-CPU TCP server: one listener and one pinned worker per online CPU
//! in one steered `SO_REUSEPORT` group. For every connection it reads one
//! line and answers with the line and the connection's RSS metadata.
//!
//! Usage: `tcp_server [BIND] [cpu|toeplitz|kernel|shared]`
//! (default `127.0.0.1:0 cpu`); prints `listening on ADDR`.
mod common;

use rsskit_app::{online_cpus, per_cpu_policy, run_pinned, Error, TcpGroup};
use std::io::{BufRead, BufReader, Write};

fn main() -> Result<(), Error> {
    let (bind, mode) = common::args();
    let policy = per_cpu_policy(&online_cpus())?;
    let group = TcpGroup::bind(&policy, mode, bind)?;
    println!("listening on {}", group.local_addr());
    std::io::stdout().flush().ok();
    run_pinned(&policy, group.into_listeners(), |worker, cpu, listener| loop {
        let Ok((stream, m)) = listener.accept_meta() else { continue };
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let kcpu = m.kernel_cpu.map_or("-".to_string(), |c| c.0.to_string());
        let reply = format!(
            "{}|worker={} cpu={} kernel_cpu={kcpu} hash={:08x} bucket={} owner={} misdirected={}\n",
            line.trim_end(),
            worker.0,
            cpu.0,
            m.hash,
            m.bucket,
            m.owner.0,
            m.misdirected
        );
        let _ = (&stream).write_all(reply.as_bytes());
    })?;
    Ok(())
}
