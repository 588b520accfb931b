//! The firewall as a netisr protocol handler ([`crate::netisr::Handler`]):
//! `rsskit firewall --engine netisr` runs it on the data plane's dispatch
//! (software RSS to per-worker rings, reassembly and decapsulation before
//! the handler, send aggregation).
//!
//! Every rule runs here, `redirect` included: a redirection rewrites the
//! frame (in a scratch copy) and hands it to the worker that owns the
//! translated flow as a netisr message ([`crate::netisr::Handler::outbox`]),
//! which goes over that pair's SPSC message ring, FIFO per sender together
//! with the firewall's control messages (slave deletion), as
//! [`super::redirect`] requires; the receiving handler calls
//! [`Worker::resume`] / [`Worker::control`]. A frame rewritten on the
//! worker that owns it (a reply translated back) is sent as rewritten
//! ([`Disposition::Replace`]). Non-IP frames (ARP...) go through the firewall,
//! which passes them, as a bridge does.

use super::order::Gate;
use super::redirect::{Control, Resume};
use super::{Dir, Firewall, Verdict, Worker};
use crate::netisr::{mbuf_flags, Delivery, Disposition, Handler, Msg, PacketCtx, FLAG_PORT_B};
use crate::wire::Packet;
use core::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// Housekeeping ([`Worker::begin_batch`]) at least every this many packets.
const BATCH: u32 = 32;

/// What one firewall worker sends another.
enum FwMsg {
    /// A frame to continue with [`Worker::resume`].
    Resume {
        frame: Vec<u8>,
        dir: Dir,
        msg: Resume,
        now: u64,
        flags: u8,
        /// Input frames it stands for (the netisr's per-frame accounting).
        frames: u32,
    },
    Control(Control),
}

/// One worker of the firewall inside a netisr worker.
pub struct FwHandler {
    w: Worker,
    scratch: Vec<u8>,
    me: Vec<IpAddr>,
    epoch: Instant,
    since_batch: u32,
    now: u64,
    /// Messages for other workers, until the netisr worker takes them.
    pending: Vec<(usize, Msg)>,
    /// Bridge: the direction is the input port ([`FLAG_PORT_B`] = `out`),
    /// not the source address.
    bridge: bool,
    /// Flags of the packet being handled.
    flags: u8,
    /// Input frames the packet being handled stands for.
    frames: u32,
    /// Live input: the clock also advances with wall time while idle.
    live: bool,
    /// Ordered replay ([`super::order`]): completions and clock ticks.
    gate: Option<Arc<Gate>>,
    /// The last barrier clock reported to the gate.
    reached: u64,
}

impl FwHandler {
    /// The handler of worker `id`.
    pub fn new(fw: &Arc<Firewall>, id: usize) -> Self {
        FwHandler {
            w: fw.worker(id),
            scratch: Vec::with_capacity(2048),
            me: fw.config.me.clone(),
            epoch: Instant::now(),
            since_batch: BATCH,
            now: 0,
            pending: Vec::new(),
            bridge: false,
            flags: 0,
            frames: 1,
            live: false,
            gate: None,
            reached: 0,
        }
    }

    /// Live input (AF_PACKET, whose timestamps are wall-clock time): idle
    /// workers keep expiring states as time passes, as the own driver does.
    pub fn live(mut self) -> Self {
        self.live = true;
        self
    }

    /// Between two interfaces: frames of the input started with
    /// [`FLAG_PORT_B`] are `out`, the others `in` (as the own driver does).
    pub fn bridged(mut self) -> Self {
        self.bridge = true;
        self
    }

    /// Ordered replay: report completions to `gate` and advance the clock
    /// when a barrier asks (the input is an [`super::order::OrderedSource`]
    /// sharing it).
    pub fn ordered(mut self, gate: Arc<Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The firewall worker.
    pub fn worker(&self) -> &Worker {
        &self.w
    }

    fn clock(&mut self, ts_ns: u64) {
        let now = if ts_ns != 0 { ts_ns / 1_000_000 } else { self.epoch.elapsed().as_millis() as u64 };
        if now > self.now || self.since_batch >= BATCH {
            self.now = self.now.max(now);
            self.w.begin_batch(self.now);
            self.since_batch = 0;
        }
        self.since_batch += 1;
    }

    /// Maps the firewall's verdict on `self.scratch` (a copy of `orig`).
    fn verdict(&mut self, v: Verdict, dir: Dir, orig: Option<&[u8]>) -> Disposition {
        let v = match v {
            Verdict::Pass if orig == Some(&self.scratch[..]) => Disposition::Forward,
            Verdict::Pass => Disposition::Replace,
            Verdict::Drop => Disposition::Drop,
            Verdict::Forward { to, msg } => {
                let frame = std::mem::replace(&mut self.scratch, Vec::with_capacity(2048));
                let (flags, frames) = (self.flags, self.frames);
                self.pending
                    .push((to, Box::new(FwMsg::Resume { frame, dir, msg, now: self.now, flags, frames })));
                Disposition::Handoff
            }
        };
        self.drain_controls();
        v
    }

    /// Moves the worker's control messages to the outbox (counted first
    /// when the replay is ordered).
    fn drain_controls(&mut self) {
        let before = self.pending.len();
        for (to, c) in self.w.drain_outbox() {
            self.pending.push((to, Box::new(FwMsg::Control(c))));
        }
        if let Some(g) = &self.gate {
            g.controls_sent(self.w.id(), (self.pending.len() - before) as u64);
        }
    }

    /// A frame the ordered input counted got its final verdict.
    fn complete(&self, v: Disposition, counted: bool) -> Disposition {
        if let (Some(g), true) = (&self.gate, counted) {
            g.frame_done(self.w.id());
        }
        v
    }

    fn dir(&self, src: IpAddr) -> Dir {
        if self.bridge {
            if self.flags & FLAG_PORT_B != 0 {
                Dir::Out
            } else {
                Dir::In
            }
        } else if self.me.contains(&src) {
            Dir::Out
        } else {
            Dir::In
        }
    }
}

impl Handler for FwHandler {
    const NON_IP: bool = true;
    const DROP_REASON: &'static str = "firewall_deny";
    // Barriers wait for idle workers' clocks: poll every idle loop.
    const POLL_IDLE: bool = true;

    fn handle(&mut self, ctx: &PacketCtx, pkt: &Packet<'_>) -> Disposition {
        self.clock(ctx.ts_ns);
        self.flags = ctx.flags;
        self.frames = ctx.frames;
        self.scratch.clear();
        self.scratch.extend_from_slice(pkt.data);
        let dir = self.dir(pkt.outer.src);
        let v = self.w.process(&mut self.scratch, dir, self.now);
        let forwarded = matches!(v, Verdict::Forward { .. });
        let v = self.verdict(v, dir, Some(pkt.data));
        // Re-injected (reassembled) packets were not counted by the input.
        self.complete(v, !forwarded && ctx.flags & mbuf_flags::REINJECTED == 0)
    }

    fn handle_other(&mut self, ctx: &PacketCtx, frame: &[u8]) -> Disposition {
        self.clock(ctx.ts_ns);
        self.flags = ctx.flags;
        self.frames = ctx.frames;
        self.scratch.clear();
        self.scratch.extend_from_slice(frame);
        let dir = if self.bridge && ctx.flags & FLAG_PORT_B != 0 { Dir::Out } else { Dir::In };
        let v = self.w.process(&mut self.scratch, dir, self.now);
        let v = self.verdict(v, dir, Some(frame));
        self.complete(v, true)
    }

    fn take_frame(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.scratch, Vec::with_capacity(2048))
    }

    fn outbox(&mut self, out: &mut Vec<(usize, Msg)>) {
        out.append(&mut self.pending);
    }

    fn message(&mut self, _ctx: &PacketCtx, msg: Msg) -> Delivery {
        let Ok(msg) = msg.downcast::<FwMsg>() else { return Delivery::None };
        match *msg {
            FwMsg::Resume { mut frame, dir, msg, now, flags, frames } => {
                self.flags = flags;
                self.frames = frames;
                self.now = self.now.max(now);
                self.since_batch += 1; // publish at the batch's end
                let v = self.w.resume(&mut frame, dir, msg, self.now);
                let forwarded = matches!(v, Verdict::Forward { .. });
                self.scratch = frame;
                let v = self.verdict(v, dir, None);
                match self.complete(v, !forwarded) {
                    Disposition::Forward | Disposition::Replace => {
                        Delivery::Send { frame: self.take_frame(), flags, frames }
                    }
                    Disposition::Drop => Delivery::Drop { frames },
                    Disposition::Handoff => Delivery::Handoff { frames },
                }
            }
            FwMsg::Control(c) => {
                self.since_batch += 1;
                self.w.control(c);
                if let Some(g) = &self.gate {
                    g.control_done(self.w.id());
                }
                Delivery::None
            }
        }
    }

    fn on_batch_end(&mut self, _now_ns: u64) {
        // Housekeeping (expiry, collect requests) also while no packet
        // arrives; the slave deletions it causes go out as messages.
        if self.live {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            if wall > self.now {
                self.now = wall;
                self.since_batch += 1;
            }
        }
        // An ordered replay's barrier: every earlier frame is done, advance
        // to the held frame's time (expiry, track releases, slave deletions).
        let tick = self.gate.as_ref().map_or(0, |g| g.tick_request());
        if tick > self.now {
            self.now = tick;
            self.since_batch += 1;
        }
        if self.since_batch > 0 {
            self.w.begin_batch(self.now);
            self.since_batch = 0;
        }
        self.drain_controls();
        if let (Some(g), true) = (&self.gate, tick > self.reached) {
            g.reached(self.w.id(), tick);
            self.reached = tick;
        }
    }
}

impl Drop for FwHandler {
    fn drop(&mut self) {
        self.w.publish();
    }
}
