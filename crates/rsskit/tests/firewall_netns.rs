//! End to end: a TCP client and server in two network namespaces, `rsskit
//! firewall` in a third bridging the two veths through AF_PACKET with a
//! redirect rule. The client connects to 10.77.0.100:8080, which exists
//! nowhere; the firewall sends it to the server at 10.77.0.2:80 and the
//! replies back, so the client talks to 10.77.0.100:8080 throughout.
//!
//! Needs root and iproute2. Transmit checksum offload is turned off on the
//! endpoints (the `ETHTOOL_STXCSUM` ioctl): AF_PACKET hands over frames whose
//! TCP checksum the kernel left for the NIC to fill. Bounded: every wait has a deadline;
//! namespaces and the rsskit process are removed on drop, also on failure.

mod common;

use common::netns::{require_root_and_ip, rsskit, unique, veth, Netns, Proc};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Moves the calling thread into namespace `ns`.
fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace file");
    // SAFETY: setns on a valid namespace fd; affects this thread only.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

#[test]
fn redirect_through_afpacket_bridge() {
    bridge("netisr");
}

#[test]
fn redirect_through_afpacket_bridge_own_engine() {
    bridge("own");
}

/// The server finds the client's MAC by ARP through the bridge: non-IP
/// frames must pass.
fn bridge(engine: &str) {
    // (Without the offload change the server would drop every segment.)
    require_root_and_ip();
    let client = Netns::new("fwc");
    let middle = Netns::new("fwm");
    let server = Netns::new("fws");
    let (c0, c1, s0, s1) = (unique("fc0"), unique("fc1"), unique("fs0"), unique("fs1"));
    veth((&c0, &client), (&c1, &middle), None);
    veth((&s0, &server), (&s1, &middle), None);
    for (ns, dev) in [(&client, &c0), (&middle, &c1), (&middle, &s1), (&server, &s0)] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1");
        ns.ip(&["link", "set", dev, "up"]);
    }
    client.ip(&["addr", "add", "10.77.0.1/24", "dev", &c0]);
    server.ip(&["addr", "add", "10.77.0.2/24", "dev", &s0]);
    client.tx_csum_off(&c0);
    server.tx_csum_off(&s0);
    // 10.77.0.100 is nobody: the client sends its frames to the server's MAC.
    let server_mac = server.read(&format!("/sys/class/net/{s0}/address"));
    client.ip(&["neigh", "add", "10.77.0.100", "lladdr", &server_mac, "dev", &c0, "nud", "permanent"]);

    let dir = std::env::temp_dir().join(format!("rsskit-fw-e2e-{engine}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("redirect.rules");
    std::fs::write(
        &rules,
        "check-state\nredirect tcp 10.77.0.100:8080 -> 10.77.0.2:80\nallow tcp from any to 10.77.0.2 80\n",
    )
    .unwrap();
    let mut cmd = middle.command(&rsskit());
    cmd.args(["firewall", "--rules"]).arg(&rules);
    cmd.args(["--in", &format!("afpacket:{c1}"), "--out", &format!("afpacket:{s1}")]);
    cmd.args(["--workers", "2", "--duration", "30", "--json", "--engine", engine]);
    let fw = Proc::spawn(cmd);
    let fw_started = Instant::now();

    // Server: answers "pong:" + what it read, then closes.
    let srv_ns = server.name.clone();
    let server_thread = std::thread::spawn(move || {
        enter(&srv_ns);
        let l = TcpListener::bind("10.77.0.2:80").expect("bind server");
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(25);
        let mut served = Vec::new();
        while served.len() < 5 && Instant::now() < deadline {
            match l.accept() {
                Ok((mut s, peer)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = [0u8; 64];
                    let n = s.read(&mut buf).unwrap_or(0);
                    let _ = s.write_all(format!("pong:{}", String::from_utf8_lossy(&buf[..n])).as_bytes());
                    served.push(peer);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        served
    });

    // Client: five short connections to the redirected address.
    let cl_ns = client.name.clone();
    let replies = std::thread::spawn(move || {
        enter(&cl_ns);
        let to: SocketAddr = "10.77.0.100:8080".parse().unwrap();
        let mut out = Vec::new();
        let start = Instant::now();
        for i in 0..5 {
            // The first connection may race rsskit's start: retry for a while.
            let mut s = loop {
                match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                    Ok(s) => break s,
                    Err(e) if start.elapsed() < Duration::from_secs(10) => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => panic!("connection {i} to {to}: {e}"),
                }
            };
            assert_eq!(s.peer_addr().unwrap(), to, "the client only ever sees the original address");
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(format!("ping{i}").as_bytes()).unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            out.push(r);
        }
        // Straight to the server's port 81: no rule allows it.
        let direct: SocketAddr = "10.77.0.2:81".parse().unwrap();
        let denied = TcpStream::connect_timeout(&direct, Duration::from_millis(800)).is_err();
        (out, denied)
    })
    .join()
    .expect("client thread");
    let served = server_thread.join().expect("server thread");
    // Let at least one per-second status line out before stopping.
    while fw_started.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    fw.signal(libc::SIGINT);
    let out = fw.wait(Duration::from_secs(15));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(|l| l.starts_with("t=1s packets=") && l.contains("states=[")),
        "status line per second on stderr: {stderr}"
    );
    let (texts, denied) = replies;
    assert_eq!(texts, (0..5).map(|i| format!("pong:ping{i}")).collect::<Vec<_>>(), "rsskit: {stdout}");
    assert!(denied, "a port no rule allows must not connect");
    assert_eq!(served.len(), 5);
    assert!(served.iter().all(|p| p.ip().to_string() == "10.77.0.1"), "{served:?}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let redirect = v["rules"].as_array().unwrap().iter().find(|r| r["number"] == 200).unwrap();
    // Five connections, at least SYN/ACK/data/FIN each way.
    assert!(redirect["packets"].as_u64().unwrap() >= 5 * 6, "{v}");
    assert!(v["total"]["installs"].as_u64().unwrap() >= 10, "a master and a slave per connection: {v}");
    assert!(v["sent"].as_u64().unwrap() > 0);
    assert_eq!(v["engine"], engine);
    assert!(v["total"]["non_ip"].as_u64().unwrap() > 0, "ARP went through the bridge: {v}");
    let _ = std::fs::remove_dir_all(&dir);
}
