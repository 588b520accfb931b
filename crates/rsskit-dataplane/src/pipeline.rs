//! The `rsskit pipeline` engine assembled from a spec: open the input and
//! output, build one [`FlowCounter`] per worker, start netisr dispatch,
//! wait, close the output. The command only maps its arguments to a
//! [`PipelineSpec`] and prints the [`RunReport`].

use crate::craft::{eth, fragment_v4, udp, udp4_frame, V4};
use crate::hash::PacketHasher;
use crate::io::spec::{open_outputs, InSpec, Inputs, OpenIn, OutSpec, Outputs, SpecError};
use crate::io::{MemSource, Source};
use crate::netisr::{FlowCounter, Netisr, NetisrConfig, RunReport, WorkerReport};
use crate::wire::{parse_ethernet, ParseConfig};
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Slots of each worker's flow table.
const FLOW_SLOTS: usize = 1 << 14;

/// What `gen[:SIZE]` input makes (one generator per worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenSpec {
    /// Frames per worker (with `frag`: rounded up to whole datagrams).
    pub packets: u64,
    /// Distinct flows.
    pub flows: u32,
    /// Each worker makes only flows it owns (all direct dispatch), as if a
    /// NIC had already steered them.
    pub owned: bool,
    /// UDP datagrams of this many IP bytes cut into 1500-byte fragments.
    pub frag: Option<u32>,
}

impl Default for GenSpec {
    fn default() -> Self {
        GenSpec { packets: 10_000_000, flows: 4096, owned: false, frag: None }
    }
}

/// Everything a pipeline run needs.
#[derive(Debug, Clone)]
pub struct PipelineSpec {
    /// Where frames come from.
    pub input: InSpec,
    /// Where forwarded frames go.
    pub output: OutSpec,
    /// The dispatch (workers, CPUs, key, batch, reassembly, ...).
    pub netisr: NetisrConfig,
    /// Capture input: passes over the file.
    pub loops: u64,
    /// Capture input: replay at capture timing.
    pub timing: bool,
    /// Capture input: a corrupt record ends the input quietly.
    pub stop_at_bad_record: bool,
    /// Synthetic input.
    pub gen: GenSpec,
}

impl PipelineSpec {
    /// Opens the input (first, so a bad name fails before anything else)
    /// and the output, and starts the workers.
    pub fn start(self) -> Result<Pipeline, SpecError> {
        let n = self.netisr.workers();
        let stride = self.netisr.stride;
        let hasher = self.netisr.hasher();
        let gen = |size, w| gen_source(&self.gen, size, w, &hasher);
        let Inputs { sources, mut notes } = self.input.open(&OpenIn {
            workers: n,
            stride,
            loops: self.loops,
            timing: self.timing,
            lenient: self.stop_at_bad_record,
            port_b: None,
            gen: Some(&gen),
        })?;
        let out = open_outputs(&self.output, n, None, stride)?;
        notes.extend(out.notes);
        let handlers = (0..n).map(|_| FlowCounter::new(FLOW_SLOTS)).collect();
        let netisr = Netisr::start_ports(self.netisr, sources, out.sinks, handlers)?;
        Ok(Pipeline { netisr, capture: out.capture, notes })
    }
}

/// A running pipeline.
pub struct Pipeline {
    netisr: Netisr<FlowCounter>,
    capture: Option<crate::io::pcap::PcapSink>,
    notes: Vec<String>,
}

impl Pipeline {
    /// How the input and output were set up, one line each for the user
    /// (AF_XDP: mode, queues, UMEM frame size); empty for the others.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Waits until the input is done and drained (or `duration` passed, or
    /// `interrupt` was set), calling `status` every `interval`; then closes
    /// the output.
    pub fn wait(
        self,
        duration: Option<Duration>,
        interval: Duration,
        interrupt: Option<&AtomicBool>,
        status: impl FnMut(&[WorkerReport], Duration),
    ) -> Result<RunReport<FlowCounter>, SpecError> {
        let report = self.netisr.wait(duration, interval, interrupt, status)?;
        Outputs::close(self.capture)?;
        Ok(report)
    }
}

/// Worker `w`'s generator.
fn gen_source(g: &GenSpec, size: usize, w: usize, hasher: &PacketHasher) -> Box<dyn Source> {
    if let Some(len) = g.frag {
        let frames = gen_fragmented(g.flows, len as usize, w as u32);
        let total = g.packets.div_ceil(frames.len() as u64) * frames.len() as u64;
        return Box::new(MemSource::new(Arc::new(frames), total));
    }
    let mut frames = gen_frames(g.flows, size, w as u32);
    if g.owned {
        let mut seed = 1000 + w as u32;
        frames.retain(|f| owner(hasher, f) == w);
        while frames.len() < g.flows as usize {
            let more = gen_frames(g.flows, size, seed);
            seed += 1000;
            frames.extend(more.into_iter().filter(|f| owner(hasher, f) == w));
        }
        frames.truncate(g.flows as usize);
    }
    Box::new(MemSource::new(Arc::new(frames), g.packets))
}

/// `flows` 64-byte (or `size`) UDP frames with distinct source addresses and ports.
pub fn gen_frames(flows: u32, size: usize, seed: u32) -> Vec<Vec<u8>> {
    (0..flows)
        .map(|i| {
            let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(0x9e37_79b9));
            let src = Ipv4Addr::from(0x0a00_0000 | (x & 0x00ff_ffff));
            udp4_frame(src, 1024 + (x >> 20) as u16, Ipv4Addr::new(192, 0, 2, 1), 9, size)
        })
        .collect()
}

/// `flows` IPv4 UDP datagrams of `ip_len` bytes, each cut into fragments
/// of at most 1500 IP bytes, as Ethernet frames in order.
pub fn gen_fragmented(flows: u32, ip_len: usize, seed: u32) -> Vec<Vec<u8>> {
    let per = 1480; // fragment payload: 1500 - 20, a multiple of 8
    let mut out = Vec::new();
    for i in 0..flows {
        let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(0x9e37_79b9));
        let src = Ipv4Addr::from(0x0a00_0000 | (x & 0x00ff_ffff));
        let payload: Vec<u8> = (0..ip_len.saturating_sub(28)).map(|k| (k as u8) ^ (x as u8)).collect();
        let u = udp(1024 + (x >> 20) as u16, 9, &payload);
        let mut h = V4::new(src, Ipv4Addr::new(192, 0, 2, 1), 17);
        h.id = x as u16;
        let cuts: Vec<usize> = (1..).map(|k| k * per).take_while(|&c| c < u.len()).collect();
        out.extend(
            fragment_v4(&h, &u, &cuts).into_iter().map(|f| eth(crate::wire::ethertype::IPV4, &[], &f)),
        );
    }
    out
}

/// The worker that owns a generated frame.
fn owner(h: &PacketHasher, f: &[u8]) -> usize {
    parse_ethernet(f, &ParseConfig::default()).map(|p| h.owner(&p).index()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netisr::default_policy;

    #[test]
    fn generators() {
        let f = gen_frames(16, 64, 0);
        assert!(f.iter().all(|x| x.len() == 64));
        let g = gen_fragmented(3, 9000, 0);
        assert_eq!(g.len(), 21, "9000 bytes in 1500-byte fragments: 7 each");
        assert!(g.iter().all(|x| x.len() <= 1514));
    }

    fn spec(input: InSpec, workers: usize, gen: GenSpec) -> PipelineSpec {
        PipelineSpec {
            input,
            output: OutSpec::Null,
            // Backpressure: a full queue holds the input, nothing is dropped.
            netisr: NetisrConfig {
                policy: Arc::new(default_policy(workers)),
                backpressure: true,
                ..Default::default()
            },
            loops: 1,
            timing: false,
            stop_at_bad_record: false,
            gen,
        }
    }

    #[test]
    fn a_generated_run_is_counted_frame_by_frame() {
        let gen = GenSpec { packets: 3000, flows: 64, owned: false, frag: None };
        let r = spec(InSpec::Gen(64), 2, gen)
            .start()
            .unwrap()
            .wait(None, Duration::from_secs(1), None, |_, _| ())
            .unwrap();
        let a = r.accounting();
        assert_eq!(a.input, 6000, "{}", a.line());
        assert!(a.balanced(), "{}", a.line());
        assert_eq!(r.total().counters.handled, 6000);
        // Owned flows: every frame dispatched directly, nothing queued.
        let gen = GenSpec { owned: true, ..gen };
        let r = spec(InSpec::Gen(64), 2, gen)
            .start()
            .unwrap()
            .wait(None, Duration::from_secs(1), None, |_, _| ())
            .unwrap();
        assert_eq!(r.total().counters.dispatched, 6000);
        assert_eq!(r.total().queued, 0);
    }

    #[test]
    fn a_missing_capture_is_named() {
        let e =
            spec(InSpec::Pcap("/nonexistent/x.pcap".into()), 1, GenSpec::default()).start().err().unwrap();
        assert!(matches!(e, SpecError::NoCapture(_)));
        assert_eq!(e.to_string(), "input capture /nonexistent/x.pcap does not exist");
    }

    #[test]
    fn a_missing_xdp_interface_is_named_with_its_side() {
        use crate::io::afxdp::AfXdpError;
        use std::error::Error;
        let chain = |e: &dyn Error| {
            let mut s = e.to_string();
            let mut cur = e.source();
            while let Some(c) = cur {
                s.push_str(&format!(": {c}"));
                cur = c.source();
            }
            s
        };
        let e = spec(InSpec::Xdp("nosuchif0xyz".into(), Some(vec![1])), 1, GenSpec::default())
            .start()
            .err()
            .unwrap();
        assert!(
            matches!(&e, SpecError::Xdp(AfXdpError::Program { ifname, .. }) if ifname == "nosuchif0xyz"),
            "{e:?}"
        );
        assert_eq!(chain(&e), "input xdp:nosuchif0xyz: no such interface: nosuchif0xyz");
        let mut s = spec(InSpec::Gen(64), 1, GenSpec { packets: 1, ..GenSpec::default() });
        s.output = OutSpec::Xdp("nosuchif0xyz".into());
        let e = s.start().err().unwrap();
        assert!(matches!(&e, SpecError::Xdp(AfXdpError::Socket { dir: "output", queue: 0, .. })), "{e:?}");
        assert!(chain(&e).starts_with("output xdp:nosuchif0xyz queue 0: "), "{}", chain(&e));
        assert!(chain(&e).contains("nosuchif0xyz"), "{}", chain(&e));
    }
}
