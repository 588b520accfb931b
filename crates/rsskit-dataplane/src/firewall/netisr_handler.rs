//! The firewall as a netisr protocol handler ([`crate::netisr::Handler`]):
//! `rsskit firewall --engine netisr` runs it on the data plane's dispatch
//! (software RSS to per-worker rings, reassembly and decapsulation before
//! the handler, send aggregation).
//!
//! The handler interface gives each packet read-only and answers forward or
//! drop, so this engine filters, keeps states, enforces limits and counts,
//! but cannot run `redirect` rules: a redirection rewrites the frame and
//! hands it, with a message, to another worker ([`super::redirect`]), which
//! needs a mutable buffer and a worker-to-worker message path in the
//! netisr loop. [`FwHandler::new`] refuses rule sets with `redirect`; the
//! firewall's own driver ([`super::run`]) runs them.

use super::rules::Action;
use super::{Dir, Firewall, Verdict as FwVerdict, Worker};
use crate::netisr::{Handler, PacketCtx, Verdict};
use crate::wire::Packet;
use core::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// Housekeeping ([`Worker::begin_batch`]) at least every this many packets.
const BATCH: u32 = 32;

/// One worker of the firewall inside a netisr worker.
pub struct FwHandler {
    w: Worker,
    scratch: Vec<u8>,
    me: Vec<IpAddr>,
    epoch: Instant,
    since_batch: u32,
    now: u64,
}

impl FwHandler {
    /// The handler of worker `id`; an error if the rules hold a `redirect`.
    pub fn new(fw: &Arc<Firewall>, id: usize) -> Result<Self, String> {
        if let Some(r) = fw.rules.load().rules.iter().find(|r| matches!(r.action, Action::Redirect(_))) {
            return Err(format!(
                "rule {} (line {}) is a redirect, which the netisr engine cannot run: use the default engine",
                r.number, r.line
            ));
        }
        Ok(FwHandler {
            w: fw.worker(id),
            scratch: Vec::with_capacity(2048),
            me: fw.config.me.clone(),
            epoch: Instant::now(),
            since_batch: BATCH,
            now: 0,
        })
    }

    /// The firewall worker.
    pub fn worker(&self) -> &Worker {
        &self.w
    }
}

impl Handler for FwHandler {
    fn handle(&mut self, ctx: &PacketCtx, pkt: &Packet<'_>) -> Verdict {
        let now =
            if ctx.ts_ns != 0 { ctx.ts_ns / 1_000_000 } else { self.epoch.elapsed().as_millis() as u64 };
        if now > self.now || self.since_batch >= BATCH {
            self.now = self.now.max(now);
            self.w.begin_batch(self.now);
            self.since_batch = 0;
        }
        self.since_batch += 1;
        self.scratch.clear();
        self.scratch.extend_from_slice(pkt.data);
        let dir = if self.me.contains(&pkt.outer.src) { Dir::Out } else { Dir::In };
        match self.w.process(&mut self.scratch, dir, self.now) {
            FwVerdict::Pass => Verdict::Forward,
            // No redirect rules (checked in `new`): no hand-over happens.
            FwVerdict::Drop | FwVerdict::Forward { .. } => Verdict::Drop,
        }
    }
}

impl Drop for FwHandler {
    fn drop(&mut self) {
        self.w.publish();
    }
}
