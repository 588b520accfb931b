//! udp-load's GSO bursts against udp-echo's GRO + GSO on loopback: every
//! datagram echoed once, by the worker owning its bucket, with exact counts
//! on both sides, whatever the offload in force.

use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy};
use rsskit_runtime::stats::Counters;
use rsskit_runtime::udp_echo::{EchoConfig, EchoServer};
use rsskit_runtime::udp_load::{self, LoadConfig, LoadReport, ServerTable};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

fn round(server_offload: bool, gso: u32, client_gro: bool) -> (LoadReport, Counters) {
    let cpus: Vec<CpuId> = rsskit_linux::cpulist::online().into_iter().map(|c| CpuId(c as u32)).collect();
    let policy = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, None).unwrap();
    let mut ec = EchoConfig::new("127.0.0.1:0".parse().unwrap(), Arc::new(policy));
    ec.offload = server_offload;
    let srv = EchoServer::start(ec).unwrap();
    assert_eq!(srv.offload().gro, server_offload, "{:?}", srv.offload());
    let online = rsskit_linux::cpulist::online();
    let lc = LoadConfig {
        streams: 4,
        size: 510,
        count: Some(160),
        // Room for 2 bursts per stream: open enough to keep bursts whole,
        // closed enough that the 4 MiB receive buffers never overflow.
        window: Some(32),
        spread: true,
        pin: online.last().map(|&c| vec![c]).unwrap_or_default(),
        gso,
        gro: client_gro,
        ..LoadConfig::new(srv.local_addr(), ServerTable::from_policy(srv.policy().clone()))
    };
    let streams = udp_load::plan_streams(&lc).unwrap();
    let r = udp_load::run(&lc, streams, &AtomicBool::new(false), |_, _, _| {}).unwrap();
    let server = srv.stop().unwrap().totals();
    (r, server)
}

fn check(r: &LoadReport, s: &Counters) {
    assert_eq!(r.sent, 4 * 160, "every stream sends its --count");
    assert_eq!(r.sent, r.echoed + r.lost, "client: sent == received + lost");
    assert_eq!(r.lost, 0, "loopback with a window loses nothing");
    assert_eq!((r.invalid, r.duplicates), (0, 0));
    for st in &r.streams {
        assert!(
            st.matched,
            "stream {} served by {:?}, owner {:?}",
            st.stream, st.served_by_workers, st.owner_worker
        );
        assert_eq!(st.flagged_misdirected, 0);
        assert_eq!(st.echoed, 160);
    }
    assert_eq!(s.received, r.sent, "server received every datagram");
    assert_eq!(s.received, s.sent + s.dropped, "server: in == out + dropped (nothing held after stop)");
    assert_eq!((s.dropped, s.misdirected, s.unowned, s.foreign), (0, 0, 0, 0));
}

#[test]
fn gso_bursts_of_16_through_gro_and_gso_are_exact_per_datagram() {
    let (r, s) = round(true, 16, true);
    check(&r, &s);
    assert!(s.coalesced > 0, "GSO bursts reach the GRO socket coalesced: {s:?}");
    assert!(s.batches < s.received, "{s:?}");
}

#[test]
fn offload_off_on_either_side_gives_the_same_per_datagram_counts() {
    let per_datagram = |c: &Counters| (c.received, c.sent, c.bytes, c.dropped, c.misdirected);
    let (r1, on) = round(true, 16, false);
    check(&r1, &on);
    let (r2, off) = round(false, 16, true);
    check(&r2, &off);
    assert_eq!(off.coalesced, 0, "no GRO on the server: the kernel splits the bursts");
    let (r3, plain) = round(true, 1, true);
    check(&r3, &plain);
    assert_eq!(plain.coalesced, 0, "no bursts: nothing to coalesce on loopback");
    assert_eq!(per_datagram(&on), per_datagram(&off));
    assert_eq!(per_datagram(&on), per_datagram(&plain));
}

#[test]
fn gso_limits_are_checked() {
    let mut lc = LoadConfig {
        size: 5000,
        count: Some(1),
        drain: Duration::from_millis(10),
        gso: 16,
        ..LoadConfig::new("127.0.0.1:9".parse().unwrap(), ServerTable::from_policy(one_cpu_policy()))
    };
    let e = lc.validate().unwrap_err().to_string();
    // Config fields, not flags: the CLI maps them (src/flags.rs).
    assert!(e.contains("gso 16 with size 5000") && e.contains("80000") && !e.contains("--"), "{e}");
    lc.size = 510;
    lc.gso = 65;
    assert!(lc.validate().unwrap_err().to_string().contains("gso must be 1..=64"));
    lc.gso = 64;
    assert!(lc.validate().is_ok());
}

fn one_cpu_policy() -> rsskit_core::RssPolicy {
    rsskit_core::RssPolicy::new(
        rsskit_core::RssKey::microsoft(),
        rsskit_core::HashConfig::default(),
        &[rsskit_core::CpuId(0)],
        None,
    )
    .unwrap()
}
