//! AF_XDP through the library on a veth pair in a private network
//! namespace (entered by the test thread only, removed with it): frames
//! sent by an AF_XDP TX socket on one end arrive, exactly and intact,
//! through the redirect program into AF_XDP RX sockets on the other.
//! Needs root; fails loudly otherwise.

use rsskit_linux::xsk::{XdpProgram, XskConfig, XskMode, XskRx, XskTx};
use std::process::Command;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("`ip` (iproute2) is needed");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `f` on a thread in a fresh network namespace with veth vA <-> vB
/// (2 queues each, up). The namespace goes away with the thread.
fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "AF_XDP tests need root (network namespace, XDP, AF_XDP)");
    std::thread::spawn(move || {
        // SAFETY: unshare affects this thread only (a fresh net namespace);
        // `ip` children forked from it inherit it.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare(CLONE_NEWNET)");
        // No IPv6 on the new links: otherwise the kernel's own router
        // solicitations and MLD reports, sent when a link comes up, land in
        // the AF_XDP rings beside the test's frames (CI once saw 1001 of 1000).
        // /proc/sys/net resolves to the opener's namespace, this thread's.
        for knob in ["all", "default"] {
            let path = format!("/proc/sys/net/ipv6/conf/{knob}/disable_ipv6");
            std::fs::write(&path, "1").unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        ip(&[
            "link",
            "add",
            "vA",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            "vB",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ]);
        ip(&["link", "set", "vA", "up"]);
        ip(&["link", "set", "vB", "up"]);
        f()
    })
    .join()
    .expect("test thread")
}

fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental ethertype
    f[14..18].copy_from_slice(&i.to_be_bytes());
    f
}

fn roundtrip(frame_size: u32) {
    let got = in_netns(move || {
        let cfg = XskConfig { frame_size, ..Default::default() };
        let mut prog = XdpProgram::attach("vB").expect("attach the redirect program to vB");
        let mut rxs: Vec<XskRx> = (0..2).map(|q| XskRx::open("vB", q, cfg).expect("rx socket")).collect();
        for r in &rxs {
            prog.register(r.socket()).expect("register");
            assert_eq!(r.socket().mode(), XskMode::Copy, "veth has no zero-copy");
        }
        let mut txs: Vec<XskTx> = (0..2).map(|q| XskTx::open("vA", q, cfg).expect("tx socket")).collect();
        let frames: Vec<Vec<u8>> = (0..1000u32).map(|i| frame(i, 60 + (i as usize % 1400))).collect();
        let mut sent = 0;
        for (k, chunk) in frames.chunks(50).enumerate() {
            sent += txs[k % 2].send(chunk.iter().map(|f| &f[..])).expect("send");
        }
        for t in &mut txs {
            assert_eq!(t.drain(Duration::from_secs(5)), 0, "every TX frame completed");
        }
        let mut seen = Vec::new();
        let mut strays = Vec::new();
        let t = Instant::now();
        while seen.len() < sent && t.elapsed() < Duration::from_secs(10) {
            for r in &mut rxs {
                while let Some(f) = r.next_frame() {
                    if f.get(12..14) == Some(&0x88b5u16.to_be_bytes()[..]) {
                        seen.push(f.to_vec());
                    } else {
                        strays.push(f.to_vec());
                    }
                }
            }
        }
        let stats: Vec<_> = rxs.iter().map(|r| r.socket().stats()).collect();
        (sent, frames, seen, strays, stats)
    });
    let (sent, frames, mut seen, strays, stats) = got;
    // With IPv6 off nothing else should be on the wire; if something is,
    // name it rather than let it pass as a test frame.
    assert!(
        strays.is_empty(),
        "frames the test did not send: {:02x?}",
        strays.iter().map(|f| &f[..f.len().min(34)]).collect::<Vec<_>>()
    );
    assert_eq!(sent, 1000, "all handed to the kernel");
    for s in &stats {
        assert_eq!(s.rx_lost(), 0, "{s:?}");
    }
    seen.sort_by_key(|f| u32::from_be_bytes(f[14..18].try_into().unwrap()));
    assert_eq!(seen.len(), frames.len(), "every frame received once");
    assert!(seen == frames, "frames arrive intact");
}

#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no XDP program")]
fn veth_roundtrip_default_frames() {
    roundtrip(2048);
}

#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no XDP program")]
fn veth_roundtrip_unaligned_frames() {
    roundtrip(3000);
}

#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no XDP program")]
fn driver_without_xdp_is_one_clear_error() {
    let e = in_netns(|| XdpProgram::attach("lo").err().map(|e| e.to_string()));
    let e = e.expect("lo has no native XDP");
    assert!(e.contains("lo: the driver has no native XDP support"), "{e}");
}

/// Nothing lost unseen: with a small RX ring nobody reads, the frames that
/// did not fit are the kernel's `XDP_STATISTICS` drops, exactly.
#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no XDP program")]
fn ring_full_drops_are_counted() {
    let (sent, read, stats) = in_netns(|| {
        let cfg = XskConfig { ring_size: 64, batch: 16, ..Default::default() };
        let mut prog = XdpProgram::attach("vB").expect("attach");
        let mut rx = XskRx::open("vB", 0, cfg).expect("rx socket");
        prog.register(rx.socket()).expect("register");
        let mut tx = XskTx::open("vA", 0, XskConfig::default()).expect("tx socket");
        let frames: Vec<Vec<u8>> = (0..1000u32).map(|i| frame(i, 64)).collect();
        let mut sent = 0;
        for chunk in frames.chunks(32) {
            sent += tx.send(chunk.iter().map(|f| &f[..])).expect("send");
        }
        assert_eq!(tx.drain(Duration::from_secs(5)), 0);
        let mut read = 0;
        while rx.next_frame().is_some() {
            read += 1;
        }
        (sent, read, rx.socket().stats())
    });
    assert_eq!(sent, 1000);
    assert!(stats.rx_lost() > 0, "a 64-slot ring cannot hold 1000 frames: {stats:?}");
    assert_eq!(read as u64 + stats.rx_lost(), 1000, "read {read} + lost {stats:?}");
    let reasons = stats.rx_loss_reasons();
    assert_eq!(reasons.iter().map(|r| r.1).sum::<u64>(), stats.rx_lost());
}

/// A second socket on a queue that already has one: one clear error.
#[test]
#[cfg_attr(rsskit_no_clang, ignore = "built without clang: no XDP program")]
fn second_socket_on_a_queue_is_busy() {
    let e = in_netns(|| {
        let _first = XskRx::open("vB", 1, XskConfig::default()).expect("first socket");
        XskTx::open("vB", 1, XskConfig::default()).err().map(|e| e.to_string())
    });
    let e = e.expect("the queue is taken");
    assert!(e.contains("vB queue 1 already has an AF_XDP socket"), "{e}");
}
