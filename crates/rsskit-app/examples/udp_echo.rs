//! A per-CPU UDP echo server: one socket and one pinned worker per online
//! CPU, steered by the kernel (`cpu`) or by the Toeplitz hash (`toeplitz`).
//! Each reply is the datagram followed by its RSS metadata.
//!
//! Usage: `udp_echo [BIND] [cpu|toeplitz|kernel|shared]`
//! (default `127.0.0.1:0 cpu`); prints `listening on ADDR`.
mod common;

use rsskit_app::{online_cpus, run_pinned, HashConfig, RssKey, RssPolicy, UdpGroup};
use rsskit_app::{CpuId, Error};
use std::io::Write;

fn main() -> Result<(), Error> {
    let (bind, mode) = common::args();
    // One worker per online CPU; UDP hashed on the 4-tuple.
    let cpus: Vec<CpuId> = online_cpus().into_iter().map(|c| CpuId(c as u32)).collect();
    let hash = HashConfig::default().with_udp_4tuple(true);
    let policy = RssPolicy::new(RssKey::microsoft(), hash, &cpus, None)?;
    let group = UdpGroup::bind(&policy, mode, bind)?;
    println!("listening on {}", group.local_addr());
    std::io::stdout().flush().ok();
    run_pinned(&policy, group.into_sockets(), |worker, cpu, mut sock| {
        let mut buf = vec![0u8; 2048];
        loop {
            let Ok((n, m)) = sock.recv_meta(&mut buf) else { continue };
            let kcpu = m.kernel_cpu.map_or("-".to_string(), |c| c.0.to_string());
            let mut reply = buf[..n].to_vec();
            let stamp = format!(
                "|worker={} cpu={} kernel_cpu={kcpu} hash={:08x} bucket={} owner={} misdirected={}",
                worker.0, cpu.0, m.hash, m.bucket, m.owner.0, m.misdirected
            );
            reply.extend_from_slice(stamp.as_bytes());
            let _ = sock.send_to(&reply, m.from);
        }
    })?;
    Ok(())
}
