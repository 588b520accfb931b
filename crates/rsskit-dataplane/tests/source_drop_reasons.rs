//! A source's drops by reason ([`Source::drop_reasons`], e.g. AF_XDP's
//! `XDP_STATISTICS`) reach the run's accounting under their own names;
//! drops it gives no reason for stay `source`.

use rsskit_dataplane::craft::udp4_frame;
use rsskit_dataplane::io::{Recv, Source};
use rsskit_dataplane::netisr::{default_policy, FlowCounter, Netisr, NetisrConfig};
use rsskit_dataplane::output::NullSink;
use std::net::Ipv4Addr;

struct Lossy {
    frames: Vec<Vec<u8>>,
    i: usize,
}

impl Source for Lossy {
    fn recv(&mut self) -> Recv<'_> {
        if self.i == self.frames.len() {
            return Recv::Done;
        }
        self.i += 1;
        Recv::Frame { data: &self.frames[self.i - 1], ts_ns: 0 }
    }
    fn drops(&self) -> u64 {
        7
    }
    fn drop_reasons(&self) -> Vec<(&'static str, u64)> {
        vec![("xdp_rx_ring_full", 4), ("xdp_fill_ring_empty", 2)]
    }
}

#[test]
fn drop_reasons_in_the_accounting() {
    let frames: Vec<Vec<u8>> = (0..100u32)
        .map(|i| udp4_frame(Ipv4Addr::from(0x0a00_0000 + i), 1000, Ipv4Addr::new(192, 0, 2, 1), 9, 64))
        .collect();
    for workers in [1, 2] {
        let cfg = NetisrConfig { policy: default_policy(workers).into(), ..Default::default() };
        let srcs: Vec<(usize, Box<dyn Source>)> = (0..workers)
            .map(|w| (w, Box::new(Lossy { frames: frames.clone(), i: 0 }) as Box<dyn Source>))
            .collect();
        let sinks = (0..workers).map(|_| Box::new(NullSink::default()) as _).collect();
        let handlers = (0..workers).map(|_| FlowCounter::new(1024)).collect();
        let r = Netisr::start(cfg, srcs, sinks, handlers).unwrap().join().unwrap();
        let a = r.accounting();
        let n = workers as u64;
        assert!(a.balanced(), "{}", a.line());
        assert_eq!(a.input, 107 * n, "{}", a.line());
        assert_eq!(a.out, 100 * n);
        assert_eq!(a.dropped.get("xdp_rx_ring_full"), Some(&(4 * n)), "{}", a.line());
        assert_eq!(a.dropped.get("xdp_fill_ring_empty"), Some(&(2 * n)));
        assert_eq!(a.dropped.get("source"), Some(&n), "the unexplained rest");
    }
}
