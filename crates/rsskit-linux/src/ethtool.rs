//! The ethtool ioctl (`SIOCETHTOOL`) for what RSS needs: the hash key,
//! indirection table and hash function (`ETHTOOL_GRSSH`, falling back to
//! `ETHTOOL_GRXFHINDIR`), the fields hashed per flow type (`ETHTOOL_GRXFH`),
//! channel counts (`ETHTOOL_GCHANNELS`) and the driver name
//! (`ETHTOOL_GDRVINFO`); flow rules and RSS contexts in [`rxnfc`].
//!
//! A driver that does not implement a query (veth and lo have no RSS) gives
//! [`Reported::Unsupported`], not an error: callers show it and go on.
//!
//! The C structs are mirrored with `#[repr(C)]` from `<linux/ethtool.h>`;
//! their sizes are checked in the tests against the header's.

use serde::Serialize;
use socket2::{Domain, Socket, Type};
use std::fmt;
use std::io;
use std::os::fd::AsRawFd;

pub mod params;
pub mod rxnfc;

// <linux/sockios.h>, <linux/ethtool.h>
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRXFH: u32 = 0x29;
const ETHTOOL_SRXFH: u32 = 0x2a;
const ETHTOOL_GRXFHINDIR: u32 = 0x38;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;
const ETHTOOL_GRSSH: u32 = 0x46;
const ETHTOOL_SRSSH: u32 = 0x47;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// `indir_size` of an `ETHTOOL_SRSSH` request that leaves the table alone
/// (0 would reset it to the driver's default).
pub const ETH_RXFH_INDIR_NO_CHANGE: u32 = 0xffff_ffff;
/// `input_xfrm` of an `ETHTOOL_SRSSH` request that leaves the transform
/// alone. Kernels since 6.8 read 0 there as "no transform": a table or key
/// write with 0 would turn a NIC's symmetric hashing off (the old-ethtool
/// incompatibility reported on netdev in 2024). Kernels before 6.8 refuse
/// anything but 0 in that byte (`rsvd8[0]`), so `set_rss` retries with 0.
pub const RXH_XFRM_NO_CHANGE: u8 = 0xff;

/// `RXH_*` bits of `ethtool_rxnfc.data` for `ETHTOOL_GRXFH`.
pub mod rxh {
    /// The destination MAC address is hashed.
    pub const L2DA: u64 = 1 << 1;
    /// The VLAN tag is hashed.
    pub const VLAN: u64 = 1 << 2;
    /// The L3 protocol number is hashed.
    pub const L3_PROTO: u64 = 1 << 3;
    /// The IP source address is hashed.
    pub const IP_SRC: u64 = 1 << 4;
    /// The IP destination address is hashed.
    pub const IP_DST: u64 = 1 << 5;
    /// L4 bytes 0-1 (the source port) are hashed.
    pub const L4_B_0_1: u64 = 1 << 6;
    /// L4 bytes 2-3 (the destination port) are hashed.
    pub const L4_B_2_3: u64 = 1 << 7;
    /// Packets of this flow type are dropped, not hashed.
    pub const DISCARD: u64 = 1 << 31;
}

/// A flow type of `ETHTOOL_GRXFH` (`TCP_V4_FLOW`...), named as `ethtool -n
/// IF rx-flow-hash NAME` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowType {
    /// The `ethtool` name (`tcp4`, `udp6`...).
    pub name: &'static str,
    /// The kernel's `*_FLOW` constant.
    pub code: u32,
}

/// The flow types queried: the six RSS hash types plus SCTP.
pub const FLOW_TYPES: [FlowType; 8] = [
    FlowType { name: "tcp4", code: 0x01 },
    FlowType { name: "udp4", code: 0x02 },
    FlowType { name: "sctp4", code: 0x03 },
    FlowType { name: "ip4", code: 0x10 },
    FlowType { name: "tcp6", code: 0x05 },
    FlowType { name: "udp6", code: 0x06 },
    FlowType { name: "sctp6", code: 0x07 },
    FlowType { name: "ip6", code: 0x11 },
];

// ---------------------------------------------------------------- C structs

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on LP64).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 24 - std::mem::size_of::<*mut libc::c_void>()],
}

/// `struct ethtool_rxfh` (header only; `rss_config[]` follows it).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolRxfh {
    cmd: u32,
    rss_context: u32,
    indir_size: u32,
    key_size: u32,
    hfunc: u8,
    /// `rsvd8[0]` is `input_xfrm` on kernels >= 6.8.
    input_xfrm: u8,
    rsvd8: [u8; 2],
    rsvd32: u32,
}

/// `struct ethtool_rxfh_indir` (header only; `ring_index[]` follows it).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolRxfhIndir {
    cmd: u32,
    size: u32,
}

/// `struct ethtool_rxnfc`: `cmd`, `flow_type`, `data`, then the flow spec and
/// rule fields this module does not use, kept as bytes so the kernel may
/// copy the whole struct (192 bytes).
#[repr(C)]
struct EthtoolRxnfc {
    cmd: u32,
    flow_type: u32,
    data: u64,
    rest: [u8; 176],
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolChannels {
    cmd: u32,
    ch: Channels,
}

/// Channel counts and maxima, as `ethtool -l` shows them (the fields of
/// `struct ethtool_channels` after `cmd`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Serialize)]
pub struct Channels {
    /// Most RX-only channels the device supports.
    pub max_rx: u32,
    /// Most TX-only channels.
    pub max_tx: u32,
    /// Most "other" (link, mailbox) channels.
    pub max_other: u32,
    /// Most combined (RX+TX) channels.
    pub max_combined: u32,
    /// RX-only channels in use.
    pub rx_count: u32,
    /// TX-only channels in use.
    pub tx_count: u32,
    /// Other channels in use.
    pub other_count: u32,
    /// Combined channels in use: the usual count of RSS queues.
    pub combined_count: u32,
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

// ---------------------------------------------------------------- results

/// The answer to one query: the data, or the driver's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported<T> {
    /// The driver answered.
    Supported(T),
    /// The driver does not implement the query (`EOPNOTSUPP`), or refused it
    /// for another reason (the reason then names the errno).
    Unsupported {
        /// The errno (or other reason) the query failed with.
        reason: String,
    },
}

impl<T> Reported<T> {
    /// The data, if the driver answered.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Reported::Supported(t) => Some(t),
            Reported::Unsupported { .. } => None,
        }
    }
    /// Why the driver did not answer, if it did not.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Reported::Supported(_) => None,
            Reported::Unsupported { reason } => Some(reason),
        }
    }
}

/// Errors that stop every query on the interface (not a driver refusal).
#[derive(Debug)]
pub enum EthtoolError {
    /// The interface does not exist (`ENODEV`) or its name is invalid.
    NoSuchInterface(String),
    /// The ethtool socket could not be opened.
    Socket(io::Error),
}

impl fmt::Display for EthtoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EthtoolError::NoSuchInterface(n) => write!(f, "interface '{n}' does not exist"),
            EthtoolError::Socket(e) => write!(f, "opening a socket for the ethtool ioctl: {e}"),
        }
    }
}

impl std::error::Error for EthtoolError {}

/// RSS key, indirection table and hash function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rss {
    /// The hash key; empty when the driver reports only the table.
    pub key: Vec<u8>,
    /// Indirection table: entry i = RX ring of the packets whose
    /// `hash % len` is i.
    pub indir: Vec<u32>,
    /// Hash function names (`toeplitz`, `xor`, `crc32`, or `bit<N>`);
    /// empty when unknown (the `ETHTOOL_GRXFHINDIR` fallback).
    pub hfunc: Vec<String>,
    /// Input transform names (`sym-xor`, `sym-or-xor`); kernels >= 6.8.
    pub input_xfrm: Vec<String>,
    /// Which ioctl answered: `ETHTOOL_GRSSH` or `ETHTOOL_GRXFHINDIR`.
    pub source: &'static str,
}

/// Fields hashed for one flow type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowHash {
    /// The flow type's `ethtool` name (`tcp4`...).
    pub flow: &'static str,
    /// The raw `RXH_*` bitmask.
    pub raw: u64,
    /// Decoded field names: `l2da`, `vlan`, `l3_proto`, `ip_src`, `ip_dst`,
    /// `l4_src_port` (L4 bytes 0-1), `l4_dst_port` (L4 bytes 2-3), `discard`.
    pub fields: Vec<&'static str>,
}

impl FlowHash {
    /// `4-tuple` (addresses + ports), `2-tuple` (addresses), `none`, or
    /// `other` for any other combination.
    pub fn tuple(&self) -> &'static str {
        let four = rxh::IP_SRC | rxh::IP_DST | rxh::L4_B_0_1 | rxh::L4_B_2_3;
        let two = rxh::IP_SRC | rxh::IP_DST;
        let core = self.raw & (four | rxh::L2DA | rxh::VLAN | rxh::L3_PROTO);
        if core == four {
            "4-tuple"
        } else if core == two {
            "2-tuple"
        } else if self.raw == 0 {
            "none"
        } else {
            "other"
        }
    }
}

/// Decodes an `RXH_*` mask into field names.
pub fn rxh_fields(raw: u64) -> Vec<&'static str> {
    [
        (rxh::L2DA, "l2da"),
        (rxh::VLAN, "vlan"),
        (rxh::L3_PROTO, "l3_proto"),
        (rxh::IP_SRC, "ip_src"),
        (rxh::IP_DST, "ip_dst"),
        (rxh::L4_B_0_1, "l4_src_port"),
        (rxh::L4_B_2_3, "l4_dst_port"),
        (rxh::DISCARD, "discard"),
    ]
    .iter()
    .filter(|(b, _)| raw & b != 0)
    .map(|(_, n)| *n)
    .collect()
}

/// Decodes `ETH_RSS_HASH_*` bits.
pub fn hfunc_names(h: u8) -> Vec<String> {
    (0..8)
        .filter(|b| h & (1 << b) != 0)
        .map(|b| match b {
            0 => "toeplitz".to_string(),
            1 => "xor".to_string(),
            2 => "crc32".to_string(),
            b => format!("bit{b}"),
        })
        .collect()
}

/// Decodes `RXH_XFRM_*` bits.
pub fn xfrm_names(x: u8) -> Vec<String> {
    (0..8)
        .filter(|b| x & (1 << b) != 0)
        .map(|b| match b {
            0 => "sym-xor".to_string(),
            1 => "sym-or-xor".to_string(),
            b => format!("bit{b}"),
        })
        .collect()
}

/// The `input_xfrm` byte back from [`xfrm_names`]' names; `None` for a
/// name it never gives.
pub fn xfrm_bits(names: &[String]) -> Option<u8> {
    names.iter().try_fold(0u8, |acc, n| {
        let bit = match n.as_str() {
            "sym-xor" => 0,
            "sym-or-xor" => 1,
            b => b.strip_prefix("bit")?.parse::<u8>().ok().filter(|b| *b < 8)?,
        };
        Some(acc | 1 << bit)
    })
}

// ---------------------------------------------------------------- the handle

/// An ethtool handle on one interface (in the caller's network namespace).
pub struct Ethtool {
    sock: Socket,
    name: [u8; libc::IFNAMSIZ],
    iface: String,
}

fn describe(cmd: &str, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => format!("{cmd}: operation not supported by the driver"),
        _ => format!("{cmd}: {e}"),
    }
}

impl Ethtool {
    /// Opens an `AF_INET` datagram socket for ioctls on `iface`. Does not
    /// check that the interface exists: the first query does.
    pub fn open(iface: &str) -> Result<Ethtool, EthtoolError> {
        if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.as_bytes().contains(&0) {
            return Err(EthtoolError::NoSuchInterface(iface.to_string()));
        }
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..iface.len()].copy_from_slice(iface.as_bytes());
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, None).map_err(EthtoolError::Socket)?;
        Ok(Ethtool { sock, name, iface: iface.to_string() })
    }

    /// Issues `SIOCETHTOOL` with `buf` as the command buffer. `buf` must start
    /// with the ethtool command struct and be as large as the kernel will
    /// write for that command.
    fn ioctl<T>(&self, buf: &mut T) -> io::Result<()> {
        // SAFETY: `buf` is a live, exclusively borrowed buffer of
        // size_of::<T>() bytes. Every caller passes a `T` that holds the
        // complete ethtool struct for its command, sized (for the
        // variable-length commands) from the sizes the kernel reported, so the
        // kernel never writes past it.
        unsafe { self.ioctl_raw((buf as *mut T).cast()) }
    }

    /// Issues `SIOCETHTOOL` with `data` as the ifreq's `ifr_data`.
    ///
    /// # Safety
    /// `data` must point to a live, exclusively borrowed ethtool command
    /// buffer large enough for everything the kernel writes for its command.
    unsafe fn ioctl_raw(&self, data: *mut libc::c_void) -> io::Result<()> {
        let mut ifr =
            IfReq { name: self.name, data, _pad: [0; 24 - std::mem::size_of::<*mut libc::c_void>()] };
        // SAFETY: `ifr` is a valid `struct ifreq` whose name is NUL-terminated
        // and whose `ifr_data` is `data`, valid as the caller guarantees. The
        // fd is a socket we own.
        let rc = unsafe { libc::ioctl(self.sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr as *mut IfReq) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn nodev(&self, e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ENODEV)
    }

    /// The driver name (`ETHTOOL_GDRVINFO`).
    pub fn driver(&self) -> Result<Reported<String>, EthtoolError> {
        // SAFETY: EthtoolDrvinfo is plain old data (integers and byte
        // arrays): all-zero bytes are a valid value.
        let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
        info.cmd = ETHTOOL_GDRVINFO;
        match self.ioctl(&mut info) {
            Ok(()) => {
                let end = info.driver.iter().position(|&b| b == 0).unwrap_or(info.driver.len());
                Ok(Reported::Supported(String::from_utf8_lossy(&info.driver[..end]).into_owned()))
            }
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_GDRVINFO", &e) }),
        }
    }

    /// Channel counts (`ETHTOOL_GCHANNELS`).
    pub fn channels(&self) -> Result<Reported<Channels>, EthtoolError> {
        let mut ch = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..EthtoolChannels::default() };
        match self.ioctl(&mut ch) {
            Ok(()) => Ok(Reported::Supported(ch.ch)),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_GCHANNELS", &e) }),
        }
    }

    /// Sets the channel counts (`ETHTOOL_SCHANNELS`); the maxima in `ch` are
    /// ignored by the kernel. `Unsupported` carries the driver's refusal.
    pub fn set_channels(&self, ch: Channels) -> Result<Reported<()>, EthtoolError> {
        let mut req = EthtoolChannels { cmd: ETHTOOL_SCHANNELS, ch };
        match self.ioctl(&mut req) {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_SCHANNELS", &e) }),
        }
    }

    /// Key, indirection table and hash function: `ETHTOOL_GRSSH`, else the
    /// table alone from `ETHTOOL_GRXFHINDIR`.
    pub fn rss(&self) -> Result<Reported<Rss>, EthtoolError> {
        match self.grssh() {
            // virtio_net without the RSS feature answers with empty sizes.
            Ok(r) if r.indir.is_empty() && r.key.is_empty() => {
                return Ok(Reported::Unsupported {
                    reason: "ETHTOOL_GRSSH: the driver reports no indirection table and no key \
                             (no RSS on this device)"
                        .into(),
                })
            }
            Ok(r) => return Ok(Reported::Supported(r)),
            Err(e) if self.nodev(&e) => return Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => return Ok(Reported::Unsupported { reason: describe("ETHTOOL_GRSSH", &e) }),
        }
        match self.grxfhindir() {
            Ok(r) => Ok(Reported::Supported(r)),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) => {
                Ok(Reported::Unsupported { reason: describe("ETHTOOL_GRSSH and ETHTOOL_GRXFHINDIR", &e) })
            }
        }
    }

    fn grssh(&self) -> io::Result<Rss> {
        self.grssh_context(0)
    }

    /// `ETHTOOL_GRSSH` of RSS context `context` (0: the main table).
    fn grssh_context(&self, context: u32) -> io::Result<Rss> {
        // First ask for the sizes only (indir_size = key_size = 0).
        let mut head = EthtoolRxfh { cmd: ETHTOOL_GRSSH, rss_context: context, ..EthtoolRxfh::default() };
        self.ioctl(&mut head)?;
        let (n_indir, n_key) = (head.indir_size as usize, head.key_size as usize);
        if n_indir > 1 << 16 || n_key > 1 << 12 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "implausible RSS table or key size"));
        }
        let mut buf = rssh_request(n_indir, n_key);
        buf[1] = context;
        self.ioctl_slice(&mut buf)?;
        Ok(decode_rssh(&buf, n_indir, n_key))
    }

    fn grxfhindir(&self) -> io::Result<Rss> {
        let mut head = EthtoolRxfhIndir { cmd: ETHTOOL_GRXFHINDIR, size: 0 };
        self.ioctl(&mut head)?;
        let n = head.size as usize;
        if n > 1 << 16 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "implausible RSS table size"));
        }
        let mut buf = vec![0u32; 2 + n];
        buf[0] = ETHTOOL_GRXFHINDIR;
        buf[1] = n as u32;
        self.ioctl_slice(&mut buf)?;
        Ok(Rss {
            key: Vec::new(),
            indir: buf[2..].to_vec(),
            hfunc: Vec::new(),
            input_xfrm: Vec::new(),
            source: "ETHTOOL_GRXFHINDIR",
        })
    }

    /// The driver's statistics (`ethtool -S`: `ETHTOOL_GSSET_INFO`,
    /// `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`) as (name, value) pairs.
    pub fn stats(&self) -> Result<Reported<Vec<(String, u64)>>, EthtoolError> {
        let fail = |e: io::Error| {
            if self.nodev(&e) {
                Err(EthtoolError::NoSuchInterface(self.iface.clone()))
            } else {
                Ok(Reported::Unsupported { reason: describe("ETHTOOL_GSTATS", &e) })
            }
        };
        // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, u32 data[1].
        let mut info = [0u32; 5];
        info[0] = ETHTOOL_GSSET_INFO;
        let mask = (1u64 << ETH_SS_STATS).to_ne_bytes();
        info[2] = u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]);
        info[3] = u32::from_ne_bytes([mask[4], mask[5], mask[6], mask[7]]);
        if let Err(e) = self.ioctl_slice(&mut info) {
            return fail(e);
        }
        let n = info[4] as usize;
        if info[2] == 0 && info[3] == 0 || n == 0 {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_GSTATS: the driver reports no statistics".into(),
            });
        }
        // Room for twice the count: the kernel writes its count at the time
        // of each call, which could grow between calls (more channels).
        let room = 2 * n + 16;
        // struct ethtool_gstrings: cmd, string_set, len, u8 data[len * 32].
        let mut names = vec![0u32; 3 + room * ETH_GSTRING_LEN / 4];
        names[0] = ETHTOOL_GSTRINGS;
        names[1] = ETH_SS_STATS;
        names[2] = n as u32;
        // SAFETY: `names` is a live, exclusively borrowed buffer with room for
        // `room` (> the count the kernel just reported, twice over) strings
        // after the header; the kernel writes its current count of strings.
        if let Err(e) = unsafe { self.ioctl_raw(names.as_mut_ptr().cast()) } {
            return fail(e);
        }
        // struct ethtool_stats: cmd, n_stats, u64 data[n_stats].
        let mut vals = vec![0u32; 2 + 2 * room];
        vals[0] = ETHTOOL_GSTATS;
        vals[1] = n as u32;
        // SAFETY: as above: room for `room` u64 values after the header.
        if let Err(e) = unsafe { self.ioctl_raw(vals.as_mut_ptr().cast()) } {
            return fail(e);
        }
        let count = (names[2] as usize).min(vals[1] as usize).min(room);
        let bytes: Vec<u8> = names[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let out = (0..count)
            .map(|i| {
                let raw = &bytes[i * ETH_GSTRING_LEN..(i + 1) * ETH_GSTRING_LEN];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(ETH_GSTRING_LEN);
                let lo = vals[2 + 2 * i].to_ne_bytes();
                let hi = vals[3 + 2 * i].to_ne_bytes();
                let v = u64::from_ne_bytes([lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]]);
                (String::from_utf8_lossy(&raw[..end]).into_owned(), v)
            })
            .collect();
        Ok(Reported::Supported(out))
    }

    /// `ioctl` on a variable-length command held in a `u32` buffer.
    fn ioctl_slice(&self, buf: &mut [u32]) -> io::Result<()> {
        // SAFETY: `buf` is a live, exclusively borrowed buffer whose header
        // carries the table and key sizes the kernel reported in the first
        // call, and it is exactly large enough for the header plus those
        // arrays. The kernel rejects (EINVAL) sizes that differ from the
        // device's, so it never writes more than the header says.
        unsafe { self.ioctl_raw(buf.as_mut_ptr().cast()) }
    }

    /// The fields hashed for each of [`FLOW_TYPES`] (`ETHTOOL_GRXFH`).
    /// Unsupported when the driver answers no flow type; flow types it
    /// refuses singly (e.g. SCTP) are left out.
    pub fn flow_hashes(&self) -> Result<Reported<Vec<FlowHash>>, EthtoolError> {
        let mut out = Vec::new();
        let mut first_err = None;
        for ft in FLOW_TYPES {
            let mut nfc = EthtoolRxnfc { cmd: ETHTOOL_GRXFH, flow_type: ft.code, data: 0, rest: [0; 176] };
            match self.ioctl(&mut nfc) {
                Ok(()) => out.push(FlowHash { flow: ft.name, raw: nfc.data, fields: rxh_fields(nfc.data) }),
                Err(e) if self.nodev(&e) => return Err(EthtoolError::NoSuchInterface(self.iface.clone())),
                Err(e) => {
                    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                        // Not implemented at all: no point asking the others.
                        return Ok(Reported::Unsupported { reason: describe("ETHTOOL_GRXFH", &e) });
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        match (out.is_empty(), first_err) {
            (true, Some(e)) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_GRXFH", &e) }),
            _ if out.iter().all(|f| f.raw == 0) => Ok(Reported::Unsupported {
                reason:
                    "ETHTOOL_GRXFH: the driver hashes no fields for any flow type (no RSS on this device)"
                        .into(),
            }),
            _ => Ok(Reported::Supported(out)),
        }
    }
}

impl Ethtool {
    /// Writes the indirection table and/or the key (`ETHTOOL_SRSSH`);
    /// `None` leaves that part as it is. The sizes must be the device's
    /// (as [`Ethtool::rss`] reports them): the kernel refuses others.
    /// A driver without `set_rxfh` (veth, lo) gives
    /// [`Reported::Unsupported`] with the reason.
    pub fn set_rss(&self, indir: Option<&[u32]>, key: Option<&[u8]>) -> Result<Reported<()>, EthtoolError> {
        let mut buf = rssh_set_request(indir, key);
        let mut r = self.ioctl_slice(&mut buf);
        if r.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL)) {
            // A kernel before 6.8: the byte is reserved and must be 0 (a
            // 6.8+ kernel refuses a bad size or ring the same way with 0).
            buf = rssh_set_request(indir, key);
            buf[4] &= !u32::from_ne_bytes([0, 0xff, 0, 0]);
            r = self.ioctl_slice(&mut buf);
        }
        match r {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(Reported::Unsupported {
                reason: format!(
                    "{} (the driver refused the table or key: a ring it does not have, or a size \
                     other than the device's)",
                    describe("ETHTOOL_SRSSH", &e)
                ),
            }),
            Err(e) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_SRSSH", &e) }),
        }
    }
}

impl Ethtool {
    /// Sets the fields hashed for one flow type (`ETHTOOL_SRXFH`; `flow` as
    /// in [`FLOW_TYPES`], `raw` an `RXH_*` mask). A driver that cannot gives
    /// [`Reported::Unsupported`] with the reason.
    pub fn set_flow_hash(&self, flow: &str, raw: u64) -> Result<Reported<()>, EthtoolError> {
        let Some(ft) = FLOW_TYPES.iter().find(|f| f.name == flow) else {
            return Ok(Reported::Unsupported {
                reason: format!("ETHTOOL_SRXFH: unknown flow type '{flow}'"),
            });
        };
        let mut nfc = EthtoolRxnfc { cmd: ETHTOOL_SRXFH, flow_type: ft.code, data: raw, rest: [0; 176] };
        match self.ioctl(&mut nfc) {
            Ok(()) => Ok(Reported::Supported(())),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(Reported::Unsupported {
                reason: format!(
                    "{} (the driver cannot hash these fields for {flow})",
                    describe("ETHTOOL_SRXFH", &e)
                ),
            }),
            Err(e) => Ok(Reported::Unsupported { reason: describe("ETHTOOL_SRXFH", &e) }),
        }
    }
}

/// The `ETHTOOL_SRXFH` request as bytes (`struct ethtool_rxnfc`, 192
/// bytes: `cmd`, `flow_type`, `data` at offset 8, the rest zero).
pub fn srxfh_request(flow_code: u32, raw: u64) -> Vec<u8> {
    let mut b = vec![0u8; std::mem::size_of::<EthtoolRxnfc>()];
    b[0..4].copy_from_slice(&ETHTOOL_SRXFH.to_ne_bytes());
    b[4..8].copy_from_slice(&flow_code.to_ne_bytes());
    b[8..16].copy_from_slice(&raw.to_ne_bytes());
    b
}

/// An `ETHTOOL_SRXFH` request as the kernel reads it: (flow name, mask).
pub fn parse_srxfh_request(b: &[u8]) -> Result<(&'static str, u64), String> {
    if b.len() != std::mem::size_of::<EthtoolRxnfc>() {
        return Err(format!("ETHTOOL_SRXFH request of {} bytes (want 192)", b.len()));
    }
    let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if word(0) != ETHTOOL_SRXFH {
        return Err(format!("command 0x{:x} is not ETHTOOL_SRXFH", word(0)));
    }
    let code = word(4);
    let flow = FLOW_TYPES
        .iter()
        .find(|f| f.code == code)
        .map(|f| f.name)
        .ok_or_else(|| format!("ETHTOOL_SRXFH: unknown flow type {code}"))?;
    let raw = u64::from_ne_bytes(b[8..16].try_into().expect("8 bytes"));
    Ok((flow, raw))
}

/// Encodes field names (as [`rxh_fields`] gives them) back into an `RXH_*` mask.
pub fn rxh_from_names(names: &[&str]) -> Result<u64, String> {
    names.iter().try_fold(0u64, |acc, n| {
        let bit = match *n {
            "l2da" => rxh::L2DA,
            "vlan" => rxh::VLAN,
            "l3_proto" => rxh::L3_PROTO,
            "ip_src" => rxh::IP_SRC,
            "ip_dst" => rxh::IP_DST,
            "l4_src_port" => rxh::L4_B_0_1,
            "l4_dst_port" => rxh::L4_B_2_3,
            "discard" => rxh::DISCARD,
            other => return Err(format!("'{other}' is not a hashed field")),
        };
        Ok(acc | bit)
    })
}

/// The `ETHTOOL_SRSSH` request: header, then the table (when given), then
/// the key bytes (when given), in a u32-aligned buffer. Without a table,
/// `indir_size` is [`ETH_RXFH_INDIR_NO_CHANGE`] and the key follows the
/// header directly, as the kernel reads it; `hfunc` 0 keeps the function.
pub fn rssh_set_request(indir: Option<&[u32]>, key: Option<&[u8]>) -> Vec<u32> {
    let n_indir = indir.map_or(0, <[u32]>::len);
    let n_key = key.map_or(0, <[u8]>::len);
    let mut buf = vec![0u32; RXFH_HDR_WORDS + n_indir + n_key.div_ceil(4)];
    let req = EthtoolRxfh {
        cmd: ETHTOOL_SRSSH,
        indir_size: if indir.is_some() { n_indir as u32 } else { ETH_RXFH_INDIR_NO_CHANGE },
        key_size: n_key as u32,
        input_xfrm: RXH_XFRM_NO_CHANGE,
        ..EthtoolRxfh::default()
    };
    write_header(&mut buf, &req);
    if let Some(t) = indir {
        buf[RXFH_HDR_WORDS..RXFH_HDR_WORDS + n_indir].copy_from_slice(t);
    }
    if let Some(k) = key {
        let mut bytes: Vec<u8> = k.to_vec();
        bytes.resize(n_key.div_ceil(4) * 4, 0);
        for (w, c) in buf[RXFH_HDR_WORDS + n_indir..].iter_mut().zip(bytes.chunks(4)) {
            *w = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
    buf
}

/// A parsed `ETHTOOL_SRSSH` request: (table, key), `None` = unchanged.
pub type SetRequest = (Option<Vec<u32>>, Option<Vec<u8>>);

/// An `ETHTOOL_SRSSH` request as the kernel parses it: (table, key), each
/// `None` when the request leaves it unchanged. Used by the fake driver of
/// test trees (`rsskit_host::sysroot`) and to check [`rssh_set_request`].
pub fn parse_set_request(buf: &[u32]) -> Result<SetRequest, String> {
    if buf.len() < RXFH_HDR_WORDS {
        return Err(format!("ETHTOOL_SRSSH request of {} bytes is shorter than its header", buf.len() * 4));
    }
    let h = read_header(buf);
    if h.cmd != ETHTOOL_SRSSH {
        return Err(format!("command 0x{:x} is not ETHTOOL_SRSSH", h.cmd));
    }
    if h.rss_context != 0 || h.rsvd32 != 0 {
        return Err("ETHTOOL_SRSSH: reserved fields or an RSS context are set".into());
    }
    if h.input_xfrm != RXH_XFRM_NO_CHANGE {
        return Err(format!(
            "ETHTOOL_SRSSH: input_xfrm {:#x} would change the input transform (a 6.8+ kernel reads 0 as off)",
            h.input_xfrm
        ));
    }
    let n_indir = if h.indir_size == ETH_RXFH_INDIR_NO_CHANGE { 0 } else { h.indir_size as usize };
    let n_key = h.key_size as usize;
    if buf.len() < RXFH_HDR_WORDS + n_indir + n_key.div_ceil(4) {
        return Err("ETHTOOL_SRSSH request shorter than its table and key".into());
    }
    if h.indir_size == ETH_RXFH_INDIR_NO_CHANGE && n_key == 0 && h.hfunc == 0 {
        return Err("ETHTOOL_SRSSH request changes nothing (EINVAL)".into());
    }
    let indir = (h.indir_size != ETH_RXFH_INDIR_NO_CHANGE && n_indir > 0)
        .then(|| buf[RXFH_HDR_WORDS..RXFH_HDR_WORDS + n_indir].to_vec());
    let key = (n_key > 0)
        .then(|| buf[RXFH_HDR_WORDS + n_indir..].iter().flat_map(|w| w.to_ne_bytes()).take(n_key).collect());
    Ok((indir, key))
}

const RXFH_HDR_WORDS: usize = std::mem::size_of::<EthtoolRxfh>() / 4;

/// The `ETHTOOL_GRSSH` request for the whole table and key: header,
/// `n_indir` u32s, `n_key` bytes, in a u32-aligned buffer.
fn rssh_request(n_indir: usize, n_key: usize) -> Vec<u32> {
    let mut buf = vec![0u32; RXFH_HDR_WORDS + n_indir + n_key.div_ceil(4)];
    let req = EthtoolRxfh {
        cmd: ETHTOOL_GRSSH,
        indir_size: n_indir as u32,
        key_size: n_key as u32,
        ..EthtoolRxfh::default()
    };
    write_header(&mut buf, &req);
    buf
}

/// Reads the kernel's answer to [`rssh_request`]: the table follows the
/// header, the key bytes follow the table.
fn decode_rssh(buf: &[u32], n_indir: usize, n_key: usize) -> Rss {
    let got = read_header(buf);
    let indir = buf[RXFH_HDR_WORDS..RXFH_HDR_WORDS + n_indir].to_vec();
    let key: Vec<u8> =
        buf[RXFH_HDR_WORDS + n_indir..].iter().flat_map(|w| w.to_ne_bytes()).take(n_key).collect();
    Rss {
        key,
        indir,
        hfunc: hfunc_names(got.hfunc),
        input_xfrm: xfrm_names(got.input_xfrm),
        source: "ETHTOOL_GRSSH",
    }
}

fn write_header(buf: &mut [u32], h: &EthtoolRxfh) {
    buf[0] = h.cmd;
    buf[1] = h.rss_context;
    buf[2] = h.indir_size;
    buf[3] = h.key_size;
    buf[4] = u32::from_ne_bytes([h.hfunc, h.input_xfrm, h.rsvd8[0], h.rsvd8[1]]);
    buf[5] = h.rsvd32;
}

fn read_header(buf: &[u32]) -> EthtoolRxfh {
    let b = buf[4].to_ne_bytes();
    EthtoolRxfh {
        cmd: buf[0],
        rss_context: buf[1],
        indir_size: buf[2],
        key_size: buf[3],
        hfunc: b[0],
        input_xfrm: b[1],
        rsvd8: [b[2], b[3]],
        rsvd32: buf[5],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// Sizes and offsets from <linux/ethtool.h> (x86_64 and aarch64 alike),
    /// as `sizeof`/`offsetof` print them.
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(size_of::<IfReq>(), 40);
        assert_eq!(size_of::<EthtoolRxfh>(), 24);
        assert_eq!(offset_of!(EthtoolRxfh, hfunc), 16);
        assert_eq!(offset_of!(EthtoolRxfh, rsvd32), 20);
        assert_eq!(size_of::<EthtoolRxfhIndir>(), 8);
        assert_eq!(size_of::<EthtoolRxnfc>(), 192);
        assert_eq!(offset_of!(EthtoolRxnfc, data), 8);
        assert_eq!(align_of::<EthtoolRxnfc>(), 8);
        assert_eq!(size_of::<EthtoolChannels>(), 36);
        assert_eq!(offset_of!(EthtoolChannels, ch) + offset_of!(Channels, combined_count), 32);
        assert_eq!(size_of::<EthtoolDrvinfo>(), 196);
        assert_eq!(offset_of!(EthtoolDrvinfo, n_priv_flags), 176);
    }

    #[test]
    fn header_round_trip() {
        let h = EthtoolRxfh {
            cmd: 0x46,
            rss_context: 0,
            indir_size: 128,
            key_size: 40,
            hfunc: 1,
            input_xfrm: 1,
            rsvd8: [0, 0],
            rsvd32: 0,
        };
        let mut buf = [0u32; 6];
        write_header(&mut buf, &h);
        let g = read_header(&buf);
        assert_eq!((g.cmd, g.indir_size, g.key_size, g.hfunc, g.input_xfrm), (0x46, 128, 40, 1, 1));
    }

    /// Fills a request buffer as the kernel does (`copy_to_user` of the
    /// table at `rss_config`, then of the key bytes right after it, then
    /// `hfunc`), and decodes it.
    #[test]
    fn rssh_buffer_layout() {
        let key: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x6d).collect();
        let indir: Vec<u32> = (0..128u32).map(|i| i % 6).collect();
        for n_key in [40usize, 52, 13] {
            let mut buf = rssh_request(indir.len(), n_key);
            assert_eq!(buf.len() * 4, 24 + 128 * 4 + n_key.div_ceil(4) * 4);
            assert_eq!((buf[0], buf[2], buf[3]), (ETHTOOL_GRSSH, 128, n_key as u32));
            assert!(buf[4] == 0 && buf[5] == 0, "reserved fields must be zero");
            let mut bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
            bytes[16] = 1; // hfunc = ETH_RSS_HASH_TOP
            bytes[17] = 1; // input_xfrm = RXH_XFRM_SYM_XOR
            for (i, v) in indir.iter().enumerate() {
                bytes[24 + 4 * i..28 + 4 * i].copy_from_slice(&v.to_ne_bytes());
            }
            let want_key: Vec<u8> = key.iter().cycle().take(n_key).copied().collect();
            bytes[24 + 512..24 + 512 + n_key].copy_from_slice(&want_key);
            for (w, c) in buf.iter_mut().zip(bytes.chunks(4)) {
                *w = u32::from_ne_bytes(c.try_into().unwrap());
            }
            let r = decode_rssh(&buf, 128, n_key);
            assert_eq!(r.indir, indir);
            assert_eq!(r.key, want_key);
            assert_eq!(r.hfunc, vec!["toeplitz"]);
            assert_eq!(r.input_xfrm, vec!["sym-xor"]);
        }
    }

    #[test]
    fn decoders() {
        let four = rxh::IP_SRC | rxh::IP_DST | rxh::L4_B_0_1 | rxh::L4_B_2_3;
        let fh = FlowHash { flow: "tcp4", raw: four, fields: rxh_fields(four) };
        assert_eq!(fh.fields, vec!["ip_src", "ip_dst", "l4_src_port", "l4_dst_port"]);
        assert_eq!(fh.tuple(), "4-tuple");
        let two = rxh::IP_SRC | rxh::IP_DST;
        assert_eq!(FlowHash { flow: "udp4", raw: two, fields: rxh_fields(two) }.tuple(), "2-tuple");
        assert_eq!(FlowHash { flow: "udp4", raw: 0, fields: vec![] }.tuple(), "none");
        assert_eq!(FlowHash { flow: "udp4", raw: rxh::IP_DST, fields: vec![] }.tuple(), "other");
        assert_eq!(hfunc_names(1), vec!["toeplitz"]);
        assert_eq!(hfunc_names(6), vec!["xor", "crc32"]);
        assert_eq!(xfrm_names(1), vec!["sym-xor"]);
        for x in 0..=255u8 {
            assert_eq!(xfrm_bits(&xfrm_names(x)), Some(x));
        }
        assert_eq!(xfrm_bits(&["bit8".to_string()]), None);
    }

    #[test]
    fn loopback_has_no_rss() {
        let e = Ethtool::open("lo").unwrap();
        let rss = e.rss().unwrap();
        let reason = rss.reason().expect("lo must not report RSS");
        assert!(reason.contains("not supported"), "{reason}");
        assert!(e.flow_hashes().unwrap().reason().is_some());
    }

    #[test]
    fn srssh_request_bytes() {
        let table: Vec<u32> = (0..128u32).map(|i| i % 4).collect();
        let key: Vec<u8> = (0..52u8).collect();
        // Table and key: header, 128 words, 13 words of key.
        let buf = rssh_set_request(Some(&table), Some(&key));
        assert_eq!(buf.len(), 6 + 128 + 13);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 0x47);
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 128);
        assert_eq!(u32::from_ne_bytes(bytes[12..16].try_into().unwrap()), 52);
        assert_eq!(bytes[16], 0, "hfunc 0 = no change");
        // input_xfrm (byte 17): no change, not 0 (which 6.8+ reads as "off").
        assert_eq!(bytes[17], RXH_XFRM_NO_CHANGE);
        assert_eq!(u32::from_ne_bytes(bytes[24 + 4 * 5..28 + 4 * 5].try_into().unwrap()), 1);
        assert_eq!(&bytes[24 + 512..24 + 512 + 52], &key[..]);
        assert_eq!(parse_set_request(&buf).unwrap(), (Some(table.clone()), Some(key.clone())));
        // Key only: the table is left alone (not reset), the key follows the header.
        let buf = rssh_set_request(None, Some(&key[..40]));
        assert_eq!(buf[2], ETH_RXFH_INDIR_NO_CHANGE);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[24..64], &key[..40]);
        assert_eq!(parse_set_request(&buf).unwrap(), (None, Some(key[..40].to_vec())));
        // Table only.
        let buf = rssh_set_request(Some(&table), None);
        assert_eq!((buf[2], buf[3]), (128, 0));
        assert_eq!(parse_set_request(&buf).unwrap(), (Some(table), None));
        // Nothing: refused as the kernel does.
        assert!(parse_set_request(&rssh_set_request(None, None)).unwrap_err().contains("changes nothing"));
        assert!(parse_set_request(&[0x46, 0, 0, 0, 0, 0]).is_err());
        // A request that would turn the transform off is refused by the
        // fixture's kernel-side parser, so no test tree hides one.
        let mut buf = rssh_set_request(Some(&[0, 1]), None);
        buf[4] &= !u32::from_ne_bytes([0, 0xff, 0, 0]);
        assert!(parse_set_request(&buf).unwrap_err().contains("input_xfrm 0x0"));
    }

    #[test]
    fn loopback_refuses_srssh() {
        let e = Ethtool::open("lo").unwrap();
        let key = [0x6du8; 40];
        let r = e.set_rss(None, Some(&key)).unwrap();
        let reason = r.reason().expect("lo has no set_rxfh");
        assert!(reason.contains("ETHTOOL_SRSSH") && reason.contains("not supported"), "{reason}");
    }

    #[test]
    fn srxfh_request_bytes() {
        let four = rxh::IP_SRC | rxh::IP_DST | rxh::L4_B_0_1 | rxh::L4_B_2_3;
        let b = srxfh_request(0x02, four);
        assert_eq!(b.len(), 192);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 0x2a);
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 0x02);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 0xf0);
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(parse_srxfh_request(&b).unwrap(), ("udp4", four));
        assert!(parse_srxfh_request(&b[..100]).is_err());
        assert!(parse_srxfh_request(&srxfh_request(0x99, 0)).unwrap_err().contains("unknown flow type"));
        assert_eq!(rxh_from_names(&rxh_fields(four)).unwrap(), four);
        assert!(rxh_from_names(&["ip_src", "nope"]).is_err());
        let e = Ethtool::open("lo").unwrap();
        let r = e.set_flow_hash("udp4", four).unwrap();
        assert!(r.reason().unwrap().contains("ETHTOOL_SRXFH"), "{r:?}");
    }

    #[test]
    fn missing_interface() {
        let e = Ethtool::open("rsskit-nope0").unwrap();
        assert!(matches!(e.driver(), Err(EthtoolError::NoSuchInterface(_))));
        assert!(matches!(e.rss(), Err(EthtoolError::NoSuchInterface(_))));
        assert!(Ethtool::open("a-name-far-too-long-for-linux").is_err());
        assert!(Ethtool::open("").is_err());
    }
}

#[cfg(test)]
mod stats_tests {
    use super::*;

    /// `lo` has no driver statistics: a reason, not an error or a panic.
    #[test]
    fn lo_has_no_stats() {
        let e = Ethtool::open("lo").unwrap();
        match e.stats().unwrap() {
            Reported::Unsupported { reason } => assert!(reason.contains("ETHTOOL_GSTATS"), "{reason}"),
            Reported::Supported(v) => panic!("lo reported statistics: {v:?}"),
        }
    }

    /// Names and values of a device that has statistics (a veth: run inside
    /// a network namespace holding one, with RSSKIT_STATS_IFACE=NAME).
    #[test]
    #[ignore = "manual: needs RSSKIT_STATS_IFACE naming a veth in the current namespace"]
    fn veth_stats_names() {
        let i = std::env::var("RSSKIT_STATS_IFACE").expect("RSSKIT_STATS_IFACE");
        let v = match Ethtool::open(&i).unwrap().stats().unwrap() {
            Reported::Supported(v) => v,
            Reported::Unsupported { reason } => panic!("{reason}"),
        };
        eprintln!("{v:?}");
        assert!(v.iter().any(|(n, _)| n == "peer_ifindex"), "{v:?}");
    }
}
