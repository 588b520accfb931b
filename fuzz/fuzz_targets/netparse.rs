//! Fuzz the command line's CPU lists, networks and port ranges: any text.
//! Must never panic or allocate without bound (a list names at most
//! MAX_CPUS CPUs); what parses round-trips through its printed form and
//! stays in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_core::netparse::{parse_cidr, parse_port_range};
use rsskit_linux::cpulist::{self, MAX_CPUS};
use rsskit_runtime::udp_load::IpNet;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(cpus) = cpulist::parse(s) {
        assert!(!cpus.is_empty() && cpus.len() <= MAX_CPUS);
        assert!(cpus.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
        assert!(cpus.iter().all(|&c| c < MAX_CPUS));
        let text = cpulist::format(&cpus);
        assert_eq!(cpulist::parse(&text).as_ref(), Ok(&cpus), "{text}");
    }
    if let Ok((addr, len)) = parse_cidr(s) {
        assert!(len <= if addr.is_ipv6() { 128 } else { 32 });
        assert_eq!(parse_cidr(&format!("{addr}/{len}")), Ok((addr, len)));
    }
    if let Ok((lo, hi)) = parse_port_range(s) {
        assert!(lo <= hi);
        assert_eq!(parse_port_range(&format!("{lo}-{hi}")), Ok((lo, hi)));
    }
    if let Ok(net) = s.parse::<IpNet>() {
        assert!(net.prefix_len <= if net.addr.is_ipv6() { 128 } else { 32 });
        let back: IpNet = net.to_string().parse().unwrap();
        assert_eq!((back.addr, back.prefix_len), (net.addr, net.prefix_len));
        // The same network as find's parser sees it.
        assert_eq!(parse_cidr(s), Ok((net.addr, net.prefix_len)));
    }
});
