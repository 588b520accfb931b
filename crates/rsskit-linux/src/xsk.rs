//! AF_XDP sockets: a UMEM (frames shared with the kernel), its fill and
//! completion rings, and the RX/TX descriptor rings, all driven in
//! batches; plus the XDP program (`bpf/xsk_redirect.bpf.c`) that redirects
//! each RX queue's frames into the socket registered for that queue in its
//! `XSKMAP`. One socket per (queue, worker); zero-copy where the driver
//! supports it, copy mode otherwise (veth), and [`XskSocket::mode`] says
//! which one the kernel chose.
//!
//! The kernel interface is used directly through `libc` rather than a
//! crate: `xsk-rs` needs libxdp at build and run time, and `xdpilone`
//! (pure Rust, EUPL-1.2) would be the only copyleft dependency of an
//! MIT/Apache workspace for what is here five socket options, four
//! `mmap`s and ring index arithmetic. The XDP program is loaded with aya
//! like every other rsskit eBPF program.

use crate::ebpf::{self, EbpfError};
use crate::packet::{ifindex, PacketError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// The kernel's smallest UMEM chunk (`XDP_UMEM_MIN_CHUNK_SIZE`).
pub const MIN_FRAME_SIZE: u32 = 2048;
/// The program and map names in `bpf/xsk_redirect.bpf.c`.
const PROGRAM: &str = "xsk_redirect";
const PROG_FN: &str = "rsskit_xsk_redirect";
const MAP: &str = "xsks";

/// Why an AF_XDP socket or its program could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A bad or unknown interface name.
    #[error(transparent)]
    Interface(#[from] PacketError),
    /// The caller lacks the privileges.
    #[error(
        "AF_XDP needs root (CAP_NET_RAW for the socket, CAP_NET_ADMIN and CAP_BPF for the XDP program): {0}"
    )]
    NotPermitted(io::Error),
    /// The kernel was built without AF_XDP.
    #[error("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): {0}")]
    NoAfXdp(io::Error),
    /// The interface's driver cannot run an XDP program natively.
    // `error`, not `source`: the message already names it (one line, once).
    #[error("{ifname}: the driver has no native XDP support ({error}); use afpacket:{ifname} instead")]
    NoXdp {
        /// The interface.
        ifname: String,
        /// What the kernel said.
        error: io::Error,
    },
    /// The interface has no such RX queue.
    #[error("{ifname} has {count} RX queue(s): no queue {queue}")]
    NoSuchQueue {
        /// The interface.
        ifname: String,
        /// The queue asked for.
        queue: u32,
        /// How many it has.
        count: u32,
    },
    /// Another AF_XDP socket is already bound to the queue.
    #[error("{ifname} queue {queue} already has an AF_XDP socket (one socket per queue: input and output cannot share an interface queue)")]
    Busy {
        /// The interface.
        ifname: String,
        /// The queue.
        queue: u32,
    },
    /// The frame size is outside what the kernel accepts.
    #[error("AF_XDP frame size {0} is outside {MIN_FRAME_SIZE}..={max} (the kernel's UMEM chunk limits)", max = page_size())]
    FrameSize(u32),
    /// The redirect program could not be loaded.
    #[error("the AF_XDP redirect program: {0}")]
    Program(#[from] EbpfError),
    /// A system call failed; the string says which step.
    #[error("{0}: {1}")]
    Sys(&'static str, io::Error),
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u32
    } else {
        4096
    }
}

fn errno_is(e: &io::Error, codes: &[i32]) -> bool {
    e.raw_os_error().is_some_and(|c| codes.contains(&c))
}

/// The `io::Error` somewhere in an error's source chain (aya wraps them).
fn find_io_error(e: &(dyn std::error::Error + 'static)) -> Option<io::Error> {
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(io) = x.downcast_ref::<io::Error>() {
            return Some(
                io.raw_os_error()
                    .map_or_else(|| io::Error::other(io.to_string()), io::Error::from_raw_os_error),
            );
        }
        cur = x.source();
    }
    None
}

/// Ring and UMEM geometry.
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// Bytes per UMEM frame (the buffer stride). The kernel needs
    /// 2048..=page size; a size that is not a power of two uses the
    /// unaligned-chunk UMEM mode.
    pub frame_size: u32,
    /// Entries of the RX and TX rings (a power of two); the UMEM has twice
    /// as many frames, and the fill ring room for all of them.
    pub ring_size: u32,
    /// Descriptors taken from (or put on) a ring at once.
    pub batch: u32,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig { frame_size: MIN_FRAME_SIZE, ring_size: 2048, batch: 64 }
    }
}

/// How the kernel moves frames between the driver and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskMode {
    /// The driver DMAs straight into the UMEM.
    ZeroCopy,
    /// The kernel copies each frame (drivers without zero-copy, e.g. veth).
    Copy,
}

impl XskMode {
    /// `zero-copy` or `copy`.
    pub fn name(self) -> &'static str {
        match self {
            XskMode::ZeroCopy => "zero-copy",
            XskMode::Copy => "copy",
        }
    }
}

/// The kernel's per-socket counters (`XDP_STATISTICS`), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for want of a fill-ring buffer or for being too big.
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Of `rx_dropped`: the fill ring was empty.
    pub rx_fill_ring_empty: u64,
    /// Invalid fill-ring descriptors (a bug on our side if not 0).
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors (a bug on our side if not 0).
    pub tx_invalid_descs: u64,
}

impl XskStats {
    /// Received frames the kernel lost before the RX ring.
    pub fn rx_lost(&self) -> u64 {
        self.rx_dropped + self.rx_ring_full
    }

    /// The losses by reason (each frame counted once): ring full, fill
    /// ring empty, other (frame too big for a UMEM frame).
    pub fn rx_loss_reasons(&self) -> [(&'static str, u64); 3] {
        let empty = self.rx_fill_ring_empty.min(self.rx_dropped);
        [
            ("xdp_rx_ring_full", self.rx_ring_full),
            ("xdp_fill_ring_empty", empty),
            ("xdp_rx_dropped", self.rx_dropped - empty),
        ]
    }
}

fn setsockopt<T: Copy>(fd: RawFd, name: libc::c_int, v: &T, what: &'static str) -> Result<(), XskError> {
    crate::socket::setsockopt(fd, libc::SOL_XDP, name, v).map_err(|e| XskError::Sys(what, e))
}

fn getsockopt<T: Copy>(fd: RawFd, name: libc::c_int, v: &mut T) -> io::Result<()> {
    crate::socket::getsockopt_into(fd, libc::SOL_XDP, name, v)
}

/// Opens an AF_XDP socket, or says why not.
fn xdp_socket() -> Result<OwnedFd, XskError> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(if errno_is(&e, &[libc::EPERM, libc::EACCES]) {
            XskError::NotPermitted(e)
        } else if errno_is(&e, &[libc::EAFNOSUPPORT]) {
            XskError::NoAfXdp(e)
        } else {
            XskError::Sys("cannot open an AF_XDP socket", e)
        });
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A memory mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn anonymous(len: usize) -> Result<Mapping, XskError> {
        // SAFETY: a fresh private anonymous mapping, no aliasing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(XskError::Sys("allocating the UMEM", io::Error::last_os_error()));
        }
        Ok(Mapping { ptr: p as *mut u8, len })
    }

    fn ring(fd: RawFd, len: usize, pgoff: u64, what: &'static str) -> Result<Mapping, XskError> {
        // SAFETY: mapping a ring the kernel created for this socket at its
        // documented page offset.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(XskError::Sys(what, io::Error::last_os_error()));
        }
        Ok(Mapping { ptr: p as *mut u8, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from our successful mmap.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// One single-producer single-consumer ring shared with the kernel. We are
/// the producer of the fill and TX rings and the consumer of the
/// completion and RX rings.
struct Ring<T> {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    size: u32,
    /// Our side's index (producer or consumer), ahead of what is published
    /// for the consumer side only between peek and release.
    local: u32,
    /// The other side's index as last read (+ size for a producer ring).
    cached: u32,
}

impl<T: Copy> Ring<T> {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        producer_side: bool,
        what: &'static str,
    ) -> Result<Self, XskError> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let m = Mapping::ring(fd, len, pgoff, what)?;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this mapping.
        let (producer, consumer, flags, desc) = unsafe {
            (
                m.ptr.add(off.producer as usize) as *const AtomicU32,
                m.ptr.add(off.consumer as usize) as *const AtomicU32,
                m.ptr.add(off.flags as usize) as *const AtomicU32,
                m.ptr.add(off.desc as usize) as *mut T,
            )
        };
        let mut r =
            Ring { _map: m, producer, consumer, flags, desc, mask: size - 1, size, local: 0, cached: 0 };
        if producer_side {
            r.local = r.prod().load(Ordering::Relaxed);
            r.cached = r.cons().load(Ordering::Acquire).wrapping_add(size);
        } else {
            r.local = r.cons().load(Ordering::Relaxed);
            r.cached = r.prod().load(Ordering::Acquire);
        }
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping; the kernel updates it atomically.
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for prod.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for prod.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer: free slots, up to `want`.
    fn free(&mut self, want: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n < want {
            self.cached = self.cons().load(Ordering::Acquire).wrapping_add(self.size);
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(want)
    }

    /// Producer: writes slot `local + i` (i < what `free` returned).
    fn write(&mut self, i: u32, v: T) {
        // SAFETY: the index is masked into the ring's descriptor array.
        unsafe { self.desc.add((self.local.wrapping_add(i) & self.mask) as usize).write(v) };
    }

    /// Producer: publishes `n` written slots.
    fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.prod().store(self.local, Ordering::Release);
    }

    /// Producer: entries the kernel has not consumed yet.
    fn outstanding(&self) -> u32 {
        self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    /// Consumer: entries ready, up to `want`.
    fn ready(&mut self, want: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n < want {
            self.cached = self.prod().load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(want)
    }

    /// Consumer: entry `local + i` (i < what `ready` returned).
    fn read(&self, i: u32) -> T {
        // SAFETY: the index is masked into the ring's descriptor array.
        unsafe { self.desc.add((self.local.wrapping_add(i) & self.mask) as usize).read() }
    }

    /// Consumer: gives `n` entries back.
    fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.cons().store(self.local, Ordering::Release);
    }
}

/// The UMEM frame an RX/TX descriptor address belongs to.
fn frame_of(unaligned: bool, frame_size: u32, addr: u64) -> u64 {
    if unaligned {
        addr & libc::XSK_UNALIGNED_BUF_ADDR_MASK
    } else {
        addr & !(u64::from(frame_size) - 1)
    }
}

/// One AF_XDP socket with its own UMEM, bound to one queue of one interface.
pub struct XskSocket {
    // Field order = drop order: rings and socket before the UMEM.
    rx: Option<Ring<libc::xdp_desc>>,
    tx: Option<Ring<libc::xdp_desc>>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: Mapping,
    frame_size: u32,
    unaligned: bool,
    /// UMEM frame addresses owned by user space and not in any ring.
    free: Vec<u64>,
    /// Frames in the UMEM.
    frames: u32,
    mode: XskMode,
    ifname: String,
    queue: u32,
    batch: u32,
}

// SAFETY: the mappings are owned by this value alone; moving it to another
// thread moves sole access with it.
unsafe impl Send for XskSocket {}

/// Number of RX queues of `ifname` from sysfs (`None` if this network
/// namespace's sysfs does not show it).
pub fn rx_queue_count(ifname: &str) -> Option<u32> {
    queue_count(ifname, "rx-")
}

/// Number of TX queues of `ifname`, as [`rx_queue_count`].
pub fn tx_queue_count(ifname: &str) -> Option<u32> {
    queue_count(ifname, "tx-")
}

fn queue_count(ifname: &str, prefix: &str) -> Option<u32> {
    let dir = format!("/sys/class/net/{ifname}/queues");
    let d = std::fs::read_dir(dir).ok()?;
    let n = d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).count();
    Some(n as u32)
}

impl XskSocket {
    /// A socket on queue `queue` of `ifname` with an RX ring (`rx`) and/or
    /// a TX ring (`tx`). The fill ring starts full for a receiving socket.
    pub fn open(ifname: &str, queue: u32, cfg: XskConfig, rx: bool, tx: bool) -> Result<Self, XskError> {
        let idx = ifindex(ifname)?;
        if let Some(count) = rx_queue_count(ifname).filter(|&c| queue >= c) {
            return Err(XskError::NoSuchQueue { ifname: ifname.into(), queue, count });
        }
        if cfg.frame_size < MIN_FRAME_SIZE || cfg.frame_size > page_size() {
            return Err(XskError::FrameSize(cfg.frame_size));
        }
        let ring = cfg.ring_size.next_power_of_two().max(64);
        let frames = 2 * ring;
        let fd = xdp_socket()?;
        let raw = fd.as_raw_fd();
        let umem_len = (frames as usize * cfg.frame_size as usize).next_multiple_of(page_size() as usize);
        let umem = Mapping::anonymous(umem_len)?;
        let unaligned = !cfg.frame_size.is_power_of_two();
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: if unaligned { libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG } else { 0 },
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg, "registering the UMEM (XDP_UMEM_REG)")?;
        // The fill ring holds every frame, so giving frames back never waits.
        let fill_size = frames;
        let comp_size = ring;
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &fill_size, "XDP_UMEM_FILL_RING")?;
        setsockopt(raw, libc::XDP_UMEM_COMPLETION_RING, &comp_size, "XDP_UMEM_COMPLETION_RING")?;
        if rx {
            setsockopt(raw, libc::XDP_RX_RING, &ring, "XDP_RX_RING")?;
        }
        if tx {
            setsockopt(raw, libc::XDP_TX_RING, &ring, "XDP_TX_RING")?;
        }
        // SAFETY: plain data, filled by the kernel.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(raw, libc::XDP_MMAP_OFFSETS, &mut off)
            .map_err(|e| XskError::Sys("reading the ring offsets (XDP_MMAP_OFFSETS)", e))?;
        let fill = Ring::map(
            raw,
            &off.fr,
            fill_size,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            true,
            "mmap of the fill ring",
        )?;
        let comp = Ring::map(
            raw,
            &off.cr,
            comp_size,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
            "mmap of the completion ring",
        )?;
        let rx_ring = if rx {
            Some(Ring::map(raw, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64, false, "mmap of the RX ring")?)
        } else {
            None
        };
        let tx_ring = if tx {
            Some(Ring::map(raw, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64, true, "mmap of the TX ring")?)
        } else {
            None
        };
        let mut s = XskSocket {
            rx: rx_ring,
            tx: tx_ring,
            fill,
            comp,
            fd,
            umem,
            frame_size: cfg.frame_size,
            unaligned,
            frames,
            free: (0..frames as u64).rev().map(|i| i * u64::from(cfg.frame_size)).collect(),
            mode: XskMode::Copy,
            ifname: ifname.into(),
            queue,
            batch: cfg.batch.max(1),
        };
        if rx {
            // Keep half the frames for TX if this socket also sends.
            let give = if tx { frames / 2 } else { frames };
            s.refill(give);
        }
        // No mode flag: the kernel tries zero-copy and falls back to copy.
        // SAFETY: sockaddr_xdp is plain data.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_USE_NEED_WAKEUP;
        sa.sxdp_ifindex = idx;
        sa.sxdp_queue_id = queue;
        // SAFETY: sa is a valid sockaddr_xdp of the size passed.
        let rc = unsafe {
            libc::bind(
                raw,
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(if errno_is(&e, &[libc::EBUSY]) {
                XskError::Busy { ifname: ifname.into(), queue }
            } else if errno_is(&e, &[libc::EPERM, libc::EACCES]) {
                XskError::NotPermitted(e)
            } else if errno_is(&e, &[libc::EINVAL]) {
                XskError::Sys("binding the AF_XDP socket (is the queue number valid?)", e)
            } else {
                XskError::Sys("binding the AF_XDP socket", e)
            });
        }
        let mut opts = libc::xdp_options { flags: 0 };
        if getsockopt(raw, libc::XDP_OPTIONS, &mut opts).is_ok()
            && opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0
        {
            s.mode = XskMode::ZeroCopy;
        }
        Ok(s)
    }

    /// Zero-copy or copy, as the kernel chose at bind time.
    pub fn mode(&self) -> XskMode {
        self.mode
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Bytes per UMEM frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// The socket descriptor (for the `XSKMAP`).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The kernel's counters for this socket.
    pub fn stats(&self) -> XskStats {
        // SAFETY: plain data, filled by the kernel.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        if getsockopt(self.fd(), libc::XDP_STATISTICS, &mut st).is_err() {
            return XskStats::default();
        }
        XskStats {
            rx_dropped: st.rx_dropped,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
            rx_invalid_descs: st.rx_invalid_descs,
            tx_invalid_descs: st.tx_invalid_descs,
        }
    }

    /// Gives up to `max` free frames to the kernel's fill ring.
    fn refill(&mut self, max: u32) {
        let n = self.fill.free((self.free.len() as u32).min(max));
        for i in 0..n {
            let a = self.free.pop().expect("counted");
            self.fill.write(i, a);
        }
        if n > 0 {
            self.fill.submit(n);
        }
    }

    /// The bytes a descriptor points at (None if it lies outside the UMEM).
    fn data(&self, d: &libc::xdp_desc) -> Option<&[u8]> {
        let off = if self.unaligned {
            (d.addr & libc::XSK_UNALIGNED_BUF_ADDR_MASK) + (d.addr >> libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT)
        } else {
            d.addr
        } as usize;
        if off + d.len as usize > self.umem.len {
            return None;
        }
        // SAFETY: inside the UMEM (checked); the kernel does not write this
        // frame until we give it back through the fill ring.
        Some(unsafe { std::slice::from_raw_parts(self.umem.ptr.add(off), d.len as usize) })
    }

    fn kick_rx(&self) {
        // SAFETY: a zero-length non-blocking recvfrom only wakes the driver.
        unsafe {
            libc::recvfrom(
                self.fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Asks the kernel to send what is on the TX ring; an error only for a
    /// hard failure (busy or no buffers means "later").
    fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: a zero-length non-blocking sendto only starts transmission.
        let rc =
            unsafe { libc::sendto(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            // Busy / try again / no buffers: the ring keeps the rest for later.
            if !errno_is(&e, &[libc::EAGAIN, libc::EBUSY, libc::ENOBUFS, libc::ENETDOWN, libc::EINTR]) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes finished TX frames back from the completion ring.
    fn reap(&mut self) {
        let n = self.comp.ready(self.comp.size);
        for i in 0..n {
            let a = self.comp.read(i);
            self.free.push(frame_of(self.unaligned, self.frame_size, a));
        }
        if n > 0 {
            self.comp.release(n);
        }
    }
}

/// The receive side of a socket: frames are read in place, a batch of RX
/// descriptors at a time; the batch's frames go back to the fill ring when
/// the next batch is taken.
pub struct XskRx {
    sock: XskSocket,
    got: u32,
    next: u32,
}

impl XskRx {
    /// A receiving socket on `queue` of `ifname` (register it with
    /// [`XdpProgram::register`] so frames reach it).
    pub fn open(ifname: &str, queue: u32, cfg: XskConfig) -> Result<Self, XskError> {
        Ok(XskRx { sock: XskSocket::open(ifname, queue, cfg, true, false)?, got: 0, next: 0 })
    }

    /// The socket.
    pub fn socket(&self) -> &XskSocket {
        &self.sock
    }

    /// The next [`XskRx::next_frame`] starts a new batch.
    pub fn at_batch_start(&self) -> bool {
        self.next == self.got
    }

    fn recycle(&mut self) {
        let Some(rx) = self.sock.rx.as_mut() else { return };
        for i in 0..self.got {
            let a = rx.read(i).addr;
            self.sock.free.push(frame_of(self.sock.unaligned, self.sock.frame_size, a));
        }
        rx.release(self.got);
        self.got = 0;
        self.next = 0;
        self.sock.refill(u32::MAX);
    }

    /// The next received frame, or `None` when the ring holds nothing now.
    /// The frame stays valid until the next call.
    pub fn next_frame(&mut self) -> Option<&[u8]> {
        loop {
            if self.next == self.got {
                if self.got > 0 {
                    self.recycle();
                }
                let batch = self.sock.batch;
                let rx = self.sock.rx.as_mut()?;
                self.got = rx.ready(batch);
                if self.got == 0 {
                    if self.sock.fill.needs_wakeup() {
                        self.sock.kick_rx();
                    }
                    return None;
                }
            }
            let d = self.sock.rx.as_ref()?.read(self.next);
            self.next += 1;
            // A descriptor outside the UMEM would be a kernel bug: skip it.
            if self.sock.data(&d).is_some() {
                return self.sock.data(&d);
            }
        }
    }
}

/// The transmit side of a socket: each batch is copied into free UMEM
/// frames, put on the TX ring with one producer update, and sent with one
/// kick (copy mode sends in the kick; the loop bounds the retries).
pub struct XskTx {
    sock: XskSocket,
}

impl XskTx {
    /// A transmitting socket on `queue` of `ifname`.
    pub fn open(ifname: &str, queue: u32, cfg: XskConfig) -> Result<Self, XskError> {
        Ok(XskTx { sock: XskSocket::open(ifname, queue, cfg, false, true)? })
    }

    /// The socket.
    pub fn socket(&self) -> &XskSocket {
        &self.sock
    }

    /// Sends `frames` as one batch; returns how many were handed to the
    /// kernel (a prefix of them: the rest found no room, or did not fit a
    /// frame). An error only if none was.
    pub fn send<'a>(&mut self, frames: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
        self.sock.reap();
        let fs = self.sock.frame_size as usize;
        let mut count = 0usize;
        let mut posted = 0u32;
        let mut err = None;
        for f in frames {
            if f.len() > fs {
                break;
            }
            let room = self.sock.tx.as_mut().map_or(0, |t| t.free(posted + 1));
            if self.sock.free.is_empty() || room < posted + 1 {
                // Send what is posted; finished frames come back meanwhile.
                if let Err(e) = self.flush_ring(posted) {
                    err = Some(e);
                    break;
                }
                posted = 0;
                self.sock.reap();
                let room = self.sock.tx.as_mut().map_or(0, |t| t.free(1));
                if self.sock.free.is_empty() || room < 1 {
                    break;
                }
            }
            let a = self.sock.free.pop().expect("checked above");
            // SAFETY: frame `a` is ours (from the free list), inside the
            // UMEM, and f fits in it (checked above).
            unsafe { std::ptr::copy_nonoverlapping(f.as_ptr(), self.sock.umem.ptr.add(a as usize), f.len()) };
            let tx = self.sock.tx.as_mut().expect("a TX socket has a TX ring");
            tx.write(posted, libc::xdp_desc { addr: a, len: f.len() as u32, options: 0 });
            posted += 1;
            count += 1;
        }
        if let Err(e) = self.flush_ring(posted) {
            err.get_or_insert(e);
        }
        match err {
            Some(e) if count == 0 => Err(e),
            _ => Ok(count),
        }
    }

    /// Publishes `n` written TX descriptors and kicks the kernel until the
    /// ring is drained or a bounded number of kicks made no progress.
    fn flush_ring(&mut self, n: u32) -> io::Result<()> {
        let Some(tx) = self.sock.tx.as_mut() else { return Ok(()) };
        if n > 0 {
            tx.submit(n);
        }
        let mut stalled = 0;
        loop {
            let before = self.sock.tx.as_ref().map_or(0, |t| t.outstanding());
            if before == 0 {
                return Ok(());
            }
            let must_kick =
                self.sock.mode == XskMode::Copy || self.sock.tx.as_ref().is_some_and(|t| t.needs_wakeup());
            if must_kick {
                self.sock.kick_tx()?;
            }
            self.sock.reap();
            let after = self.sock.tx.as_ref().map_or(0, |t| t.outstanding());
            if after >= before {
                stalled += 1;
                if stalled > 64 {
                    // The rest stays on the ring and goes with a later kick.
                    return Ok(());
                }
                std::thread::yield_now();
            } else {
                stalled = 0;
            }
        }
    }

    /// Sends what is still on the TX ring and waits (at most `limit`) for
    /// the kernel to complete every frame; returns how many did not.
    pub fn drain(&mut self, limit: std::time::Duration) -> u32 {
        let t = std::time::Instant::now();
        let total = self.sock.frames;
        loop {
            let _ = self.flush_ring(0);
            self.sock.reap();
            let in_kernel = total.saturating_sub(self.sock.free.len() as u32);
            if in_kernel == 0 || t.elapsed() > limit {
                return in_kernel;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// The XDP redirect program attached to one interface (natively, in the
/// driver), with its `XSKMAP`. Detached when dropped (aya holds the
/// attachment as a link owned by this value; the kernel also detaches it
/// when the process exits).
pub struct XdpProgram {
    bpf: aya::Ebpf,
    ifname: String,
}

impl XdpProgram {
    /// Loads `bpf/xsk_redirect.bpf.c` and attaches it to `ifname` in driver
    /// mode. Errors: a bad name, no privileges, no AF_XDP in the kernel, a
    /// driver without native XDP: one clear [`XskError`] each.
    pub fn attach(ifname: &str) -> Result<Self, XskError> {
        ifindex(ifname)?;
        // Permission and kernel support first, with the clearest errors.
        drop(xdp_socket()?);
        let mut bpf = ebpf::load(PROGRAM).map_err(|e| match &e {
            EbpfError::Load { source, .. } => match find_io_error(source.as_ref()) {
                Some(io) if errno_is(&io, &[libc::EPERM, libc::EACCES]) => XskError::NotPermitted(io),
                _ => XskError::Program(e),
            },
            _ => XskError::Program(e),
        })?;
        let prog_err = |what: &'static str, e: aya::programs::ProgramError| {
            let io = find_io_error(&e).unwrap_or_else(|| io::Error::other(e.to_string()));
            XskError::Sys(what, io)
        };
        let prog: &mut aya::programs::Xdp = bpf
            .program_mut(PROG_FN)
            .ok_or_else(|| XskError::Sys("finding the XDP program", io::Error::other(PROG_FN)))?
            .try_into()
            .map_err(|e| prog_err("the redirect program is not an XDP program", e))?;
        prog.load().map_err(|e| match find_io_error(&e) {
            Some(io) if errno_is(&io, &[libc::EPERM, libc::EACCES]) => XskError::NotPermitted(io),
            _ => prog_err("loading the XDP program (verifier)", e),
        })?;
        prog.attach(ifname, aya::programs::XdpFlags::DRV_MODE).map_err(|e| match find_io_error(&e) {
            Some(io) if errno_is(&io, &[libc::EOPNOTSUPP, libc::ENOTSUP]) => {
                XskError::NoXdp { ifname: ifname.into(), error: io }
            }
            Some(io) if errno_is(&io, &[libc::EPERM, libc::EACCES]) => XskError::NotPermitted(io),
            _ => prog_err("attaching the XDP program", e),
        })?;
        Ok(XdpProgram { bpf, ifname: ifname.into() })
    }

    /// The interface it is attached to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Directs the frames of `sock`'s queue into `sock`.
    pub fn register(&mut self, sock: &XskSocket) -> Result<(), XskError> {
        let map = self
            .bpf
            .map_mut(MAP)
            .ok_or_else(|| XskError::Sys("finding the XSKMAP", io::Error::other(MAP)))?;
        let mut xsks: aya::maps::XskMap<_> = aya::maps::XskMap::try_from(map)
            .map_err(|e| XskError::Sys("opening the XSKMAP", io::Error::other(e.to_string())))?;
        xsks.set(sock.queue(), sock.fd(), 0).map_err(|e| {
            XskError::Sys(
                "adding the socket to the XSKMAP",
                find_io_error(&e).unwrap_or_else(|| io::Error::other(e.to_string())),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_named() {
        let e = XskRx::open("nosuchif0xyz", 0, XskConfig::default()).err().unwrap();
        assert!(e.to_string().contains("no such interface: nosuchif0xyz"), "{e}");
        let e = XskRx::open("a/b", 0, XskConfig::default()).err().unwrap();
        assert!(e.to_string().contains("bad interface name"), "{e}");
        let e = XskRx::open("lo", 7, XskConfig::default()).err().unwrap();
        assert!(e.to_string().contains("no queue 7"), "{e}");
        let e = XskRx::open("lo", 0, XskConfig { frame_size: 1024, ..Default::default() }).err().unwrap();
        assert!(e.to_string().contains("frame size 1024"), "{e}");
    }

    #[test]
    fn loss_reasons_count_each_frame_once() {
        let s = XskStats { rx_dropped: 10, rx_ring_full: 3, rx_fill_ring_empty: 4, ..Default::default() };
        let r = s.rx_loss_reasons();
        assert_eq!(r.iter().map(|x| x.1).sum::<u64>(), s.rx_lost());
        assert_eq!(r, [("xdp_rx_ring_full", 3), ("xdp_fill_ring_empty", 4), ("xdp_rx_dropped", 6)]);
    }
}
