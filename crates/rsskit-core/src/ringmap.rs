//! DragonFly's ringmap (`if_ringmap_*` in `sys/net/if.c`): which CPU each
//! RX/TX ring is bound to, and the NIC redirect table that sends every hash
//! to a ring bound to the CPU the host itself picks for that hash.
//!
//! The host (DragonFly's netisr) picks the CPU of a packet as
//! `(hash & 127) % ncpus` ([`host_cpu`]). The NIC picks the ring as
//! `table[hash & (len - 1)]`. An entry whose ring is bound to another CPU
//! than the host's pick is a *mismatch*: every packet hashed to it costs an
//! IPI to move it to the right CPU.
//!
//! When `ncpus % nrings == 0` the plain table `0, 1, .., nrings-1` repeated
//! works. When not (24 CPUs, 16 rings), repeating it mismatches on most
//! entries. The ringmap instead:
//! 1. divides the CPUs into equal sets, each just big enough for the rings:
//!    the *grid*, the smallest divisor of `ncpus` that is `>= nrings`;
//!    the rings are bound to consecutive CPUs of one set, starting at its
//!    first CPU; device unit `U` uses set `U` (`offset = grid * U % ncpus`),
//!    so several NICs spread over the CPUs;
//! 2. divides the redirect table into grids: the first `nrings` entries of
//!    each grid are `0..nrings`; the remaining `grid % nrings` entries of
//!    each grid are filled round-robin with the rings, continuing from one
//!    grid to the next, so every ring gets its share.
//!
//! Entries whose host CPU has no ring are mismatches whatever the table says;
//! the ringmap table has no other mismatches (see [`Ringmap::min_mismatches`]).
//! DragonFly's grid table achieves that for the bindings `alloc` makes; after
//! `match` moves rings inside a larger CPU set it would not, and rsskit then
//! builds the table from the binding instead ([`Ringmap::rdrtable`]).
//!
//! The host table block is 128 entries ([`HOST_TABLE_LEN`]): a larger table
//! (any multiple of 128) repeats the first 128 entries, because the host only
//! looks at `hash & 127`. For the same reason at most 128 CPUs take part
//! (`(hash & 127) % ncpus` never picks a CPU past 127), as DragonFly caps
//! its netisr CPUs.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// Entries of the host's view of the table: the host uses `hash & 127`.
pub const HOST_TABLE_LEN: usize = 128;

/// Most CPUs the ringmap spreads over (see the module docs).
pub const MAX_CPUS: usize = HOST_TABLE_LEN;

/// The CPU the host picks for a hash: `(hash & 127) % ncpus`.
///
/// `ncpus` must be at least 1.
#[inline]
pub fn host_cpu(hash: u32, ncpus: usize) -> usize {
    (hash as usize & (HOST_TABLE_LEN - 1)) % ncpus
}

/// The one "table entry vs the host's pick" rule. Entry `entry` of a
/// redirect table names `ring`; `ring_cpus[r]` is the CPU ring `r` runs on
/// (`None`: not bound to one CPU) and `host_cpus` (ascending) the CPUs the
/// host picks among. The entry is a *mismatch* when its ring's CPU is not
/// the host's pick for it, `host_cpus[(entry & 127) % host_cpus.len()]`.
/// A ring that does not exist or has no CPU, or no host CPU at all, is a
/// mismatch.
pub fn is_mismatch(entry: usize, ring: usize, ring_cpus: &[Option<usize>], host_cpus: &[usize]) -> bool {
    if host_cpus.is_empty() {
        return true;
    }
    let pick = host_cpus[host_cpu(entry as u32, host_cpus.len())];
    ring_cpus.get(ring).copied().flatten() != Some(pick)
}

/// Why a ringmap or table was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingmapError {
    /// Zero CPUs.
    NoCpus,
    /// Zero rings.
    NoRings,
    /// A table size that is zero or not a multiple of 128.
    BadTableSize(usize),
    /// More rings asked for than the table has entries: some ring could never be used.
    MoreRingsThanEntries {
        /// Rings asked for.
        rings: usize,
        /// Table entries.
        entries: usize,
    },
    /// Two ringmaps of different CPU counts or device units cannot be aligned.
    Incompatible,
}

impl fmt::Display for RingmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingmapError::NoCpus => f.write_str("at least one CPU is needed"),
            RingmapError::NoRings => f.write_str("at least one ring is needed"),
            RingmapError::BadTableSize(n) => {
                write!(f, "redirect table size {n} is not a positive multiple of {HOST_TABLE_LEN}")
            }
            RingmapError::MoreRingsThanEntries { rings, entries } => {
                write!(f, "{rings} rings do not fit a redirect table of {entries} entries")
            }
            RingmapError::Incompatible => {
                f.write_str("RX and TX ringmaps are for different CPU counts or device units")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RingmapError {}

/// The grid for `rings` rings on `ncpus` CPUs: the smallest divisor of
/// `ncpus` that holds all rings (`rings` is capped at `ncpus`).
pub fn grid(ncpus: usize, rings: usize) -> usize {
    let rings = rings.clamp(1, ncpus.max(1));
    (rings..=ncpus.max(1)).find(|&d| ncpus.is_multiple_of(d)).unwrap_or(ncpus.max(1))
}

/// Ring -> CPU binding of one set of rings (RX or TX) of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ringmap {
    ncpus: usize,
    unit: usize,
    grid: usize,
    /// `cpus[r]`: the CPU ring `r` is bound to.
    cpus: Vec<usize>,
}

impl Ringmap {
    /// `rings` rings of device unit `unit` on `ncpus` CPUs (DragonFly's
    /// `if_ringmap_alloc`). The ring count is capped at the CPU count
    /// (and the CPU count at [`MAX_CPUS`]).
    pub fn alloc(ncpus: usize, rings: usize, unit: usize) -> Result<Self, RingmapError> {
        Self::alloc_inner(ncpus, rings, unit, false)
    }

    /// As [`Ringmap::alloc`], for NICs whose ring count must be a power of
    /// two (`if_ringmap_alloc2`): the count is rounded down to one.
    pub fn alloc2(ncpus: usize, rings: usize, unit: usize) -> Result<Self, RingmapError> {
        Self::alloc_inner(ncpus, rings, unit, true)
    }

    fn alloc_inner(ncpus: usize, rings: usize, unit: usize, pow2: bool) -> Result<Self, RingmapError> {
        if ncpus == 0 {
            return Err(RingmapError::NoCpus);
        }
        if rings == 0 {
            return Err(RingmapError::NoRings);
        }
        let ncpus = ncpus.min(MAX_CPUS);
        let mut count = rings.min(ncpus);
        if pow2 {
            // Largest power of two not above `count`.
            count = 1 << (usize::BITS - 1 - count.leading_zeros());
        }
        let mut rm = Ringmap { ncpus, unit, grid: 0, cpus: vec![0; count] };
        rm.set_grid(grid(ncpus, count));
        Ok(rm)
    }

    /// Binds the rings to the CPU set of this unit for a given grid.
    fn set_grid(&mut self, grid: usize) {
        debug_assert!(grid >= self.cpus.len() && self.ncpus.is_multiple_of(grid));
        self.grid = grid;
        let offset = (grid * (self.unit % self.ncpus)) % self.ncpus;
        for (r, cpu) in self.cpus.iter_mut().enumerate() {
            *cpu = offset + r;
        }
    }

    /// Number of rings in use.
    pub fn count(&self) -> usize {
        self.cpus.len()
    }

    /// The CPUs taking part (the given count, capped at [`MAX_CPUS`]).
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// Device unit.
    pub fn unit(&self) -> usize {
        self.unit
    }

    /// The grid: size of each CPU set and of each table grid.
    pub fn grid(&self) -> usize {
        self.grid
    }

    /// Ring -> CPU for every ring.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The CPU ring `ring` is bound to (`if_ringmap_cpumap`).
    pub fn cpu(&self, ring: usize) -> Option<usize> {
        self.cpus.get(ring).copied()
    }

    /// Puts RX and TX rings on the same CPUs in the same order
    /// (`if_ringmap_align`): both take the larger grid.
    pub fn align(rx: &mut Ringmap, tx: &mut Ringmap) -> Result<(), RingmapError> {
        if rx.ncpus != tx.ncpus || rx.unit != tx.unit {
            return Err(RingmapError::Incompatible);
        }
        match rx.grid.cmp(&tx.grid) {
            core::cmp::Ordering::Greater => tx.set_grid(rx.grid),
            core::cmp::Ordering::Less => rx.set_grid(tx.grid),
            core::cmp::Ordering::Equal => {}
        }
        Ok(())
    }

    /// Spreads independent RX and TX rings evenly (`if_ringmap_match`).
    ///
    /// Both are aligned first. Then, if the larger set has room for at
    /// least two copies of the smaller one's old grid, the smaller set is
    /// moved, by device unit, to a different slice of the larger set's
    /// CPUs, so that devices together load the CPUs evenly. E.g. 12 CPUs,
    /// 4 RX and 2 TX rings: unit 0 puts TX on CPUs 0-1, unit 3 on 2-3.
    pub fn match_rings(rx: &mut Ringmap, tx: &mut Ringmap) -> Result<(), RingmapError> {
        if rx.ncpus != tx.ncpus || rx.unit != tx.unit {
            return Err(RingmapError::Incompatible);
        }
        if rx.grid == tx.grid {
            return Ok(());
        }
        let (old_rx_grid, old_tx_grid) = (rx.grid, tx.grid);
        Ringmap::align(rx, tx)?;
        let (sup, sub, sub_grid) = if rx.count() >= 2 * old_tx_grid {
            (&*rx, &mut *tx, old_tx_grid)
        } else if tx.count() >= 2 * old_rx_grid {
            (&*tx, &mut *rx, old_rx_grid)
        } else {
            // No room to shuffle.
            return Ok(());
        };
        let slices = sup.count() / sub_grid;
        let sets = sup.ncpus / sup.grid;
        let offset = ((sup.unit / sets) % slices) * sub_grid;
        for cpu in sub.cpus.iter_mut() {
            *cpu += offset;
        }
        debug_assert!(sub.cpus.iter().all(|c| sup.cpus.contains(c)));
        Ok(())
    }

    /// The redirect table of `len` entries (`if_ringmap_rdrtable`); `len`
    /// must be a positive multiple of 128. Entry `i` is the ring for
    /// `hash & (len - 1) == i`.
    ///
    /// This is DragonFly's grid table whenever that is optimal, which it is
    /// for every binding [`Ringmap::alloc`] and [`Ringmap::align`] make
    /// (ring `r` sits at position `r` of its CPU set). When
    /// [`Ringmap::match_rings`] has moved the rings within a larger set,
    /// the grid table no longer lines up with their CPUs; then the table is
    /// built from the binding itself ([`Ringmap::binding_table`]), so it
    /// always has exactly [`Ringmap::min_mismatches`] mismatches.
    pub fn rdrtable(&self, len: usize) -> Result<Vec<usize>, RingmapError> {
        let grid_table = self.grid_table(len)?;
        if self.mismatches(&grid_table) == self.min_mismatches(len) {
            Ok(grid_table)
        } else {
            self.binding_table(len)
        }
    }

    /// DragonFly's grid table, as `if_ringmap_rdrtable` builds it: in each
    /// grid of the table, `0..nrings`, repeated as far as it fits, and the
    /// `grid % nrings` entries left at the end of each grid filled with
    /// the rings round robin, continuing from one grid to the next, so
    /// every ring gets its share.
    pub fn grid_table(&self, len: usize) -> Result<Vec<usize>, RingmapError> {
        check_len(len)?;
        let (n, grid) = (self.count(), self.grid);
        let mut block: Vec<usize> = (0..HOST_TABLE_LEN).map(|i| (i % grid) % n).collect();
        let patch = grid % n;
        if patch != 0 {
            let mut next = 0;
            'grids: for g in (0..HOST_TABLE_LEN).step_by(grid) {
                for j in 0..patch {
                    let i = g + (grid - patch) + j;
                    if i >= HOST_TABLE_LEN {
                        break 'grids;
                    }
                    block[i] = next % n;
                    next += 1;
                }
            }
        }
        Ok(repeat_block(&block, len))
    }

    /// A table built from the binding: an entry whose host CPU has a ring
    /// gets that ring; the others (mismatches whatever they hold) get the
    /// rings round robin.
    pub fn binding_table(&self, len: usize) -> Result<Vec<usize>, RingmapError> {
        check_len(len)?;
        let mut ring_of_cpu = vec![None; self.ncpus];
        for (r, &c) in self.cpus.iter().enumerate() {
            ring_of_cpu[c] = Some(r);
        }
        let mut next = 0;
        let block: Vec<usize> = (0..HOST_TABLE_LEN)
            .map(|i| {
                ring_of_cpu[host_cpu(i as u32, self.ncpus)].unwrap_or_else(|| {
                    next += 1;
                    (next - 1) % self.count()
                })
            })
            .collect();
        Ok(repeat_block(&block, len))
    }

    /// The plain table: `0, 1, .., nrings-1` repeated.
    pub fn replicated_table(&self, len: usize) -> Result<Vec<usize>, RingmapError> {
        check_len(len)?;
        Ok((0..len).map(|i| i % self.count()).collect())
    }

    /// Entries of `table` whose ring is bound to a CPU other than the one
    /// the host picks for that entry, `(i & 127) % ncpus`. Entries naming
    /// a ring that does not exist count as mismatches.
    pub fn mismatches(&self, table: &[usize]) -> usize {
        let (ring_cpus, host_cpus) = self.mismatch_view();
        table.iter().enumerate().filter(|&(i, &ring)| is_mismatch(i, ring, &ring_cpus, &host_cpus)).count()
    }

    /// This binding as [`is_mismatch`] reads it: each ring's CPU, and the
    /// host's CPUs `0..ncpus`.
    pub fn mismatch_view(&self) -> (Vec<Option<usize>>, Vec<usize>) {
        (self.cpus.iter().copied().map(Some).collect(), (0..self.ncpus).collect())
    }

    /// The fewest mismatches any table of `len` entries can have with this
    /// binding: the entries whose host CPU has no ring at all.
    pub fn min_mismatches(&self, len: usize) -> usize {
        (0..len).filter(|&i| !self.cpus.contains(&host_cpu(i as u32, self.ncpus))).count()
    }
}

fn repeat_block(block: &[usize], len: usize) -> Vec<usize> {
    block.iter().copied().cycle().take(len).collect()
}

fn check_len(len: usize) -> Result<(), RingmapError> {
    if len == 0 || !len.is_multiple_of(HOST_TABLE_LEN) {
        return Err(RingmapError::BadTableSize(len));
    }
    Ok(())
}

/// Everything `rsskit table` shows: a ringmap, its redirect table, the
/// replicated table's mismatches beside it, and optionally matched TX rings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingmapPlan {
    /// The RX ringmap.
    pub rx: Ringmap,
    /// TX rings after [`Ringmap::match_rings`], when asked for.
    pub tx: Option<Ringmap>,
    /// The redirect table ([`Ringmap::rdrtable`]): entry `i` is the RX ring
    /// for `hash & (len - 1) == i`.
    pub table: Vec<usize>,
    /// Mismatches of `table` ([`Ringmap::mismatches`]).
    pub mismatches: usize,
    /// Mismatches of the plain replicated table ([`Ringmap::replicated_table`]).
    pub replicate_mismatches: usize,
    /// The lower bound [`Ringmap::min_mismatches`].
    pub min_mismatches: usize,
    /// Table entries per ring.
    pub ring_entries: Vec<usize>,
}

/// Parameters of a [`RingmapPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSpec {
    /// Number of CPUs.
    pub ncpus: usize,
    /// Number of RX rings.
    pub rings: usize,
    /// Device unit (picks the CPU set, see [`Ringmap::alloc`]).
    pub unit: usize,
    /// Power-of-two ring count (`alloc2`).
    pub pow2: bool,
    /// Separate TX ring count, matched to the RX rings.
    pub tx_rings: Option<usize>,
    /// Redirect table size (a multiple of 128).
    pub table_len: usize,
}

impl RingmapPlan {
    /// Builds the ringmap(s) and the table, validating the input.
    pub fn new(s: PlanSpec) -> Result<Self, RingmapError> {
        if s.ncpus == 0 {
            return Err(RingmapError::NoCpus);
        }
        if s.rings == 0 || s.tx_rings == Some(0) {
            return Err(RingmapError::NoRings);
        }
        check_len(s.table_len)?;
        if s.rings > s.table_len {
            return Err(RingmapError::MoreRingsThanEntries { rings: s.rings, entries: s.table_len });
        }
        let alloc = if s.pow2 { Ringmap::alloc2 } else { Ringmap::alloc };
        let mut rx = alloc(s.ncpus, s.rings, s.unit)?;
        let tx = match s.tx_rings {
            Some(t) => {
                let mut tx = alloc(s.ncpus, t, s.unit)?;
                Ringmap::match_rings(&mut rx, &mut tx)?;
                Some(tx)
            }
            None => None,
        };
        let table = rx.rdrtable(s.table_len)?;
        let mismatches = rx.mismatches(&table);
        let replicate_mismatches = rx.mismatches(&rx.replicated_table(s.table_len)?);
        let min_mismatches = rx.min_mismatches(s.table_len);
        let mut ring_entries = vec![0; rx.count()];
        for &r in &table {
            ring_entries[r] += 1;
        }
        Ok(RingmapPlan { rx, tx, table, mismatches, replicate_mismatches, min_mismatches, ring_entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_rule_reads_cpus_through_the_lists() {
        // Host CPUs 2, 5, 7: entry i goes to host_cpus[(i & 127) % 3].
        let host = [2, 5, 7];
        let rings = [Some(5), Some(2), None];
        assert!(!is_mismatch(0, 1, &rings, &host));
        assert!(is_mismatch(0, 0, &rings, &host));
        assert!(!is_mismatch(1, 0, &rings, &host));
        assert!(!is_mismatch(129, 0, &rings, &host), "the host looks at entry & 127 only");
        assert!(is_mismatch(2, 2, &rings, &host), "a ring without a CPU");
        assert!(is_mismatch(2, 9, &rings, &host), "a ring that does not exist");
        assert!(is_mismatch(0, 1, &rings, &[]), "no host CPU");
        // A ringmap's count is the same rule over CPU indices 0..ncpus.
        let rm = Ringmap::alloc(24, 16, 0).unwrap();
        let t = rm.replicated_table(256).unwrap();
        let direct =
            t.iter().enumerate().filter(|&(i, &r)| rm.cpu(r) != Some(host_cpu(i as u32, 24))).count();
        assert!(direct > 0);
        assert_eq!(rm.mismatches(&t), direct);
    }

    #[test]
    fn grid_is_smallest_divisor_holding_rings() {
        assert_eq!(grid(24, 16), 24);
        assert_eq!(grid(24, 8), 8);
        assert_eq!(grid(24, 5), 6);
        assert_eq!(grid(12, 8), 12);
        assert_eq!(grid(7, 3), 7);
        assert_eq!(grid(8, 1), 1);
        assert_eq!(grid(8, 100), 8);
    }

    #[test]
    fn host_pick() {
        assert_eq!(host_cpu(130, 24), 2);
        assert_eq!(host_cpu(127, 24), 127 % 24);
    }
}
