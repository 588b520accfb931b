//! Building the usual policy.

use crate::Error;
use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy};

/// The CPUs online now (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> Vec<usize> {
    rsskit_linux::cpulist::online()
}

/// One worker per CPU in `cpus` (worker `i` on `cpus[i]`), the Microsoft
/// key, FreeBSD's default hash types, buckets round-robin over the workers.
///
/// ```
/// let p = rsskit_app::per_cpu_policy(&[0, 1])?;
/// assert_eq!(p.workers(), 2);
/// let owner = p.worker_of_bucket(1);
/// assert_eq!(p.cpu_of(owner), Some(rsskit_app::CpuId(1)));
/// assert!(rsskit_app::per_cpu_policy(&[]).is_err());
/// # Ok::<(), rsskit_app::Error>(())
/// ```
pub fn per_cpu_policy(cpus: &[usize]) -> Result<RssPolicy, Error> {
    let cpus: Vec<CpuId> = cpus.iter().map(|&c| CpuId(c as u32)).collect();
    Ok(RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &cpus, None)?)
}
