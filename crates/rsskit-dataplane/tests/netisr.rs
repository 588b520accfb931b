//! netisr dispatch: every packet handled exactly once, on the worker that
//! owns its bucket, in order per flow; counters exact; queue-full drops
//! counted.

use rsskit_core::RssPolicy;
use rsskit_core::{CpuId, HashConfig, RssKey};
use rsskit_dataplane::craft::{eth, ipv4, udp, udp4_frame, V4};
use rsskit_dataplane::hash::PacketHasher;
use rsskit_dataplane::io::{MemSource, Recv, Source};
use rsskit_dataplane::netisr::{
    default_policy, Delivery, Disposition, Handler, Mbuf, Netisr, NetisrConfig, PacketCtx, Prefetch,
};
use rsskit_dataplane::output::{FlushPolicy, NullSink, Sink};
use rsskit_dataplane::wire::{ethertype, parse_ethernet, ParseConfig, Transport};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

/// Records (flow, seq) of every packet it handles; optionally slow.
#[derive(Default)]
struct Recorder {
    seen: Vec<(u16, u32, u32)>, // (flow = source port, seq, hash)
    spin: u32,
}

impl Handler for Recorder {
    fn handle(&mut self, ctx: &PacketCtx, pkt: &rsskit_dataplane::wire::Packet<'_>) -> Disposition {
        for _ in 0..self.spin {
            std::hint::spin_loop();
        }
        if let Transport::Udp { src_port, payload, .. } = pkt.l4 {
            let seq = u32::from_be_bytes(payload[..4].try_into().unwrap());
            self.seen.push((src_port, seq, ctx.hash));
        }
        Disposition::Forward
    }
}

/// Flow f: 10.0.(f/256).(f%256):f -> 192.0.2.1:53, seq in the payload.
fn frame(flow: u16, seq: u32) -> Vec<u8> {
    let mut payload = seq.to_be_bytes().to_vec();
    payload.resize(22, 0);
    let src = Ipv4Addr::new(10, 0, (flow >> 8) as u8, flow as u8);
    eth(ethertype::IPV4, &[], &ipv4(&V4::new(src, Ipv4Addr::new(192, 0, 2, 1), 17), &udp(flow, 53, &payload)))
}

/// Interleaved flows: packet i is flow i % flows, seq i / flows.
fn traffic(flows: u16, per_flow: u32) -> Vec<Vec<u8>> {
    (0..per_flow).flat_map(|s| (0..flows).map(move |f| frame(f, s))).collect()
}

/// Counts frames it was given (pcap-like shared sink).
#[derive(Clone, Default)]
struct CountSink(Arc<Mutex<Vec<usize>>>);
impl Sink for CountSink {
    fn send(&mut self, frames: &[Mbuf]) -> std::io::Result<usize> {
        self.0.lock().unwrap().push(frames.len());
        Ok(frames.len())
    }
}

fn owner(cfg: &NetisrConfig, rss: &RssPolicy, f: &[u8]) -> usize {
    let h = PacketHasher::new(cfg.policy.key(), cfg.policy.hash_config());
    let p = parse_ethernet(f, &ParseConfig::default()).unwrap();
    rss.worker_of_hash(h.nic(&p).hash).index()
}

fn run(
    cfg: NetisrConfig,
    inputs: Vec<(usize, Vec<Vec<u8>>)>,
    spin: u32,
) -> rsskit_dataplane::netisr::RunReport<Recorder> {
    let n = cfg.workers();
    let srcs: Vec<(usize, Box<dyn Source>)> = inputs
        .into_iter()
        .map(|(w, frames)| {
            let len = frames.len() as u64;
            (w, Box::new(MemSource::new(Arc::new(frames), len)) as Box<dyn Source>)
        })
        .collect();
    let sinks: Vec<Box<dyn Sink>> = (0..n).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>).collect();
    let handlers = (0..n).map(|_| Recorder { seen: Vec::new(), spin }).collect();
    Netisr::start(cfg, srcs, sinks, handlers).unwrap().join().unwrap()
}

#[test]
fn every_packet_once_on_its_owner_in_order() {
    for workers in [1usize, 2, 3] {
        for (batch, prefetch) in [(1, Prefetch::None), (4, Prefetch::Both), (256, Prefetch::Header)] {
            let cfg = NetisrConfig {
                policy: default_policy(workers).into(),
                batch,
                prefetch,
                ring_capacity: 4096,
                ..Default::default()
            };
            let rss = cfg.policy.clone();
            let frames = traffic(64, 50);
            // One input on worker 0, another on the last worker (same frames
            // with other flow ids so the two inputs' flows are distinct).
            let other: Vec<Vec<u8>> = traffic(64, 50)
                .into_iter()
                .enumerate()
                .map(|(i, _)| frame(1000 + (i % 64) as u16, (i / 64) as u32))
                .collect();
            let report = run(cfg.clone(), vec![(0, frames.clone()), (workers - 1, other.clone())], 0);
            let total = report.total();
            assert_eq!(total.counters.input, 6400);
            assert_eq!(total.counters.handled, 6400);
            assert_eq!(total.counters.forwarded, 6400);
            assert_eq!(total.counters.output.packets, 6400);
            assert_eq!(total.qdrops, 0);
            assert_eq!(total.counters.dispatched + total.queued, 6400, "every packet dispatched or queued");
            let mut all = Vec::new();
            for (w, h) in report.handlers.iter().enumerate() {
                let mut last: std::collections::HashMap<u16, u32> = Default::default();
                for &(flow, seq, hash) in &h.seen {
                    assert_eq!(rss.worker_of_hash(hash).index(), w, "flow {flow} handled on worker {w}");
                    if let Some(&prev) = last.get(&flow) {
                        assert_eq!(seq, prev + 1, "flow {flow} out of order on worker {w}");
                    } else {
                        assert_eq!(seq, 0);
                    }
                    last.insert(flow, seq);
                    all.push((flow, seq));
                }
                // netstat -Q: handled here == what this worker's inputs kept + what was queued to it.
                let r = &report.workers[w];
                assert_eq!(r.counters.handled, h.seen.len() as u64);
                assert_eq!(r.counters.handled, r.counters.dispatched + r.queued);
            }
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), 6400, "every packet exactly once (workers {workers}, batch {batch})");
            // The owner computed independently of the dispatcher.
            for f in frames.iter().take(64) {
                let o = owner(&cfg, &rss, f);
                let p = parse_ethernet(f, &ParseConfig::default()).unwrap();
                let Transport::Udp { src_port, .. } = p.l4 else { panic!() };
                assert!(report.handlers[o].seen.iter().any(|s| s.0 == src_port));
            }
        }
    }
}

#[test]
fn direct_dispatch_counts_exact() {
    // Two workers, one input on worker 0: packets worker 0 owns are
    // dispatched directly, the others queued to worker 1.
    let cfg = NetisrConfig { policy: default_policy(2).into(), batch: 8, ..Default::default() };
    let rss = cfg.policy.clone();
    let frames = traffic(32, 10);
    let own0 = frames.iter().filter(|f| owner(&cfg, &rss, f) == 0).count() as u64;
    assert!(own0 > 0 && own0 < 320);
    let r = run(cfg, vec![(0, frames)], 0);
    assert_eq!(r.workers[0].counters.input, 320);
    assert_eq!(r.workers[0].counters.dispatched, own0);
    assert_eq!(r.workers[0].queued, 0);
    assert_eq!(r.workers[1].queued, 320 - own0);
    assert_eq!(r.workers[1].counters.dispatched, 0);
    assert_eq!(r.workers[1].counters.handled, 320 - own0);
    assert!(r.workers[1].high_water >= 1);
}

/// A source that produces all its frames as fast as possible, used with a
/// slow consumer and a tiny ring to force queue drops.
#[test]
fn queue_full_drops_are_counted() {
    let cfg =
        NetisrConfig { policy: default_policy(2).into(), batch: 4, ring_capacity: 8, ..Default::default() };
    let rss = cfg.policy.clone();
    // Only flows owned by worker 1, fed from worker 0.
    let mut frames = Vec::new();
    let mut f = 0u16;
    while frames.len() < 4000 {
        let fr = frame(f, 0);
        if owner(&cfg, &rss, &fr) == 1 {
            frames.push(fr);
        }
        f = f.wrapping_add(1);
    }
    let r = run(cfg, vec![(0, frames)], 20_000);
    let w1 = &r.workers[1];
    assert!(w1.qdrops > 0, "a slow worker behind an 8-slot ring must drop");
    assert_eq!(w1.queued + w1.qdrops, 4000, "every packet queued or dropped");
    assert_eq!(w1.counters.handled, w1.queued);
    assert_eq!(r.handlers[1].seen.len() as u64, w1.queued);
    assert_eq!(w1.high_water, 8);
    assert_eq!(r.total().total_drops(), w1.qdrops);
    let a = r.accounting();
    assert_eq!(a.dropped.get("queue_full"), Some(&w1.qdrops), "{}", a.line());
    assert_eq!((a.input, a.out, a.held), (4000, w1.queued, 0), "{}", a.line());
    assert!(a.balanced(), "{}", a.line());
}

#[test]
fn malformed_frames_dropped_by_reason() {
    let cfg = NetisrConfig { policy: default_policy(2).into(), ..Default::default() };
    let mut frames = traffic(4, 4);
    frames.push(vec![0u8; 10]); // shorter than Ethernet
    frames.push(eth(0x0806, &[], &[0u8; 28])); // ARP
    let mut bad = udp4_frame(Ipv4Addr::new(1, 2, 3, 4), 1, Ipv4Addr::new(5, 6, 7, 8), 2, 64);
    bad[24] ^= 0xff; // IPv4 checksum
    frames.push(bad);
    let r = run(cfg, vec![(0, frames)], 0);
    let t = r.total();
    assert_eq!(t.counters.input, 19);
    // The bad-checksum frame is hashed as a NIC would (no validation at the
    // input stage) and dropped by its owner's parser: handled, then dropped.
    assert_eq!(t.counters.handled, 17);
    assert_eq!(t.counters.forwarded, 16);
    let names: Vec<String> =
        rsskit_dataplane::netisr::drop_reasons(&t.counters).into_iter().map(|x| x.0).collect();
    assert_eq!(names, vec!["eth_truncated", "not_ip", "ipv4_bad_checksum"]);
    assert_eq!(t.total_drops(), 3);
    let a = r.accounting();
    assert!(a.balanced(), "{}", a.line());
    assert_eq!((a.input, a.out, a.dropped_total()), (19, 16, 3), "{}", a.line());
    assert_eq!(a.dropped.get("not_ip"), Some(&1));
}

#[test]
fn send_aggregation_flushes_at_16() {
    let cfg = NetisrConfig {
        policy: default_policy(1).into(),
        batch: 32,
        flush: FlushPolicy { max_packets: 16, max_bytes: usize::MAX, on_idle: true },
        ..Default::default()
    };
    let sink = CountSink::default();
    let frames = traffic(8, 8); // 64 packets
    let srcs: Vec<(usize, Box<dyn Source>)> = vec![(0, Box::new(MemSource::new(Arc::new(frames), 64)))];
    let r = Netisr::start(cfg, srcs, vec![Box::new(sink.clone())], vec![Recorder::default()])
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(*sink.0.lock().unwrap(), vec![16, 16, 16, 16]);
    assert_eq!(r.workers[0].counters.output.flush_packets, 4);
    assert_eq!(r.workers[0].counters.output.packets, 64);
}

/// A source that trickles one frame per call with idle gaps: the idle flush
/// sends partial groups.
struct Trickle {
    frames: Vec<Vec<u8>>,
    i: usize,
    gap: bool,
}
impl Source for Trickle {
    fn recv(&mut self) -> Recv<'_> {
        if self.i == self.frames.len() {
            return Recv::Done;
        }
        self.gap = !self.gap;
        if self.gap {
            return Recv::Idle;
        }
        self.i += 1;
        Recv::Frame { data: &self.frames[self.i - 1], ts_ns: 0 }
    }
}

#[test]
fn idle_flush_when_out_of_input() {
    let cfg = NetisrConfig { policy: default_policy(1).into(), batch: 4, ..Default::default() };
    let sink = CountSink::default();
    let srcs: Vec<(usize, Box<dyn Source>)> =
        vec![(0, Box::new(Trickle { frames: traffic(2, 5), i: 0, gap: false }))];
    let r = Netisr::start(cfg, srcs, vec![Box::new(sink.clone())], vec![Recorder::default()])
        .unwrap()
        .join()
        .unwrap();
    let c = r.workers[0].counters.output;
    assert_eq!(c.packets, 10);
    assert_eq!(c.flush_idle, 10, "one frame per poll, flushed each time the worker ran dry");
    assert_eq!(sink.0.lock().unwrap().iter().sum::<usize>(), 10);
}

#[test]
fn pool_backpressure_loses_nothing() {
    // A pool smaller than the ring: the input must pause, not drop.
    // Only flows of worker 1, read by worker 0: every frame holds one of
    // worker 0's 64 buffers until the slow worker 1 is done with it, so
    // worker 0 (reading ~100x faster) runs out whatever the scheduling.
    let cfg = NetisrConfig {
        policy: default_policy(2).into(),
        batch: 8,
        ring_capacity: 1024,
        pool_buffers: 64,
        ..Default::default()
    };
    let rss = cfg.policy.clone();
    let frames: Vec<Vec<u8>> = traffic(128, 40).into_iter().filter(|f| owner(&cfg, &rss, f) == 1).collect();
    let n = frames.len() as u64;
    assert!(n > 1000, "{n} frames for worker 1");
    let r = run(cfg, vec![(0, frames)], 2_000);
    let t = r.total();
    assert_eq!(t.counters.handled, n);
    assert_eq!(t.qdrops, 0);
    assert!(t.counters.pool_stalls > 0, "the input paused for buffers");
    let a = r.accounting();
    assert!(a.balanced() && a.out == n, "{}", a.line());
}

#[test]
fn config_errors() {
    let e = |c: NetisrConfig| {
        Netisr::<Recorder>::start(c, vec![], vec![], vec![]).err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(e(NetisrConfig { batch: 0, ..Default::default() }).contains("batch"));
    assert!(e(NetisrConfig { batch: 257, ..Default::default() }).contains("batch"));
    let e65 = e(NetisrConfig { policy: default_policy(65).into(), ..Default::default() });
    assert_eq!(e65, "workers must be 1..=64, not 65");
    let _ = RssKey::microsoft();
}

#[test]
fn backpressure_holds_instead_of_dropping() {
    // Same setup as the queue-full test, with backpressure: nothing is
    // dropped, every packet arrives, in order per flow.
    let cfg = NetisrConfig {
        policy: default_policy(2).into(),
        batch: 4,
        ring_capacity: 8,
        backpressure: true,
        ..Default::default()
    };
    let rss = cfg.policy.clone();
    let mut frames = Vec::new();
    let mut f = 0u16;
    while frames.len() < 3000 {
        for s in 0..3u32 {
            let fr = frame(f, s);
            if owner(&cfg, &rss, &fr) == 1 {
                frames.push(fr);
            }
        }
        f = f.wrapping_add(1);
    }
    let n = frames.len() as u64;
    let r = run(cfg, vec![(0, frames)], 20_000);
    let w1 = &r.workers[1];
    assert_eq!(w1.qdrops, 0);
    assert_eq!(w1.queued, n);
    assert_eq!(w1.counters.handled, n);
    assert_eq!(w1.high_water, 8, "the ring did fill up");
    let mut last: std::collections::HashMap<u16, u32> = Default::default();
    for &(flow, seq, _) in &r.handlers[1].seen {
        if let Some(&p) = last.get(&flow) {
            assert_eq!(seq, p + 1);
        }
        last.insert(flow, seq);
    }
}

/// Relays every UDP packet as a message to the next worker (which sends a
/// copy on), answers ARP with a rewritten frame, and records what it got.
#[derive(Default)]
struct Relay {
    workers: usize,
    /// (from worker, flow, seq) of every message received.
    got: Vec<(usize, u16, u32)>,
    out: Vec<(usize, rsskit_dataplane::netisr::Msg)>,
    arp: u64,
    batches: u64,
    frame: Vec<u8>,
}

impl Handler for Relay {
    const NON_IP: bool = true;

    fn handle(&mut self, ctx: &PacketCtx, pkt: &rsskit_dataplane::wire::Packet<'_>) -> Disposition {
        let Transport::Udp { src_port, payload, .. } = pkt.l4 else { return Disposition::Drop };
        let seq = u32::from_be_bytes(payload[..4].try_into().unwrap());
        let to = (ctx.worker + 1) % self.workers;
        self.out.push((to, Box::new((ctx.worker, src_port, seq, pkt.data.to_vec(), ctx.frames))));
        Disposition::Handoff
    }

    fn handle_other(&mut self, _ctx: &PacketCtx, frame: &[u8]) -> Disposition {
        self.arp += 1;
        self.frame = frame.to_vec();
        self.frame[0] = 0x42;
        Disposition::Replace
    }

    fn take_frame(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.frame)
    }

    fn outbox(&mut self, out: &mut Vec<(usize, rsskit_dataplane::netisr::Msg)>) {
        out.append(&mut self.out);
    }

    fn message(&mut self, ctx: &PacketCtx, msg: rsskit_dataplane::netisr::Msg) -> Delivery {
        let (from, flow, seq, frame, frames) =
            *msg.downcast::<(usize, u16, u32, Vec<u8>, u32)>().expect("our message");
        assert_eq!((from + 1) % self.workers, ctx.worker, "delivered to its addressee");
        self.got.push((from, flow, seq));
        Delivery::Send { frame, flags: 0, frames }
    }

    fn on_batch_end(&mut self, _now_ns: u64) {
        self.batches += 1;
    }
}

#[test]
fn handler_messages_fifo_per_sender_and_non_ip_frames() {
    for workers in [1usize, 2, 3] {
        // Small rings: messages wait for room instead of being lost.
        // (Backpressure: no packet is lost to a full packet ring either.)
        let cfg = NetisrConfig {
            policy: default_policy(workers).into(),
            batch: 8,
            ring_capacity: 16,
            backpressure: true,
            ..Default::default()
        };
        let mut frames = traffic(32, 40);
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        arp.resize(60, 0);
        for i in 0..10 {
            frames.insert(i * 100, arp.clone());
        }
        let n = frames.len() as u64;
        let sink = CountSink::default();
        let srcs: Vec<(usize, Box<dyn Source>)> =
            vec![(0, Box::new(MemSource::new(Arc::new(frames), n)) as Box<dyn Source>)];
        let sinks: Vec<Box<dyn Sink>> =
            (0..workers).map(|_| Box::new(sink.clone()) as Box<dyn Sink>).collect();
        let handlers = (0..workers).map(|_| Relay { workers, ..Default::default() }).collect();
        let report = Netisr::start(cfg, srcs, sinks, handlers).unwrap().join().unwrap();
        let t = report.total();
        assert_eq!(t.counters.input, n);
        assert_eq!(t.counters.parse_drops(), 0, "ARP went to the handler");
        assert_eq!(t.qdrops, 0);
        assert_eq!(report.handlers.iter().map(|h| h.arp).sum::<u64>(), 10);
        let got: Vec<_> = report.handlers.iter().flat_map(|h| h.got.iter().copied()).collect();
        assert_eq!(got.len(), 32 * 40, "every message delivered once ({workers} workers)");
        // FIFO per sender: each (sender, flow) sees its seqs in order.
        for h in &report.handlers {
            let mut last: std::collections::HashMap<(usize, u16), u32> = Default::default();
            for &(from, flow, seq) in &h.got {
                if let Some(prev) = last.insert((from, flow), seq) {
                    assert!(seq > prev, "flow {flow} from worker {from} out of order");
                }
            }
            assert!(h.batches > 0);
        }
        // Forwarded: the 1280 relayed frames and the 10 rewritten ARPs.
        assert_eq!(t.counters.forwarded, 32 * 40 + 10);
        assert_eq!(t.counters.output.packets, 32 * 40 + 10);
        assert_eq!(sink.0.lock().unwrap().iter().sum::<usize>(), 32 * 40 + 10);
        // Every frame accounted for: handed off in a message, then sent.
        let acct = report.accounting();
        assert_eq!((acct.input, acct.out, acct.held), (n, n, 0), "{}", acct.line());
        assert!(acct.dropped.is_empty() && acct.balanced(), "{}", acct.line());
    }
}

#[test]
fn a_cpu_that_cannot_be_used_fails_start_and_stops_the_started_workers() {
    use rsskit_dataplane::netisr::NetisrError;
    let first = CpuId(rsskit_linux::affinity::current_affinity().unwrap()[0] as u32);
    let cfg = NetisrConfig {
        policy: RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[first, CpuId(100_000)], None)
            .unwrap()
            .into(),
        pin: true,
        ..Default::default()
    };
    // An endless source on worker 0: it must still stop when start fails.
    let frames = Arc::new(traffic(4, 4));
    let inputs: Vec<(usize, Box<dyn Source>)> = vec![(0, Box::new(MemSource::new(frames, u64::MAX)))];
    let sinks: Vec<Box<dyn Sink>> = (0..2).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>).collect();
    let t = std::time::Instant::now();
    match Netisr::start(cfg, inputs, sinks, vec![Recorder::default(), Recorder::default()]) {
        Err(NetisrError::Spawn { worker: 1, source }) => {
            assert!(source.to_string().contains("100000"), "{source}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("CPU 100000 accepted"),
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "the running worker was not stopped");
}

/// The run time ends when the last worker finished its work, not when the
/// controlling thread looked: a controller that only calls `join` 2 s after
/// a run of 2,000 frames still reports the run's own length (before, the
/// 2 s were in it and in every rate derived from it).
#[test]
fn run_time_ends_with_the_last_workers_work() {
    let cfg = NetisrConfig { policy: default_policy(2).into(), ..Default::default() };
    let srcs: Vec<(usize, Box<dyn Source>)> = (0..2)
        .map(|w| (w, Box::new(MemSource::new(Arc::new(traffic(10, 100)), 1000)) as Box<dyn Source>))
        .collect();
    let sinks: Vec<Box<dyn Sink>> = (0..2).map(|_| Box::new(NullSink::default()) as Box<dyn Sink>).collect();
    let handlers = (0..2).map(|_| Recorder::default()).collect();
    let netisr = Netisr::start(cfg, srcs, sinks, handlers).unwrap();
    let looked_after = std::time::Duration::from_secs(2);
    std::thread::sleep(looked_after);
    let report = netisr.join().unwrap();
    assert_eq!(report.total().counters.handled, 2000);
    assert!(report.accounting().balanced(), "{}", report.accounting().line());
    assert!(report.elapsed < looked_after, "run time {:?} includes the controller's delay", report.elapsed);
}
