//! netisr-style per-CPU dispatch (FreeBSD `netisr` + RSS, DragonFly
//! rollups).
//!
//! N workers, each optionally pinned to a CPU. Every [`Source`] is homed on
//! one worker, which polls it: for each frame the input stage parses the
//! outer headers and computes the RSS hash exactly as the NIC would
//! ([`PacketHasher::nic`]), looks up the owning worker
//! (`RssPolicy::worker_of_hash`, buckets spread over the workers), and either
//! processes the packet in place (*direct dispatch*, when the input runs on
//! the owner) or pushes it on the single-producer single-consumer ring from
//! this worker to the owner. There is one ring per ordered (worker, worker)
//! pair, so every ring has exactly one producer thread and no locks exist on
//! the data path; buffers travel back to their pool through a second ring
//! per pair.
//!
//! Each worker takes packets in batches of [`NetisrConfig::batch`] (1..=256):
//! optional prefetch of every packet's header, then of every packet's
//! flow-table bucket ([`Handler::prefetch`]), then parse and handle each.
//!
//! Fragments go to the worker's [`Reassembler`](crate::reass::Reassembler) (all fragments of a
//! datagram share the NIC's 2-tuple hash, so they meet on one worker).
//! A completed datagram, and the inner packet of a decapsulated tunnel, is
//! re-hashed with its full hash type and *re-injected*: handled at once if
//! this worker owns the new hash, queued to the owner otherwise, as
//! FreeBSD's `ip_reass` + `netisr_dispatch` does.
//!
//! Handlers can talk to each other: [`Handler::outbox`] hands over
//! `(worker, message)` pairs ([`Msg`], e.g. a rewritten frame with what the
//! receiver must do with it), carried by a third SPSC ring per ordered pair,
//! FIFO per sender and never dropped (a full ring keeps them staged, and
//! the worker counts as busy), and delivered to [`Handler::message`] on the
//! addressee; [`Handler::on_batch_end`] runs after every busy loop (and now
//! and then while idle) for housekeeping. A handler may also answer
//! [`Disposition::Replace`] to send a rewritten frame, and, with
//! [`Handler::NON_IP`], receive non-IP frames (ARP) instead of having them
//! dropped. The default methods do nothing, so a plain handler pays one
//! empty check per packet and loop.
//!
//! Forwarded packets go through send aggregation ([`crate::output`]).
//! Counters follow `netstat -Q`: per worker dispatched (direct), queued,
//! handled, queue drops, queue high-water mark, plus re-injected,
//! reassembled and drops by reason.
//!
//! # Every frame accounted for
//! [`RunReport::accounting`] sums the run per input frame:
//! `in == out + sum(dropped by reason) + held`. `in` is every frame the
//! sources read plus those they saw but could not deliver (`source`:
//! kernel ring drops, unreadable capture records). Each packet carries the
//! number of input frames it stands for ([`Mbuf::frames`]): a reassembled
//! datagram its fragments', so when it is sent it accounts for all of them
//! as `out`, and when it is dropped (queue full, handler, output error)
//! all of them under that reason. Fragments dropped by reassembly
//! (overlap, limits, timeout...) count under their `frag_*` reason, every
//! fragment a killed datagram held included; fragments still waiting at
//! exit are `held`, with any frame still in a handler message or a queue.
//! A handler that moves a packet into a message answers
//! [`Disposition::Handoff`], and the addressee's [`Handler::message`] says what
//! became of those frames ([`Delivery`]).
//!
//! # Layout
//! `handler` (the [`Handler`] API and [`FlowCounter`]), `config`
//! ([`NetisrConfig`], [`NetisrError`]), `controller` ([`Netisr`]: start,
//! snapshot, wait and join), `report` (counters, [`RunReport`],
//! [`Accounting`]), `worker` (the loop on each worker thread) and [`ring`]
//! (the SPSC rings). Everything public is re-exported here.

mod config;
mod controller;
mod handler;
mod report;
pub mod ring;
mod worker;

pub use crate::pool::{mbuf_flags, Mbuf};
pub use config::{default_policy, NetisrConfig, NetisrError, Prefetch};
pub use controller::Netisr;
pub(crate) use controller::RunState;
pub use handler::{prefetch, Delivery, Disposition, FlowCounter, Handler, Msg, PacketCtx, FLAG_PORT_B};
pub(crate) use report::add_reasons;
pub use report::{drop_reasons, Accounting, FrameCounters, RunReport, WorkerCounters, WorkerReport};

// Only named in the docs' links.
#[cfg(doc)]
use crate::{hash::PacketHasher, io::Source};
