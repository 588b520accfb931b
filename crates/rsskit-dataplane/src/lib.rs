//! rsskit user-space data plane.
//!
//! - [`wire`]: checked zero-copy parsing (Ethernet, VLAN, IPv4/IPv6 with
//!   extension headers, UDP/TCP/ICMP, IPIP/6in4/GRE decapsulation), every
//!   reject counted by [`wire::DropReason`];
//! - [`hash`]: the RSS hash of a packet exactly as a NIC configured with a
//!   [`rsskit_core::HashConfig`] computes it, and the inner-flow hash used to
//!   re-inject decapsulated or reassembled packets;
//! - [`reass`]: bounded, sans-I/O IPv4/IPv6 fragment reassembly;
//! - [`netisr`]: per-CPU dispatch over per-pair SPSC rings, with
//!   [`output`] (send aggregation) and [`pool`] (frame buffers);
//! - [`firewall`]: the per-CPU stateful firewall;
//! - [`io`]: sources and sinks (memory, pcap/pcapng, AF_PACKET) and
//!   [`io::spec`], the inputs and outputs a command names;
//! - the builders the commands call: [`pipeline::PipelineSpec`] and
//!   [`firewall::FirewallSpec`];
//! - [`livecheck`]: does a NIC steer by the RSS setup its driver reports
//!   (the sans-I/O core of `rsskit check --live`);
//! - [`craft`]: frames built by hand (tests, generators).
//!
//! Errors are typed ([`netisr::NetisrError`], [`io::pcap::CaptureError`],
//! [`io::spec::SpecError`]); threads start pinned through
//! `rsskit_linux::affinity::spawn_pinned`.

#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod craft;
pub mod firewall;
pub mod hash;
pub mod io;
pub mod livecheck;
pub mod netisr;
pub mod output;
pub mod pipeline;
pub mod pool;
pub mod reass;
pub mod wire;
