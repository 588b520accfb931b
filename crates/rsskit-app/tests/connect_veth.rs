//! Outgoing flows on a multi-queue veth between two namespaces: the replies
//! to a flow opened with [`connect_udp`] are processed on the calling
//! worker's CPU, measured with `SO_INCOMING_CPU` on the caller's socket.
//!
//! A veth has no Toeplitz hardware, so the test builds the "NIC" from real
//! kernel pieces: the peer answers from a Toeplitz-steered group (a
//! symmetric key, so the request's bucket is the reply's), each answering
//! worker pinned to its bucket owner's CPU; XPS sends CPU `c`'s replies on
//! TX queue `c + 1`, which the client's veth receives on RX queue `c`, and
//! RPS on that queue processes them on CPU `c`. A control flow whose port
//! belongs to the *other* worker must then land on the other CPU (so the
//! result is the port's doing, not RFS following the caller). Needs root,
//! `ip` and two CPUs.

use rsskit_app::{
    connect_udp, run_pinned, ConnectOptions, CpuId, HashConfig, RssKey, RssPolicy, Steer, UdpGroup, WorkerId,
};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("this test needs `ip` (iproute2) and root");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// A namespace, deleted on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Ns {
        let name = format!("rska{tag}{}", std::process::id() % 100000);
        ip(&["netns", "add", &name]);
        Ns(name)
    }
    fn write(&self, path: &str, value: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "sh", "-c", &format!("echo {value} > {path}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
    }
    /// Moves the calling thread into the namespace.
    fn enter(&self) {
        let f = std::fs::File::open(format!("/var/run/netns/{}", self.0)).unwrap();
        // SAFETY: a valid namespace fd; only the calling thread changes namespace.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn incoming_cpu(s: &impl AsRawFd) -> i32 {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and `len` is the size of `v`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&mut v as *mut i32).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    v
}

#[test]
#[cfg_attr(rsskit_one_cpu, ignore = "needs two CPUs")]
fn replies_processed_on_the_callers_cpu() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (CI runs it as root)");
    let online = rsskit_app::online_cpus();
    let cpus = [online[0], online[1]];
    let (server, client) = (Ns::new("s"), Ns::new("c"));
    let (vs, vc) = (format!("{}v", server.0), format!("{}v", client.0));
    let (vs, vc) = (&vs[vs.len().saturating_sub(15)..], &vc[vc.len().saturating_sub(15)..]);
    let q = ["numtxqueues", "3", "numrxqueues", "3"];
    let mut args = vec!["link", "add", vs];
    args.extend_from_slice(&q);
    args.extend_from_slice(&["netns", &server.0, "type", "veth", "peer", "name", vc]);
    args.extend_from_slice(&q);
    args.extend_from_slice(&["netns", &client.0]);
    ip(&args);
    for (ns, dev, a4, a6) in
        [(&server, vs, "198.18.7.1/24", "fd78::1/64"), (&client, vc, "198.18.7.2/24", "fd78::2/64")]
    {
        ns.write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "0");
        ip(&["-n", &ns.0, "addr", "add", a4, "dev", dev]);
        ip(&["-n", &ns.0, "-6", "addr", "add", a6, "dev", dev, "nodad"]);
        ip(&["-n", &ns.0, "link", "set", dev, "up"]);
    }
    for (i, cpu) in cpus.iter().enumerate() {
        let mask = format!("{:x}", 1u64 << cpu);
        server.write(&format!("/sys/class/net/{vs}/queues/tx-{}/xps_cpus", i + 1), &mask);
        client.write(&format!("/sys/class/net/{vc}/queues/rx-{i}/rps_cpus"), &mask);
    }
    let worker_cpus = [CpuId(cpus[0] as u32), CpuId(cpus[1] as u32)];
    let hash = HashConfig::default().with_udp_4tuple(true);
    let policy = RssPolicy::new(RssKey::symmetric(), hash, &worker_cpus, None).unwrap();

    for (srv_ip, what) in [("198.18.7.1", "IPv4"), ("fd78::1", "IPv6")] {
        let srv_ip: IpAddr = srv_ip.parse().unwrap();
        let t0 = std::time::Instant::now();
        let stop = AtomicBool::new(false);
        // The peer: a Toeplitz-steered echo group in the server namespace.
        let group = std::thread::scope(|s| {
            s.spawn(|| {
                server.enter();
                UdpGroup::bind(&policy, Steer::Toeplitz, SocketAddr::new(srv_ip, 0)).unwrap()
            })
            .join()
            .unwrap()
        });
        let remote = group.local_addr();
        std::thread::scope(|s| {
            let echo = s.spawn(|| {
                let socks = group.into_sockets();
                for so in &socks {
                    so.socket().set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                }
                run_pinned(&policy, socks, |_, _, mut so| {
                    let mut buf = [0u8; 64];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((n, m)) = so.recv_meta(&mut buf) {
                            so.send_to(&buf[..n], m.from).unwrap();
                        }
                    }
                })
                .unwrap();
            });
            // The callers: one pinned worker per CPU in the client namespace.
            let res = std::thread::scope(|s2| {
                s2.spawn(|| {
                    client.enter();
                    run_pinned(&policy, vec![(); 2], |w, cpu, ()| {
                        let mut seen = Vec::new();
                        for (k, owner) in [w, WorkerId(1 - w.0)].into_iter().enumerate() {
                            for i in 0..6 {
                                let opts = ConnectOptions {
                                    ports: (20000 + 2000 * k as u16 + 300 * i)..=60999,
                                    ..Default::default()
                                };
                                let c = connect_udp(&policy, owner, remote, &opts).unwrap();
                                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                                c.send(b"ping").unwrap();
                                let mut buf = [0u8; 8];
                                assert_eq!(c.recv(&mut buf).expect("an echo within 10 s"), 4);
                                seen.push((cpu, owner, policy.cpu_of(owner).unwrap(), incoming_cpu(&c)));
                            }
                        }
                        seen
                    })
                    .unwrap()
                })
                .join()
                .unwrap()
            });
            stop.store(true, Ordering::Relaxed);
            echo.join().unwrap();
            eprintln!("{what}: flows done in {:?}", t0.elapsed());
            for (caller_cpu, owner, owner_cpu, kernel_cpu) in res.into_iter().flatten() {
                assert_eq!(
                    kernel_cpu, owner_cpu.0 as i32,
                    "{what}: caller on {caller_cpu}, port for {owner}: replies processed on CPU {kernel_cpu}"
                );
            }
        });
    }
}
