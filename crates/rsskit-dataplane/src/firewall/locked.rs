//! Where a worker keeps its states: its own [`Tables`] (the per-CPU design)
//! or one global set behind a read-write lock (the design it replaced,
//! DragonFly's figure 9), selected per firewall for comparison.
//!
//! In the locked baseline every packet that looks at states takes the
//! *write* lock: a state lookup refreshes the state's lifetime and moves it
//! in its expiry list, which is a write. (The 2008 kernel refreshed under the
//! read lock with racy stores; Rust does not allow that, and with short-lived
//! flows installs and removals, which need the write lock there too, are a
//! large share of the operations anyway.) The read lock serves statistics.
//! Tracks live in the same locked [`Tables`], as the old global table held
//! everything. The global limit, messages and redirection work unchanged.

use super::limit::LocalTracks;
use super::state::{StateTable, Timeouts};
use std::sync::{Arc, RwLock};

/// States and `limit` tracks, kept together because removing a state
/// releases its track. Aligned so two workers' tables, allocated one after
/// the other, never share a cache line (their headers are written on every
/// install and expiry).
#[derive(Debug)]
#[repr(align(128))]
pub struct Tables {
    /// The dynamic states.
    pub states: StateTable,
    /// The `limit` tracks of those states.
    pub tracks: LocalTracks,
}

impl Tables {
    /// Empty tables.
    pub fn new(timeouts: Timeouts) -> Self {
        Tables { states: StateTable::new(timeouts), tracks: LocalTracks::default() }
    }
}

/// The baseline: one global table behind a lock.
pub type LockedTables = Arc<RwLock<Tables>>;

/// A worker's state storage.
#[derive(Debug)]
pub enum Store {
    /// Owned by the worker: no lock, no atomics.
    Local(Box<Tables>),
    /// Shared by all workers.
    Locked(LockedTables),
}

impl Store {
    /// Runs `f` on the tables (under the write lock for [`Store::Locked`]).
    #[inline]
    pub fn with<R>(&mut self, f: impl FnOnce(&mut Tables) -> R) -> R {
        match self {
            Store::Local(t) => f(t),
            Store::Locked(l) => f(&mut l.write().unwrap_or_else(|e| e.into_inner())),
        }
    }

    /// Live states (the whole global table for [`Store::Locked`]).
    pub fn len(&self) -> usize {
        match self {
            Store::Local(t) => t.states.len(),
            Store::Locked(l) => l.read().unwrap_or_else(|e| e.into_inner()).states.len(),
        }
    }

    /// Whether there are no states.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is the locked baseline.
    pub fn is_locked(&self) -> bool {
        matches!(self, Store::Locked(_))
    }
}
