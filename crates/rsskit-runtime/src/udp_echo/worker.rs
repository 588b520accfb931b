//! A worker's loop: receive a batch, classify, count, check and stamp each
//! datagram (each segment of a coalesced one), queue the echo, flush.

use super::{Plan, RxSocket};
use crate::proto::{self, ServerStamp, FLAG_MISDIRECTED};
use crate::stats::{Counters, FlushReason};
use crate::steer::Steer;
use crate::worker::WorkerCtx;
use rsskit_core::{FlowTuple, HashType, L4Proto, RssPolicy, WorkerId};
use rsskit_linux::socket::{segment_count, Batch};
use socket2::Socket;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Per-datagram RSS bookkeeping of one worker.
struct Classifier {
    policy: RssPolicy,
    hash_type: HashType,
    local: SocketAddr,
    memo: FlowMemo,
}

impl Classifier {
    fn new(policy: RssPolicy, hash_type: HashType, local: SocketAddr) -> Self {
        Classifier { policy, hash_type, local, memo: FlowMemo::default() }
    }

    /// (hash, bucket) of a datagram from `from` to `local_ip`.
    #[inline]
    fn classify(&mut self, from: SocketAddr, local_ip: IpAddr) -> Option<(u32, u32)> {
        let key = FlowMemo::key(from, local_ip);
        if let Some(hit) = key.and_then(|k| self.memo.get(k)) {
            return Some(hit);
        }
        let t = FlowTuple::new(from.ip(), from.port(), local_ip, self.local.port(), L4Proto::Udp);
        let input = t.input(self.hash_type).ok()?;
        // Through the policy: a symmetric NIC's transform (`--key nic:IF`) included.
        let h = self.policy.hash_input(&input);
        let v = (h, self.policy.bucket(h));
        if let Some(k) = key {
            self.memo.put(k, v);
        }
        Some(v)
    }
}

/// (hash, bucket) of the IPv4 flows seen last: a small 2-way
/// set-associative memo, keyed by the tuple. Both are functions of the
/// tuple alone (the worker's key, hash type and table size never change),
/// so a hit gives what the hash would; the owner is still looked up live
/// for every buffer. Why: with GRO a buffer is ~16 datagrams of one flow,
/// and building the hash input, the Toeplitz hash and the bucket were ~190
/// of the ~750 user-space instructions spent per buffer (bench/udp-instr);
/// a hit is ~20. Two ways, so that two flows whose sources share a set do
/// not evict each other on every buffer. IPv6 is hashed every time.
#[derive(Default)]
struct FlowMemo {
    /// Per set: the most recent entry, then the one before. A key of 0
    /// is empty (a key always has its tag bit set).
    sets: [[(u128, (u32, u32)); 2]; MEMO_SETS],
}

const MEMO_SETS: usize = 32;

impl FlowMemo {
    /// Source address and port, local address, and a tag bit: the whole
    /// tuple (the local port is the worker's own).
    #[inline]
    fn key(from: SocketAddr, local_ip: IpAddr) -> Option<u128> {
        match (from, local_ip) {
            (SocketAddr::V4(f), IpAddr::V4(l)) => Some(
                1 << 112
                    | u128::from(f.ip().to_bits()) << 64
                    | u128::from(l.to_bits()) << 16
                    | u128::from(f.port()),
            ),
            _ => None,
        }
    }

    #[inline]
    fn set(key: u128) -> usize {
        // Source address and port, mixed by one multiply (Fibonacci hashing).
        let x = (key >> 64) as u32 ^ (key as u32);
        (x.wrapping_mul(0x9E37_79B1) >> (32 - MEMO_SETS.trailing_zeros())) as usize
    }

    #[inline]
    fn get(&self, key: u128) -> Option<(u32, u32)> {
        let set = &self.sets[Self::set(key)];
        set.iter().find(|e| e.0 == key).map(|e| e.1)
    }

    /// Inserts as the most recent entry of its set, keeping the one before.
    #[inline]
    fn put(&mut self, key: u128, v: (u32, u32)) {
        let set = &mut self.sets[Self::set(key)];
        set[1] = set[0];
        set[0] = (key, v);
    }
}

pub(super) fn run_worker(ctx: &WorkerCtx, plan: Plan, socks: Vec<RxSocket>) -> io::Result<Counters> {
    let mut c = Counters::default();
    if ctx.stopping() {
        return Ok(c);
    }
    rsskit_linux::affinity::set_current_thread_policy(plan.sched)?;
    // Allocated after pinning: first touch on the worker's own CPU.
    let mut w = WorkerState {
        // A clone made here: the Toeplitz tables are first touched on the
        // worker's own CPU.
        cls: Classifier::new(plan.policy.clone(), plan.hash_type, plan.local),
        // Control buffers for packet info and, with GRO, the segment size.
        rx: Batch::new(plan.batch, plan.max_datagram, plan.pktinfo || plan.gro),
        tx: Batch::new(
            if plan.sink { 1 } else { plan.flush_packets },
            plan.max_datagram,
            plan.pktinfo || plan.gro,
        ),
        me: ctx.index as u32,
        my_cpu: ctx.cpu as u16,
        owners_at_drain: Vec::new(),
        owners_before_read: Vec::new(),
        plan,
    };
    read_owners(&w.plan, &mut w.owners_at_drain);
    let Some((own, others)) = socks.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a worker without a socket"));
    };
    let reply = &own.sock;
    // Sockets of CPUs without a worker (cpu steering): they signal this
    // thread (SIGIO) when a datagram arrives, which ends the blocking read
    // below with EINTR, instead of a poll over every socket on every
    // wake-up (a third system call per wake-up, ~15% of the echo's CPU).
    let mut others_ready = match others {
        [] => None,
        _ => Some(rsskit_linux::sigio::ReadySignals::arm(others.iter().map(|s| s.sock.as_fd()))?),
    };
    serve(ctx, &mut w, own, others, others_ready.as_mut(), &mut c)?;
    if !w.tx.is_empty() {
        w.flush(reply, &mut c, FlushReason::Idle);
    }
    ctx.stats.publish(&c);
    Ok(c)
}

/// The worker's loop, until the stop flag. Never inlined: bench/udp-instr
/// counts the instructions of this function (callgrind --toggle-collect),
/// the steady state without the worker's set-up (the policy clone and the
/// batches, ~4 instructions per datagram of a 12,000-datagram count).
#[inline(never)]
fn serve(
    ctx: &WorkerCtx,
    w: &mut WorkerState,
    own: &RxSocket,
    others: &[RxSocket],
    mut others_ready: Option<&mut rsskit_linux::sigio::ReadySignals>,
    c: &mut Counters,
) -> io::Result<()> {
    let reply = &own.sock;
    let mut errors = 0u32;
    // Read the others first: anything queued before they were armed.
    let mut read_others = others_ready.is_some();
    while !ctx.stopping() {
        if let Some(sig) = &mut others_ready {
            // `|`, not `||`: `fired` is asked every time, so it forgets what it reported.
            if std::mem::take(&mut read_others) | sig.fired() {
                for rs in others {
                    w.drain(rs, reply, c, &mut errors)?;
                }
            }
        }
        // The own socket: block in recvmmsg (SO_RCVTIMEO bounds the wait,
        // so the stop flag is seen), but never while replies are pending:
        // then MSG_DONTWAIT, and an empty queue flushes them ("idle").
        read_owners(&w.plan, &mut w.owners_before_read);
        let dontwait = !w.tx.is_empty();
        match w.rx.recv(&own.sock, dontwait) {
            Ok(n) => {
                errors = 0;
                w.handle(own, reply, n, c);
                if n < w.plan.batch {
                    // The queue ran dry within this call: nothing more to read.
                    std::mem::swap(&mut w.owners_at_drain, &mut w.owners_before_read);
                    if !w.tx.is_empty() {
                        w.flush(reply, c, FlushReason::Idle);
                    }
                }
            }
            Err(e) if transient(&e) => {
                std::mem::swap(&mut w.owners_at_drain, &mut w.owners_before_read);
                if !w.tx.is_empty() {
                    w.flush(reply, c, FlushReason::Idle);
                }
                // EINTR: maybe another socket's signal. A timeout reads them
                // too: a signal handled just before the read began (after
                // `fired` was asked) waits at most one POLL_INTERVAL. An
                // empty queue seen without waiting says nothing of them.
                read_others = !dontwait || e.kind() == io::ErrorKind::Interrupted;
            }
            Err(e) => recv_error(e, &mut errors)?,
        }
        ctx.stats.publish(c);
    }
    Ok(())
}

/// Copies the live bucket -> worker map as it is now into `into` (left
/// empty without live buckets; no allocation once it has its size).
fn read_owners(plan: &Plan, into: &mut Vec<u32>) {
    into.clear();
    if let Some(o) = &plan.owners {
        into.extend(o.iter().map(|w| w.load(Relaxed)));
    }
}

/// A receive error that is not "nothing to read": tolerated (after a
/// short pause, e.g. `ENOBUFS`/`ENOMEM` under memory pressure) unless it
/// keeps happening, then the worker stops with it.
fn recv_error(e: io::Error, errors: &mut u32) -> io::Result<()> {
    *errors += 1;
    if *errors > 100 {
        return Err(io::Error::new(e.kind(), format!("recvmmsg failing repeatedly: {e}")));
    }
    std::thread::sleep(Duration::from_millis(1));
    Ok(())
}

/// Errors that only mean "nothing to read right now".
fn transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

/// A worker's own state: its hasher, batches and plan.
struct WorkerState {
    cls: Classifier,
    rx: Batch,
    tx: Batch,
    me: u32,
    my_cpu: u16,
    plan: Plan,
    /// Live buckets (`plan.owners`): bucket -> worker as it was just before
    /// the last read that left this worker's socket empty. Every datagram
    /// read since was queued after that moment, so one of a bucket this
    /// worker owned then was steered here by the program before the bucket
    /// moved away: in flight during a move, not misdirected (it still
    /// counts as `unowned`).
    owners_at_drain: Vec<u32>,
    /// The same, read just before the current read.
    owners_before_read: Vec<u32>,
}

impl WorkerState {
    /// Reads `rs` without waiting until it is empty (a read returns less
    /// than a batch), handling what it returns.
    fn drain(&mut self, rs: &RxSocket, reply: &Socket, c: &mut Counters, errors: &mut u32) -> io::Result<()> {
        loop {
            match self.rx.recv(&rs.sock, true) {
                Ok(n) => {
                    *errors = 0;
                    self.handle(rs, reply, n, c);
                    if n < self.plan.batch {
                        return Ok(());
                    }
                }
                Err(e) if transient(&e) => return Ok(()),
                Err(e) => return recv_error(e, errors),
            }
        }
    }

    fn flush(&mut self, reply: &Socket, c: &mut Counters, why: FlushReason) {
        let r = self.tx.send(reply);
        c.sent += r.sent as u64;
        c.dropped += r.failed as u64;
        c.flushed(why);
    }

    /// Classifies, stamps and queues the `n` datagrams just received on `rs`.
    #[inline]
    fn handle(&mut self, rs: &RxSocket, reply: &Socket, n: usize, c: &mut Counters) {
        c.batches += 1;
        // Zero-copy echo: when nothing is queued and every datagram of this
        // batch will be answered, the received batch itself becomes the send
        // batch (swapped with the empty one) instead of copying each
        // datagram: the copy was ~2.5% of the server's CPU per datagram
        // (perf, 510-byte datagrams), the gap to the C floor's 1.10x margin.
        let in_place = !self.plan.sink
            && self.tx.is_empty()
            && self.rx.capacity() == self.tx.capacity()
            && n <= self.plan.flush_packets
            && {
                // One pass: every datagram whole, and the batch within the byte bound.
                let mut bytes = 0;
                (0..n).all(|i| {
                    bytes += self.rx.data(i).len();
                    !self.rx.truncated(i)
                }) && bytes <= self.plan.flush_bytes
            };
        for i in 0..n {
            // A coalesced buffer (GRO) is `dgrams` datagrams of one flow:
            // counted, checked and stamped one by one.
            let len = self.rx.data(i).len();
            let seg = if self.plan.gro { self.rx.segment_size(i).unwrap_or(0) } else { 0 };
            let dgrams = segment_count(len, seg) as u64;
            c.received += dgrams;
            c.bytes += len as u64;
            if dgrams > 1 {
                c.coalesced += dgrams;
            }
            if self.rx.truncated(i) {
                c.dropped += dgrams;
                continue;
            }
            let from = self.rx.addr(i);
            let local_ip = if self.plan.pktinfo { self.rx.local_ip(i) } else { Some(self.plan.local.ip()) };
            // One 4-tuple per buffer: the kernel coalesces only one flow's datagrams.
            let (hash, bucket) = match (from, local_ip) {
                (Some(f), Some(l)) => self.cls.classify(f, l).unwrap_or((0, 0)),
                _ => (0, 0),
            };
            let owner = match &self.plan.owners {
                Some(o) => WorkerId(o[bucket as usize].load(Relaxed)),
                None => self.cls.policy.worker_of_bucket(bucket),
            };
            let unowned = owner != WorkerId(self.me);
            c.unowned += u64::from(unowned) * dgrams;
            let in_flight = unowned && self.owners_at_drain.get(bucket as usize) == Some(&self.me);
            let misdirected = match self.plan.mode {
                Steer::Cpu => rs.kernel_cpu != self.my_cpu,
                _ => unowned && !in_flight,
            };
            c.misdirected += u64::from(misdirected) * dgrams;
            let stamp = ServerStamp {
                worker: self.me as u16,
                cpu: self.my_cpu,
                bucket: bucket as u16,
                kernel_cpu: rs.kernel_cpu,
                hash,
                flags: if unowned && !in_flight { FLAG_MISDIRECTED } else { 0 },
            };
            // The segments share the stamp: encoded once per buffer.
            let stamp = stamp.to_bytes();
            let stamp = (!self.plan.sink).then_some(&stamp);
            // Exactly `dgrams` segments (one when the buffer is one datagram, even empty).
            c.foreign += proto::stamp_segments(self.rx.data_mut(i), seg, stamp);
            if !self.plan.sink && !in_place {
                self.tx.push_from(&self.rx, i);
                if self.tx.len() >= self.plan.flush_packets {
                    self.flush(reply, c, FlushReason::Count);
                } else if self.tx.queued_bytes() >= self.plan.flush_bytes {
                    self.flush(reply, c, FlushReason::Bytes);
                }
            }
        }
        if in_place && n > 0 {
            self.rx.queue_received();
            std::mem::swap(&mut self.rx, &mut self.tx);
            if self.tx.len() >= self.plan.flush_packets {
                self.flush(reply, c, FlushReason::Count);
            } else if self.tx.queued_bytes() >= self.plan.flush_bytes {
                self.flush(reply, c, FlushReason::Bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_core::{CpuId, HashConfig, RssKey};

    /// The memo answers what the hash does, for flows that share a set,
    /// evict each other, come back, and for IPv6 (never memoised).
    #[test]
    fn flow_memo_gives_what_the_hash_gives() {
        let cpus = [CpuId(0), CpuId(1)];
        let policy = RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, Some(7)).unwrap();
        let local: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let plain = |from: SocketAddr, l: IpAddr, hash_type: HashType| {
            let t = FlowTuple::new(from.ip(), from.port(), l, local.port(), L4Proto::Udp);
            let h = policy.toeplitz().hash(t.input(hash_type).unwrap().as_bytes());
            (h, policy.bucket(h))
        };
        // 400 sources over 64 entries: sets shared, entries evicted and refilled.
        let froms: Vec<SocketAddr> = (0..400u32)
            .map(|i| {
                SocketAddr::from((
                    std::net::Ipv4Addr::from(0x0a00_0000 + i % 7),
                    1024 + (i * 37 % 5000) as u16,
                ))
            })
            .collect();
        let v4 = HashType::UdpIpv4;
        let mut memo = Classifier::new(policy.clone(), v4, local);
        for round in 0..3 {
            for (i, &f) in froms.iter().enumerate() {
                let l: IpAddr = if i % 2 == 0 { local.ip() } else { "10.0.0.9".parse().unwrap() };
                assert_eq!(memo.classify(f, l), Some(plain(f, l, v4)), "round {round}, {f} -> {l}");
            }
        }
        // IPv6: hashed every time, never memoised.
        let (f6, l6): (SocketAddr, IpAddr) =
            ("[2001:db8::1]:5000".parse().unwrap(), "2001:db8::2".parse().unwrap());
        assert_eq!(FlowMemo::key(f6, l6), None);
        let mut memo6 = Classifier::new(policy.clone(), HashType::UdpIpv6, local);
        assert_eq!(memo6.classify(f6, l6), Some(plain(f6, l6, HashType::UdpIpv6)));
        // Two flows in one set, alternating: both stay (two ways).
        let mut same_set = froms.iter().map(|&f| (f, FlowMemo::key(f, local.ip()).unwrap()));
        let (a, ka) = same_set.next().unwrap();
        let (b, _) =
            same_set.find(|(_, k)| FlowMemo::set(*k) == FlowMemo::set(ka)).expect("two sources in one set");
        for _ in 0..3 {
            assert_eq!(memo.classify(a, local.ip()), Some(plain(a, local.ip(), v4)));
            assert_eq!(memo.classify(b, local.ip()), Some(plain(b, local.ip(), v4)));
        }
        assert!(
            memo.memo.get(ka).is_some() && memo.memo.get(FlowMemo::key(b, local.ip()).unwrap()).is_some()
        );
    }
}
