//! A per-CPU stateful firewall: ipfw-style rules, lockless per-worker state
//! tables, a loose global state limit, `limit` tracks and state-based
//! redirection across workers (DragonFlyBSD, "per CPU IPFW states").
//!
//! Sans-I/O: a [`Worker`] takes frames (`&mut [u8]`, Ethernet II) and a
//! millisecond clock and returns a [`Verdict`]; moving frames between
//! workers (the [`Verdict::Forward`] messages of a redirection, and the
//! [`Control`] messages in [`Worker::drain_outbox`]) is the driver's job.
//! [`sim::Cluster`] is a deterministic single-thread driver (tests),
//! [`run`] a threaded one (`rsskit firewall --engine own` and the
//! benchmark), [`netisr_handler`] the data plane's netisr dispatch (the
//! command's default).
//!
//! # Both directions on one worker: the symmetric key
//!
//! A state is found from either direction of its flow ([`state::FlowKey`] is
//! normalized), but only if both directions reach the worker that owns the
//! state. rsskit steers with [`rsskit_core::RssKey::symmetric`] (DragonFly's
//! `6d5a` key), for which hash(a -> b) == hash(b -> a) for every hash type;
//! [`FlowOwners`] uses it by default and the tests check the property and
//! show replies missing their state under the Microsoft key. We chose the
//! key over an explicit cross-worker reply path because it costs nothing
//! per packet, keeps replies on the worker whose cache holds the state, and
//! is what a NIC can be programmed with (`rsskit info` shows the key in
//! use). The one exception is a redirected flow, whose two halves hash
//! differently by construction: that is the explicit [`redirect`] path.
//! The price of the symmetric key is spread: the key repeats every 16 bits,
//! so input bits 16 apart cancel, and flows whose address and port bits
//! move together (sequential clients on sequential ports) can all land in
//! one bucket; real traffic and the benchmark's random flows spread evenly.
//!
//! Non-first IPv4/IPv6 fragments carry no ports and so match no TCP/UDP
//! state: run the firewall behind reassembly (`--engine netisr` does it).
//!
//! # Modules
//! - [`rules`]: the rule language and its parser (errors with line, column
//!   and what was expected);
//! - [`ruleset`]: compiled rules, per-rule per-worker counters, run-time swap;
//! - [`state`]: the per-worker state table (TCP tracking, O(expired) expiry);
//! - [`locked`]: per-worker tables or the locked global baseline;
//! - [`limit`]: the loose global counter and `limit` tracks;
//! - [`redirect`]: master/slave states and frame rewriting;
//! - [`order`]: the causal order of a capture replay across workers.
//!
//! # Rule evaluation
//! Rules are walked in order. `check-state` (or, without one, the first
//! rule that creates states: ipfw's implicit check-state) looks the packet's
//! flow up; a hit passes the packet and is counted on the rule that created
//! the state. A matching `allow` with `keep-state`/`limit` installs a state
//! (refused by the global limit or the track: the packet is dropped and
//! still counted on the rule). Byte counters count IP packet bytes, like
//! ipfw. Non-IP frames (ARP...) pass without touching the rules; frames the
//! wire layer rejects are dropped.
//!
//! # Memory per state
//! [`State`](state::State) is 80 bytes (`size_of`, x86-64) and its map entry
//! 44 bytes (the 40-byte normalized key and the slot index) plus one control
//! byte. Measured with a counting allocator (`tests/firewall_memory.rs`),
//! 100 000 states take 16.4 MB: 164 bytes per state, the rest being the
//! slab's and the map's spare capacity after doubling. A redirected flow
//! adds a 64-byte boxed translation to each of its two states; a `limit`
//! track costs about 100 bytes per distinct key and worker. DragonFly
//! quotes ~14 MB for 100 000 per-CPU states.
//!
//! # Where it runs
//! [`run`] is the firewall's own driver (a dispatcher thread and channels);
//! [`netisr_handler`] plugs the same workers into the data plane's netisr
//! dispatch as protocol handlers, all rules included: redirected frames and
//! control messages go to their worker as netisr handler messages (SPSC
//! rings, FIFO per sender).
//!
//! # Replaying a capture across workers
//! Each worker judges its frames in file order, each at its own capture
//! time, but workers run concurrently: a reply whose redirect slave is
//! being installed by another worker, or a SYN whose `limit` slot another
//! worker's state frees when it expires, could overtake its cause. A
//! replay is therefore ordered by default ([`order::Order::Causal`]): a
//! frame that may touch cross-worker state waits at an epoch barrier
//! (every earlier frame done, every worker's clock at its time); the other
//! frames never wait. The per-rule counters of a replay then equal the
//! single-threaded [`sim`]'s for any worker count, on either engine. A
//! `limit` track's admission is a compare-and-swap on its shared counter,
//! so exactly N states are admitted per track however the workers
//! interleave (ordered or not); which N depends on the order.

pub mod limit;
pub mod locked;
pub mod netisr_handler;
pub mod order;
pub mod redirect;
pub mod rules;
pub mod ruleset;
pub mod run;
pub mod sim;
pub mod spec;
pub mod state;

use crate::hash::PacketHasher;
use crate::wire::{self, DropReason, ParseConfig, Transport};
use core::net::IpAddr;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use limit::{GlobalLimit, LooseCounter, Padded, TrackId, TrackRegistry};
use locked::{Store, Tables};
pub use redirect::{Control, Resume};
use redirect::{Offsets, Role, Xlat};
use rsskit_core::{FlowTuple, HashConfig, L4Proto, RssKey, RssPolicy};
pub use rules::{parse, Dir, ParseError, Rules};
use ruleset::{RuleSet, RuleSetHandle, RuleTotals};
pub use spec::{Engine, FirewallOutcome, FirewallSpec};
use state::{FlowKey, NewState, Removed, Timeouts};
use std::sync::{Arc, RwLock};

const NIL: u32 = u32::MAX;

/// The fields of a packet the firewall looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwPacket {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// TCP/UDP ports; `None` for other protocols and non-first fragments.
    pub ports: Option<(u16, u16)>,
    /// TCP flags (0 otherwise).
    pub flags: u8,
    /// IP packet length (what the byte counters count).
    pub len: u32,
    /// Received (`in`) or sent (`out`).
    pub dir: Dir,
    /// Header offsets, for rewriting.
    pub offsets: Offsets,
}

impl FwPacket {
    /// Parses `frame`: `Ok(None)` for a non-IP frame.
    pub fn parse(frame: &[u8], dir: Dir, cfg: &ParseConfig) -> Result<Option<FwPacket>, DropReason> {
        let p = match wire::parse_ethernet(frame, cfg) {
            Ok(p) => p,
            Err(DropReason::NotIp) => return Ok(None),
            Err(e) => return Err(e),
        };
        let ip = p.innermost();
        let flags = match p.l4 {
            Transport::Tcp { flags, .. } => flags,
            _ => 0,
        };
        Ok(Some(FwPacket {
            src: ip.src,
            dst: ip.dst,
            proto: ip.proto,
            ports: p.l4.ports(),
            flags,
            len: ip.bytes.len() as u32,
            dir,
            offsets: Offsets {
                ip: ip.offset,
                l4: ip.offset + ip.header_len,
                ipv6: ip.is_ipv6(),
                proto: ip.proto,
            },
        }))
    }

    /// The packet's flow key and whether its source is the key's `a` side.
    #[inline]
    pub fn key(&self) -> (FlowKey, bool) {
        let (sp, dp) = self.ports.unwrap_or((0, 0));
        FlowKey::of(self.src, sp, self.dst, dp, self.proto)
    }
}

/// Which worker owns a flow: the RSS hash of its tuple, as the NIC (or the
/// software dispatcher) computes it, through the policy's bucket table.
#[derive(Clone)]
pub struct FlowOwners {
    hasher: PacketHasher,
}

impl FlowOwners {
    /// Steering by `policy`'s key, hash types and bucket table (each
    /// worker keeps its own copy of the key's tables).
    pub fn new(policy: &RssPolicy) -> Self {
        FlowOwners { hasher: PacketHasher::from_policy(policy.clone()) }
    }

    /// The worker of a flow `src:sp -> dst:dp`.
    pub fn worker_of(&self, src: IpAddr, sp: u16, dst: IpAddr, dp: u16, proto: u8) -> usize {
        let t = FlowTuple::new(src, sp, dst, dp, L4Proto::from_number(proto));
        self.hasher.policy().worker_of(&t).index()
    }

    /// The worker of a frame (its outer header, as a NIC hashes it); 0 for
    /// frames that do not parse.
    pub fn worker_of_frame(&self, frame: &[u8], cfg: &ParseConfig) -> usize {
        match wire::parse_ethernet(frame, cfg) {
            Ok(p) => self.hasher.owner(&p).index(),
            Err(_) => 0,
        }
    }
}

/// Firewall settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Who owns a flow: one worker thread per policy worker, each with its
    /// own state table; the key and hash types steer flows (and find a
    /// redirected flow's worker). Use the symmetric key
    /// ([`symmetric_policy`]) so both directions meet.
    pub policy: Arc<RssPolicy>,
    /// Most states over all workers; 0 = unlimited.
    pub states_max: u64,
    /// State lifetimes per class.
    pub timeouts: Timeouts,
    /// Use one global table behind a lock (the baseline).
    pub locked: bool,
    /// The addresses `me` matches.
    pub me: Vec<IpAddr>,
    /// Most states expired per batch (the rest at the next batch).
    pub expire_budget: usize,
    /// How frames are parsed (tunnels are not decapsulated: the rules see the outer header, like ipfw).
    pub parse: ParseConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: symmetric_policy(1),
            states_max: 0,
            timeouts: Timeouts::default(),
            locked: false,
            me: Vec::new(),
            expire_budget: 1024,
            // The firewall filters the outer header, like ipfw.
            parse: ParseConfig { decap_tunnels: false, ..ParseConfig::default() },
        }
    }
}

impl Config {
    /// Worker threads: the policy's workers.
    pub fn workers(&self) -> usize {
        self.policy.workers()
    }
}

/// `workers` workers (at least one) steered with the symmetric key and the
/// default hash types: the firewall's default.
pub fn symmetric_policy(workers: usize) -> Arc<RssPolicy> {
    let policy = RssPolicy::with_workers(RssKey::symmetric(), HashConfig::default(), workers.max(1), None)
        .expect("one or more workers and the default bits make a valid policy");
    Arc::new(policy)
}

/// A packet's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the packet through.
    Pass,
    /// Consume the packet.
    Drop,
    /// Hand the (rewritten) frame to worker `to`, which calls [`Worker::resume`] with `msg`.
    Forward {
        /// The worker owning the translated flow.
        to: usize,
        /// What that worker does with the frame.
        msg: Resume,
    },
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// A worker's counters (published once per batch).
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
        pub struct FirewallCounters { $($(#[$doc])* pub $name: u64,)* }
        #[derive(Debug, Default)]
        struct SharedCounters { $($name: AtomicU64,)* }
        impl SharedCounters {
            fn publish(&self, c: &FirewallCounters) { $(self.$name.store(c.$name, Relaxed);)* }
            fn read(&self) -> FirewallCounters { FirewallCounters { $($name: self.$name.load(Relaxed),)* } }
        }
        impl FirewallCounters {
            /// Field-wise sum.
            pub fn add(&mut self, o: &FirewallCounters) { $(self.$name += o.$name;)* }
        }
    };
}

counters!(
    /// Frames processed (resumed ones included).
    packets,
    /// Frames passed.
    passed,
    /// Frames dropped (by the rules, or unparsable).
    dropped,
    /// Frames handed to another worker (a redirection).
    forwarded,
    /// Frames taken over from another worker.
    resumed,
    /// Control messages (slave deletions) handled.
    controls,
    /// States held (at the last publish).
    states,
    /// States installed.
    installs,
    /// States removed (closed, deleted, evicted).
    removed,
    /// States expired.
    expired,
    /// Full expiry passes (asked for when the global limit was reached).
    gc_runs,
    /// Times this worker asked every worker to expire (global limit reached).
    gc_requests,
    /// States refused by the global limit.
    limit_hits,
    /// States refused by a `limit` track.
    track_hits,
    /// Frames the wire layer rejected.
    parse_drops,
    /// Non-IP frames (ARP...) passed without the rules.
    non_ip,
    /// Redirected frames whose state was gone on arrival (dropped).
    stale,
    /// Rule set swaps taken over.
    rule_swaps,
);

/// What all workers share.
#[derive(Debug)]
pub struct Firewall {
    /// Settings.
    pub config: Config,
    /// The current rule set (swappable at run time).
    pub rules: RuleSetHandle,
    /// The loose global state count.
    pub limit: GlobalLimit,
    /// The shared tier of the `limit` tracks.
    pub tracks: TrackRegistry,
    stats: Box<[Padded<SharedCounters>]>,
    locked: Option<Arc<RwLock<Tables>>>,
}

/// A point-in-time view of the firewall's counters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Snapshot {
    /// Per-rule counters summed over the workers.
    pub rules: Vec<RuleTotals>,
    /// Each worker's counters.
    pub workers: Vec<FirewallCounters>,
    /// Their sum.
    pub total: FirewallCounters,
    /// States over all workers (exact, from the workers' own counts).
    pub states: i64,
    /// The loose shared total.
    pub states_loose: i64,
    /// Times a worker corrected the loose total from its own count.
    pub resyncs: u64,
    /// Times a worker asked every worker to expire states (the global limit was hit).
    pub gc_broadcasts: u64,
    /// Distinct `limit` tracks alive.
    pub tracks: usize,
}

impl Firewall {
    /// A firewall with `rules`.
    pub fn new(config: Config, rules: Rules) -> Arc<Self> {
        let workers = config.workers();
        let locked = config.locked.then(|| Arc::new(RwLock::new(Tables::new(config.timeouts))));
        Arc::new(Firewall {
            rules: RuleSetHandle::new(rules, config.me.clone(), workers),
            limit: GlobalLimit::new(config.states_max, workers),
            tracks: TrackRegistry::default(),
            stats: (0..workers).map(|_| Padded(SharedCounters::default())).collect(),
            locked,
            config,
        })
    }

    /// Worker `id`'s handle (create each once, move it to its thread).
    pub fn worker(self: &Arc<Self>, id: usize) -> Worker {
        let store = match &self.locked {
            Some(l) => Store::Locked(l.clone()),
            None => Store::Local(Box::new(Tables::new(self.config.timeouts))),
        };
        let rules = self.rules.load();
        Worker {
            rules_gen: rules.generation,
            rules,
            fw: self.clone(),
            core: Core {
                id,
                store,
                loose: LooseCounter::default(),
                steer: FlowOwners::new(&self.config.policy),
                outbox: Vec::new(),
                c: FirewallCounters::default(),
            },
        }
    }

    /// Swaps in a new rule set; workers take it at their next batch.
    pub fn swap_rules(&self, rules: Rules) -> u64 {
        self.rules.swap(rules)
    }

    /// Counters summed over workers.
    pub fn snapshot(&self) -> Snapshot {
        let workers: Vec<FirewallCounters> = self.stats.iter().map(|s| s.0.read()).collect();
        let mut total = FirewallCounters::default();
        for w in &workers {
            total.add(w);
        }
        Snapshot {
            rules: self.rules.load().totals(),
            workers,
            total,
            states: self.limit.exact_total(),
            states_loose: self.limit.loose_total(),
            resyncs: self.limit.resyncs.load(Relaxed),
            gc_broadcasts: self.limit.gc_broadcasts.load(Relaxed),
            tracks: self.tracks.len(),
        }
    }
}

/// One worker: its rule set copy, its state table, its counters. Aligned to
/// 128 bytes: workers are built on one thread and moved to theirs, and their
/// counters are written on every packet, so two of them must not share a line.
#[repr(align(128))]
pub struct Worker {
    fw: Arc<Firewall>,
    rules: Arc<RuleSet>,
    rules_gen: u64,
    core: Core,
}

struct Core {
    id: usize,
    store: Store,
    loose: LooseCounter,
    steer: FlowOwners,
    outbox: Vec<(usize, Control)>,
    c: FirewallCounters,
}

#[derive(Debug)]
enum Refused {
    Limit,
    Track,
}

impl Worker {
    /// This worker's index.
    pub fn id(&self) -> usize {
        self.core.id
    }

    /// The shared firewall.
    pub fn firewall(&self) -> &Arc<Firewall> {
        &self.fw
    }

    /// States in this worker's table (the global table when locked).
    pub fn states(&self) -> usize {
        self.core.store.len()
    }

    /// This worker's counters (as of now, not the published copy).
    pub fn counters(&self) -> FirewallCounters {
        let mut c = self.core.c;
        c.states = self.core.loose.count.max(0) as u64;
        c
    }

    /// Per-batch housekeeping: take a new rule set, answer a collect
    /// request, expire due states (at most the configured budget), publish
    /// counters. Call before each batch of packets.
    pub fn begin_batch(&mut self, now: u64) {
        let g = self.fw.rules.generation();
        if g != self.rules_gen {
            self.rules = self.fw.rules.load();
            self.rules_gen = self.rules.generation;
            self.core.c.rule_swaps += 1;
        }
        if self.fw.limit.take_gc_request(self.core.id) {
            self.core.gc(&self.fw, now, usize::MAX);
        } else {
            self.core.gc(&self.fw, now, self.fw.config.expire_budget);
        }
        self.publish();
    }

    /// Publishes this worker's counters for [`Firewall::snapshot`].
    pub fn publish(&self) {
        self.fw.stats[self.core.id].0.publish(&self.counters());
    }

    /// Collects every expired state now (what a collect request does).
    pub fn collect(&mut self, now: u64) -> usize {
        self.core.gc(&self.fw, now, usize::MAX)
    }

    /// Filters a frame received from the wire.
    pub fn process(&mut self, frame: &mut [u8], dir: Dir, now: u64) -> Verdict {
        self.core.c.packets += 1;
        let mut p = match FwPacket::parse(frame, dir, &self.fw.config.parse) {
            Ok(Some(p)) => p,
            Ok(None) => {
                self.core.c.non_ip += 1;
                self.core.c.passed += 1;
                return Verdict::Pass;
            }
            Err(_) => {
                self.core.c.parse_drops += 1;
                self.core.c.dropped += 1;
                return Verdict::Drop;
            }
        };
        let v = self.core.walk(&self.fw, &self.rules, frame, &mut p, 0, false, now);
        self.core.tally(v)
    }

    /// Continues a frame another worker handed over with [`Verdict::Forward`].
    pub fn resume(&mut self, frame: &mut [u8], dir: Dir, msg: Resume, now: u64) -> Verdict {
        self.core.c.resumed += 1;
        let v = self.core.resume(&self.fw, &self.rules, frame, dir, msg, now);
        self.core.tally(v)
    }

    /// Handles a control message.
    pub fn control(&mut self, msg: Control) {
        self.core.c.controls += 1;
        match msg {
            Control::DeleteSlave { key } => {
                let fw = &self.fw;
                if let Some(r) = self.core.store.with(|t| {
                    let r = t.states.remove_key(&key);
                    if let Some(r) = &r {
                        if r.track != NIL {
                            t.tracks.release(&fw.tracks, r.track);
                        }
                    }
                    r
                }) {
                    debug_assert!(r.xlat.is_some_and(|x| x.role == Role::Slave));
                    self.core.c.removed += 1;
                    self.core.loose.add(&fw.limit, self.core.id, -1);
                }
            }
        }
    }

    /// Takes the control messages produced so far: `(to worker, message)`.
    pub fn drain_outbox(&mut self) -> std::vec::Drain<'_, (usize, Control)> {
        self.core.outbox.drain(..)
    }
}

impl Core {
    fn tally(&mut self, v: Verdict) -> Verdict {
        match v {
            Verdict::Pass => self.c.passed += 1,
            Verdict::Drop => self.c.dropped += 1,
            Verdict::Forward { .. } => self.c.forwarded += 1,
        }
        v
    }

    /// Expires up to `budget` due states, with their side effects.
    fn gc(&mut self, fw: &Firewall, now: u64, budget: usize) -> usize {
        let outbox = &mut self.outbox;
        let me = self.id;
        let mut local_slave = Vec::new();
        let n = self.store.with(|t| {
            let Tables { states, tracks } = t;
            states.expire(now, budget, |r: Removed| {
                if r.track != NIL {
                    tracks.release(&fw.tracks, r.track);
                }
                if let Some(x) = r.xlat {
                    if x.role == Role::Master {
                        let key = x.slave_key(r.key.proto);
                        if usize::from(x.peer) == me {
                            local_slave.push(key);
                        } else {
                            outbox.push((usize::from(x.peer), Control::DeleteSlave { key }));
                        }
                    }
                }
            })
        });
        if budget == usize::MAX {
            self.c.gc_runs += 1;
        }
        self.c.expired += n as u64;
        self.c.removed += n as u64;
        self.loose.add(&fw.limit, self.id, -(n as i64));
        for key in local_slave {
            if self.store.with(|t| t.states.remove_key(&key)).is_some() {
                self.c.removed += 1;
                self.loose.add(&fw.limit, self.id, -1);
            }
        }
        n
    }

    /// Whether one more state may be installed (the loose global limit).
    fn admit(&mut self, fw: &Firewall, now: u64) -> bool {
        let g = &fw.limit;
        if !self.loose.at_limit(g) {
            return true;
        }
        g.resync();
        self.loose.synced();
        if !self.loose.at_limit(g) {
            return true;
        }
        self.gc(fw, now, usize::MAX);
        g.resync();
        self.loose.synced();
        if !self.loose.at_limit(g) {
            return true;
        }
        if g.request_gc(self.id, now) {
            self.c.gc_requests += 1;
        }
        false
    }

    /// Installs (or refreshes) the state of `p` for rule `rule`.
    fn install(
        &mut self,
        fw: &Firewall,
        rule: &rules::Rule,
        p: &FwPacket,
        xlat: Option<Xlat>,
        now: u64,
    ) -> Result<(), Refused> {
        let (key, src_is_a) = p.key();
        let hit = self.store.with(|t| {
            let id = t.states.lookup(&key)?;
            let fwd = t.states.get(id).init_is_a == src_is_a;
            t.states.touch(id, fwd, p.flags, now);
            Some(())
        });
        if hit.is_some() {
            return Ok(());
        }
        if !self.admit(fw, now) {
            self.c.limit_hits += 1;
            return Err(Refused::Limit);
        }
        let limit = rule.limit;
        let number = rule.number;
        let ok = self.store.with(|t| {
            let track = match limit {
                Some(l) => {
                    let id = TrackId::new(number, l.keys, p.src, p.dst, p.ports);
                    t.tracks.acquire(&fw.tracks, id, l.max)?
                }
                None => NIL,
            };
            let n = NewState {
                key,
                init_is_a: src_is_a,
                rule: number,
                track,
                xlat: xlat.map(Box::new),
                pinned: false,
            };
            t.states.insert(n, p.flags, now);
            Some(())
        });
        if ok.is_none() {
            self.c.track_hits += 1;
            return Err(Refused::Track);
        }
        self.c.installs += 1;
        self.loose.add(&fw.limit, self.id, 1);
        Ok(())
    }

    /// Walks the rules from index `start`.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        fw: &Firewall,
        rs: &RuleSet,
        frame: &mut [u8],
        p: &mut FwPacket,
        start: usize,
        mut checked: bool,
        now: u64,
    ) -> Verdict {
        let mut i = start;
        while i < rs.rules.len() {
            let r = &rs.rules[i];
            if !checked && (r.action == rules::Action::CheckState || i == rs.implicit_check) {
                checked = true;
                if let Some(v) = self.state_hit(fw, rs, frame, p, now) {
                    return v;
                }
            }
            match r.action {
                rules::Action::CheckState => {}
                _ if !r.matches(p, &rs.me) => {}
                rules::Action::Deny => {
                    rs.count(self.id, i, p.len);
                    return Verdict::Drop;
                }
                rules::Action::Allow => {
                    rs.count(self.id, i, p.len);
                    if r.creates_state() && self.install(fw, r, p, None, now).is_err() {
                        return Verdict::Drop;
                    }
                    return Verdict::Pass;
                }
                rules::Action::Redirect(rd) => {
                    rs.count(self.id, i, p.len);
                    return self.redirect_first(fw, rs, r, rd, frame, p, now);
                }
            }
            i += 1;
        }
        rs.count(self.id, rs.default_index(), p.len);
        if rs.default_allow {
            Verdict::Pass
        } else {
            Verdict::Drop
        }
    }

    /// `check-state`: `Some(verdict)` if the packet belongs to a state.
    fn state_hit(
        &mut self,
        fw: &Firewall,
        rs: &RuleSet,
        frame: &mut [u8],
        p: &mut FwPacket,
        now: u64,
    ) -> Option<Verdict> {
        let (key, src_is_a) = p.key();
        let (fwd, rule, xlat) = self.store.with(|t| {
            let id = t.states.lookup(&key)?;
            let s = t.states.get(id);
            let fwd = s.init_is_a == src_is_a;
            let (rule, xlat) = (s.rule, s.xlat.as_deref().copied());
            t.states.touch(id, fwd, p.flags, now);
            Some((fwd, rule, xlat))
        })?;
        if let Some(ix) = rs.index_of(rule) {
            rs.count(self.id, ix, p.len);
        }
        let Some(x) = xlat else { return Some(Verdict::Pass) };
        let peer = usize::from(x.peer);
        Some(match (x.role, fwd) {
            (Role::Master, true) => {
                if !redirect::rewrite(frame, &p.offsets, true, x.new) {
                    return Some(Verdict::Drop);
                }
                if peer == self.id {
                    self.resume(fw, rs, frame, p.dir, Resume::ToSlave, now)
                } else {
                    Verdict::Forward { to: peer, msg: Resume::ToSlave }
                }
            }
            (Role::Slave, false) => {
                if !redirect::rewrite(frame, &p.offsets, false, x.orig) {
                    return Some(Verdict::Drop);
                }
                if peer == self.id {
                    self.resume(fw, rs, frame, p.dir, Resume::ToMaster, now)
                } else {
                    Verdict::Forward { to: peer, msg: Resume::ToMaster }
                }
            }
            // A reply on the original tuple, or the client talking to the
            // new address directly: same flow, pass.
            _ => Verdict::Pass,
        })
    }

    /// First packet of a redirected flow on the master's worker.
    #[allow(clippy::too_many_arguments)]
    fn redirect_first(
        &mut self,
        fw: &Firewall,
        rs: &RuleSet,
        r: &rules::Rule,
        rd: rules::Redirect,
        frame: &mut [u8],
        p: &mut FwPacket,
        now: u64,
    ) -> Verdict {
        let Some((sp, _)) = p.ports else { return Verdict::Drop };
        let target = self.steer.worker_of(p.src, sp, rd.to.0, rd.to.1, p.proto);
        let x =
            Xlat { role: Role::Master, peer: target as u16, client: (p.src, sp), orig: rd.from, new: rd.to };
        if self.install(fw, r, p, Some(x), now).is_err() {
            return Verdict::Drop;
        }
        if !redirect::rewrite(frame, &p.offsets, true, rd.to) {
            return Verdict::Drop;
        }
        let msg = Resume::NewSlave { master: self.id as u16, after_rule: r.number, orig: rd.from };
        if target == self.id {
            self.resume(fw, rs, frame, p.dir, msg, now)
        } else {
            Verdict::Forward { to: target, msg }
        }
    }

    fn resume(
        &mut self,
        fw: &Firewall,
        rs: &RuleSet,
        frame: &mut [u8],
        dir: Dir,
        msg: Resume,
        now: u64,
    ) -> Verdict {
        let mut p = match FwPacket::parse(frame, dir, &fw.config.parse) {
            Ok(Some(p)) => p,
            _ => return Verdict::Drop,
        };
        let (key, src_is_a) = p.key();
        match msg {
            Resume::NewSlave { master, after_rule, orig } => {
                let Some((sp, dp)) = p.ports else { return Verdict::Drop };
                let x = Xlat { role: Role::Slave, peer: master, client: (p.src, sp), orig, new: (p.dst, dp) };
                let replaced = self.store.with(|t| {
                    let old = t.states.remove_key(&key);
                    let n = NewState {
                        key,
                        init_is_a: src_is_a,
                        rule: after_rule,
                        track: NIL,
                        xlat: Some(Box::new(x)),
                        pinned: true,
                    };
                    t.states.insert(n, p.flags, now);
                    old.is_some()
                });
                // The master already passed the global limit; a slave is never refused.
                if !replaced {
                    self.c.installs += 1;
                    self.loose.add(&fw.limit, self.id, 1);
                }
                let start = rs.index_after(after_rule);
                self.walk(fw, rs, frame, &mut p, start, true, now)
            }
            Resume::ToSlave => {
                if self.store.with(|t| t.states.lookup(&key)).is_some() {
                    Verdict::Pass
                } else {
                    self.c.stale += 1;
                    Verdict::Drop
                }
            }
            Resume::ToMaster => {
                let found = self.store.with(|t| {
                    let id = t.states.lookup(&key)?;
                    let fwd = t.states.get(id).init_is_a == src_is_a;
                    t.states.touch(id, fwd, p.flags, now);
                    Some(())
                });
                if found.is_none() {
                    self.c.stale += 1;
                }
                Verdict::Pass
            }
        }
    }
}
