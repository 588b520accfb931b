//! The setting model: which setting ([`Target`]), how its value is
//! written and compared ([`Kind`]), and what a valid value is. No I/O, so
//! that the plan can check its values with the same rules as `apply`.

use rsskit_linux::cpulist;
use rsskit_linux::netdev::{parse_hex_mask, valid_name};
use serde::{Deserialize, Serialize};

/// How a value is written and compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A sysfs CPU bitmap (`rps_cpus`, `xps_cpus`).
    CpuMask,
    /// A CPU list (`smp_affinity_list`).
    CpuList,
    /// A number (`rps_flow_cnt`, `rps_sock_flow_entries`).
    Count,
    /// The RSS indirection table (ethtool), comma-separated rings.
    RssTable,
    /// The RSS key (ethtool), hex.
    RssKey,
    /// Fields hashed for one flow type (ethtool), comma-separated names.
    HashFields,
    // nicres: NIC resources.
    /// Interrupt coalescing (ethtool): `field=N` pairs, comma-separated,
    /// each of [`COALESCE_FIELDS`] at most once; compared on the fields
    /// both values name (a plan names the ones it sets, a read names all).
    Coalesce,
    // symplan: symmetric hashing (issue 37 item 3).
    /// An RSS input transform (ethtool netlink): one of [`INPUT_XFRM_VALUES`].
    InputXfrm,
}

/// Which setting: its kind and what it belongs to. Everything `apply`
/// writes is one of these; the path or ethtool call is derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The RSS indirection table of a device (`ETHTOOL_SRSSH`).
    RssTable {
        /// Interface.
        device: String,
    },
    /// The RSS key of a device (`ETHTOOL_SRSSH`).
    RssKey {
        /// Interface.
        device: String,
    },
    /// The fields hashed for one flow type (`ETHTOOL_SRXFH`).
    HashFields {
        /// Interface.
        device: String,
        /// One of [`FLOW_TYPES`](rsskit_linux::ethtool::FLOW_TYPES).
        flow: &'static str,
    },
    /// `/proc/irq/N/smp_affinity_list` of one of the device's IRQs.
    IrqAffinity {
        /// Interface the IRQ serves.
        device: String,
        /// IRQ number.
        irq: u32,
    },
    /// `/sys/class/net/IF/queues/rx-N/rps_cpus`.
    RpsCpus {
        /// Interface.
        device: String,
        /// RX queue.
        queue: u32,
    },
    /// `/sys/class/net/IF/queues/rx-N/rps_flow_cnt`.
    RpsFlowCnt {
        /// Interface.
        device: String,
        /// RX queue.
        queue: u32,
    },
    /// `/sys/class/net/IF/queues/tx-N/xps_cpus`.
    XpsCpus {
        /// Interface.
        device: String,
        /// TX queue.
        queue: u32,
    },
    /// `/proc/sys/net/core/rps_sock_flow_entries` (global).
    RpsSockFlowEntries,
    /// `/sys/class/net/IF/threaded`: threaded NAPI (0 off).
    NapiThreaded {
        /// Interface.
        device: String,
    },
    /// The combined channel count of a device (`ETHTOOL_SCHANNELS`): set by
    /// a persisted plan (`persist apply`, the agent) and by a plan that
    /// changes it (`--channels`; then `apply` saves it, first).
    Channels {
        /// Interface.
        device: String,
    },
    // Threaded NAPI pinning and NAPI settings (napi):
    /// The CPUs NAPI thread `napi/IF-ID` may run on (`sched_setaffinity`),
    /// named by its NAPI id: toggling `threaded` re-creates the thread
    /// under a new PID, never a new id.
    NapiThreadCpus {
        /// Interface.
        device: String,
        /// NAPI id.
        napi_id: u32,
    },
    /// `/sys/class/net/IF/napi_defer_hard_irqs`.
    NapiDeferHardIrqs {
        /// Interface.
        device: String,
    },
    /// `/sys/class/net/IF/gro_flush_timeout` (ns).
    GroFlushTimeout {
        /// Interface.
        device: String,
    },
    // nicres: ring sizes and interrupt coalescing.
    /// Descriptors per RX ring (`ETHTOOL_SRINGPARAM`, `ethtool -G IF rx N`).
    RxRing {
        /// Interface.
        device: String,
    },
    /// Descriptors per TX ring (`ETHTOOL_SRINGPARAM`, `ethtool -G IF tx N`).
    TxRing {
        /// Interface.
        device: String,
    },
    /// Interrupt coalescing (`ETHTOOL_SCOALESCE`, `ethtool -C`).
    Coalesce {
        /// Interface.
        device: String,
    },
    // symplan: symmetric hashing (issue 37 item 3).
    /// The RSS input transform of the main context (`ETHTOOL_MSG_RSS_SET`
    /// `input-xfrm`, `ethtool -X IF xfrm symmetric-xor`).
    InputXfrm {
        /// Interface.
        device: String,
    },
}

/// The kinds a save file names, as it spells them.
pub const TARGET_KINDS: [&str; 17] = [
    "rss_table",
    "rss_key",
    "hash_fields",
    "irq_affinity",
    "rps_cpus",
    "rps_flow_cnt",
    "xps_cpus",
    "rps_sock_flow_entries",
    "napi_threaded",
    // napi:
    "napi_thread_cpus",
    "napi_defer_hard_irqs",
    "gro_flush_timeout",
    // nicres
    "rx_ring",
    "tx_ring",
    "coalesce",
    "channels",
    // symplan
    "input_xfrm",
];

impl Target {
    /// How its value is written and compared.
    pub fn kind(&self) -> Kind {
        match self {
            Target::RssTable { .. } => Kind::RssTable,
            Target::RssKey { .. } => Kind::RssKey,
            Target::HashFields { .. } => Kind::HashFields,
            Target::IrqAffinity { .. } => Kind::CpuList,
            Target::RpsCpus { .. } | Target::XpsCpus { .. } => Kind::CpuMask,
            Target::RpsFlowCnt { .. }
            | Target::RpsSockFlowEntries
            | Target::Channels { .. }
            | Target::NapiThreaded { .. } => Kind::Count,
            // napi:
            Target::NapiThreadCpus { .. } => Kind::CpuList,
            Target::NapiDeferHardIrqs { .. } | Target::GroFlushTimeout { .. } => Kind::Count,
            // nicres
            Target::RxRing { .. } | Target::TxRing { .. } => Kind::Count,
            Target::Coalesce { .. } => Kind::Coalesce,
            // symplan
            Target::InputXfrm { .. } => Kind::InputXfrm,
        }
    }

    /// Its kind as a save file names it (one of [`TARGET_KINDS`]).
    pub fn name(&self) -> &'static str {
        match self {
            Target::RssTable { .. } => "rss_table",
            Target::RssKey { .. } => "rss_key",
            Target::HashFields { .. } => "hash_fields",
            Target::IrqAffinity { .. } => "irq_affinity",
            Target::RpsCpus { .. } => "rps_cpus",
            Target::RpsFlowCnt { .. } => "rps_flow_cnt",
            Target::XpsCpus { .. } => "xps_cpus",
            Target::RpsSockFlowEntries => "rps_sock_flow_entries",
            Target::Channels { .. } => "channels",
            Target::NapiThreaded { .. } => "napi_threaded",
            // napi:
            Target::NapiThreadCpus { .. } => "napi_thread_cpus",
            Target::NapiDeferHardIrqs { .. } => "napi_defer_hard_irqs",
            Target::GroFlushTimeout { .. } => "gro_flush_timeout",
            // nicres
            Target::RxRing { .. } => "rx_ring",
            Target::TxRing { .. } => "tx_ring",
            Target::Coalesce { .. } => "coalesce",
            // symplan
            Target::InputXfrm { .. } => "input_xfrm",
        }
    }

    /// The interface, or `host` for the global setting.
    pub fn device(&self) -> &str {
        match self {
            Target::RssTable { device }
            | Target::RssKey { device }
            | Target::HashFields { device, .. }
            | Target::IrqAffinity { device, .. }
            | Target::RpsCpus { device, .. }
            | Target::RpsFlowCnt { device, .. }
            | Target::XpsCpus { device, .. }
            | Target::Channels { device }
            | Target::NapiThreaded { device } => device,
            // napi:
            Target::NapiThreadCpus { device, .. }
            | Target::NapiDeferHardIrqs { device }
            | Target::GroFlushTimeout { device } => device,
            // nicres
            Target::RxRing { device } | Target::TxRing { device } | Target::Coalesce { device } => device,
            // symplan
            Target::InputXfrm { device } => device,
            Target::RpsSockFlowEntries => "host",
        }
    }

    /// What it is, for people (`rx-0 rps_cpus`); `irq_name` is the IRQ's
    /// action name in `/proc/interrupts`, if known.
    pub fn describe(&self, irq_name: Option<&str>) -> String {
        match self {
            Target::RssTable { .. } => "RSS indirection table".into(),
            Target::RssKey { .. } => "RSS key".into(),
            Target::HashFields { flow, .. } => format!("{flow} hashed fields"),
            Target::IrqAffinity { irq, .. } => match irq_name {
                Some(n) => format!("IRQ {irq} ({n}) affinity"),
                None => format!("IRQ {irq} affinity"),
            },
            Target::RpsCpus { queue, .. } => format!("rx-{queue} rps_cpus"),
            Target::RpsFlowCnt { queue, .. } => format!("rx-{queue} rps_flow_cnt"),
            Target::XpsCpus { queue, .. } => format!("tx-{queue} xps_cpus"),
            Target::RpsSockFlowEntries => "net.core.rps_sock_flow_entries".into(),
            Target::Channels { .. } => "combined channels".into(),
            Target::NapiThreaded { .. } => "threaded NAPI".into(),
            // napi:
            Target::NapiThreadCpus { device, napi_id } => format!("thread napi/{device}-{napi_id} CPUs"),
            Target::NapiDeferHardIrqs { .. } => "napi_defer_hard_irqs".into(),
            Target::GroFlushTimeout { .. } => "gro_flush_timeout (ns)".into(),
            // nicres
            Target::RxRing { .. } => "RX ring size".into(),
            Target::TxRing { .. } => "TX ring size".into(),
            Target::Coalesce { .. } => "interrupt coalescing".into(),
            // symplan
            Target::InputXfrm { .. } => "RSS input transform (input_xfrm)".into(),
        }
    }
}

/// One setting: which, its value now and the value to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Which setting.
    pub target: Target,
    /// What it is, for people: `rx-0 rps_cpus`, `IRQ 41 (eth0-TxRx-1) affinity`.
    pub what: String,
    /// The value now (`None`: unreadable, or not a valid value of its kind).
    pub old: Option<String>,
    /// The value to write (always a valid value of its kind: [`valid_value`]).
    pub new: String,
}

impl Setting {
    /// Whether `new` is already in place.
    pub fn unchanged(&self) -> bool {
        self.old.as_deref().is_some_and(|o| same(self.kind(), o, &self.new))
    }

    /// How its value is written and compared.
    pub fn kind(&self) -> Kind {
        self.target.kind()
    }

    /// The interface, or `host`.
    pub fn device(&self) -> &str {
        self.target.device()
    }
}

/// Whether two values of a kind mean the same.
pub fn same(kind: Kind, a: &str, b: &str) -> bool {
    match kind {
        Kind::CpuMask => match (parse_hex_mask(a), parse_hex_mask(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::CpuList => match (cpulist::parse(a), cpulist::parse(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::Count => match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        Kind::RssTable | Kind::RssKey => a.trim().eq_ignore_ascii_case(b.trim()),
        Kind::HashFields => match (fields_mask(a), fields_mask(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a.trim() == b.trim(),
        },
        // nicres
        Kind::Coalesce => match (coalesce_pairs(a), coalesce_pairs(b)) {
            (Ok(x), Ok(y)) => x.iter().all(|(k, v)| y.iter().all(|(k2, v2)| k != k2 || v == v2)),
            _ => a.trim() == b.trim(),
        },
        // symplan
        Kind::InputXfrm => a.trim() == b.trim(),
    }
}

/// Longest RSS key accepted (bytes); drivers use 40 or 52.
pub const MAX_KEY_BYTES: usize = 256;
/// Most indirection table entries accepted; drivers use 64..=2048.
pub const MAX_TABLE_ENTRIES: usize = 65_536;

/// Whether `v` is a value of `kind` as rsskit writes it; `Err` says why not
/// (without quoting `v`, which may be anything).
pub fn valid_value(kind: Kind, v: &str) -> Result<(), String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match kind {
        Kind::CpuMask => {
            let words = v.split(',').count();
            if words > cpulist::MAX_CPUS / 32 || !v.bytes().all(|b| b.is_ascii_hexdigit() || b == b',') {
                return Err("not a CPU mask (hex words separated by commas)".into());
            }
            parse_hex_mask(v).map(drop).map_err(|_| "not a CPU mask (32-bit hex words)".into())
        }
        Kind::CpuList => {
            if v.len() > 8 * cpulist::MAX_CPUS
                || !v.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-')
            {
                return Err("not a CPU list (like 0-3,5)".into());
            }
            cpulist::parse(v).map(drop).map_err(|_| "not a CPU list (like 0-3,5)".into())
        }
        Kind::Count => match digits(v) && v.len() <= 20 && v.parse::<u64>().is_ok() {
            true => Ok(()),
            false => Err("not a count (a decimal number)".into()),
        },
        Kind::RssKey => {
            let ok = !v.is_empty()
                && v.len().is_multiple_of(2)
                && v.len() <= 2 * MAX_KEY_BYTES
                && v.bytes().all(|b| b.is_ascii_hexdigit());
            if ok {
                Ok(())
            } else {
                Err(format!("not an RSS key (an even number of hex digits, at most {MAX_KEY_BYTES} bytes)"))
            }
        }
        Kind::RssTable => {
            let n = v.split(',').count();
            if n > MAX_TABLE_ENTRIES
                || !v.split(',').all(|x| digits(x) && x.len() <= 10 && x.parse::<u32>().is_ok())
            {
                return Err(format!(
                    "not an indirection table (at most {MAX_TABLE_ENTRIES} ring numbers separated by commas)"
                ));
            }
            Ok(())
        }
        Kind::HashFields => {
            let names: Vec<&str> = v.split(',').collect();
            if v.is_empty() || names.len() > 16 || rsskit_linux::ethtool::rxh_from_names(&names).is_err() {
                return Err("not a list of hashed fields (ip_src,ip_dst,l4_src_port,...)".into());
            }
            Ok(())
        }
        // nicres
        Kind::Coalesce => coalesce_pairs(v).map(drop),
        // symplan
        Kind::InputXfrm => match input_xfrm_bits(v) {
            Some(_) => Ok(()),
            None => Err(format!("not an input transform (one of {})", INPUT_XFRM_VALUES.join(", "))),
        },
    }
}

// symplan: the input transform's text.
/// The input transforms rsskit writes and restores, as the kernel's
/// ethtool strings name them (`none`: no transform).
pub const INPUT_XFRM_VALUES: [&str; 3] = ["none", "sym-xor", "sym-or-xor"];

/// The `RXH_XFRM_*` bits of a value of [`INPUT_XFRM_VALUES`].
pub fn input_xfrm_bits(v: &str) -> Option<u8> {
    let i = INPUT_XFRM_VALUES.iter().position(|x| *x == v.trim())?;
    Some([0, rsskit_core::xfrm::RXH_XFRM_SYM_XOR, rsskit_core::xfrm::RXH_XFRM_SYM_OR_XOR][i])
}

/// The value of a device's `input_xfrm` names as RSS reads report them;
/// `None` for a transform rsskit does not model (both bits, or another).
pub fn input_xfrm_text(names: &[String]) -> Option<String> {
    match names {
        [] => Some("none".into()),
        [one] if input_xfrm_bits(one).is_some() && one != "none" => Some(one.clone()),
        _ => None,
    }
}

// nicres: the coalescing value's text.
/// The coalescing fields rsskit models, as a coalescing value names them
/// (`struct ethtool_coalesce`'s names, shortened as `ethtool -C` does).
pub const COALESCE_FIELDS: [&str; 6] =
    ["adaptive_rx", "adaptive_tx", "rx_usecs", "rx_frames", "tx_usecs", "tx_frames"];

/// Largest usecs or frames value accepted (the kernel's fields are 32-bit;
/// no driver takes more than a second).
pub const MAX_COALESCE: u32 = 1_000_000;

/// A coalescing value's `field=N` pairs, checked: known fields, each once,
/// at least one, `adaptive_*` 0 or 1, the others at most [`MAX_COALESCE`].
pub fn coalesce_pairs(v: &str) -> Result<Vec<(&'static str, u32)>, String> {
    let bad = || {
        format!(
            "not a coalescing value (field=N pairs separated by commas; fields: {})",
            COALESCE_FIELDS.join(", ")
        )
    };
    let mut out: Vec<(&'static str, u32)> = Vec::new();
    for part in v.trim().split(',') {
        let (k, n) = part.split_once('=').ok_or_else(bad)?;
        let k = COALESCE_FIELDS.iter().find(|f| **f == k.trim()).ok_or_else(bad)?;
        let n = n.trim();
        if n.is_empty() || n.len() > 10 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u32 = n.parse().map_err(|_| bad())?;
        let limit = if k.starts_with("adaptive") { 1 } else { MAX_COALESCE };
        if n > limit || out.iter().any(|(f, _)| f == k) {
            return Err(bad());
        }
        out.push((k, n));
    }
    Ok(out)
}

/// The coalescing value of every modelled field of `c` (what a read shows
/// and a save keeps: restoring it puts back all six).
pub fn coalesce_text(c: &rsskit_linux::ethtool::params::Coalesce) -> String {
    format!(
        "adaptive_rx={},adaptive_tx={},rx_usecs={},rx_frames={},tx_usecs={},tx_frames={}",
        u8::from(c.adaptive_rx),
        u8::from(c.adaptive_tx),
        c.rx_usecs,
        c.rx_frames,
        c.tx_usecs,
        c.tx_frames
    )
}

/// `c` with the fields `v` names set to its values (`v` checked first).
pub fn coalesce_over(
    c: &rsskit_linux::ethtool::params::Coalesce,
    v: &str,
) -> Result<rsskit_linux::ethtool::params::Coalesce, String> {
    let mut c = *c;
    for (k, n) in coalesce_pairs(v)? {
        match k {
            "adaptive_rx" => c.adaptive_rx = n != 0,
            "adaptive_tx" => c.adaptive_tx = n != 0,
            "rx_usecs" => c.rx_usecs = n,
            "rx_frames" => c.rx_frames = n,
            "tx_usecs" => c.tx_usecs = n,
            _ => c.tx_frames = n,
        }
    }
    Ok(c)
}

pub(super) fn fields_mask(s: &str) -> Result<u64, String> {
    let names: Vec<&str> = s.split(',').map(str::trim).filter(|x| !x.is_empty()).collect();
    rsskit_linux::ethtool::rxh_from_names(&names)
}

pub(super) fn table_text(t: &[u32]) -> String {
    t.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `s` in quotes with control and non-ASCII characters escaped: safe to
/// print whatever a file holds.
pub fn quoted(s: &str) -> String {
    let cut: String = s.chars().take(64).collect();
    let more = if cut.len() < s.len() { "..." } else { "" };
    format!("\"{}{more}\"", cut.escape_default())
}

/// `s` with control characters escaped (a terminal shows them as text).
pub fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// A device name as given, or quoted and escaped when it holds anything
/// but plain ASCII (the kernel allows control characters in names).
pub(super) fn shown(d: &str) -> String {
    if valid_name(d) && d.chars().all(|c| c.is_ascii_graphic()) {
        d.to_string()
    } else {
        quoted(d)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn comparisons() {
        assert!(same(Kind::CpuMask, "0000000f", "f"));
        assert!(same(Kind::CpuMask, "00000000,00000001", "1"));
        assert!(!same(Kind::CpuMask, "3", "1"));
        assert!(same(Kind::CpuList, "0-2", "0,1,2"));
        assert!(same(Kind::Count, "0\n", "0"));
        assert!(!same(Kind::Count, "1000", "1024"));
        assert!(same(Kind::RssKey, "6D5A", "6d5a"));
        assert!(same(Kind::HashFields, "ip_dst,ip_src", "ip_src,ip_dst"));
        assert!(!same(Kind::HashFields, "ip_src,ip_dst", "ip_src,ip_dst,l4_src_port,l4_dst_port"));
    }

    pub(crate) fn rps(device: &str, old: &str, new: &str) -> Setting {
        Setting {
            target: Target::RpsCpus { device: device.into(), queue: 0 },
            what: "rx-0 rps_cpus".into(),
            old: Some(old.into()),
            new: new.into(),
        }
    }

    #[test]
    fn values_by_kind() {
        assert!(valid_value(Kind::CpuMask, "00000000,0000000f").is_ok());
        assert!(valid_value(Kind::CpuMask, &"0,".repeat(300)).is_err(), "more words than CPUs exist");
        assert!(valid_value(Kind::CpuList, "0-3,5").is_ok());
        assert!(valid_value(Kind::CpuList, "0-99999").is_err());
        assert!(valid_value(Kind::Count, "32768").is_ok());
        assert!(valid_value(Kind::Count, "-1").is_err());
        assert!(valid_value(Kind::RssTable, "0,1,2,3").is_ok());
        assert!(valid_value(Kind::RssTable, "0,,1").is_err());
        assert!(valid_value(Kind::RssKey, &"6d".repeat(40)).is_ok());
        assert!(valid_value(Kind::HashFields, "ip_src,ip_dst").is_ok());
        assert!(valid_value(Kind::HashFields, "").is_err());
    }

    // nicres
    #[test]
    fn coalescing_values() {
        assert!(valid_value(Kind::Coalesce, "adaptive_rx=0,rx_usecs=50").is_ok());
        for bad in
            ["", "rx_usecs", "rx_usecs=", "rx_usecs=-1", "adaptive_rx=2", "rx_usecs=1,rx_usecs=2", "x=1"]
        {
            assert!(valid_value(Kind::Coalesce, bad).is_err(), "{bad}");
        }
        assert!(valid_value(Kind::Coalesce, &format!("rx_usecs={}", MAX_COALESCE + 1)).is_err());
        let full = "adaptive_rx=0,adaptive_tx=1,rx_usecs=50,rx_frames=0,tx_usecs=3,tx_frames=0";
        // A plan names only what it sets: compared on those fields.
        assert!(same(Kind::Coalesce, full, "adaptive_rx=0,rx_usecs=50"));
        assert!(!same(Kind::Coalesce, full, "adaptive_rx=0,rx_usecs=51"));
        assert!(!same(Kind::Coalesce, full, "adaptive_tx=0"));
        let c = coalesce_over(&Default::default(), full).unwrap();
        assert_eq!(coalesce_text(&c), full, "every field round-trips");
    }

    // symplan
    #[test]
    fn input_xfrm_values() {
        for v in INPUT_XFRM_VALUES {
            assert!(valid_value(Kind::InputXfrm, v).is_ok(), "{v}");
        }
        for bad in ["", "symmetric-xor", "sym-xor,sym-or-xor", "bit5", "1"] {
            assert!(valid_value(Kind::InputXfrm, bad).is_err(), "{bad}");
        }
        assert_eq!(input_xfrm_bits("sym-or-xor"), Some(2));
        assert_eq!(input_xfrm_text(&[]).as_deref(), Some("none"));
        assert_eq!(input_xfrm_text(&["sym-xor".into()]).as_deref(), Some("sym-xor"));
        assert_eq!(input_xfrm_text(&["sym-xor".into(), "sym-or-xor".into()]), None, "not modelled");
        assert_eq!(input_xfrm_text(&["bit7".into()]), None);
    }
}
