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
//! - [`rss`]: buckets, bucket -> CPU, the NIC indirection table;
//! - [`ringmap`]: DragonFly's ring -> CPU grid and redirect table;
//! - [`finder`]: solving for tuples that land in a chosen bucket;
//! - [`netparse`]: the command line's networks and port ranges.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod finder;
pub mod hashtype;
pub mod key;
pub mod keycheck;
pub mod netparse;
pub mod ringmap;
pub mod rss;
pub mod toeplitz;

pub use hashtype::{FlowTuple, HashConfig, HashInput, HashType, L4Proto};
pub use key::RssKey;
pub use toeplitz::Toeplitz;
