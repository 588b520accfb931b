//! One stream's protocol state, no I/O: what was sent, which echoes came
//! back (lost, out of order, duplicated), the RTT of each from the probe's
//! send stamp, who served it (from the server's echo stamp), and refusals.
//! Every method takes the time it happens at (`now_ns`, CLOCK_MONOTONIC).

use crate::proto;
use rsskit_core::{CpuId, WorkerId};
use std::collections::{BTreeMap, BTreeSet};
use std::io;

/// How a socket error on a stream is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// Try again later (socket buffer full, would block, interrupted).
    Retry,
    /// ICMP port unreachable came back: nothing listens at the target.
    Refused,
    /// Anything else ends the run.
    Fatal,
}

/// Classifies an error of `send`/`recv` on a stream's socket.
pub fn classify(e: &io::Error) -> IoClass {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => IoClass::Refused,
        Some(libc::ENOBUFS) | Some(libc::EINTR) => IoClass::Retry,
        _ if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => IoClass::Retry,
        _ => IoClass::Fatal,
    }
}

/// What one received datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// A first echo of one of our probes, after `rtt_ns`.
    Fresh {
        /// Round-trip time, nanoseconds.
        rtt_ns: u64,
    },
    /// An echo already counted.
    Duplicate,
    /// Not an echo of this stream (bad magic, truncated, other stream, a
    /// sequence number never sent).
    Invalid,
}

/// State of one stream.
#[derive(Debug, Clone)]
pub struct StreamTracker {
    /// Stream number.
    pub id: u32,
    /// Probes sent.
    pub sent: u64,
    /// First echoes received.
    pub echoed: u64,
    highest: Option<u64>,
    seen: Vec<u64>,
    /// Echoes that arrived after a later one.
    pub out_of_order: u64,
    /// Echoes received more than once.
    pub duplicates: u64,
    /// Datagrams given up for the window (presumed lost).
    written_off: u64,
    /// Last send (first one) or echo batch: the window's write-off clock.
    last_progress_ns: u64,
    /// Echoes per serving worker.
    pub workers: BTreeMap<u16, u64>,
    /// The lowest sequence number echoed and the worker that served it.
    pub first: Option<(u64, u16)>,
    /// CPUs of the workers that served it.
    pub cpus: BTreeSet<u16>,
    /// CPUs the server's kernel processed its datagrams on.
    pub kcpus: BTreeSet<u16>,
    /// Buckets the server computed for it.
    pub buckets: BTreeSet<u16>,
    /// Echoes the server flagged as misdirected.
    pub flagged: u64,
    /// Echoes whose kernel CPU differs from the serving worker's CPU.
    pub kcpu_mismatch: u64,
    /// ECONNREFUSED errors seen (the stream stops sending at the first).
    pub refused: u64,
    /// Refused while it still had datagrams to send.
    pub cut_short: bool,
}

impl StreamTracker {
    /// A fresh stream; `now_ns` starts its window clock.
    pub fn new(id: u32, now_ns: u64) -> Self {
        StreamTracker {
            id,
            sent: 0,
            echoed: 0,
            highest: None,
            seen: Vec::new(),
            out_of_order: 0,
            duplicates: 0,
            written_off: 0,
            last_progress_ns: now_ns,
            workers: BTreeMap::new(),
            first: None,
            cpus: BTreeSet::new(),
            kcpus: BTreeSet::new(),
            buckets: BTreeSet::new(),
            flagged: 0,
            kcpu_mismatch: 0,
            refused: 0,
            cut_short: false,
        }
    }

    /// The probe to send next.
    pub fn next_probe(&self, now_ns: u64) -> proto::Probe {
        proto::Probe { stream: self.id, seq: self.sent, sent_ns: now_ns }
    }

    /// May this stream send now? Not once refused or at `count`; with a
    /// `window`, not while `window` datagrams are outstanding, unless none
    /// came back for `window_timeout_ns`: then the outstanding ones are
    /// written off (presumed lost) and it goes on.
    pub fn may_send(
        &mut self,
        now_ns: u64,
        count: Option<u64>,
        window: Option<u32>,
        window_timeout_ns: u64,
    ) -> bool {
        self.refused == 0
            && count.is_none_or(|c| self.sent < c)
            && window.is_none_or(|w| {
                // Late echoes of written-off datagrams may still come: saturate.
                let outstanding = self.sent.saturating_sub(self.echoed + self.written_off);
                if outstanding >= u64::from(w)
                    && now_ns.saturating_sub(self.last_progress_ns) > window_timeout_ns
                {
                    self.written_off = self.sent.saturating_sub(self.echoed);
                    self.last_progress_ns = now_ns;
                    true
                } else {
                    outstanding < u64::from(w)
                }
            })
    }

    /// Probes this stream may still send now (after [`Self::may_send`]
    /// said yes): within `count` and the window.
    pub fn room(&self, count: Option<u64>, window: Option<u32>) -> u64 {
        let by_count = count.map_or(u64::MAX, |c| c.saturating_sub(self.sent));
        let by_window = window.map_or(u64::MAX, |w| {
            u64::from(w).saturating_sub(self.sent.saturating_sub(self.echoed + self.written_off))
        });
        by_count.min(by_window)
    }

    /// The kernel took the next probe.
    pub fn on_sent(&mut self, now_ns: u64) {
        if self.sent == 0 {
            self.last_progress_ns = now_ns;
        }
        self.sent += 1;
    }

    /// ECONNREFUSED. `sending`: still in the sending phase (not draining),
    /// so a stream short of its `count` was cut short.
    pub fn on_refused(&mut self, sending: bool, count: Option<u64>) {
        self.refused += 1;
        self.cut_short |= sending && count.is_none_or(|c| self.sent < c);
    }

    /// A batch of datagrams was read at `now_ns` (the window's clock).
    pub fn on_read(&mut self, now_ns: u64) {
        self.last_progress_ns = now_ns;
    }

    /// One received datagram (`truncated`: longer than the buffer).
    pub fn on_datagram(&mut self, data: &[u8], truncated: bool, now_ns: u64) -> Echo {
        let Some((p, s)) = (!truncated).then(|| proto::decode(data)).flatten() else {
            return Echo::Invalid;
        };
        if p.stream != self.id || p.seq >= self.sent {
            return Echo::Invalid;
        }
        if !self.mark(p.seq) {
            self.duplicates += 1;
            return Echo::Duplicate;
        }
        self.echoed += 1;
        match self.highest {
            Some(h) if p.seq < h => self.out_of_order += 1,
            _ => self.highest = Some(p.seq),
        }
        *self.workers.entry(s.worker).or_default() += 1;
        if self.first.is_none_or(|(q, _)| p.seq < q) {
            self.first = Some((p.seq, s.worker));
        }
        self.cpus.insert(s.cpu);
        self.buckets.insert(s.bucket);
        if s.kernel_cpu != proto::CPU_UNKNOWN {
            self.kcpus.insert(s.kernel_cpu);
            if s.kernel_cpu != s.cpu {
                self.kcpu_mismatch += 1;
            }
        }
        if s.misdirected() {
            self.flagged += 1;
        }
        Echo::Fresh { rtt_ns: now_ns.saturating_sub(p.sent_ns).max(1) }
    }

    /// Done sending: refused, or at `count`.
    pub fn done_sending(&self, count: Option<u64>) -> bool {
        self.refused > 0 || count.is_some_and(|c| self.sent >= c)
    }

    /// Nothing more to wait for: refused, or every datagram echoed.
    pub fn all_in(&self) -> bool {
        self.refused > 0 || self.echoed >= self.sent
    }

    /// Datagrams never echoed.
    pub fn lost(&self) -> u64 {
        self.sent - self.echoed.min(self.sent)
    }

    /// Served as it should be: echoed, and every echo by the worker owning
    /// `bucket` (`owner`, on `owner_cpu`), which computed that same bucket
    /// and did not flag it misdirected.
    pub fn served_by_owner(&self, owner: Option<WorkerId>, owner_cpu: Option<CpuId>, bucket: u32) -> bool {
        self.echoed > 0
            && owner.is_some()
            && self.workers.keys().all(|&w| Some(WorkerId(w.into())) == owner)
            && self.cpus.iter().all(|&c| Some(CpuId(c.into())) == owner_cpu)
            && self.buckets.iter().all(|&b| u32::from(b) == bucket)
            && self.flagged == 0
    }

    /// Served as the server's live table said (`udp-echo --rebalance`
    /// moved its bucket): the earliest echo from `owner`, later ones also
    /// from other workers, every echo with `bucket`, none flagged
    /// misdirected (each serving worker owned the bucket in the server's
    /// table at the time). A server whose fixed table differs from ours
    /// never qualifies: its streams do not change workers.
    pub fn moved_by_server(&self, owner: Option<WorkerId>, bucket: u32) -> bool {
        self.echoed > 0
            && owner.is_some()
            && self.first.map(|f| WorkerId(f.1.into())) == owner
            && self.workers.len() > 1
            && self.buckets.iter().all(|&b| u32::from(b) == bucket)
            && self.flagged == 0
    }

    fn mark(&mut self, seq: u64) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.seen.len() {
            self.seen.resize(w + 1, 0);
        }
        let fresh = self.seen[w] & (1 << b) == 0;
        self.seen[w] |= 1 << b;
        fresh
    }
}

/// Limits a send pass applies to every stream.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    /// Probes per stream; `None`: no limit.
    pub count: Option<u64>,
    /// Most probes outstanding per stream; `None`: open loop.
    pub window: Option<u32>,
    /// How long without progress before the window's outstanding probes are written off.
    pub window_timeout_ns: u64,
}

/// One send pass: up to `due` probes, round-robin over the streams from
/// `*next`, each through `send(stream index, probe)`. A stream that may not
/// send, or whose socket is full (retry) or refused, is skipped; the pass
/// ends when `due` are sent or every stream in a row was skipped. Returns
/// how many were sent, or the first fatal error with its stream index.
pub fn send_pass(
    trackers: &mut [StreamTracker],
    next: &mut usize,
    due: u64,
    now_ns: u64,
    limits: SendLimits,
    mut send: impl FnMut(usize, &proto::Probe) -> io::Result<()>,
) -> Result<u64, (usize, io::Error)> {
    send_pass_bursts(trackers, next, due, now_ns, limits, 1, |i, p, _| send(i, p))
}

/// As [`send_pass`], a stream sending up to `gso` probes at a time:
/// `send(stream index, first probe, k)` sends probes `first.seq..first.seq
/// + k` together (one GSO send, taken whole or not at all), `k` within
/// `due`, the stream's `count` and its window.
pub fn send_pass_bursts(
    trackers: &mut [StreamTracker],
    next: &mut usize,
    due: u64,
    now_ns: u64,
    limits: SendLimits,
    gso: u64,
    mut send: impl FnMut(usize, &proto::Probe, u64) -> io::Result<()>,
) -> Result<u64, (usize, io::Error)> {
    let n = trackers.len();
    let (mut tries, mut sent) = (0, 0);
    while sent < due && tries < n {
        let i = *next % n;
        *next = i + 1;
        let st = &mut trackers[i];
        if !st.may_send(now_ns, limits.count, limits.window, limits.window_timeout_ns) {
            tries += 1;
            continue;
        }
        let room = st.room(limits.count, limits.window).min(gso).max(1);
        let k = room.min(due - sent);
        match send(i, &st.next_probe(now_ns), k) {
            Ok(()) => {
                for _ in 0..k {
                    st.on_sent(now_ns);
                }
                sent += k;
                tries = 0;
                if k < room {
                    // Cut short by `due`: this stream goes first next pass,
                    // so every stream gets its share (not one the long
                    // sends and the next one the remainders).
                    *next = i;
                }
            }
            Err(e) => match classify(&e) {
                IoClass::Retry => tries += 1,
                IoClass::Refused => {
                    st.on_refused(true, limits.count);
                    tries += 1;
                }
                IoClass::Fatal => return Err((i, e)),
            },
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn stamp(worker: u16, cpu: u16, bucket: u16) -> proto::ServerStamp {
        proto::ServerStamp { worker, cpu, bucket, kernel_cpu: proto::CPU_UNKNOWN, hash: 0, flags: 0 }
    }

    /// The echo of `seq` of stream `id`, sent at `sent_ns`, as `s` stamped it.
    fn echo(id: u32, seq: u64, sent_ns: u64, s: &proto::ServerStamp) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        assert!(proto::encode_probe(&mut b, &proto::Probe { stream: id, seq, sent_ns }));
        assert!(proto::write_stamp(&mut b, s));
        b
    }

    fn sent(n: u64) -> StreamTracker {
        let mut t = StreamTracker::new(3, 0);
        for i in 0..n {
            assert!(t.may_send(i, None, None, 0));
            t.on_sent(i);
        }
        t
    }

    #[test]
    fn out_of_order_duplicate_and_lost_are_counted_exactly() {
        let mut t = sent(10);
        let s = stamp(1, 1, 5);
        // 0 1 4 2 3 4 7 6 1 : 5, 8 and 9 lost; 2, 3 and 6 late; 4 and 1 twice.
        let order = [0, 1, 4, 2, 3, 4, 7, 6, 1];
        let got: Vec<Echo> =
            order.iter().map(|&q| t.on_datagram(&echo(3, q, 0, &s), false, 10 * MS)).collect();
        assert_eq!(got.iter().filter(|e| matches!(e, Echo::Fresh { .. })).count(), 7);
        assert_eq!(got[5], Echo::Duplicate);
        assert_eq!(got[8], Echo::Duplicate);
        assert_eq!((t.echoed, t.duplicates, t.out_of_order, t.lost()), (7, 2, 3, 3));
        assert!(!t.all_in());
    }

    #[test]
    fn invalid_datagrams_are_not_echoes() {
        let mut t = sent(2);
        let s = stamp(0, 0, 0);
        assert_eq!(t.on_datagram(&echo(4, 0, 0, &s), false, 1), Echo::Invalid, "other stream");
        assert_eq!(t.on_datagram(&echo(3, 2, 0, &s), false, 1), Echo::Invalid, "never sent");
        assert_eq!(t.on_datagram(&echo(3, 0, 0, &s), true, 1), Echo::Invalid, "truncated");
        assert_eq!(t.on_datagram(b"hello, this is not a probe of ours at all!", false, 1), Echo::Invalid);
        assert_eq!(t.on_datagram(&echo(3, 0, 0, &s)[..20], false, 1), Echo::Invalid, "short");
        assert_eq!((t.echoed, t.duplicates), (0, 0));
        assert!(matches!(t.on_datagram(&echo(3, 1, 0, &s), false, 1), Echo::Fresh { .. }));
    }

    #[test]
    fn rtt_is_from_the_probe_stamp() {
        let mut t = sent(3);
        let s = stamp(0, 0, 0);
        assert_eq!(
            t.on_datagram(&echo(3, 0, 5 * MS, &s), false, 7 * MS + 250),
            Echo::Fresh { rtt_ns: 2 * MS + 250 }
        );
        // A stamp from the future (another clock) is not a negative RTT.
        assert_eq!(t.on_datagram(&echo(3, 1, 9 * MS, &s), false, 8 * MS), Echo::Fresh { rtt_ns: 1 });
        assert_eq!(t.next_probe(42), proto::Probe { stream: 3, seq: 3, sent_ns: 42 });
    }

    #[test]
    fn served_by_a_worker_not_owning_the_bucket_is_a_mismatch() {
        let mut t = sent(4);
        for q in 0..2 {
            t.on_datagram(&echo(3, q, 0, &stamp(1, 3, 5)), false, 1);
        }
        assert!(t.served_by_owner(Some(WorkerId(1)), Some(CpuId(3)), 5));
        assert!(!t.served_by_owner(Some(WorkerId(0)), Some(CpuId(3)), 5), "other owner");
        assert!(!t.served_by_owner(Some(WorkerId(1)), Some(CpuId(2)), 5), "owner on another CPU");
        assert!(!t.served_by_owner(Some(WorkerId(1)), Some(CpuId(3)), 6), "server computed another bucket");
        assert!(!t.served_by_owner(None, None, 5), "no owner");
        // One echo from worker 0: no longer only the owner.
        t.on_datagram(&echo(3, 2, 0, &stamp(0, 2, 5)), false, 1);
        assert!(!t.served_by_owner(Some(WorkerId(1)), Some(CpuId(3)), 5));
        assert_eq!(t.workers.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        // Flagged by the server.
        let mut u = sent(1);
        let mut s = stamp(1, 3, 5);
        s.flags = proto::FLAG_MISDIRECTED;
        s.kernel_cpu = 0;
        u.on_datagram(&echo(3, 0, 0, &s), false, 1);
        assert_eq!((u.flagged, u.kcpu_mismatch), (1, 1));
        assert!(!u.served_by_owner(Some(WorkerId(1)), Some(CpuId(3)), 5));
        assert!(!sent(1).served_by_owner(Some(WorkerId(1)), Some(CpuId(3)), 5), "never echoed");
    }

    #[test]
    fn window_blocks_then_writes_off_after_the_timeout() {
        let mut t = StreamTracker::new(0, 0);
        let w = Some(2);
        assert!(t.may_send(0, None, w, 200 * MS));
        t.on_sent(10 * MS);
        assert!(t.may_send(10 * MS, None, w, 200 * MS));
        t.on_sent(10 * MS);
        assert!(!t.may_send(100 * MS, None, w, 200 * MS), "two outstanding");
        assert!(!t.may_send(210 * MS, None, w, 200 * MS), "timeout not passed since the first send");
        assert!(t.may_send(211 * MS, None, w, 200 * MS), "written off");
        t.on_sent(211 * MS);
        t.on_sent(211 * MS);
        assert!(!t.may_send(212 * MS, None, w, 200 * MS), "the window counts from the write-off");
        // A late echo of a written-off one is still an echo.
        t.on_datagram(&echo(0, 0, 0, &stamp(0, 0, 0)), false, 300 * MS);
        t.on_read(300 * MS);
        assert_eq!((t.echoed, t.lost()), (1, 3));
        // ... and frees a slot of the window (sent 4 - echoed 1 - written off 2).
        assert!(t.may_send(301 * MS, None, w, 200 * MS));
    }

    #[test]
    fn count_stops_sending() {
        let mut t = StreamTracker::new(0, 0);
        for _ in 0..3 {
            assert!(t.may_send(0, Some(3), None, 0) && !t.done_sending(Some(3)));
            t.on_sent(0);
        }
        assert!(!t.may_send(0, Some(3), None, 0));
        assert!(t.done_sending(Some(3)) && !t.done_sending(None));
    }

    #[test]
    fn refusals_are_counted_and_stop_the_stream() {
        let mut t = sent(2);
        t.on_refused(true, None);
        assert_eq!((t.refused, t.cut_short), (1, true));
        assert!(!t.may_send(0, None, None, 0) && t.done_sending(None) && t.all_in());
        t.on_refused(false, None);
        assert_eq!(t.refused, 2);
        // While draining, or at --count, a refusal does not cut the run short.
        let mut d = sent(2);
        d.on_refused(false, None);
        assert_eq!((d.refused, d.cut_short), (1, false));
        let mut c = sent(2);
        c.on_refused(true, Some(2));
        assert!(!c.cut_short);
        let mut c = sent(2);
        c.on_refused(true, Some(3));
        assert!(c.cut_short);
    }

    #[test]
    fn errors_are_classified() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(classify(&os(libc::ECONNREFUSED)), IoClass::Refused);
        assert_eq!(classify(&os(libc::EAGAIN)), IoClass::Retry);
        assert_eq!(classify(&os(libc::ENOBUFS)), IoClass::Retry);
        assert_eq!(classify(&os(libc::EINTR)), IoClass::Retry);
        assert_eq!(classify(&io::Error::from(io::ErrorKind::WouldBlock)), IoClass::Retry);
        assert_eq!(classify(&os(libc::EMSGSIZE)), IoClass::Fatal);
        assert_eq!(classify(&os(libc::ENETUNREACH)), IoClass::Fatal);
        assert_eq!(classify(&os(libc::EBADF)), IoClass::Fatal);
    }

    fn limits(count: Option<u64>, window: Option<u32>) -> SendLimits {
        SendLimits { count, window, window_timeout_ns: 200 * MS }
    }

    #[test]
    fn a_send_pass_goes_round_robin_and_stops_at_due() {
        let mut ts: Vec<StreamTracker> = (0..3).map(|i| StreamTracker::new(i, 0)).collect();
        let (mut next, mut order) = (0, vec![]);
        let n = send_pass(&mut ts, &mut next, 7, 5, limits(None, None), |i, p| {
            assert_eq!((p.stream, p.seq, p.sent_ns), (i as u32, ts_seq(&order, i), 5));
            order.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 7);
        assert_eq!(order, vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(ts.iter().map(|t| t.sent).collect::<Vec<_>>(), vec![3, 2, 2]);
        // The next pass goes on where this one stopped.
        send_pass(&mut ts, &mut next, 1, 6, limits(None, None), |i, _| {
            assert_eq!(i, 1);
            Ok(())
        })
        .unwrap();
    }

    /// Sequence number stream `i` is at, given the sends so far.
    fn ts_seq(order: &[usize], i: usize) -> u64 {
        order.iter().filter(|&&j| j == i).count() as u64
    }

    #[test]
    fn a_full_socket_is_a_partial_pass_not_an_error() {
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        let mut next = 0;
        // Stream 1's socket takes 2 and is then full; stream 0's takes all.
        let mut took = [0u64; 2];
        let n = send_pass(&mut ts, &mut next, 10, 0, limits(None, None), |i, _| {
            if i == 1 && took[1] == 2 {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            took[i] += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 10);
        assert_eq!((ts[0].sent, ts[1].sent), (8, 2), "a full socket is skipped, its sequence not advanced");
        // Both full: the pass ends early with what went out.
        let n = send_pass(&mut ts, &mut next, 10, 0, limits(None, None), |_, _| {
            Err(io::Error::from_raw_os_error(libc::ENOBUFS))
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn a_send_pass_respects_count_window_and_refusals() {
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        let mut next = 0;
        assert_eq!(send_pass(&mut ts, &mut next, 100, 0, limits(Some(3), None), |_, _| Ok(())).unwrap(), 6);
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        assert_eq!(send_pass(&mut ts, &mut next, 100, 0, limits(None, Some(4)), |_, _| Ok(())).unwrap(), 8);
        // Stream 0 refused: counted, cut short, no more sends to it.
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        let mut next = 0;
        let n = send_pass(&mut ts, &mut next, 6, 0, limits(None, None), |i, _| {
            if i == 0 {
                Err(io::Error::from_raw_os_error(libc::ECONNREFUSED))
            } else {
                Ok(())
            }
        })
        .unwrap();
        assert_eq!(n, 6);
        assert_eq!((ts[0].sent, ts[0].refused, ts[0].cut_short, ts[1].sent), (0, 1, true, 6));
        // A fatal error stops the pass and names the stream.
        let (i, e) = send_pass(&mut ts, &mut next, 6, 0, limits(None, None), |_, _| {
            Err(io::Error::from_raw_os_error(libc::EMSGSIZE))
        })
        .unwrap_err();
        assert_eq!((i, e.raw_os_error()), (1, Some(libc::EMSGSIZE)));
    }

    #[test]
    fn bursts_stay_within_due_count_and_window() {
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        let mut next = 0;
        let mut calls = vec![];
        let n = send_pass_bursts(&mut ts, &mut next, 40, 0, limits(Some(20), None), 16, |i, p, k| {
            calls.push((i, p.seq, k));
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 40);
        // 16 + 16, then each stream's last 4 of its count of 20.
        assert_eq!(calls, vec![(0, 0, 16), (1, 0, 16), (0, 16, 4), (1, 16, 4)]);
        // Due cuts a burst short; the window bounds it.
        let mut ts = vec![StreamTracker::new(0, 0)];
        let mut ks = vec![];
        send_pass_bursts(&mut ts, &mut 0, 5, 0, limits(None, None), 16, |_, _, k| {
            ks.push(k);
            Ok(())
        })
        .unwrap();
        let mut ts2 = vec![StreamTracker::new(0, 0)];
        send_pass_bursts(&mut ts2, &mut 0, 100, 0, limits(None, Some(6)), 16, |_, _, k| {
            ks.push(k);
            Ok(())
        })
        .unwrap();
        assert_eq!(ks, vec![5, 6]);
        assert_eq!((ts[0].sent, ts2[0].sent), (5, 6));
        // Passes of 20 over 2 streams of GSO 16: a stream cut short goes
        // first next pass, so both get 100 of 200 (not 160 / 40).
        let mut ts: Vec<StreamTracker> = (0..2).map(|i| StreamTracker::new(i, 0)).collect();
        let mut next = 0;
        for _ in 0..10 {
            send_pass_bursts(&mut ts, &mut next, 20, 0, limits(None, None), 16, |_, _, _| Ok(())).unwrap();
        }
        assert_eq!((ts[0].sent, ts[1].sent), (100, 100));
        // A refused burst (socket full) advances nothing.
        let mut ts = vec![StreamTracker::new(0, 0)];
        let n = send_pass_bursts(&mut ts, &mut 0, 16, 0, limits(None, None), 16, |_, _, _| {
            Err(io::Error::from_raw_os_error(libc::EAGAIN))
        })
        .unwrap();
        assert_eq!((n, ts[0].sent), (0, 0));
    }
}
