//! The worker loop.

use super::ring::{ring, Consumer, Producer, RingMonitor};
use super::{
    mbuf_flags, prefetch, Delivery, Disposition, Handler, Mbuf, Msg, NetisrConfig, NetisrError, PacketCtx,
    RunState, WorkerCounters,
};
use crate::hash::PacketHasher;
use crate::io::{Recv, Source};
use crate::output::{Aggregator, FlushReason, Sink};
use crate::pool::{Pool, PoolMem};
use crate::reass::{ReassOutcome, Reassembler};
use crate::wire::{parse_ethernet, DropReason, ParseConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Publish counters to the monitor after this many handled packets.
const PUBLISH_EVERY: u64 = 4096;

pub(super) struct Parts<H: Handler> {
    pub workers: Vec<WorkerLoop<H>>,
    pub monitors: Vec<Vec<RingMonitor<Mbuf>>>,
    pub msg_monitors: Vec<RingMonitor<Msg>>,
}

struct HomedSource {
    src: Box<dyn Source>,
    done: bool,
    /// [`Mbuf::flags`] bits of every frame read from it (the bridge port).
    flags: u8,
}

pub(super) struct WorkerLoop<H: Handler> {
    id: usize,
    /// The RSS policy (key, hash types, bucket -> worker) and the frame hash.
    hasher: PacketHasher,
    parse: ParseConfig,
    batch: usize,
    prefetch_header: bool,
    prefetch_bucket: bool,
    decap: bool,
    backpressure: bool,
    /// `staged[j]`: packets for worker j, pushed on its ring as one group
    /// (one index publication per group instead of one per packet). With
    /// backpressure, what did not fit stays here and the input pauses.
    staged: Vec<Vec<Mbuf>>,
    /// `ret_staged[j]`: buffers of pool j to return, pushed as one group.
    ret_staged: Vec<Vec<u32>>,
    /// Consecutive loops the input stayed paused (backpressure).
    stall_loops: u64,
    inputs: Vec<HomedSource>,
    pool: Pool,
    /// Every pool by id; keeps their memory alive while mbufs point into it.
    _pools: Vec<Arc<PoolMem>>,
    /// Rings to and from every other worker: frames, returned buffers
    /// (`ret_tx[j]` returns buffers of pool j) and handler messages.
    links: Links,
    /// Messages the handler emitted, per destination, not yet on a ring
    /// (`msg_staged[self]`: to this worker itself).
    msg_staged: Vec<Vec<Msg>>,
    /// Reused buffer for [`Handler::outbox`].
    msg_out: Vec<(usize, Msg)>,
    reass: Option<Reassembler>,
    handler: H,
    out: Aggregator,
    /// Flushed mbufs waiting to be released (reused allocation).
    freed: Vec<Mbuf>,
    sink: Box<dyn Sink>,
    c: WorkerCounters,
    ctl: Arc<RunState>,
    epoch: Instant,
    last_publish: u64,
    /// Thread CPU time at start (ns).
    cpu0: u64,
}

/// One worker's ends of the rings to and from every other worker
/// (`tx[j]`/`ret_tx[j]`/`msg_tx[j]`: to worker j, `None` for itself).
struct Links {
    tx: Vec<Option<Producer<Mbuf>>>,
    rx: Vec<Consumer<Mbuf>>,
    ret_tx: Vec<Option<Producer<u32>>>,
    ret_rx: Vec<Consumer<u32>>,
    msg_tx: Vec<Option<Producer<Msg>>>,
    msg_rx: Vec<Consumer<Msg>>,
}

impl Links {
    fn new(n: usize) -> Self {
        Links {
            tx: (0..n).map(|_| None).collect(),
            rx: Vec::new(),
            ret_tx: (0..n).map(|_| None).collect(),
            ret_rx: Vec::new(),
            msg_tx: (0..n).map(|_| None).collect(),
            msg_rx: Vec::new(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build<H: Handler>(
    cfg: &NetisrConfig,
    n: usize,
    hasher: PacketHasher,
    inputs: Vec<(usize, u8, Box<dyn Source>)>,
    sinks: Vec<Box<dyn Sink>>,
    handlers: Vec<H>,
    ctl: &Arc<RunState>,
) -> Result<Parts<H>, NetisrError> {
    let cap = cfg.ring_capacity.max(2).next_power_of_two();
    // Enough buffers that the rings to every other worker, a batch and an
    // output group can all be full at once, plus slack.
    let pool_buffers = if cfg.pool_buffers > 0 {
        cfg.pool_buffers
    } else {
        cap * n + 4 * cfg.batch + 4 * cfg.flush.max_packets + 1024
    };
    let pools: Vec<Pool> = (0..n).map(|_| Pool::new(pool_buffers, cfg.stride)).collect();
    let mems: Vec<Arc<PoolMem>> = pools.iter().map(|p| p.mem().clone()).collect();
    // Three rings per ordered pair (src -> dst): packets, buffer returns,
    // handler messages.
    let mut links: Vec<Links> = (0..n).map(|_| Links::new(n)).collect();
    let mut monitors: Vec<Vec<RingMonitor<Mbuf>>> = (0..n).map(|_| Vec::new()).collect();
    let mut msg_monitors = Vec::new();
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            let (p, c, m) = ring::<Mbuf>(cap);
            links[s].tx[d] = Some(p);
            links[d].rx.push(c);
            monitors[d].push(m);
            // Buffers of pool d held by worker s go back on s -> d; it can
            // hold every buffer of the pool, so a return never fails.
            let (p, c, _) = ring::<u32>(pool_buffers);
            links[s].ret_tx[d] = Some(p);
            links[d].ret_rx.push(c);
            let (p, c, m) = ring::<Msg>(cap);
            links[s].msg_tx[d] = Some(p);
            links[d].msg_rx.push(c);
            msg_monitors.push(m);
        }
    }
    let mut homed: Vec<Vec<HomedSource>> = (0..n).map(|_| Vec::new()).collect();
    for (w, flags, src) in inputs {
        homed[w].push(HomedSource { src, done: false, flags });
    }
    let epoch = Instant::now();
    let mut workers = Vec::with_capacity(n);
    let (mut sinks, mut handlers) = (sinks.into_iter(), handlers.into_iter());
    for (id, ((pool, links), inputs)) in pools.into_iter().zip(links).zip(homed).enumerate() {
        workers.push(WorkerLoop {
            id,
            hasher: hasher.clone(),
            parse: cfg.parse,
            batch: cfg.batch,
            prefetch_header: cfg.prefetch.header(),
            prefetch_bucket: cfg.prefetch.bucket(),
            decap: cfg.decap,
            backpressure: cfg.backpressure,
            staged: (0..n).map(|_| Vec::with_capacity(cfg.batch.max(32))).collect(),
            ret_staged: (0..n).map(|_| Vec::with_capacity(64)).collect(),
            stall_loops: 0,
            inputs,
            pool,
            _pools: mems.clone(),
            links,
            msg_staged: (0..n).map(|_| Vec::new()).collect(),
            msg_out: Vec::new(),
            reass: cfg.reass.map(Reassembler::new),
            handler: handlers.next().expect("one handler per worker (checked by start)"),
            out: Aggregator::new(cfg.flush),
            freed: Vec::with_capacity(cfg.flush.max_packets),
            sink: sinks.next().expect("one sink per worker (checked by start)"),
            c: WorkerCounters::default(),
            ctl: ctl.clone(),
            epoch,
            last_publish: 0,
            cpu0: 0,
        });
    }
    Ok(Parts { workers, monitors, msg_monitors })
}

impl<H: Handler> WorkerLoop<H> {
    pub(super) fn id(&self) -> usize {
        self.id
    }

    /// The worker loop, on its (already pinned) thread, until told to stop.
    pub(super) fn run(mut self) -> Result<(H, WorkerCounters), NetisrError> {
        self.cpu0 = thread_cpu_ns();
        let mut local: Vec<Mbuf> = Vec::with_capacity(self.batch * 2);
        let mut idle_loops = 0u32;
        let ctl = self.ctl.clone();
        let ws = &ctl.workers[self.id];
        // Termination handshake (see `Netisr::quiescent`): `idle` goes false
        // before we look for work and true only after a loop found none, with
        // the count of busy loops published just before. While busy, the
        // loop writes nothing shared.
        let mut idle = false;
        let mut busy_loops = 0u64;
        loop {
            if idle {
                ws.idle.store(false, Ordering::SeqCst);
                idle = false;
            }
            // `more`: some input or ring still had a full batch waiting.
            let (mut did, mut more) = self.poll_inputs(&mut local);
            // Direct-dispatched packets first, then the rings, batch by batch.
            if !local.is_empty() {
                self.process_batch(&mut local);
            }
            for r in 0..self.links.rx.len() {
                let n = self.links.rx[r].pop_into(&mut local, self.batch);
                if n > 0 {
                    did = true;
                    more |= n == self.batch;
                    self.process_batch(&mut local);
                }
            }
            if self.poll_messages() {
                did = true;
            }
            if did && !more {
                // Ran out of input for now: DragonFly's rollup.
                self.flush(FlushReason::Idle);
            }
            if did || H::POLL_IDLE || idle_loops.is_multiple_of(256) {
                self.handler.on_batch_end(self.epoch.elapsed().as_nanos() as u64);
                self.take_outbox();
            }
            // Whatever this loop queued or freed becomes visible before the
            // worker can report itself idle.
            self.flush_staged();
            if self.flush_messages() {
                did = true; // messages still waiting for room: not idle
            }
            if let Some(reass) = &mut self.reass {
                if let Some(d) = reass.next_deadline() {
                    let now = self.epoch.elapsed().as_nanos() as u64;
                    if d <= now {
                        reass.expire(now);
                    }
                }
            }
            if did {
                idle_loops = 0;
                busy_loops += 1;
                if self.c.handled + self.c.input - self.last_publish >= PUBLISH_EVERY {
                    self.publish();
                }
                continue;
            }
            self.flush(FlushReason::Idle);
            if idle_loops == 0 && busy_loops > 0 {
                // First idle loop after work: the end of this worker's run so far.
                *ws.busy_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
            if self.c.handled + self.c.input != self.last_publish || idle_loops.is_multiple_of(1024) {
                self.publish();
            }
            ws.work.store(busy_loops, Ordering::SeqCst);
            ws.idle.store(true, Ordering::SeqCst);
            idle = true;
            if ctl.stop.load(Ordering::SeqCst) {
                break;
            }
            idle_loops = idle_loops.saturating_add(1);
            if idle_loops < 64 {
                std::hint::spin_loop();
            } else if idle_loops < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.flush(FlushReason::Final);
        self.flush_staged();
        self.flush_messages();
        // Only if the run was cut short with a queue still full (backpressure).
        self.c.frames.staged = self.staged.iter().flatten().map(|m| u64::from(m.frames)).sum();
        self.sink.finish().map_err(|source| NetisrError::Output { worker: self.id, source })?;
        if let Some(r) = &self.reass {
            self.c.reass = *r.counters();
        }
        self.publish();
        Ok((self.handler, self.c))
    }

    fn publish(&mut self) {
        if let Some(r) = &self.reass {
            self.c.reass = *r.counters();
        }
        self.c.output = self.out.counters;
        self.c.cpu_ns = thread_cpu_ns().saturating_sub(self.cpu0);
        self.last_publish = self.c.handled + self.c.input;
        let ws = &self.ctl.workers[self.id];
        *ws.counters.lock().unwrap_or_else(|e| e.into_inner()) = self.c;
        let drops: u64 = self.inputs.iter().map(|i| i.src.drops()).sum();
        ws.source_drops.store(drops, Ordering::Relaxed);
        let mut reasons = Vec::new();
        for i in &self.inputs {
            super::add_reasons(&mut reasons, &i.src.drop_reasons());
        }
        if !reasons.is_empty() {
            *ws.source_drop_reasons.lock().unwrap_or_else(|e| e.into_inner()) = reasons;
        }
    }

    /// Reads up to one batch from the sources homed here: hash, then direct
    /// dispatch into `local` or queue to the owner.
    fn poll_inputs(&mut self, local: &mut Vec<Mbuf>) -> (bool, bool) {
        if self.inputs.is_empty() {
            return (false, false);
        }
        if self.backpressure && self.staged.iter().any(|q| !q.is_empty()) {
            self.flush_staged();
            if self.staged.iter().any(|q| !q.is_empty()) {
                // Still no room: read nothing until the owner catches up.
                // Counts as work so the run is not judged drained meanwhile.
                // Back off a little so the retries do not keep pulling the
                // owner's ring index line away from it; yield if the owner
                // seems not to be running at all.
                self.stall_loops += 1;
                if self.stall_loops.is_multiple_of(4096) {
                    std::thread::yield_now();
                } else {
                    for _ in 0..16 {
                        std::hint::spin_loop();
                    }
                }
                return (true, true);
            }
            self.stall_loops = 0;
        }
        let stop = self.ctl.stop_inputs.load(Ordering::Relaxed);
        let mut did = false;
        let mut more = false;
        for i in 0..self.inputs.len() {
            if self.inputs[i].done {
                continue;
            }
            if stop {
                self.input_done(i);
                continue;
            }
            let mut got = 0;
            for _ in 0..self.batch {
                let Some(idx) = self.alloc() else {
                    // Every buffer is in flight: leave the frame in the source.
                    more = true;
                    break;
                };
                let (len, ts_ns, heap) = match self.inputs[i].src.recv() {
                    Recv::Frame { data, ts_ns } => {
                        if data.len() <= self.pool.stride() {
                            // SAFETY: we hold `idx` (just allocated).
                            let buf = unsafe { self.pool.mem().buf_mut(idx) };
                            buf[..data.len()].copy_from_slice(data);
                            (data.len(), ts_ns, None)
                        } else {
                            (data.len(), ts_ns, Some(data.to_vec()))
                        }
                    }
                    Recv::Idle => {
                        self.pool.free(idx);
                        break;
                    }
                    Recv::Done => {
                        self.pool.free(idx);
                        self.input_done(i);
                        break;
                    }
                };
                did = true;
                got += 1;
                self.c.input += 1;
                let mut m = match heap {
                    Some(v) => {
                        self.pool.free(idx);
                        Mbuf::heap(v, 0, ts_ns, 0)
                    }
                    // SAFETY: we hold `idx` and hand it to the mbuf; every
                    // pool's memory lives as long as any worker (`_pools`).
                    None => unsafe { Mbuf::pooled(self.pool.mem(), self.id as u16, idx, len, 0, ts_ns) },
                };
                m.flags |= self.inputs[i].flags;
                self.dispatch_input(m, local);
            }
            more |= got == self.batch;
        }
        self.flush_staged();
        (did, more)
    }

    fn input_done(&mut self, i: usize) {
        if !self.inputs[i].done {
            if let Some(e) = self.inputs[i].src.failure() {
                self.ctl.failures.lock().unwrap_or_else(|e| e.into_inner()).push(e);
            }
            self.inputs[i].done = true;
            self.ctl.inputs_active.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The input stage for one frame: the NIC's hash, then direct dispatch
    /// or queue.
    #[inline]
    fn dispatch_input(&mut self, mut m: Mbuf, local: &mut Vec<Mbuf>) {
        let hash = match self.hasher.nic_frame(m.data()) {
            Some(h) => h,
            None => match parse_ethernet(m.data(), &self.parse) {
                Ok(p) => self.hasher.nic(&p).hash,
                // Non-IP frames (ARP...) for the handler: on this worker.
                Err(DropReason::NotIp) if H::NON_IP => {
                    self.c.dispatched += 1;
                    local.push(m);
                    if local.len() >= self.batch {
                        self.process_batch(local);
                    }
                    return;
                }
                Err(r) => {
                    self.c.drops.inc(r);
                    self.c.frames.parse.add(r, u64::from(m.frames));
                    self.release(m);
                    return;
                }
            },
        };
        m.hash = hash;
        let owner = self.hasher.policy().worker_of_hash(hash).index();
        if owner == self.id {
            self.c.dispatched += 1;
            local.push(m);
            if local.len() >= self.batch {
                self.process_batch(local);
            }
        } else {
            self.enqueue(owner, m);
        }
    }

    /// Queues `m` to worker `owner` (staged; pushed by [`Self::flush_staged`]).
    #[inline]
    fn enqueue(&mut self, owner: usize, m: Mbuf) {
        self.staged[owner].push(m);
        if self.staged[owner].len() >= 64 {
            self.flush_staged();
        }
    }

    /// Pushes every staged group onto its ring. What does not fit is kept
    /// (backpressure) or dropped and counted as queue drops (netisr).
    fn flush_staged(&mut self) {
        for owner in 0..self.staged.len() {
            if self.staged[owner].is_empty() {
                continue;
            }
            let mut q = std::mem::take(&mut self.staged[owner]);
            let r = self.links.tx[owner].as_mut().expect("ring to another worker");
            r.push_many(&mut q);
            if !q.is_empty() && !self.backpressure {
                r.count_drops(q.len() as u64);
                for m in q.drain(..) {
                    self.c.frames.queue_full += u64::from(m.frames);
                    self.release(m);
                }
            }
            self.staged[owner] = q;
        }
        self.flush_returns();
    }

    /// Pushes the staged buffer returns onto the return rings.
    fn flush_returns(&mut self) {
        for (pool, q) in self.ret_staged.iter_mut().enumerate() {
            if !q.is_empty() {
                if let Some(r) = self.links.ret_tx[pool].as_mut() {
                    // Sized to hold the whole pool: everything fits.
                    r.push_many(q);
                }
                q.clear();
            }
        }
    }

    /// A free buffer of our pool, refilling from the return rings if needed.
    #[inline]
    fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.pool.alloc() {
            return Some(i);
        }
        for r in &mut self.links.ret_rx {
            while let Some(i) = r.pop() {
                self.pool.free(i);
            }
        }
        let i = self.pool.alloc();
        if i.is_none() {
            // Backpressure: the frame stays in the source until buffers return.
            self.c.pool_stalls += 1;
        }
        i
    }

    /// Frees an mbuf: a heap buffer is dropped, a pool buffer goes back to
    /// its pool (through the return ring if it is another worker's).
    #[inline]
    fn release(&mut self, m: Mbuf) {
        if let Some((pool, idx)) = m.pool_slot() {
            let pool = pool as usize;
            if pool == self.id {
                self.pool.free(idx);
            } else {
                self.ret_staged[pool].push(idx);
                if self.ret_staged[pool].len() >= 64 {
                    self.flush_returns();
                }
            }
        }
    }

    /// Processes `local` (drained) in batches: prefetch headers, prefetch
    /// buckets, then parse and handle each packet.
    fn process_batch(&mut self, local: &mut Vec<Mbuf>) {
        let mut batch = std::mem::take(local);
        let mut start = 0;
        while start < batch.len() {
            let end = (start + self.batch).min(batch.len());
            if self.prefetch_header {
                for m in &batch[start..end] {
                    prefetch(m.as_ptr());
                }
            }
            if self.prefetch_bucket {
                for m in &batch[start..end] {
                    self.handler.prefetch(m.hash);
                }
            }
            start = end;
        }
        for m in batch.drain(..) {
            self.process(m);
        }
        *local = batch;
    }

    /// Handles one packet on its owning worker.
    fn process(&mut self, m: Mbuf) {
        self.c.handled += 1;
        enum Next {
            Handled(Disposition),
            /// The frame, its flags and the input frames it stands for.
            Reinject(Vec<u8>, u8, u32),
            /// Held or dropped by reassembly (which counts it).
            Consumed,
            Dropped,
        }
        let next = {
            let data = m.data();
            // Matched by reference: moving the ~220-byte Packet out of the
            // Result costs a memcpy per packet.
            let parsed = parse_ethernet(data, &self.parse);
            match &parsed {
                Err(DropReason::NotIp) if H::NON_IP => {
                    let ctx = self.ctx(&m);
                    Next::Handled(self.handler.handle_other(&ctx, data))
                }
                Err(r) => {
                    self.c.drops.inc(*r);
                    self.c.frames.parse.add(*r, u64::from(m.frames));
                    Next::Dropped
                }
                Ok(p) => {
                    let frag = p.inner.is_none() && p.outer.is_fragment();
                    if let (true, Some(reass)) = (frag, self.reass.as_mut()) {
                        let now = self.epoch.elapsed().as_nanos() as u64;
                        match reass.push_frames(&p.outer, now, u64::from(m.frames)) {
                            ReassOutcome::Complete(ip) => {
                                self.c.reassembled += 1;
                                let frames = u32::try_from(reass.last_complete_frames()).unwrap_or(u32::MAX);
                                Next::Reinject(with_link(&data[..12], &ip), mbuf_flags::REASSEMBLED, frames)
                            }
                            ReassOutcome::Held | ReassOutcome::Dropped(_) => Next::Consumed,
                            ReassOutcome::NotFragment => {
                                let ctx = self.ctx(&m);
                                Next::Handled(self.handler.handle(&ctx, p))
                            }
                        }
                    } else if let (Some(inner), true) = (&p.inner, self.decap) {
                        self.c.decapsulated += 1;
                        Next::Reinject(
                            with_link(&data[..12], inner.bytes),
                            mbuf_flags::DECAPSULATED,
                            m.frames,
                        )
                    } else {
                        let ctx = self.ctx(&m);
                        Next::Handled(self.handler.handle(&ctx, p))
                    }
                }
            }
        };
        if matches!(next, Next::Handled(_)) {
            self.take_outbox();
        }
        match next {
            Next::Handled(Disposition::Forward) => {
                self.c.forwarded += 1;
                if let Some(reason) = self.out.push(m) {
                    self.flush(reason);
                }
            }
            Next::Handled(Disposition::Drop) => {
                self.c.consumed += 1;
                self.c.frames.handler += u64::from(m.frames);
                self.release(m);
            }
            Next::Handled(Disposition::Handoff) => {
                self.c.consumed += 1;
                self.c.frames.handoff += u64::from(m.frames);
                self.release(m);
            }
            Next::Handled(Disposition::Replace) => {
                self.c.forwarded += 1;
                let mut f = Mbuf::heap(self.handler.take_frame(), m.hash, m.ts_ns, m.flags);
                f.frames = m.frames;
                self.release(m);
                if let Some(reason) = self.out.push(f) {
                    self.flush(reason);
                }
            }
            Next::Consumed | Next::Dropped => self.release(m),
            Next::Reinject(frame, flag, frames) => {
                let ts = m.ts_ns;
                let flags = m.flags | flag;
                self.release(m);
                self.reinject(frame, flags, ts, frames);
            }
        }
    }

    /// Moves the handler's new messages to the per-destination stages.
    #[inline]
    fn take_outbox(&mut self) {
        self.handler.outbox(&mut self.msg_out);
        // Most handlers send no messages: skip making and dropping a
        // `Drain` for every packet (~40 instructions and ~14 stores a frame).
        if self.msg_out.is_empty() {
            return;
        }
        for (to, msg) in self.msg_out.drain(..) {
            if let Some(q) = self.msg_staged.get_mut(to) {
                q.push(msg);
            }
        }
    }

    /// Pushes staged messages onto their rings (what does not fit waits);
    /// true if some are still waiting.
    fn flush_messages(&mut self) -> bool {
        let mut waiting = false;
        for (to, q) in self.msg_staged.iter_mut().enumerate() {
            if q.is_empty() {
                continue;
            }
            // To this worker itself (no ring): `poll_messages` takes them.
            if let Some(r) = self.links.msg_tx[to].as_mut() {
                r.push_many(q);
            }
            waiting |= !q.is_empty();
        }
        waiting
    }

    /// Hands the messages waiting for this worker to the handler (its own
    /// first, then one batch per ring); true if there were any.
    fn poll_messages(&mut self) -> bool {
        let mut did = false;
        let ctx = PacketCtx { worker: self.id, hash: 0, flags: 0, ts_ns: 0, frames: 0 };
        if !self.msg_staged[self.id].is_empty() {
            let own = std::mem::take(&mut self.msg_staged[self.id]);
            for msg in own {
                self.deliver(&ctx, msg);
            }
            did = true;
        }
        for r in 0..self.links.msg_rx.len() {
            for _ in 0..self.batch {
                let Some(msg) = self.links.msg_rx[r].pop() else { break };
                did = true;
                self.deliver(&ctx, msg);
            }
        }
        did
    }

    fn deliver(&mut self, ctx: &PacketCtx, msg: Msg) {
        match self.handler.message(ctx, msg) {
            Delivery::None => {}
            Delivery::Send { frame, flags, frames } => {
                self.c.forwarded += 1;
                self.c.frames.handoff_done += u64::from(frames);
                let mut m = Mbuf::heap(frame, 0, 0, flags);
                m.frames = frames;
                if let Some(reason) = self.out.push(m) {
                    self.flush(reason);
                }
            }
            Delivery::Drop { frames } => {
                self.c.frames.handoff_done += u64::from(frames);
                self.c.frames.handler += u64::from(frames);
            }
            Delivery::Handoff { frames } => {
                self.c.frames.handoff_done += u64::from(frames);
                self.c.frames.handoff += u64::from(frames);
            }
        }
        self.take_outbox();
    }

    fn ctx(&self, m: &Mbuf) -> PacketCtx {
        PacketCtx { worker: self.id, hash: m.hash, flags: m.flags, ts_ns: m.ts_ns, frames: m.frames }
    }

    /// Re-hash with the full hash type and hand to the owner: at once if it
    /// is this worker, through its ring otherwise.
    fn reinject(&mut self, frame: Vec<u8>, flags: u8, ts_ns: u64, frames: u32) {
        let hash = match parse_ethernet(&frame, &self.parse) {
            Ok(p) => self.hasher.nic(&p).hash,
            Err(r) => {
                self.c.drops.inc(r);
                self.c.frames.parse.add(r, u64::from(frames));
                return;
            }
        };
        self.c.reinjected += 1;
        let mut m = Mbuf::heap(frame, hash, ts_ns, flags | mbuf_flags::REINJECTED);
        m.frames = frames;
        let owner = self.hasher.policy().worker_of_hash(hash).index();
        if owner == self.id {
            self.c.reinjected_direct += 1;
            self.process(m);
        } else {
            self.enqueue(owner, m);
        }
    }

    fn flush(&mut self, reason: FlushReason) {
        if self.out.pending() == 0 {
            return;
        }
        let mut done = std::mem::take(&mut self.freed);
        self.out.flush(reason, self.sink.as_mut(), |m| done.push(m));
        for m in done.drain(..) {
            self.release(m);
        }
        self.freed = done;
    }
}

/// `dst MAC + src MAC` of the original frame, the ethertype for `ip`, then `ip`.
fn with_link(macs: &[u8], ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + ip.len());
    let h = crate::io::eth_header_for(ip);
    if macs.len() == 12 {
        f.extend_from_slice(macs);
    } else {
        f.extend_from_slice(&h[..12]);
    }
    f.extend_from_slice(&h[12..]);
    f.extend_from_slice(ip);
    f
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    rsskit_linux::affinity::thread_cpu_time().as_nanos() as u64
}
