//! DragonFly ringmap: the paper's 24 CPU / 16 ring example, hand-checked
//! small cases, and properties over many CPU / ring counts.

use proptest::prelude::*;
use rsskit_core::ringmap::{grid, host_cpu, PlanSpec, Ringmap, RingmapError, RingmapPlan};

fn host_mismatches(table: &[usize], rm: &Ringmap, entries: usize) -> usize {
    (0..entries).filter(|&i| rm.cpu(table[i]).unwrap() != i % rm.ncpus()).count()
}

/// The paper's Figure 4: 24 CPUs, one NIC with 16 RX rings bound to CPUs
/// 0-15. In the first 48 entries the replicated table has 32 mismatches,
/// the ringmap table 16.
#[test]
fn paper_24_cpus_16_rings() {
    let rm = Ringmap::alloc(24, 16, 0).unwrap();
    assert_eq!(rm.grid(), 24);
    assert_eq!(rm.count(), 16);
    assert_eq!(rm.cpus(), (0..16).collect::<Vec<_>>().as_slice());
    let fixed = rm.rdrtable(128).unwrap();
    let repl = rm.replicated_table(128).unwrap();
    assert_eq!(host_mismatches(&repl, &rm, 48), 32);
    assert_eq!(host_mismatches(&fixed, &rm, 48), 16);
    // Grid 0: rings 0-15 then 0-7; grid 1: 0-15 then 8-15.
    let want: Vec<usize> = (0..16).chain(0..8).chain(0..16).chain(8..16).collect();
    assert_eq!(&fixed[..48], want.as_slice());
    // Whole table: host CPUs 16-23 come up 5 times each in 128 entries and
    // no ring is there: 40 unavoidable mismatches, and no other.
    assert_eq!(rm.mismatches(&fixed), 40);
    assert_eq!(rm.min_mismatches(128), 40);
    // Replicated: entry i matches iff i % 16 == i % 24 iff i % 48 < 16.
    let repl_matches = (0..128).filter(|i| i % 48 < 16).count();
    assert_eq!(rm.mismatches(&repl), 128 - repl_matches);
}

/// DragonFly's own comment example: 12 CPUs, 8 rings.
#[test]
fn twelve_cpus_eight_rings() {
    let rm = Ringmap::alloc(12, 8, 0).unwrap();
    assert_eq!(rm.grid(), 12);
    let t = rm.rdrtable(128).unwrap();
    let want: Vec<usize> =
        (0..8).chain(0..4).chain(0..8).chain(4..8).chain(0..8).chain(0..4).chain(0..8).chain(4..8).collect();
    assert_eq!(&t[..48], want.as_slice());
    // Host CPUs 8-11 appear 10 times each in 128 entries: 40 unavoidable.
    assert_eq!(rm.mismatches(&t), 40);
    // Replicated: match iff i % 8 == i % 12 iff i % 24 < 8: 48 matches.
    assert_eq!(rm.mismatches(&rm.replicated_table(128).unwrap()), 80);
    // Every ring gets 16 entries: 10 grids x 8 + 8 + 40 patched / 8.
    let mut per_ring = [0usize; 8];
    t.iter().for_each(|&r| per_ring[r] += 1);
    assert_eq!(per_ring, [16; 8]);
}

/// 6 CPUs, 4 rings: grid 6, two patched entries per grid, rings 0-1, then 2-3.
#[test]
fn six_cpus_four_rings() {
    let rm = Ringmap::alloc(6, 4, 0).unwrap();
    assert_eq!(rm.grid(), 6);
    let t = rm.rdrtable(128).unwrap();
    assert_eq!(&t[..18], &[0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 2, 3, 0, 1]);
    // 128 = 21 * 6 + 2: host CPUs 4 and 5 appear 21 times each.
    assert_eq!(rm.mismatches(&t), 42);
    assert_eq!(rm.min_mismatches(128), 42);
}

/// When the CPU count is a multiple of the ring count, the ringmap table is
/// the replicated one and every entry matches.
#[test]
fn divisible_counts_match_everywhere() {
    let rm = Ringmap::alloc(8, 4, 0).unwrap();
    assert_eq!(rm.grid(), 4);
    let t = rm.rdrtable(256).unwrap();
    assert_eq!(t, rm.replicated_table(256).unwrap());
    // Rings on CPUs 0-3; host CPUs 4-7 have no ring: half the entries.
    assert_eq!(rm.mismatches(&t), 128);
    let all = Ringmap::alloc(8, 8, 0).unwrap();
    assert_eq!(all.mismatches(&all.rdrtable(128).unwrap()), 0);
}

/// The paper's 3-NIC example: 24 CPUs, 8 rings each; NIC0 on CPUs 0-7,
/// NIC1 on 8-15, NIC2 on 16-23; unit 3 wraps to 0-7 again.
#[test]
fn units_spread_over_cpu_sets() {
    for (unit, first) in [(0, 0), (1, 8), (2, 16), (3, 0)] {
        let rm = Ringmap::alloc(24, 8, unit).unwrap();
        assert_eq!(rm.grid(), 8);
        assert_eq!(rm.cpus(), (first..first + 8).collect::<Vec<_>>().as_slice(), "unit {unit}");
        // The table does not depend on the unit.
        assert_eq!(rm.rdrtable(128).unwrap(), (0..128).map(|i| i % 8).collect::<Vec<_>>());
    }
}

#[test]
fn ring_count_capped_and_pow2() {
    let rm = Ringmap::alloc(4, 16, 0).unwrap();
    assert_eq!((rm.count(), rm.grid()), (4, 4));
    let rm = Ringmap::alloc2(24, 12, 0).unwrap();
    assert_eq!((rm.count(), rm.grid()), (8, 8));
    let rm = Ringmap::alloc2(6, 6, 1).unwrap();
    assert_eq!((rm.count(), rm.grid()), (4, 6));
    assert_eq!(rm.cpus(), &[0, 1, 2, 3]); // offset 6 * 1 % 6 = 0
    let rm = Ringmap::alloc2(24, 1, 5).unwrap();
    assert_eq!((rm.count(), rm.grid(), rm.cpus()), (1, 1, &[5usize][..]));
    // More than 128 CPUs: the host never picks past CPU 127.
    let rm = Ringmap::alloc(200, 200, 0).unwrap();
    assert_eq!((rm.ncpus(), rm.count()), (128, 128));
}

/// `if_ringmap_align`: 8 CPUs, 4 RX and 2 TX rings, unit 1.
#[test]
fn align_puts_tx_on_rx_cpus() {
    let mut rx = Ringmap::alloc(8, 4, 1).unwrap();
    let mut tx = Ringmap::alloc(8, 2, 1).unwrap();
    assert_eq!(rx.cpus(), &[4, 5, 6, 7]);
    assert_eq!(tx.cpus(), &[2, 3]);
    Ringmap::align(&mut rx, &mut tx).unwrap();
    assert_eq!(rx.cpus(), &[4, 5, 6, 7]);
    assert_eq!(tx.cpus(), &[4, 5]);
    assert_eq!(tx.grid(), 4);
    let mut other = Ringmap::alloc(8, 2, 2).unwrap();
    assert_eq!(Ringmap::align(&mut rx, &mut other), Err(RingmapError::Incompatible));
}

/// `if_ringmap_match`: 12 CPUs, 4 RX and 2 TX rings. Units 0-2 put TX on
/// the first two CPUs of each RX set, units 3-5 on the last two.
#[test]
fn match_spreads_tx_over_units() {
    let expect = [
        (0, [0, 1, 2, 3], [0, 1]),
        (1, [4, 5, 6, 7], [4, 5]),
        (2, [8, 9, 10, 11], [8, 9]),
        (3, [0, 1, 2, 3], [2, 3]),
        (4, [4, 5, 6, 7], [6, 7]),
        (5, [8, 9, 10, 11], [10, 11]),
    ];
    for (unit, rx_cpus, tx_cpus) in expect {
        let mut rx = Ringmap::alloc(12, 4, unit).unwrap();
        let mut tx = Ringmap::alloc(12, 2, unit).unwrap();
        Ringmap::match_rings(&mut rx, &mut tx).unwrap();
        assert_eq!(rx.cpus(), &rx_cpus, "unit {unit}");
        assert_eq!(tx.cpus(), &tx_cpus, "unit {unit}");
    }
    // More TX than RX: the RX rings move instead.
    let mut rx = Ringmap::alloc(12, 2, 3).unwrap();
    let mut tx = Ringmap::alloc(12, 4, 3).unwrap();
    Ringmap::match_rings(&mut rx, &mut tx).unwrap();
    assert_eq!((rx.cpus(), tx.cpus()), (&[2, 3][..], &[0, 1, 2, 3][..]));
}

/// After `match` moves the RX rings inside the TX set, DragonFly's grid
/// table no longer lines up; the table is then built from the binding.
#[test]
fn shifted_rings_use_binding_table() {
    let mut rx = Ringmap::alloc(30, 13, 1).unwrap();
    let mut tx = Ringmap::alloc(30, 30, 1).unwrap();
    Ringmap::match_rings(&mut rx, &mut tx).unwrap();
    assert_eq!(rx.cpus(), (15..28).collect::<Vec<_>>().as_slice());
    let grid = rx.grid_table(128).unwrap();
    let table = rx.rdrtable(128).unwrap();
    assert!(rx.mismatches(&grid) > rx.min_mismatches(128));
    assert_eq!(table, rx.binding_table(128).unwrap());
    assert_eq!(rx.mismatches(&table), rx.min_mismatches(128));
    // Entry 15 (host CPU 15) goes to ring 0, bound to CPU 15.
    assert_eq!(table[15], 0);
    assert_eq!(table[30 + 27], 12);
    assert!(rx.mismatches(&table) <= rx.mismatches(&rx.replicated_table(128).unwrap()));
}

#[test]
fn plan_errors() {
    let spec = PlanSpec { ncpus: 4, rings: 4, unit: 0, pow2: false, tx_rings: None, table_len: 128 };
    assert!(RingmapPlan::new(spec).is_ok());
    assert_eq!(RingmapPlan::new(PlanSpec { ncpus: 0, ..spec }), Err(RingmapError::NoCpus));
    assert_eq!(RingmapPlan::new(PlanSpec { rings: 0, ..spec }), Err(RingmapError::NoRings));
    assert_eq!(RingmapPlan::new(PlanSpec { tx_rings: Some(0), ..spec }), Err(RingmapError::NoRings));
    assert_eq!(RingmapPlan::new(PlanSpec { table_len: 100, ..spec }), Err(RingmapError::BadTableSize(100)));
    assert_eq!(RingmapPlan::new(PlanSpec { table_len: 0, ..spec }), Err(RingmapError::BadTableSize(0)));
    assert_eq!(
        RingmapPlan::new(PlanSpec { rings: 129, ..spec }),
        Err(RingmapError::MoreRingsThanEntries { rings: 129, entries: 128 })
    );
    assert!(RingmapError::BadTableSize(100).to_string().contains("multiple of 128"));
}

#[test]
fn grid_examples() {
    assert_eq!(grid(24, 16), 24);
    assert_eq!(grid(24, 7), 8);
    assert_eq!(grid(10, 3), 5);
    assert_eq!(grid(13, 2), 13);
}

#[test]
fn host_cpu_uses_low_seven_bits() {
    assert_eq!(host_cpu(0x1234_5680, 24), 0);
    assert_eq!(host_cpu(0x1234_56ff, 24), 127 % 24);
}

fn spec() -> impl Strategy<Value = PlanSpec> {
    (1usize..=160, 1usize..=128, 0usize..8, any::<bool>(), prop::option::of(1usize..=160), 1usize..=4)
        .prop_map(|(ncpus, rings, unit, pow2, tx_rings, blocks)| PlanSpec {
            ncpus,
            rings,
            unit,
            pow2,
            tx_rings,
            table_len: 128 * blocks,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tables_are_valid_and_never_worse(s in spec()) {
        let p = RingmapPlan::new(s).unwrap();
        let n = p.rx.count();
        let ncpus = s.ncpus.min(128);
        prop_assert!(n >= 1 && n <= s.rings.min(ncpus));
        if s.pow2 { prop_assert!(n.is_power_of_two()); }
        // The grid divides the CPUs and holds the rings.
        prop_assert!(p.rx.grid() >= n && ncpus % p.rx.grid() == 0);
        // Rings on distinct, existing CPUs.
        let mut cpus = p.rx.cpus().to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        prop_assert_eq!(cpus.len(), n);
        prop_assert!(cpus.iter().all(|&c| c < ncpus));
        // Only valid rings, every ring appears, in every 128-entry block.
        prop_assert_eq!(p.table.len(), s.table_len);
        prop_assert!(p.table.iter().all(|&r| r < n));
        prop_assert_eq!(p.ring_entries.len(), n);
        prop_assert!(p.ring_entries.iter().all(|&e| e > 0));
        for b in 0..s.table_len / 128 {
            prop_assert_eq!(&p.table[b * 128..(b + 1) * 128], &p.table[..128]);
        }
        // Never more mismatches than the replicated table, never below the bound.
        prop_assert!(p.mismatches <= p.replicate_mismatches);
        prop_assert!(p.mismatches >= p.min_mismatches);
        if s.tx_rings.is_none() {
            // Without TX matching DragonFly's grid table is the table, and optimal.
            prop_assert_eq!(&p.table, &p.rx.grid_table(s.table_len).unwrap());
        }
        // Always optimal for the binding.
        prop_assert_eq!(p.mismatches, p.min_mismatches);
        {
        }
        if let Some(tx) = &p.tx {
            prop_assert!(tx.cpus().iter().all(|&c| c < ncpus));
            prop_assert!(tx.count() <= ncpus);
            // After matching, the smaller set's CPUs lie within the larger's.
            let (small, big) = if tx.count() <= n { (tx.cpus(), p.rx.cpus()) } else { (p.rx.cpus(), tx.cpus()) };
            prop_assert!(small.iter().all(|c| big.contains(c)), "rx {:?} tx {:?}", p.rx.cpus(), tx.cpus());
        }
    }
}
