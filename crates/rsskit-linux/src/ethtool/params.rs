//! NIC resources around the queues, as one type each whichever kernel
//! interface answered: ring sizes (`ethtool -g`) and interrupt coalescing
//! (`ethtool -c`). The ioctl (`ETHTOOL_GRINGPARAM`/`ETHTOOL_GCOALESCE`) and
//! the ethtool netlink family (`RINGS_GET`/`COALESCE_GET`) both fill these,
//! so the host logic above never knows which one was used; [`Via`] says it.

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
