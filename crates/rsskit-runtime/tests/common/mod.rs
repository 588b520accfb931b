//! Shared by the steering tests and benchmarks: a reuseport group on
//! loopback, a private network namespace, and the sender-CPU measurement
//! of the "steering program cost" method (docs/BENCHMARKS.md).
#![allow(dead_code)]

use rsskit_linux::affinity::thread_cpu_time;
use rsskit_linux::socket::{udp_socket, wait_readable, Batch, UdpOptions};
use std::net::{SocketAddr, UdpSocket as Socket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// `n` non-blocking UDP sockets in one reuseport group on `ip` (an
/// ephemeral port), and the group's address.
pub fn group(ip: &str, n: usize) -> (Vec<Socket>, SocketAddr) {
    let opts = UdpOptions { reuseport: true, nonblocking: true, ..Default::default() };
    let first: Socket = udp_socket(format!("{ip}:0").parse().unwrap(), &opts).unwrap().into();
    let at = first.local_addr().unwrap();
    let mut v = vec![first];
    for _ in 1..n {
        v.push(udp_socket(at, &opts).unwrap().into());
    }
    (v, at)
}

/// Runs `f` on a thread of its own in a new network namespace with `lo`
/// up (needs root), so the host's UDP counters are not disturbed.
pub fn in_private_netns(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unshare only affects this thread's namespaces.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare(CLONE_NEWNET) needs root: {}", std::io::Error::last_os_error());
        let st = std::process::Command::new("ip").args(["link", "set", "lo", "up"]).status().unwrap();
        assert!(st.success());
        f()
    })
    .join()
    .unwrap();
}

/// Sends `n` 64-byte datagrams to `at` with `sendmmsg` (32 per call) from
/// this (pinned) thread while one thread per socket drains the group (at
/// most 256 in flight, so nothing is dropped and every mode takes the same
/// path). On loopback the receive path, reuseport selection and its
/// program run in the sender's softirq, so the sender's thread CPU time
/// per datagram is the cost compared. Returns (ns per datagram, sent).
pub fn sender_cpu_per_datagram(socks: Vec<Socket>, at: SocketAddr, n: usize) -> (f64, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicUsize::new(0));
    let drains: Vec<_> = socks
        .into_iter()
        .map(|s| {
            let (stop, received) = (stop.clone(), received.clone());
            std::thread::spawn(move || {
                let mut b = Batch::new(64, 128, false);
                let mut got = 0usize;
                while !stop.load(Relaxed) {
                    match b.recv(&s, true) {
                        Ok(n) => {
                            got += n;
                            received.fetch_add(n, Relaxed);
                        }
                        Err(_) => {
                            wait_readable(&s, Duration::from_millis(2)).ok();
                        }
                    }
                }
                while let Ok(n) = b.recv(&s, true) {
                    got += n;
                }
                got
            })
        })
        .collect();
    let tx = udp_socket(SocketAddr::new(at.ip(), 0), &UdpOptions::default()).unwrap();
    let mut batch = Batch::new(32, 64, false);
    let t0 = thread_cpu_time();
    let mut sent = 0;
    while sent < n {
        while !batch.is_full() {
            batch.push(&[0u8; 64], &at);
        }
        sent += batch.send(&tx).sent;
        // Let the drains keep up; sleeping costs the sender no CPU time.
        while sent - received.load(Relaxed) > 256 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let dt = thread_cpu_time() - t0;
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Relaxed);
    let got: usize = drains.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(got * 100 >= sent * 95, "{got} of {sent} received: drains fell behind");
    (dt.as_nanos() as f64 / sent as f64, sent)
}

/// The median (upper median for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
