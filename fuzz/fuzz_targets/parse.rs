//! Fuzz the wire parser and the packet hash: any bytes, as an Ethernet frame
//! and as a raw IP packet. Must never panic; every view of a parsed packet
//! must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_core::{HashConfig, RssKey};
use rsskit_dataplane::hash::PacketHasher;
use rsskit_dataplane::wire::{self, DropCounters, Packet, ParseConfig};
use std::sync::OnceLock;

fn hasher() -> &'static PacketHasher {
    static H: OnceLock<PacketHasher> = OnceLock::new();
    H.get_or_init(|| PacketHasher::new(&RssKey::microsoft(), HashConfig::all()))
}

fn check(p: &Packet<'_>, len: usize) {
    for ip in [Some(&p.outer), p.inner.as_ref()].into_iter().flatten() {
        assert!(ip.offset + ip.bytes.len() <= len);
        assert!(ip.header_len <= ip.bytes.len());
        if let Some(f) = ip.frag {
            assert!(usize::from(f.frag_hdr_at) <= ip.header_len);
            let _ = ip.fragment_data();
        }
    }
    let n = hasher().nic(p);
    let f = hasher().flow(p);
    if p.inner.is_none() {
        assert_eq!(n, f);
    }
    if p.outer.is_fragment() {
        assert!(!n.hash_type.has_ports());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut drops = DropCounters::new();
    for verify in [true, false] {
        let cfg = ParseConfig { verify_ipv4_checksum: verify, ..ParseConfig::default() };
        if let Some(p) = wire::parse_counted(data, &cfg, &mut drops) {
            check(&p, data.len());
        }
        match wire::parse_ip(data, &cfg) {
            Ok(p) => check(&p, data.len()),
            Err(r) => drops.inc(r),
        }
    }
    assert!(drops.total() <= 4);
});
