//! Thin Linux layer for rsskit: everything that touches the kernel
//! (sysfs/procfs, ethtool ioctls, CPU affinity, sockets, classic BPF) lives
//! here, behind small safe wrappers, so the core stays sans-I/O.
#![warn(unreachable_pub)]
#![warn(missing_docs)]
pub mod addrs;
pub mod affinity;
pub mod bpf;
pub mod clock;
pub mod cpulist;
pub mod ebpf;
pub mod epoll;
pub mod ethtool;
pub mod ethtool_nl;
pub mod fs;
pub mod genl;
pub mod netdev;
pub mod netdev_nl;
pub mod packet;
pub mod poll;
pub mod process;
pub mod procnet;
pub mod reuseport;
pub mod rtnl;
pub mod sigio;
pub mod snmp;
pub mod socket;
pub mod topology;
pub mod watchdog;
pub mod xdp_steer;
pub mod xsk;
