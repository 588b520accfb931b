//! Attaching classic BPF steering programs to `SO_REUSEPORT` groups. The
//! programs themselves (and an interpreter that explains their verdicts)
//! are RSS logic and live in `rsskit_core::cbpf`.

use rsskit_core::cbpf::Program;
use std::io;
use std::os::fd::AsRawFd;

/// Attaches `prog` to the reuseport group of `s` (`SO_ATTACH_REUSEPORT_CBPF`);
/// it then steers for every socket of the group.
pub fn attach_reuseport(prog: &Program, s: &impl AsRawFd) -> io::Result<()> {
    // The kernel's own instruction type (same fields as `cbpf::Insn`).
    let insns: Vec<libc::sock_filter> =
        prog.insns().iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
    let len = u16::try_from(insns.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog { len, filter: insns.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `fprog` points at `len` live instructions for the duration of
    // the call; the kernel copies them.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("SO_ATTACH_REUSEPORT_CBPF: {e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{udp_socket, UdpOptions};
    use rsskit_core::cbpf::{cpu_program, toeplitz_program};
    use rsskit_core::{HashType, RssKey};

    #[test]
    fn attach_needs_reuseport_socket() {
        let s =
            udp_socket("127.0.0.1:0".parse().unwrap(), &UdpOptions { reuseport: true, ..Default::default() })
                .unwrap();
        attach_reuseport(&cpu_program(&[0]).unwrap(), &s).expect("attach to a reuseport socket");
        let big =
            toeplitz_program(&RssKey::microsoft(), HashType::UdpIpv6, &(0..128).collect::<Vec<_>>()).unwrap();
        attach_reuseport(&big, &s).expect("the kernel accepts the largest program");
    }
}
