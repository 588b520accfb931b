//! Memory per state: `size_of` plus what the allocator really hands out
//! (slab slot + hash map entry + spare capacity), measured with a counting
//! global allocator over 100 000 states. `cargo test -p rsskit-dataplane
//! --test firewall_memory -- --nocapture` prints the figures used in
//! docs/BENCHMARKS.md.

use rsskit_dataplane::firewall::redirect::Xlat;
use rsskit_dataplane::firewall::state::{FlowKey, NewState, State, StateTable, Timeouts};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn bytes_per_state() {
    let n = 100_000u32;
    let before = LIVE.load(Ordering::Relaxed);
    let mut t = StateTable::new(Timeouts::default());
    let me = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    for i in 0..n {
        let c = IpAddr::V4(Ipv4Addr::from(0xac10_0000 + i));
        let (key, a) = FlowKey::of(c, 40000, me, 80, 6);
        t.insert(
            NewState { key, init_is_a: a, rule: 200, track: u32::MAX, xlat: None, pinned: false },
            0x02,
            0,
        );
    }
    let used = LIVE.load(Ordering::Relaxed) - before;
    drop(t);
    // Everything freed (the test harness may allocate a little meanwhile).
    let left = LIVE.load(Ordering::Relaxed) - before;
    assert!(left.abs() < 4096, "{left} B not freed");
    let per = used as f64 / f64::from(n);
    let state = std::mem::size_of::<State>();
    let entry = std::mem::size_of::<(FlowKey, u32)>();
    println!("size_of::<State>() = {state} B, map entry = {entry} B + 1 control byte");
    println!("redirected flows: + size_of::<Xlat>() = {} B boxed, per state", std::mem::size_of::<Xlat>());
    println!("{n} states: {used} B allocated, {per:.1} B per state (slab and map at their growth capacity)");
    assert!(state <= 96, "State grew: {state} B");
    assert!(per >= (state + entry) as f64, "cannot be below the payload");
    assert!(per < 4.0 * (state + entry) as f64, "{per} B per state");
}
