//! rsskit's host application, on top of the platform layer `rsskit_linux`.
#![warn(missing_docs)]
pub mod hostcheck;
pub mod irqbalance;
pub mod keeper;
pub mod lock;
pub mod metrics;
pub mod nic_rebalance;
pub mod nicsteer;
pub mod persist;
pub mod plan;
pub mod softnet;
pub mod sysroot;
pub mod tune;
