//! NIC resources around the queues, as one type each whichever kernel
//! interface answered: ring sizes (`ethtool -g`) and interrupt coalescing
//! (`ethtool -c`). The ioctl (`ETHTOOL_GRINGPARAM`/`ETHTOOL_GCOALESCE`) and
//! the ethtool netlink family (`RINGS_GET`/`COALESCE_GET`) both fill these,
//! so the host logic above never knows which one was used; [`Via`] says it.

use super::{describe, Ethtool, EthtoolError, Reported};
use serde::{Deserialize, Serialize};

/// Which kernel interface answered a query or took a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The ethtool generic netlink family (`ethtool` itself uses it).
    Netlink,
    /// `SIOCETHTOOL`, on kernels or settings netlink does not cover.
    Ioctl,
}

/// RX and TX ring sizes and their maxima (`struct ethtool_ringparam`'s
/// main fields; the mini and jumbo rings are not modelled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings {
    /// Descriptors per RX ring now.
    pub rx: u32,
    /// Descriptors per TX ring now.
    pub tx: u32,
    /// Most RX descriptors the device allows.
    pub rx_max: u32,
    /// Most TX descriptors the device allows.
    pub tx_max: u32,
}

/// Interrupt coalescing: the subset of `struct ethtool_coalesce` rsskit
/// plans (adaptive moderation on or off, else a fixed usecs/frames pair).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coalesce {
    /// Adaptive RX moderation (`use_adaptive_rx_coalesce`).
    pub adaptive_rx: bool,
    /// Adaptive TX moderation (`use_adaptive_tx_coalesce`).
    pub adaptive_tx: bool,
    /// Microseconds from an RX frame to its interrupt (`rx_coalesce_usecs`).
    pub rx_usecs: u32,
    /// Frames that raise an RX interrupt at once (`rx_max_coalesced_frames`).
    pub rx_frames: u32,
    /// Microseconds for TX completions (`tx_coalesce_usecs`).
    pub tx_usecs: u32,
    /// Frames for a TX completion interrupt (`tx_max_coalesced_frames`).
    pub tx_frames: u32,
}

// ------------------------------------------------------------- the ioctl

// <linux/ethtool.h>
const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_SCOALESCE: u32 = 0x0f;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_SRINGPARAM: u32 = 0x11;

/// `struct ethtool_ringparam`: `cmd`, four maxima, four counts.
#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max: u32,
    rx_mini_max: u32,
    rx_jumbo_max: u32,
    tx_max: u32,
    rx: u32,
    rx_mini: u32,
    rx_jumbo: u32,
    tx: u32,
}

/// `struct ethtool_coalesce`: `cmd` then 22 `__u32`s, kept whole so a set
/// writes back every field it did not mean to change as the driver gave it.
#[repr(C)]
struct CoalesceParam([u32; 23]);

// Indices into `CoalesceParam` (field order of `struct ethtool_coalesce`).
const C_RX_USECS: usize = 1;
const C_RX_FRAMES: usize = 2;
const C_TX_USECS: usize = 5;
const C_TX_FRAMES: usize = 6;
const C_ADAPTIVE_RX: usize = 10;
const C_ADAPTIVE_TX: usize = 11;

impl CoalesceParam {
    fn model(&self) -> Coalesce {
        let c = &self.0;
        Coalesce {
            adaptive_rx: c[C_ADAPTIVE_RX] != 0,
            adaptive_tx: c[C_ADAPTIVE_TX] != 0,
            rx_usecs: c[C_RX_USECS],
            rx_frames: c[C_RX_FRAMES],
            tx_usecs: c[C_TX_USECS],
            tx_frames: c[C_TX_FRAMES],
        }
    }
}

impl Ethtool {
    fn answer<T>(&self, cmd: &str, r: std::io::Result<T>) -> Result<Reported<T>, EthtoolError> {
        match r {
            Ok(t) => Ok(Reported::Supported(t)),
            Err(e) if self.nodev(&e) => Err(EthtoolError::NoSuchInterface(self.iface.clone())),
            Err(e) => Ok(Reported::Unsupported { reason: describe(cmd, &e) }),
        }
    }

    /// Ring sizes (`ETHTOOL_GRINGPARAM`).
    pub fn rings(&self) -> Result<Reported<Rings>, EthtoolError> {
        let mut p = RingParam { cmd: ETHTOOL_GRINGPARAM, ..RingParam::default() };
        let r = self.ioctl(&mut p).map(|()| Rings { rx: p.rx, tx: p.tx, rx_max: p.rx_max, tx_max: p.tx_max });
        self.answer("ETHTOOL_GRINGPARAM", r)
    }

    /// Sets the RX and TX ring sizes (`ETHTOOL_SRINGPARAM`), keeping the mini
    /// and jumbo rings as the driver reports them.
    pub fn set_rings(&self, rx: u32, tx: u32) -> Result<Reported<()>, EthtoolError> {
        let mut p = RingParam { cmd: ETHTOOL_GRINGPARAM, ..RingParam::default() };
        if let Err(e) = self.ioctl(&mut p) {
            return self.answer("ETHTOOL_GRINGPARAM", Err(e));
        }
        p.cmd = ETHTOOL_SRINGPARAM;
        p.rx = rx;
        p.tx = tx;
        let r = self.ioctl(&mut p);
        self.answer("ETHTOOL_SRINGPARAM", r)
    }

    /// Interrupt coalescing (`ETHTOOL_GCOALESCE`).
    pub fn coalesce(&self) -> Result<Reported<Coalesce>, EthtoolError> {
        let mut p = CoalesceParam([0; 23]);
        p.0[0] = ETHTOOL_GCOALESCE;
        let r = self.ioctl(&mut p).map(|()| p.model());
        self.answer("ETHTOOL_GCOALESCE", r)
    }

    /// Sets the modelled coalescing fields (`ETHTOOL_SCOALESCE`) over the
    /// driver's current values, so fields rsskit does not model keep theirs.
    pub fn set_coalesce(&self, c: &Coalesce) -> Result<Reported<()>, EthtoolError> {
        let mut p = CoalesceParam([0; 23]);
        p.0[0] = ETHTOOL_GCOALESCE;
        if let Err(e) = self.ioctl(&mut p) {
            return self.answer("ETHTOOL_GCOALESCE", Err(e));
        }
        p.0[0] = ETHTOOL_SCOALESCE;
        p.0[C_ADAPTIVE_RX] = u32::from(c.adaptive_rx);
        p.0[C_ADAPTIVE_TX] = u32::from(c.adaptive_tx);
        p.0[C_RX_USECS] = c.rx_usecs;
        p.0[C_RX_FRAMES] = c.rx_frames;
        p.0[C_TX_USECS] = c.tx_usecs;
        p.0[C_TX_FRAMES] = c.tx_frames;
        let r = self.ioctl(&mut p);
        self.answer("ETHTOOL_SCOALESCE", r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_match_the_header_sizes() {
        // sizeof(struct ethtool_ringparam) == 36, sizeof(struct ethtool_coalesce) == 92.
        assert_eq!(std::mem::size_of::<RingParam>(), 36);
        assert_eq!(std::mem::size_of::<CoalesceParam>(), 92);
    }

    #[test]
    fn coalesce_fields_come_from_their_header_offsets() {
        let mut p = CoalesceParam([0; 23]);
        for (i, v) in p.0.iter_mut().enumerate() {
            *v = i as u32;
        }
        let m = p.model();
        // Byte offsets in <linux/ethtool.h>: rx_coalesce_usecs 4,
        // rx_max_coalesced_frames 8, tx_coalesce_usecs 20,
        // tx_max_coalesced_frames 24, use_adaptive_rx 40, use_adaptive_tx 44.
        assert_eq!((m.rx_usecs, m.rx_frames, m.tx_usecs, m.tx_frames), (4 / 4, 8 / 4, 20 / 4, 24 / 4));
        assert!(m.adaptive_rx && m.adaptive_tx);
        assert_eq!((C_ADAPTIVE_RX * 4, C_ADAPTIVE_TX * 4), (40, 44));
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = Ethtool::open("rsskit-none0").unwrap();
        assert!(matches!(e.rings(), Err(EthtoolError::NoSuchInterface(_))));
        assert!(matches!(e.coalesce(), Err(EthtoolError::NoSuchInterface(_))));
    }

    #[test]
    fn loopback_refuses_rings_with_a_reason() {
        let e = Ethtool::open("lo").unwrap();
        let r = e.rings().unwrap();
        assert!(r.reason().is_some_and(|s| s.starts_with("ETHTOOL_GRINGPARAM")), "{r:?}");
    }
}
