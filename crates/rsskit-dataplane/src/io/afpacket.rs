//! AF_PACKET input and output for the data plane: the kernel side (the
//! TPACKET_V3 ring, the `sendmmsg` socket) is `rsskit_linux::packet`; this
//! module adapts it to [`Source`] and [`Sink`].

use super::{Recv, Source};
use crate::output::Sink;
use crate::pool::Mbuf;
use rsskit_linux::packet::{RxRing, TxSocket};
use std::cell::Cell;
use std::io;

pub use rsskit_linux::packet::{ifindex, PacketError, RingConfig};

/// A TPACKET_V3 receive ring on one interface.
pub struct AfPacketSource {
    ring: RxRing,
    drops: Cell<u64>,
}

impl AfPacketSource {
    /// Opens a ring on `ifname`; joins fanout group `fanout` (hash mode) if given.
    pub fn open(ifname: &str, cfg: RingConfig, fanout: Option<u16>) -> Result<Self, PacketError> {
        Ok(AfPacketSource { ring: RxRing::open(ifname, cfg, fanout)?, drops: Cell::new(0) })
    }
}

impl Source for AfPacketSource {
    fn recv(&mut self) -> Recv<'_> {
        match self.ring.next_frame() {
            Some((data, ts_ns)) => Recv::Frame { data, ts_ns },
            None => Recv::Idle,
        }
    }

    fn drops(&self) -> u64 {
        self.drops.set(self.drops.get() + self.ring.take_drops());
        self.drops.get()
    }
}

/// Sends frames on one interface with `sendmmsg` (one syscall per flushed group).
pub struct AfPacketSink {
    tx: TxSocket,
}

impl AfPacketSink {
    /// A transmit socket bound to `ifname`.
    pub fn open(ifname: &str) -> Result<Self, PacketError> {
        Ok(AfPacketSink { tx: TxSocket::open(ifname)? })
    }
}

impl Sink for AfPacketSink {
    fn send(&mut self, frames: &[Mbuf]) -> io::Result<usize> {
        self.tx.send(frames.iter().map(|f| f.data()))
    }
}
