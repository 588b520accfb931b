//! The host's own interface addresses (`getifaddrs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Addresses of one family assigned to local interfaces, loopback first,
/// without duplicates; IPv6 link-local ones are left out (they need a scope
/// id, so they are no plain source). Empty if `getifaddrs` fails.
pub fn local_addrs(ipv6: bool) -> Vec<IpAddr> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs fills a linked list we only read and then free with
    // freeifaddrs; every ifa_addr is checked for null and its family before
    // the cast to the matching sockaddr type.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                match (i32::from((*a).sa_family), ipv6) {
                    (libc::AF_INET, false) => {
                        let sin = &*(a as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
                    }
                    (libc::AF_INET6, true) => {
                        let sin6 = &*(a as *const libc::sockaddr_in6);
                        let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                        if ip.segments()[0] & 0xffc0 != 0xfe80 {
                            out.push(IpAddr::V6(ip));
                        }
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out.sort_by_key(|a| !a.is_loopback());
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_comes_first() {
        let v4 = super::local_addrs(false);
        assert_eq!(v4.first(), Some(&std::net::IpAddr::from([127, 0, 0, 1])), "{v4:?}");
        assert!(v4.iter().all(|a| a.is_ipv4()));
    }
}
