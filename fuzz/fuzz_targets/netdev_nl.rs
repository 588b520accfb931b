//! Fuzz the netdev generic netlink reply parser (`rsskit_linux::netdev_nl`,
//! behind `rsskit info`'s queue -> NAPI -> IRQ map): any bytes, as if the
//! kernel had sent them. Must never panic; every message it accepts lies
//! within the input, and every decoded queue or NAPI instance carries the
//! attributes the decoder requires.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_linux::netdev_nl::{self, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(msgs) = netdev_nl::parse_messages(data) else { return };
    // Each message takes at least its 16-byte header.
    assert!(msgs.len() * 16 <= data.len(), "{} messages from {} bytes", msgs.len(), data.len());
    for m in &msgs {
        if let Message::Genl { attrs, .. } = m {
            let inner: usize = attrs.iter().map(|(_, v)| v.len() + 4).sum();
            assert!(inner <= data.len());
        }
    }
    if let Ok(qs) = netdev_nl::decode_queues(&msgs) {
        assert!(qs.len() <= msgs.len());
    }
    if let Ok(ns) = netdev_nl::decode_napis(&msgs) {
        assert!(ns.len() <= msgs.len());
    }
    let _ = netdev_nl::decode_family(&msgs, "netdev");
    // nicres: qstats drop counters, each named once.
    if let Ok(d) = netdev_nl::decode_qstats_drops(&msgs, 1) {
        assert!(d.len() <= netdev_nl::QSTATS_DROPS.len());
    }
});
