//! Sans-I/O receive-side scaling core.
//!
//! Everything here is pure computation, bit-exact with what a NIC does:
//! no sockets, no syscalls, `no_std` + `alloc` (the `std` feature only adds
//! the OS random source for [`key::RssKey::random`]).
//!
//! The layout follows FreeBSD's `sys/net/rss_config.c` and DragonFly's
//! `if_ringmap_*`:
//! - [`key`]: RSS keys (Microsoft default, symmetric, hex, random with a quality check);
//! - [`toeplitz`]: the Toeplitz hash (reference, fast, batch);
//! - [`hashtype`]: hash types, hash input layout, the per-packet hash-type rule;
//! - [`policy`]: **the** RSS policy ([`RssPolicy`]): key, hash types,
//!   bucket -> worker, worker -> CPU; every layer above asks it;
//! - [`rss`]: FreeBSD's bucket arithmetic (bits, masks, round-robin);
//! - [`ringmap`]: DragonFly's ring -> CPU grid and redirect table;
//! - [`flowrule`]: NIC flow classification rules and which one a flow meets;
//! - [`finder`]: solving for tuples that land in a chosen bucket;
//! - [`cbpf`]: classic BPF steering programs (cpu, Toeplitz bucket) and an
//!   interpreter that runs them as the kernel does;
//! - [`netparse`]: the command line's networks and port ranges;
//! - [`rng`]: the deterministic generators of the tests and benchmarks;
//! - [`xfrm`]: the NIC's input transforms (symmetric-xor, symmetric-or-xor).
#![warn(unreachable_pub)]
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]

extern crate alloc;

pub mod cbpf;
pub mod finder;
pub mod flowrule;
pub mod hashtype;
pub mod key;
pub mod keycheck;
pub mod netparse;
pub mod policy;
pub mod rebalance;
pub mod ringmap;
pub mod rng;
pub mod rss;
pub mod toeplitz;
pub mod xfrm;

pub use hashtype::{FlowTuple, HashConfig, HashInput, HashType, L4Proto};
pub use key::RssKey;
pub use policy::{Buckets, CpuId, RssPolicy, WorkerId};
pub use toeplitz::Toeplitz;
pub use xfrm::InputXfrm;
