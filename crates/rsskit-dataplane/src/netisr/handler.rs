//! The handler API: what a protocol handler implements ([`Handler`]) and
//! the values it exchanges with the worker loop ([`PacketCtx`],
//! [`Disposition`], [`Delivery`], [`Msg`]), plus [`FlowCounter`], the
//! default handler of `rsskit pipeline`. Kept apart from the dispatch
//! machinery because this is the surface handler authors (the firewall,
//! the pipeline, tests) program against; nothing here knows about rings or
//! threads.

use crate::wire::Packet;
// Only named in the docs' links.
#[cfg(doc)]
use super::{mbuf_flags, Mbuf, Netisr, RunReport};

/// Prefetches the cache line at `p` into all levels. A hint: never faults,
/// whatever `p` is. No-op on targets without a prefetch intrinsic here.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint; it does not fault on any address and
    // SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Per-worker packet processing (the "protocol handler").
pub trait Handler: Send + 'static {
    /// Prefetch the state `hash` will touch (flow-table bucket).
    #[inline]
    fn prefetch(&self, _hash: u32) {}
    /// Handles one parsed packet (not a fragment, not a tunnel: those are
    /// reassembled / decapsulated and re-injected first).
    fn handle(&mut self, ctx: &PacketCtx, pkt: &Packet<'_>) -> Disposition;

    /// With `true`, frames the parser refuses as not IP (ARP, LLDP...) go to
    /// [`Handler::handle_other`] on the worker that read them, as a bridge
    /// passes them; with `false` (the default) they are dropped and counted
    /// as parser drops.
    const NON_IP: bool = false;
    /// A non-IP frame (only with [`Handler::NON_IP`]).
    fn handle_other(&mut self, _ctx: &PacketCtx, _frame: &[u8]) -> Disposition {
        Disposition::Drop
    }
    /// The frame to send for a [`Disposition::Replace`].
    fn take_frame(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// Moves the messages produced since the last call into `out` as
    /// `(worker, message)`. Called after every handled packet and message
    /// and after [`Handler::on_batch_end`]. Messages travel over one SPSC
    /// ring per (worker, worker) pair, FIFO per sender, never dropped.
    #[inline]
    fn outbox(&mut self, _out: &mut Vec<(usize, Msg)>) {}
    /// A message from another worker (or this one), and what became of
    /// the frames it carried ([`Delivery`]): e.g. a frame to send on
    /// (through send aggregation) with its [`Mbuf::flags`].
    fn message(&mut self, _ctx: &PacketCtx, _msg: Msg) -> Delivery {
        Delivery::None
    }
    /// The drop reason of the frames this handler drops
    /// ([`Disposition::Drop`], [`Delivery::Drop`]) in [`RunReport::accounting`].
    const DROP_REASON: &'static str = "handler_drop";
    /// Called after each loop that did work, and now and then while idle
    /// (`now_ns`: the worker's monotonic clock): housekeeping, expiry.
    #[inline]
    fn on_batch_end(&mut self, _now_ns: u64) {}
    /// With `true`, [`Handler::on_batch_end`] also runs on every idle loop
    /// (a handler that waits for other workers, e.g. an ordered replay).
    const POLL_IDLE: bool = false;
}

/// [`Mbuf::flags`] bit of the frames read from an input started as the
/// second port of a bridge ([`Netisr::start_ports`]); the sink can route on
/// it (the [`mbuf_flags`] bits are 1, 2 and 4).
pub const FLAG_PORT_B: u8 = 0x80;

/// A message between handlers ([`Handler::outbox`], [`Handler::message`]).
pub type Msg = Box<dyn std::any::Any + Send>;

/// What the handler is told besides the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketCtx {
    /// Worker index.
    pub worker: usize,
    /// The packet's RSS hash (after re-injection: the full re-hash).
    pub hash: u32,
    /// [`mbuf_flags`] bits.
    pub flags: u8,
    /// Capture timestamp (ns since the epoch, 0 if unknown).
    pub ts_ns: u64,
    /// Input frames the packet stands for ([`Mbuf::frames`]); a handler
    /// that hands the packet off in a message carries this along.
    pub frames: u32,
}

/// What to do with a handled packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Send it on (through send aggregation).
    Forward,
    /// Consume it.
    Drop,
    /// Send the frame [`Handler::take_frame`] returns instead (the handler
    /// rewrote the packet).
    Replace,
    /// The packet continues in a message this handler emitted (its
    /// [`PacketCtx::frames`] with it); the addressee's [`Handler::message`]
    /// accounts for it. Until then its frames count as held.
    Handoff,
}

/// What became of a message ([`Handler::message`]), for the accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// No frame involved (a control message).
    None,
    /// Send `frame` (with these [`Mbuf::flags`]); it stands for `frames`
    /// input frames.
    Send {
        /// The frame.
        frame: Vec<u8>,
        /// Its [`Mbuf::flags`].
        flags: u8,
        /// Input frames it stands for.
        frames: u32,
    },
    /// The message carried `frames` input frames; the handler dropped them
    /// ([`Handler::DROP_REASON`]).
    Drop {
        /// Input frames dropped.
        frames: u32,
    },
    /// The message carried `frames` input frames, now handed on in another
    /// message.
    Handoff {
        /// Input frames handed on.
        frames: u32,
    },
}

/// A flow table: open addressing on the RSS hash (linear probing, 8-byte
/// slots: 32-bit hash + 32-bit packet count), one per worker, no locks.
/// The default handler of `rsskit pipeline`: every packet touches its
/// flow's slot, as a firewall state lookup would.
pub struct FlowCounter {
    slots: Vec<(u32, u32)>,
    mask: usize,
    /// Distinct flows seen (until the table is 3/4 full).
    pub flows: usize,
    /// Packets not recorded because the table was full.
    pub overflow: u64,
}

impl FlowCounter {
    /// A table with `slots` slots (rounded up to a power of two).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(16).next_power_of_two();
        FlowCounter { slots: vec![(0, 0); n], mask: n - 1, flows: 0, overflow: 0 }
    }

    #[inline]
    fn index(&self, hash: u32) -> usize {
        // The low bits chose the worker (same for every flow here); mix.
        (hash.wrapping_mul(0x9e37_79b1) as usize >> 7) & self.mask
    }

    /// Packets recorded for `hash`.
    pub fn get(&self, hash: u32) -> u32 {
        let mut i = self.index(hash);
        for _ in 0..=self.mask {
            let (h, n) = self.slots[i];
            if n == 0 {
                return 0;
            }
            if h == hash {
                return n;
            }
            i = (i + 1) & self.mask;
        }
        0
    }
}

impl Handler for FlowCounter {
    #[inline]
    fn prefetch(&self, hash: u32) {
        prefetch(self.slots[self.index(hash)..].as_ptr().cast());
    }

    #[inline]
    fn handle(&mut self, ctx: &PacketCtx, _pkt: &Packet<'_>) -> Disposition {
        let mut i = self.index(ctx.hash);
        let full = self.flows * 4 >= self.slots.len() * 3;
        loop {
            let s = &mut self.slots[i];
            if s.1 == 0 {
                if full {
                    self.overflow += 1;
                    return Disposition::Forward;
                }
                *s = (ctx.hash, 1);
                self.flows += 1;
                return Disposition::Forward;
            }
            if s.0 == ctx.hash {
                s.1 = s.1.saturating_add(1);
                return Disposition::Forward;
            }
            i = (i + 1) & self.mask;
        }
    }
}
