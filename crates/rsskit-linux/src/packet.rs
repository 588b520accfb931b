//! AF_PACKET sockets: a TPACKET_V3 receive ring (memory shared with the
//! kernel, frames read in place) with optional fanout, and a transmit
//! socket that sends a batch with one `sendmmsg`. The data plane wraps
//! these as its `Source` and `Sink`. [`QueueCapture`] is one ring per RX
//! queue in a `PACKET_FANOUT_QM` group: each frame with the queue the driver
//! recorded for it and the kernel's `rxhash` (`rsskit check --live`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const PACKET_OUTGOING: u8 = 4;
/// `tp_feature_req_word` bit: fill `tp_rxhash` in every frame header.
const TP_FT_REQ_FILL_RXHASH: u32 = 1;
/// Fanout flag: the kernel picks a group id no one uses (read back with getsockopt).
const PACKET_FANOUT_FLAG_UNIQUEID: libc::c_int = 0x2000;

/// Why an AF_PACKET socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// The name cannot be an interface name.
    #[error("bad interface name {0:?}")]
    BadName(String),
    /// No interface has this name.
    #[error("no such interface: {0}")]
    NoSuchInterface(String),
    /// The caller lacks CAP_NET_RAW.
    #[error("AF_PACKET sockets need CAP_NET_RAW (run as root): {0}")]
    NotPermitted(io::Error),
    /// A system call failed; the string says which step.
    #[error("{0}: {1}")]
    Sys(&'static str, io::Error),
}

/// Ring geometry.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks in the ring.
    pub block_count: u32,
    /// Frame slot size hint for the kernel (V3 packs frames, this bounds snaplen).
    pub frame_size: u32,
    /// Milliseconds after which the kernel hands over a partly filled block.
    pub block_timeout_ms: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig { block_size: 1 << 18, block_count: 16, frame_size: 2048, block_timeout_ms: 2 }
    }
}

/// The index of interface `name`, or a clear error.
pub fn ifindex(name: &str) -> Result<u32, PacketError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(PacketError::BadName(name.to_string()));
    }
    let c = CString::new(name).map_err(|_| PacketError::BadName(name.to_string()))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(PacketError::NoSuchInterface(name.to_string()));
    }
    Ok(idx)
}

fn packet_socket(proto: u16) -> Result<OwnedFd, PacketError> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto.to_be()))
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
            return Err(PacketError::NotPermitted(e));
        }
        return Err(PacketError::Sys("cannot open an AF_PACKET socket", e));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
    what: &'static str,
) -> Result<(), PacketError> {
    crate::socket::setsockopt(fd.as_raw_fd(), level, name, v).map_err(|e| PacketError::Sys(what, e))
}

fn bind(fd: &OwnedFd, ifindex: u32, proto: u16) -> Result<(), PacketError> {
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(PacketError::Sys("binding the AF_PACKET socket", io::Error::last_os_error()));
    }
    Ok(())
}

/// A fanout group to create or join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// Join (or create) the group with this id.
    Join(u16),
    /// Create a group with an id no one uses ([`RxRing::fanout_group`] reads it).
    NewUnique,
}

/// How a fanout group spreads frames over its sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutMode {
    /// By flow hash (`PACKET_FANOUT_HASH`).
    Hash,
    /// By the RX queue the driver recorded (`PACKET_FANOUT_QM`): socket
    /// `queue % members`.
    QueueMapping,
}

/// How [`RxRing::open_with`] sets a ring up.
#[derive(Debug, Clone, Copy, Default)]
pub struct RxOptions {
    /// The fanout group and mode, if any.
    pub fanout: Option<(Fanout, FanoutMode)>,
    /// Ask the kernel to fill `tp_rxhash` ([`RxFrame::rxhash`]).
    pub rxhash: bool,
    /// Accept no frame until [`RxRing::resume`].
    pub paused: bool,
}

/// One received frame in the ring.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The captured bytes (up to the ring's block size).
    pub data: &'a [u8],
    /// Kernel receive timestamp, ns.
    pub ts_ns: u64,
    /// The frame's length on the wire (more than `data` when cut).
    pub wire_len: u32,
    /// `skb_get_hash()` of the frame: the NIC's hash where the driver
    /// reports one with an L4 type, else the kernel's own flow hash. 0
    /// unless the ring was opened with [`RxOptions::rxhash`].
    pub rxhash: u32,
}

/// A classic BPF program that accepts nothing (`ret #0`).
const DROP_ALL: [libc::sock_filter; 1] = [libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0 }];

/// Attaches `prog` as the socket filter, or detaches the filter (`None`).
fn set_filter(fd: &OwnedFd, prog: Option<&[libc::sock_filter]>) -> Result<(), PacketError> {
    match prog {
        Some(p) => {
            let fprog =
                libc::sock_fprog { len: p.len() as u16, filter: p.as_ptr() as *mut libc::sock_filter };
            // The kernel copies the program during the call.
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog, "SO_ATTACH_FILTER")
        }
        None => {
            let zero: libc::c_int = 0;
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &zero, "SO_DETACH_FILTER")
        }
    }
}

/// A TPACKET_V3 receive ring on one interface.
pub struct RxRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    cfg: RingConfig,
    /// Current block, and position in it.
    block: u32,
    pkt_left: u32,
    pkt_off: usize,
    /// The frame returned last is inside the current block; the block is
    /// released on the call after its last frame.
    release_pending: bool,
}

// SAFETY: the mapping is owned by this value alone (no aliasing handles);
// moving it to another thread moves sole access with it.
unsafe impl Send for RxRing {}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: map/map_len come from our successful mmap.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

impl RxRing {
    /// Opens a ring on `ifname`; joins fanout group `fanout` (hash mode) if given.
    pub fn open(ifname: &str, cfg: RingConfig, fanout: Option<u16>) -> Result<Self, PacketError> {
        let fanout = fanout.map(|g| (Fanout::Join(g), FanoutMode::Hash));
        RxRing::open_with(ifname, cfg, &RxOptions { fanout, ..RxOptions::default() })
    }

    /// Opens a ring on `ifname` with `opts`.
    pub fn open_with(ifname: &str, cfg: RingConfig, opts: &RxOptions) -> Result<Self, PacketError> {
        let idx = ifindex(ifname)?;
        let proto = libc::ETH_P_ALL as u16;
        let fd = packet_socket(proto)?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V3, "PACKET_VERSION TPACKET_V3")?;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_count,
            tp_frame_size: cfg.frame_size,
            tp_frame_nr: cfg.block_size / cfg.frame_size * cfg.block_count,
            tp_retire_blk_tov: cfg.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: if opts.rxhash { TP_FT_REQ_FILL_RXHASH } else { 0 },
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        let map_len = cfg.block_size as usize * cfg.block_count as usize;
        // SAFETY: mapping the ring the kernel just created for this fd.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED can fail on RLIMIT_MEMLOCK: retry without it.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(PacketError::Sys("mmap of the AF_PACKET ring", io::Error::last_os_error()));
            }
            m
        } else {
            map
        };
        let s = RxRing {
            fd,
            map: map as *mut u8,
            map_len,
            cfg,
            block: 0,
            pkt_left: 0,
            pkt_off: 0,
            release_pending: false,
        };
        // Our own transmissions (when in and out are the same interface) are not input.
        let one: libc::c_int = 1;
        let _ =
            setsockopt(&s.fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one, "PACKET_IGNORE_OUTGOING");
        if opts.paused {
            // Accepts nothing until `resume` (so a fanout group can be
            // completed before any frame is spread over a partial one).
            set_filter(&s.fd, Some(&DROP_ALL))?;
        }
        bind(&s.fd, idx, proto)?;
        if let Some((group, mode)) = opts.fanout {
            let mode = match mode {
                FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
                FanoutMode::QueueMapping => libc::PACKET_FANOUT_QM,
            } as libc::c_int;
            let arg = match group {
                Fanout::Join(g) => i32::from(g) | (mode << 16),
                Fanout::NewUnique => (mode | PACKET_FANOUT_FLAG_UNIQUEID) << 16,
            };
            setsockopt(&s.fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg, "PACKET_FANOUT")?;
        }
        Ok(s)
    }

    /// The id of the fanout group this socket is in (`None`: in none).
    pub fn fanout_group(&self) -> Option<u16> {
        let mut v: libc::c_int = 0;
        crate::socket::getsockopt_into(self.fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &mut v)
            .ok()?;
        // id in the low 16 bits, mode and flags above; 0 when not in a group.
        (v != 0).then_some((v & 0xffff) as u16)
    }

    /// Starts accepting frames on a ring opened `paused`.
    pub fn resume(&self) -> Result<(), PacketError> {
        set_filter(&self.fd, None)
    }

    fn block_ptr(&self, b: u32) -> *mut u8 {
        // SAFETY: b < block_count, so the offset is inside the mapping.
        unsafe { self.map.add(b as usize * self.cfg.block_size as usize) }
    }

    fn read_u32(p: *const u8, off: usize) -> u32 {
        // SAFETY: callers pass offsets inside the block header / frame
        // header the kernel wrote; volatile because the kernel writes the
        // ring concurrently.
        unsafe { core::ptr::read_volatile(p.add(off) as *const u32) }
    }

    fn release_block(&mut self) {
        let bp = self.block_ptr(self.block);
        fence(Ordering::Release);
        // SAFETY: block_status is at offset 8 of tpacket_block_desc; handing
        // the block back to the kernel is a store of TP_STATUS_KERNEL.
        unsafe { core::ptr::write_volatile(bp.add(8) as *mut u32, TP_STATUS_KERNEL) };
        self.block = (self.block + 1) % self.cfg.block_count;
        self.release_pending = false;
    }

    /// Frames the kernel dropped since the last call (its counters reset on read).
    pub fn take_drops(&self) -> u64 {
        let mut st = libc::tpacket_stats_v3 { tp_packets: 0, tp_drops: 0, tp_freeze_q_cnt: 0 };
        match crate::socket::getsockopt_into(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st,
        ) {
            Ok(()) => u64::from(st.tp_drops),
            Err(_) => 0,
        }
    }

    /// The next received frame and its kernel timestamp (ns), or `None`
    /// when the ring holds nothing now. The frame stays valid until the
    /// next call (its block goes back to the kernel only then).
    pub fn next_frame(&mut self) -> Option<(&[u8], u64)> {
        self.next_rx().map(|f| (f.data, f.ts_ns))
    }

    /// The next received frame with its header fields (see [`RxRing::next_frame`]).
    pub fn next_rx(&mut self) -> Option<RxFrame<'_>> {
        loop {
            if self.pkt_left == 0 {
                if self.release_pending {
                    self.release_block();
                }
                let bp = self.block_ptr(self.block);
                let status = Self::read_u32(bp, 8);
                if status & TP_STATUS_USER == 0 {
                    return None;
                }
                fence(Ordering::Acquire);
                self.pkt_left = Self::read_u32(bp, 12);
                self.pkt_off = Self::read_u32(bp, 16) as usize;
                self.release_pending = true;
                if self.pkt_left == 0 {
                    continue;
                }
            }
            let bp = self.block_ptr(self.block);
            let bs = self.cfg.block_size as usize;
            if self.pkt_off + 32 > bs {
                // Corrupt offsets: give the block back.
                self.pkt_left = 0;
                continue;
            }
            // SAFETY: pkt_off < block_size (checked), inside the mapping.
            let hp = unsafe { bp.add(self.pkt_off) };
            let next = Self::read_u32(hp, 0) as usize;
            let sec = Self::read_u32(hp, 4);
            let nsec = Self::read_u32(hp, 8);
            let snaplen = Self::read_u32(hp, 12) as usize;
            let wire_len = Self::read_u32(hp, 16);
            // hv1.tp_rxhash (filled when the ring asked for it; else 0).
            let rxhash = Self::read_u32(hp, 28);
            // SAFETY: tp_mac (u16 at 24) and sll_pkttype (sockaddr_ll after
            // the 48-byte aligned header, +10) are inside the frame header.
            let (mac, pkttype) = unsafe {
                (
                    core::ptr::read_volatile(hp.add(24) as *const u16) as usize,
                    core::ptr::read_volatile(hp.add(48 + 10)),
                )
            };
            self.pkt_left -= 1;
            self.pkt_off += next;
            if self.pkt_off.saturating_sub(next) + mac + snaplen > bs || pkttype == PACKET_OUTGOING {
                continue;
            }
            // SAFETY: the frame bytes lie inside the block (checked above);
            // the kernel does not touch the block until we release it, which
            // happens only on a later call (after this borrow ends).
            let data = unsafe { core::slice::from_raw_parts(hp.add(mac), snaplen) };
            let ts_ns = u64::from(sec) * 1_000_000_000 + u64::from(nsec);
            return Some(RxFrame { data, ts_ns, wire_len, rxhash });
        }
    }
}

/// Members of a `PACKET_FANOUT_QM` group over `queues` RX queues. The
/// kernel sends a frame to socket `skb_get_queue_mapping() % m`: the raw
/// `queue_mapping`, which a driver that records RX queue `q` sets to `q + 1`
/// (`skb_record_rx_queue`), and which stays 0 when it records none. With
/// `queues + 1` members, socket 0 gets the frames without a queue and
/// socket `q + 1` those of queue `q` (measured in the QEMU lab: with one
/// member per queue every virtio-net frame showed up one queue too far, and
/// queue 3's on a socket of its own).
pub fn qm_members(queues: usize) -> usize {
    queues + 1
}

/// Most RX queues [`QueueCapture`] opens rings for.
pub const MAX_CAPTURE_QUEUES: usize = 1024;

/// One TPACKET_V3 ring per RX queue of an interface, all in one
/// `PACKET_FANOUT_QM` group (ring `q + 1` gets the frames of queue `q`),
/// plus ring 0 for frames whose driver recorded no queue (see
/// [`qm_members`]). Every ring asks for `tp_rxhash`. Receiving is a
/// copy: the stack still gets every frame. The group is complete before
/// any ring accepts a frame, so no frame is spread over a partial group.
pub struct QueueCapture {
    rings: Vec<RxRing>,
    queues: usize,
}

impl QueueCapture {
    /// Opens the rings on `ifname` for `queues` RX queues, `cfg` each.
    pub fn open(ifname: &str, queues: usize, cfg: RingConfig) -> Result<Self, PacketError> {
        if queues == 0 || queues > MAX_CAPTURE_QUEUES {
            return Err(PacketError::Sys(
                "capturing per RX queue",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{queues} RX queues (1-{MAX_CAPTURE_QUEUES} supported)"),
                ),
            ));
        }
        let members = qm_members(queues);
        let mut rings: Vec<RxRing> = Vec::with_capacity(members);
        for _ in 0..members {
            let group = match rings.first() {
                None => Fanout::NewUnique,
                Some(r) => Fanout::Join(r.fanout_group().ok_or_else(|| {
                    PacketError::Sys(
                        "reading the fanout group id",
                        io::Error::other("the first socket is in no group"),
                    )
                })?),
            };
            let opts =
                RxOptions { fanout: Some((group, FanoutMode::QueueMapping)), rxhash: true, paused: true };
            rings.push(RxRing::open_with(ifname, cfg, &opts)?);
        }
        for r in &rings {
            r.resume()?;
        }
        Ok(QueueCapture { rings, queues })
    }

    /// The RX queues captured.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// The rings; see [`QueueCapture::queue_of`].
    pub fn rings_mut(&mut self) -> &mut [RxRing] {
        &mut self.rings
    }

    /// The rings' descriptors (to wait on).
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.rings.iter().map(|r| r.fd.as_raw_fd()).collect()
    }

    /// The RX queue of ring `i`'s frames; `None`: no queue was recorded
    /// (ring 0, see [`qm_members`]).
    pub fn queue_of(&self, ring: usize) -> Option<u16> {
        ring.checked_sub(1).filter(|&q| q < self.queues).and_then(|q| u16::try_from(q).ok())
    }

    /// Frames the kernel dropped on every ring since the last call (ring full).
    pub fn take_drops(&self) -> u64 {
        self.rings.iter().map(RxRing::take_drops).sum()
    }
}

/// Sends frames on one interface with `sendmmsg` (one syscall per batch).
pub struct TxSocket {
    fd: OwnedFd,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: iovs/hdrs hold raw pointers only during send(); between calls they
// are dead scratch space.
unsafe impl Send for TxSocket {}

impl TxSocket {
    /// A transmit socket bound to `ifname`.
    pub fn open(ifname: &str) -> Result<Self, PacketError> {
        let idx = ifindex(ifname)?;
        // Protocol 0: transmit only, receives nothing.
        let fd = packet_socket(0)?;
        bind(&fd, idx, 0)?;
        Ok(TxSocket { fd, iovs: Vec::new(), hdrs: Vec::new() })
    }

    /// Sends `frames` as one batch; returns how many were sent (an error
    /// only if none was).
    pub fn send<'a>(&mut self, frames: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
        self.iovs.clear();
        self.hdrs.clear();
        for f in frames {
            self.iovs.push(libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() });
        }
        let count = self.iovs.len();
        if count == 0 {
            return Ok(0);
        }
        for i in 0..count {
            // SAFETY: msghdr is plain data; zero is a valid empty header.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        let mut sent = 0usize;
        while sent < count {
            // SAFETY: hdrs[sent..] point at iovecs over frames that live for this call.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr().add(sent),
                    (count - sent) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if sent == 0 {
                    return Err(e);
                }
                break;
            }
            if n == 0 {
                break;
            }
            sent += n as usize;
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names() {
        assert!(ifindex("").unwrap_err().to_string().contains("bad interface name"));
        assert!(ifindex("a/b").unwrap_err().to_string().contains("bad interface name"));
        assert!(ifindex("nosuchif0xyz").unwrap_err().to_string().contains("no such interface: nosuchif0xyz"));
        assert!(ifindex("lo").unwrap() > 0);
    }

    #[test]
    fn unrecorded_frames_get_a_socket_of_their_own() {
        // queue_mapping 0 (none recorded) -> socket 0; queue q (mapping q + 1) -> socket q + 1.
        for q in 1..=MAX_CAPTURE_QUEUES {
            let m = qm_members(q);
            assert_eq!(0 % m, 0);
            assert!((0..q).all(|x| (x + 1) % m == x + 1), "{q} queues: {m} members");
        }
        assert_eq!(qm_members(4), 5);
    }
}
