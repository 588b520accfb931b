//! rsskit user-space data plane.
//!
//! - [`wire`]: checked zero-copy parsing (Ethernet, VLAN, IPv4/IPv6 with
//!   extension headers, UDP/TCP/ICMP, IPIP/6in4/GRE decapsulation), every
//!   reject counted by [`wire::DropReason`];
//! - [`hash`]: the RSS hash of a packet exactly as a NIC configured with a
//!   [`rsskit_core::HashConfig`] computes it, and the inner-flow hash used to
//!   re-inject decapsulated or reassembled packets;
//! - [`reass`]: bounded, sans-I/O IPv4/IPv6 fragment reassembly.

#![warn(missing_docs)]

pub mod craft;
pub mod firewall;
pub mod hash;
pub mod io;
pub mod netisr;
pub mod output;
pub mod pipeline;
pub mod pool;
pub mod reass;
pub mod wire;
