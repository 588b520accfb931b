//! Questions about one socket of a `SO_REUSEPORT` group, asked through any
//! descriptor of it (ours or a copy taken from another process): is
//! `SO_REUSEPORT` set, its cookie (`SO_COOKIE`), how much waits in it
//! (listener accept queue, datagram receive memory), and detaching the
//! group's steering program (`SO_DETACH_REUSEPORT_BPF`).

use std::io;
use std::os::fd::{AsRawFd, RawFd};

fn getsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, what: &str) -> io::Result<T> {
    // SAFETY: T is plain data (an integer or a kernel struct of integers); all-zero is valid.
    let mut v: T = unsafe { std::mem::zeroed() };
    crate::socket::getsockopt_into(fd, level, name, &mut v)
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))?;
    Ok(v)
}

/// Whether `SO_REUSEPORT` is set on the socket.
pub fn reuseport_enabled(s: &impl AsRawFd) -> io::Result<bool> {
    Ok(getsockopt::<libc::c_int>(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, "SO_REUSEPORT")? != 0)
}

/// Whether an IPv6 socket is `IPV6_V6ONLY` (else it also receives IPv4).
pub fn v6only(s: &impl AsRawFd) -> io::Result<bool> {
    Ok(getsockopt::<libc::c_int>(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, "IPV6_V6ONLY")? != 0)
}

/// The socket's cookie (`SO_COOKIE`): a 64-bit id unique while the kernel runs.
pub fn cookie(s: &impl AsRawFd) -> io::Result<u64> {
    getsockopt::<u64>(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_COOKIE, "SO_COOKIE")
}

/// Connections waiting in a TCP listener's accept queue (`TCP_INFO`: for a
/// listener the kernel reports `sk_ack_backlog` in `tcpi_unacked`).
pub fn accept_queue_len(s: &impl AsRawFd) -> io::Result<u32> {
    let i: libc::tcp_info = getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, "TCP_INFO")?;
    Ok(i.tcpi_unacked)
}

/// Bytes of receive memory in use (`SO_MEMINFO`, `SK_MEMINFO_RMEM_ALLOC`):
/// grows by one datagram's truesize when one is queued.
pub fn rmem_alloc(s: &impl AsRawFd) -> io::Result<u32> {
    let m: [u32; 9] = getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO, "SO_MEMINFO")?;
    Ok(m[libc::SK_MEMINFO_RMEM_ALLOC as usize])
}

/// Detaches the steering program of the socket's reuseport group (the
/// kernel's own hash picks the socket again). `Ok(false)`: none was attached.
pub fn detach(s: &impl AsRawFd) -> io::Result<bool> {
    match crate::socket::setsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_DETACH_REUSEPORT_BPF, 0) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(io::Error::new(e.kind(), format!("SO_DETACH_REUSEPORT_BPF: {e}"))),
    }
}

/// Takes the datagram at the head of the socket's receive queue if it came
/// from `from` (peeked first: anything else stays for its owner).
/// `Ok(true)`: one was taken.
pub fn take_datagram_from(s: &impl std::os::fd::AsFd, from: std::net::SocketAddr) -> io::Result<bool> {
    use std::mem::MaybeUninit;
    let sock = socket2::SockRef::from(s);
    let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
    let peeked = sock.recv_from_with_flags(&mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT);
    match peeked {
        Ok((_, a)) if a.as_socket() == Some(from) => {
            sock.recv_from_with_flags(&mut buf, libc::MSG_DONTWAIT)?;
            Ok(true)
        }
        Ok(_) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{udp_socket, UdpOptions};
    use rsskit_core::cbpf::cpu_program;

    #[test]
    fn reuseport_cookie_rmem_detach() {
        let opts = UdpOptions { reuseport: true, ..Default::default() };
        let a = udp_socket("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        assert!(reuseport_enabled(&a).unwrap());
        let plain = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!reuseport_enabled(&plain).unwrap());
        // Before bind: the kernel refuses to change IPV6_V6ONLY on a bound socket.
        let v6 = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None).unwrap();
        v6.set_only_v6(true).unwrap();
        assert!(v6only(&v6).unwrap());
        v6.set_only_v6(false).unwrap();
        assert!(!v6only(&v6).unwrap());
        assert_ne!(cookie(&a).unwrap(), cookie(&plain).unwrap());
        let before = rmem_alloc(&plain).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", plain.local_addr().unwrap()).unwrap();
        let t = std::time::Instant::now();
        while rmem_alloc(&plain).unwrap() == before && t.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        assert!(rmem_alloc(&plain).unwrap() > before);
        let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!take_datagram_from(&plain, other.local_addr().unwrap()).unwrap(), "not from there");
        assert!(take_datagram_from(&plain, tx.local_addr().unwrap()).unwrap());
        assert!(!take_datagram_from(&plain, tx.local_addr().unwrap()).unwrap(), "queue empty");
        assert!(!detach(&a).unwrap(), "nothing attached yet");
        crate::bpf::attach_reuseport(&cpu_program(&[0]).unwrap(), &a).unwrap();
        assert!(detach(&a).unwrap());
    }

    #[test]
    fn accept_queue_counts_connections() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(accept_queue_len(&l).unwrap(), 0);
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let t = std::time::Instant::now();
        while accept_queue_len(&l).unwrap() == 0 && t.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        assert_eq!(accept_queue_len(&l).unwrap(), 1);
    }
}
