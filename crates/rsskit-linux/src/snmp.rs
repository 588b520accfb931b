//! The kernel's UDP counters: `/proc/net/snmp` (`Udp:`), `/proc/net/snmp6`
//! (`Udp6*`), and per-socket receive queues and drops from `/proc/net/udp`
//! and `/proc/net/udp6` — FreeBSD's `netstat -sp udp`, for Linux. All are
//! per network namespace (the reader's).

use serde::Serialize;
use std::io;

/// The UDP MIB counters rsskit reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UdpCounters {
    /// Datagrams delivered to sockets.
    pub in_datagrams: u64,
    /// Datagrams to a port nobody listens on.
    pub no_ports: u64,
    /// Datagrams dropped for other reasons (includes buffer errors).
    pub in_errors: u64,
    /// Datagrams sent.
    pub out_datagrams: u64,
    /// Dropped: receive buffer full.
    pub rcvbuf_errors: u64,
    /// Dropped: send buffer full.
    pub sndbuf_errors: u64,
    /// Dropped: bad checksum.
    pub in_csum_errors: u64,
}

impl UdpCounters {
    /// `self - earlier`, field by field (0 where a counter went backwards).
    pub fn delta(&self, earlier: &UdpCounters) -> UdpCounters {
        UdpCounters {
            in_datagrams: self.in_datagrams.saturating_sub(earlier.in_datagrams),
            no_ports: self.no_ports.saturating_sub(earlier.no_ports),
            in_errors: self.in_errors.saturating_sub(earlier.in_errors),
            out_datagrams: self.out_datagrams.saturating_sub(earlier.out_datagrams),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(earlier.rcvbuf_errors),
            sndbuf_errors: self.sndbuf_errors.saturating_sub(earlier.sndbuf_errors),
            in_csum_errors: self.in_csum_errors.saturating_sub(earlier.in_csum_errors),
        }
    }

    fn set(&mut self, name: &str, v: u64) {
        match name {
            "InDatagrams" => self.in_datagrams = v,
            "NoPorts" => self.no_ports = v,
            "InErrors" => self.in_errors = v,
            "OutDatagrams" => self.out_datagrams = v,
            "RcvbufErrors" => self.rcvbuf_errors = v,
            "SndbufErrors" => self.sndbuf_errors = v,
            "InCsumErrors" => self.in_csum_errors = v,
            _ => {}
        }
    }
}

/// The `Udp:` counters of `/proc/net/snmp` text (a header line of names,
/// then a line of values); `None` if there is no `Udp:` pair.
pub fn parse_snmp(text: &str) -> Option<UdpCounters> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let mut c = UdpCounters::default();
    for (n, v) in names.split_whitespace().zip(values.split_whitespace()).skip(1) {
        c.set(n, v.parse().ok()?);
    }
    Some(c)
}

/// The `Udp6*` counters of `/proc/net/snmp6` text (`Udp6InDatagrams  12` lines).
pub fn parse_snmp6(text: &str) -> Option<UdpCounters> {
    let mut c = UdpCounters::default();
    let mut seen = false;
    for l in text.lines() {
        let mut it = l.split_whitespace();
        if let (Some(name), Some(v)) = (it.next(), it.next()) {
            if let Some(n) = name.strip_prefix("Udp6") {
                c.set(n, v.parse().ok()?);
                seen = true;
            }
        }
    }
    seen.then_some(c)
}

fn read(path: &str) -> io::Result<String> {
    std::fs::read_to_string(path).map_err(|e| io::Error::new(e.kind(), format!("reading {path}: {e}")))
}

fn bad(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: no UDP counters found"))
}

/// IPv4 UDP counters now.
pub fn udp4() -> io::Result<UdpCounters> {
    parse_snmp(&read("/proc/net/snmp")?).ok_or_else(|| bad("/proc/net/snmp"))
}

/// IPv6 UDP counters now.
pub fn udp6() -> io::Result<UdpCounters> {
    parse_snmp6(&read("/proc/net/snmp6")?).ok_or_else(|| bad("/proc/net/snmp6"))
}

/// UDP counters of one family now.
pub fn udp(ipv6: bool) -> io::Result<UdpCounters> {
    if ipv6 {
        udp6()
    } else {
        udp4()
    }
}

/// Sockets bound to one local port, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SocketDrops {
    /// Sockets found on the port.
    pub sockets: usize,
    /// Datagrams the kernel dropped on them (receive queue full, ...).
    pub drops: u64,
    /// Bytes waiting in their receive queues.
    pub rx_queue: u64,
}

/// Sums the sockets of `/proc/net/udp{,6}` text whose local port is `port`.
/// Line: `sl local_address rem_address st tx_queue:rx_queue ... drops`.
pub fn parse_proc_udp(text: &str, port: u16) -> SocketDrops {
    let mut d = SocketDrops::default();
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 13 {
            continue;
        }
        let local_port = f[1].rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if local_port != Some(port) {
            continue;
        }
        d.sockets += 1;
        if let Some((_, rx)) = f[4].split_once(':') {
            d.rx_queue += u64::from_str_radix(rx, 16).unwrap_or(0);
        }
        d.drops += f[f.len() - 1].parse::<u64>().unwrap_or(0);
    }
    d
}

/// Per-socket figures of every UDP socket of one family on `port`.
pub fn socket_drops(port: u16, ipv6: bool) -> io::Result<SocketDrops> {
    let path = if ipv6 { "/proc/net/udp6" } else { "/proc/net/udp" };
    Ok(parse_proc_udp(&read(path)?, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
Udp: 100 2 3 90 4 5 6 0 0\n\
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
UdpLite: 9 9 9 9 9 9 9 9 9\n";

    #[test]
    fn snmp() {
        let c = parse_snmp(SNMP).unwrap();
        assert_eq!(
            c,
            UdpCounters {
                in_datagrams: 100,
                no_ports: 2,
                in_errors: 3,
                out_datagrams: 90,
                rcvbuf_errors: 4,
                sndbuf_errors: 5,
                in_csum_errors: 6
            }
        );
        let later = UdpCounters { in_datagrams: 150, ..c };
        assert_eq!(later.delta(&c).in_datagrams, 50);
        assert_eq!(c.delta(&later).in_datagrams, 0);
        assert_eq!(parse_snmp("Ip: a\nIp: 1\n"), None);
    }

    #[test]
    fn snmp6() {
        let t = "Ip6InReceives    5\nUdp6InDatagrams  \t 7\nUdp6NoPorts 1\nUdp6RcvbufErrors 2\nUdpLite6InDatagrams 9\n";
        let c = parse_snmp6(t).unwrap();
        assert_eq!((c.in_datagrams, c.no_ports, c.rcvbuf_errors), (7, 1, 2));
        assert_eq!(parse_snmp6("Ip6InReceives 5\n"), None);
    }

    #[test]
    fn proc_udp() {
        let t = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  1: 0100007F:2328 00000000:0000 07 00000000:00000340 00:00000000 00000000     0        0 1 2 0000000000000000 17\n\
  2: 0100007F:2328 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 2 2 0000000000000000 3\n\
  3: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0000000000000000 99\n";
        let d = parse_proc_udp(t, 9000);
        assert_eq!(d, SocketDrops { sockets: 2, drops: 20, rx_queue: 0x340 });
        assert_eq!(parse_proc_udp(t, 1).sockets, 0);
    }

    #[test]
    fn live_counters_move() {
        let before = udp4().unwrap();
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        for _ in 0..5 {
            tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        }
        let mut b = [0u8; 4];
        for _ in 0..5 {
            rx.recv(&mut b).unwrap();
        }
        let d = udp4().unwrap().delta(&before);
        assert!(d.in_datagrams >= 5 && d.out_datagrams >= 5, "{d:?}");
        assert_eq!(socket_drops(port, false).unwrap().sockets, 1);
        assert!(udp6().is_ok());
    }
}
