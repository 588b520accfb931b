//! Packet buffer pool: one contiguous, 4 KiB-aligned allocation cut into
//! `count` buffers `stride` bytes apart.
//!
//! The stride defaults to [`DEFAULT_STRIDE`] = 1920 = 2048 - 2 * 64: with a
//! 2048-byte stride every buffer starts at the same offset modulo 2 KiB, so
//! the packet headers (the bytes every stage reads) all fall into the same
//! few cache sets and evict each other; Adrian Chadd measured 6.5 Mpps at
//! 2048 vs 10 Mpps at 1920 bridging with netmap ("Intel DDIO, LLC cache,
//! buffer alignment, prefetching, shared locks and packet rates", 2015).
//!
//! Ownership: a buffer index is handed out by [`Pool::alloc`] (only by the
//! pool's owner thread, through its free list) and comes back through
//! [`Pool::free`] or, from another thread, through the netisr return
//! rings. Exactly one party holds an index at a time; that is what makes
//! [`PoolMem::buf`] / [`PoolMem::buf_mut`] sound.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

/// Default buffer stride (bytes): two cache lines less than 2048.
pub const DEFAULT_STRIDE: usize = 1920;

/// Unused slots after the free list's last entry (a cache-line pair).
const FREE_LIST_PAD: usize = 128 / core::mem::size_of::<u32>();

/// The buffer memory. Shared (`Arc`) between the owner and every thread a
/// buffer may travel to.
///
/// Aligned to 128 bytes (a cache-line pair): its owner reads it for every
/// frame, and the pools of all workers are made one after the other by one
/// thread, so it must not share lines with another worker's written data.
#[repr(align(128))]
pub struct PoolMem {
    base: *mut u8,
    layout: Layout,
    stride: usize,
    count: usize,
}

// SAFETY: the memory is only reached through indices, and the ownership
// protocol (module docs) gives each index to one thread at a time; the
// hand-off goes through the SPSC rings' Release/Acquire.
unsafe impl Send for PoolMem {}
// SAFETY: as above.
unsafe impl Sync for PoolMem {}

impl Drop for PoolMem {
    fn drop(&mut self) {
        // SAFETY: allocated in Pool::new with this layout.
        unsafe { dealloc(self.base, self.layout) };
    }
}

impl PoolMem {
    /// Buffer stride.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Address of buffer `idx` (for prefetching; reading it needs ownership).
    #[inline]
    pub fn ptr(&self, idx: u32) -> *const u8 {
        let i = (idx as usize).min(self.count - 1);
        // SAFETY: i < count, so the offset stays inside the allocation.
        unsafe { self.base.add(i * self.stride) }
    }

    /// The first `len` bytes of buffer `idx`.
    ///
    /// # Safety
    /// The caller holds buffer `idx` (no one else writes it meanwhile).
    #[inline]
    pub unsafe fn buf(&self, idx: u32, len: usize) -> &[u8] {
        assert!((idx as usize) < self.count && len <= self.stride);
        // SAFETY: in bounds (asserted); exclusivity is the caller's contract.
        unsafe { core::slice::from_raw_parts(self.base.add(idx as usize * self.stride), len) }
    }

    /// Buffer `idx`, whole stride, writable.
    ///
    /// # Safety
    /// The caller holds buffer `idx` and no other reference to it exists.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn buf_mut(&self, idx: u32) -> &mut [u8] {
        assert!((idx as usize) < self.count);
        // SAFETY: in bounds; exclusivity is the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.base.add(idx as usize * self.stride), self.stride) }
    }
}

/// A pool and its owner's free list.
pub struct Pool {
    mem: Arc<PoolMem>,
    free: Vec<u32>,
}

impl Pool {
    /// `count` buffers of `stride` bytes (stride rounded up to 64, at least 64).
    pub fn new(count: usize, stride: usize) -> Self {
        let stride = stride.max(64).div_ceil(64) * 64;
        let count = count.max(1);
        let size = stride.checked_mul(count).expect("pool size overflows");
        let layout = Layout::from_size_align(size, 4096).expect("pool layout");
        // SAFETY: size > 0.
        let base = unsafe { alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mem = Arc::new(PoolMem { base, layout, stride, count });
        // The top of the free stack (its end) is written for every frame and
        // sits within a batch or two of `count`: 32 spare slots (128 bytes)
        // keep the next allocation, maybe another worker's, off its lines.
        let mut free = Vec::with_capacity(count + FREE_LIST_PAD);
        free.extend((0..count as u32).rev());
        Pool { mem, free }
    }

    /// The shared memory handle.
    pub fn mem(&self) -> &Arc<PoolMem> {
        &self.mem
    }

    /// Takes a free buffer.
    #[inline]
    pub fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Gives a buffer back.
    #[inline]
    pub fn free(&mut self, idx: u32) {
        debug_assert!((idx as usize) < self.mem.count);
        self.free.push(idx);
    }

    /// Free buffers.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Stride.
    pub fn stride(&self) -> usize {
        self.mem.stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one worker writes or reads for every frame stays off the lines
    /// of the next allocation (another worker's pool, made right after).
    #[test]
    fn hot_pool_state_is_padded() {
        let (a, b) = (Pool::new(1000, DEFAULT_STRIDE), Pool::new(1000, DEFAULT_STRIDE));
        for p in [&a, &b] {
            assert_eq!(Arc::as_ptr(&p.mem) as usize % 128, 0);
            assert!(p.free.capacity() >= p.free.len() + 32);
        }
    }

    #[test]
    fn stride_and_alignment() {
        let mut p = Pool::new(8, DEFAULT_STRIDE);
        assert_eq!(p.stride(), 1920);
        assert_eq!(p.mem().ptr(0) as usize % 4096, 0);
        assert_eq!(p.mem().ptr(1) as usize - p.mem().ptr(0) as usize, 1920);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert_ne!(a, b);
        // SAFETY: we hold a and b.
        unsafe {
            p.mem().buf_mut(a)[..3].copy_from_slice(&[1, 2, 3]);
            p.mem().buf_mut(b)[..3].copy_from_slice(&[4, 5, 6]);
            assert_eq!(p.mem().buf(a, 3), &[1, 2, 3]);
            assert_eq!(p.mem().buf(b, 3), &[4, 5, 6]);
        }
        for _ in 0..6 {
            p.alloc().unwrap();
        }
        assert_eq!(p.alloc(), None);
        p.free(a);
        assert_eq!(p.available(), 1);
        assert_eq!(Pool::new(1, 100).stride(), 128);
    }
}

/// Who owns an [`Mbuf`]'s bytes.
#[derive(Debug)]
enum Owner {
    /// Buffer `idx` of pool `pool` (the netisr thread id of its owner).
    Pool { pool: u16, idx: u32 },
    /// A heap buffer (reassembled or decapsulated packets, oversize frames).
    Heap(#[allow(dead_code)] Box<[u8]>),
}

/// A packet in flight: its bytes (in a pool buffer or on the heap), the
/// RSS hash the input computed, the capture timestamp and flags.
#[derive(Debug)]
pub struct Mbuf {
    ptr: core::ptr::NonNull<u8>,
    len: u32,
    /// RSS hash (the NIC's, or the full re-hash after re-injection).
    pub hash: u32,
    /// Capture timestamp, ns since the epoch (0 if unknown).
    pub ts_ns: u64,
    /// [`mbuf_flags`] bits.
    pub flags: u8,
    /// Input frames this packet stands for (per-frame accounting): 1 for a
    /// frame read from a source, the sum of its fragments' for a
    /// reassembled datagram, the outer packet's for a decapsulated one.
    pub frames: u32,
    owner: Owner,
}

/// [`Mbuf::flags`] bits.
pub mod mbuf_flags {
    /// Re-injected after reassembly or decapsulation.
    pub const REINJECTED: u8 = 1;
    /// Reassembled from fragments.
    pub const REASSEMBLED: u8 = 2;
    /// Decapsulated from a tunnel.
    pub const DECAPSULATED: u8 = 4;
}

// SAFETY: the pointer targets either the Box this Mbuf owns or a pool
// buffer this Mbuf holds exclusively (pool ownership protocol); moving the
// Mbuf to another thread moves that exclusive hold with it.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// A heap-backed packet.
    pub fn heap(data: Vec<u8>, hash: u32, ts_ns: u64, flags: u8) -> Mbuf {
        let b = data.into_boxed_slice();
        let len = b.len() as u32;
        // A Box<[u8]>'s data pointer is non-null (dangling for len 0) and
        // does not move when the Box moves.
        let ptr = core::ptr::NonNull::new(b.as_ptr() as *mut u8).expect("box pointer is non-null");
        Mbuf { ptr, len, hash, ts_ns, flags, frames: 1, owner: Owner::Heap(b) }
    }

    /// A packet in buffer `idx` of `mem` (pool id `pool`), `len` bytes.
    ///
    /// # Safety
    /// The caller holds buffer `idx` and hands that hold to the Mbuf; `mem`
    /// outlives every use of [`Mbuf::data`].
    pub unsafe fn pooled(mem: &PoolMem, pool: u16, idx: u32, len: usize, hash: u32, ts_ns: u64) -> Mbuf {
        assert!((idx as usize) < mem.count && len <= mem.stride);
        let ptr = core::ptr::NonNull::new(mem.ptr(idx) as *mut u8).expect("pool pointer is non-null");
        Mbuf { ptr, len: len as u32, hash, ts_ns, flags: 0, frames: 1, owner: Owner::Pool { pool, idx } }
    }

    /// The packet bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: ptr/len describe bytes this Mbuf holds exclusively (see
        // `pooled`'s contract and `heap`).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Zero-length?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte (for prefetching).
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// `(pool, index)` for a pool buffer, `None` for a heap one.
    #[inline]
    pub fn pool_slot(&self) -> Option<(u16, u32)> {
        match self.owner {
            Owner::Pool { pool, idx } => Some((pool, idx)),
            Owner::Heap(_) => None,
        }
    }
}

#[cfg(test)]
mod mbuf_tests {
    use super::*;

    #[test]
    fn heap_and_pooled() {
        let m = Mbuf::heap(vec![1, 2, 3], 7, 9, mbuf_flags::REINJECTED);
        let moved = m;
        assert_eq!(moved.data(), &[1, 2, 3]);
        assert_eq!(moved.pool_slot(), None);
        let mut p = Pool::new(2, 256);
        let i = p.alloc().unwrap();
        // SAFETY: we hold i.
        unsafe { p.mem().buf_mut(i)[..2].copy_from_slice(&[5, 6]) };
        // SAFETY: hold handed over; the pool outlives the mbuf.
        let m = unsafe { Mbuf::pooled(p.mem(), 3, i, 2, 0, 0) };
        assert_eq!(m.data(), &[5, 6]);
        assert_eq!(m.pool_slot(), Some((3, i)));
    }
}
