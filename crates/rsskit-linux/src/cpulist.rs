//! Kernel CPU-list syntax (`0-3,5,7-8`), as in `/sys/devices/system/cpu/online`,
//! `smp_affinity_list` and `taskset -c`.

use std::fmt;

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuListError(pub String);

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CpuListError {}

/// CPU ids are below this: Linux's largest NR_CPUS (CONFIG_MAXSMP). A
/// list can thus name at most this many CPUs.
pub const MAX_CPUS: usize = 8192;

/// Parses `0-3,5,7-8` into sorted, de-duplicated CPU ids, each below
/// [`MAX_CPUS`].
pub fn parse(s: &str) -> Result<Vec<usize>, CpuListError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(CpuListError("empty CPU list".into()));
    }
    let num = |t: &str| match t.trim().parse::<usize>() {
        Ok(n) if n < MAX_CPUS => Ok(n),
        _ => Err(CpuListError(format!("'{t}' in CPU list '{s}' is not a CPU number (0-{})", MAX_CPUS - 1))),
    };
    let mut cpus = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(CpuListError(format!("range '{part}' in CPU list '{s}' runs backwards")));
                }
                if b - a > 1 << 16 {
                    return Err(CpuListError(format!("range '{part}' in CPU list '{s}' is too large")));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU ids back into the compact syntax.
pub fn format(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end += 1;
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// The online CPUs (`/sys/devices/system/cpu/online`); falls back to
/// `0..available_parallelism` where sysfs is not mounted.
pub fn online() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s).ok())
        .unwrap_or_else(|| (0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).collect())
}

/// Parses a user's `--cpus LIST` and checks every CPU is online.
pub fn parse_online(s: &str) -> Result<Vec<usize>, CpuListError> {
    let cpus = parse(s)?;
    let online = online();
    if let Some(bad) = cpus.iter().find(|c| !online.contains(c)) {
        return Err(CpuListError(format!(
            "CPU {bad} in '{s}' does not exist or is offline (online CPUs: {})",
            format(&online)
        )));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(parse("0-3,5,7-8").unwrap(), vec![0, 1, 2, 3, 5, 7, 8]);
        assert_eq!(format(&[8, 7, 5, 3, 2, 1, 0]), "0-3,5,7-8");
        assert_eq!(parse("1\n").unwrap(), vec![1]);
    }

    #[test]
    fn errors() {
        assert!(parse("").is_err());
        assert!(parse("3-1").is_err());
        assert!(parse("a").is_err());
        assert!(parse("8192").unwrap_err().0.contains("0-8191"));
        assert!(parse("0-18446744073709551615").is_err());
        assert_eq!(parse("8191").unwrap(), vec![8191]);
        assert!(parse_online("8191").unwrap_err().0.contains("does not exist"));
    }
}
