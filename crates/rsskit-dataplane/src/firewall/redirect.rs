//! State-based redirection across workers (DragonFly's section 5.4).
//!
//! A `redirect tcp 10.0.0.1:8080 -> 10.0.0.2:80` flow has two states:
//!
//! - the **master** `{client:cport, 10.0.0.1:8080}` on the worker owning the
//!   original flow, installed when the first packet matches the rule;
//! - the **slave** `{10.0.0.2:80, client:cport}` on the worker owning the
//!   translated flow, which is almost always another worker.
//!
//! The master worker rewrites the packet (destination address and port,
//! incremental checksum updates) and hands it to the slave's worker with a
//! [`Resume::NewSlave`] message: no lock, no shared table. That worker
//! installs the slave and continues rule processing *after* the redirect
//! rule with the translated packet. Later packets of the flow are
//! translated by the master and sent with [`Resume::ToSlave`].
//!
//! Replies (`10.0.0.2:80 -> client`) reach the slave's worker (symmetric
//! steering, see the module docs of [`crate::firewall`]); the slave
//! translates the source back to `10.0.0.1:8080` and sends the packet to the
//! master with [`Resume::ToMaster`], so the master sees both directions and
//! alone tracks the TCP state and the lifetime of the flow.
//!
//! Only the master starts deletion: when it expires or closes it is removed
//! from its table and a [`Control::DeleteSlave`] message goes to the slave's
//! worker. Slaves are pinned (never expire by themselves). Each worker's
//! input is FIFO per sender, so a packet the master forwarded before the
//! delete is processed before it: in-flight packets never find their slave
//! gone. A reply in flight towards a master that was just removed finds no
//! master and passes (it was translated by a live slave), counted as `stale`.

use super::state::FlowKey;
use crate::wire::ip::proto;
use crate::wire::{ipv4, ipv6, tcp, udp, Ipv4Packet, Ipv6Packet};
use core::net::IpAddr;

/// Which side of a redirection a state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Holds the client-side state; rewrites replies.
    Master,
    /// Holds the server-side state on the translated flow's worker; removed by its master.
    Slave,
}

/// Translation data of a redirected flow's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xlat {
    /// Which side this state is.
    pub role: Role,
    /// The worker holding the other state.
    pub peer: u16,
    /// The client's endpoint.
    pub client: (IpAddr, u16),
    /// Original destination (what the client talks to).
    pub orig: (IpAddr, u16),
    /// New destination (where the packets go).
    pub new: (IpAddr, u16),
}

impl Xlat {
    /// Key of the master state.
    pub fn master_key(&self, proto: u8) -> FlowKey {
        FlowKey::of(self.client.0, self.client.1, self.orig.0, self.orig.1, proto).0
    }

    /// Key of the slave state.
    pub fn slave_key(&self, proto: u8) -> FlowKey {
        FlowKey::of(self.client.0, self.client.1, self.new.0, self.new.1, proto).0
    }
}

/// A packet handed from one worker to another, with what to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// First packet of a redirected flow, already translated: install the
    /// slave and continue with the rules after rule number `after_rule`.
    NewSlave {
        /// The worker holding the master state.
        master: u16,
        /// The `redirect` rule's number.
        after_rule: u16,
        /// The flow's original destination (address, port).
        orig: (IpAddr, u16),
    },
    /// A later client packet, already translated.
    ToSlave,
    /// A reply, already translated back: the master tracks it.
    ToMaster,
}

/// A message between workers that carries no packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The master of this slave is gone: remove the slave.
    DeleteSlave {
        /// The slave's flow.
        key: FlowKey,
    },
}

/// Incremental checksum update (RFC 1624), kept under its old name.
pub use crate::wire::checksum::replace as csum_replace;

/// Where the headers of a packet start in its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Start of the IP header.
    pub ip: usize,
    /// Start of the TCP/UDP header.
    pub l4: usize,
    /// An IPv6 packet.
    pub ipv6: bool,
    /// 6 or 17.
    pub proto: u8,
}

/// Rewrites the destination (`dst = true`) or source endpoint of a TCP or
/// UDP packet in place to `to` through the wire views, updating the IPv4
/// header checksum and the transport checksum incrementally. The family of `to` must be the
/// packet's. Returns false (nothing changed) if the frame is too short.
pub fn rewrite(frame: &mut [u8], o: &Offsets, dst: bool, to: (IpAddr, u16)) -> bool {
    let ip_len = if o.ipv6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
    let l4_csum = if o.proto == proto::TCP { tcp::field::CHECKSUM } else { udp::field::CHECKSUM };
    if frame.len() < o.ip + ip_len || frame.len() < o.l4 + l4_csum.end {
        return false;
    }
    let mut old_a = [0u8; 16];
    let mut new_a = [0u8; 16];
    let alen = match (to.0, o.ipv6) {
        (IpAddr::V4(a), false) => {
            let old = Ipv4Packet::new_unchecked(&mut frame[o.ip..]).rewrite_addr(dst, a);
            old_a[..4].copy_from_slice(&old);
            new_a[..4].copy_from_slice(&a.octets());
            4
        }
        (IpAddr::V6(a), true) => {
            let old = Ipv6Packet::new_unchecked(&mut frame[o.ip..]).rewrite_addr(dst, a);
            old_a = old;
            new_a = a.octets();
            16
        }
        _ => return false,
    };
    // Both TCP and UDP keep the ports first.
    let port = if dst { udp::field::DST_PORT } else { udp::field::SRC_PORT };
    let l4 = &mut frame[o.l4..];
    let old_p = [l4[port.start], l4[port.start + 1]];
    let new_p = to.1.to_be_bytes();
    l4[port].copy_from_slice(&new_p);
    let s = u16::from_be_bytes([l4[l4_csum.start], l4[l4_csum.start + 1]]);
    // IPv4 UDP checksum 0 means "none": leave it.
    if !(o.proto == proto::UDP && !o.ipv6 && s == 0) {
        let s = csum_replace(s, &old_a[..alen], &new_a[..alen]);
        let mut s = csum_replace(s, &old_p, &new_p);
        if o.proto == proto::UDP && s == 0 {
            s = 0xffff;
        }
        l4[l4_csum].copy_from_slice(&s.to_be_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::craft;
    use crate::wire::internet_checksum;
    use core::net::Ipv4Addr;

    #[test]
    fn rewrite_keeps_checksums_valid() {
        let src = Ipv4Addr::new(192, 168, 1, 10);
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        let mut t = craft::tcp(40000, 8080, b"hello");
        // Fill a correct TCP checksum first.
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.octets());
        ph.extend_from_slice(&dst.octets());
        ph.extend_from_slice(&[0, 6]);
        ph.extend_from_slice(&(t.len() as u16).to_be_bytes());
        ph.extend_from_slice(&t);
        let c = internet_checksum(&ph);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        let ip = craft::ipv4(&craft::V4::new(src, dst, 6), &t);
        let mut f = craft::eth(0x0800, &[], &ip);
        assert!(crate::wire::ipv4_l4_checksum_ok(&f[14..]));
        let o = Offsets { ip: 14, l4: 34, ipv6: false, proto: 6 };
        assert!(rewrite(&mut f, &o, true, (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 80)));
        assert_eq!(&f[30..34], &[10, 0, 0, 2]);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 80);
        assert_eq!(internet_checksum(&f[14..34]), 0, "IPv4 header checksum");
        assert!(crate::wire::ipv4_l4_checksum_ok(&f[14..]));
        assert!(rewrite(&mut f, &o, false, (IpAddr::V4(Ipv4Addr::new(172, 16, 0, 9)), 1234)));
        assert_eq!(internet_checksum(&f[14..34]), 0);
        assert!(crate::wire::ipv4_l4_checksum_ok(&f[14..]));
    }
}
