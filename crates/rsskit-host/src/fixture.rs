//! The fixture driver (feature `fixtures`, and this crate's own tests): a
//! [`Sysroot::tree`](crate::sysroot::Sysroot::tree)'s ethtool answers come
//! from `DIR/ethtool/IF.json`, a fake driver, and `ETHTOOL_SRSSH` /
//! `ETHTOOL_SRXFH` writes are built as the ioctl's bytes and parsed back as
//! the kernel would before they update that file. Kept out of the shipped
//! binary: nothing there can point rsskit's reads and writes at a tree.

use crate::sysroot::SysrootError;
use rsskit_core::flowrule::parse_rule;
use rsskit_linux::ethtool::params::{Coalesce, Rings};
use rsskit_linux::ethtool::rxnfc::{self, ContextRss, RuleEntry, RuleTable};
use rsskit_linux::ethtool::{self, Channels, FlowHash, Reported, Rss};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The fake driver of a test tree: `DIR/ethtool/IF.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct FakeDriver {
    /// The driver name sysfs would show.
    #[serde(default)]
    pub driver: Option<String>,
    /// `combined` channel count, if the driver reports channels.
    #[serde(default)]
    pub combined: Option<u32>,
    /// Key (hex) and table; absent = no RSS.
    #[serde(default)]
    pub rss: Option<FakeRss>,
    /// `RXH_*` mask per flow type (`udp4`...); absent = no `ETHTOOL_GRXFH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<BTreeMap<String, u64>>,
    /// Refuse `ETHTOOL_SRSSH` and `ETHTOOL_SRXFH` with this reason (a driver without `set_rxfh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuse_set: Option<String>,
    /// Flow classification rules, one line each in `flowrule`'s text
    /// (`udp4 dst-port 443 context 1 loc 3`); absent = no `ETHTOOL_GRXCLSRLCNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<String>>,
    /// Additional RSS contexts by id (`"1"`); each its key and table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contexts: BTreeMap<String, FakeRss>,
    // nicres: NIC resources.
    /// Ring sizes and maxima; absent = no `ETHTOOL_GRINGPARAM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rings: Option<Rings>,
    /// The driver rounds ring sizes up to a multiple of this (as e1000e
    /// and ixgbe round to 8); absent = kept as asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_align: Option<u32>,
    /// Interrupt coalescing; absent = no `ETHTOOL_GCOALESCE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalesce>,
    /// The driver refuses adaptive moderation (`ETHTOOL_SCOALESCE` with
    /// `use_adaptive_*` set: EOPNOTSUPP, as igb does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_adaptive: Option<bool>,
    /// Most combined channels (`max_combined`); absent = the count now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_combined: Option<u32>,
    // Service isolation (issue 33 item 3): a driver without RSS contexts.
    /// Refuse every RSS context (`ETHTOOL_GRSSH`/`SRSSH` with one) as
    /// `EOPNOTSUPP`: a driver without `create_rxfh_context`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_contexts: bool, // symplan: symmetric hashing (issue 37 item 3).
    /// `RXH_XFRM_*` bits the driver takes (`supported_input_xfrm`, as ice
    /// 1, mlx5 2); absent = none: any transform is refused as EOPNOTSUPP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_xfrm_supported: Option<u8>,
}

/// The fake RSS state of a test tree's driver.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct FakeRss {
    /// The key, hex.
    pub key: String,
    /// The indirection table: bucket -> RX queue.
    pub table: Vec<u32>,
    /// `input_xfrm` bits as `ETHTOOL_GRSSH` reports them (1 symmetric-xor,
    /// 2 symmetric-or-xor); absent = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_xfrm: Option<u8>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

fn read(dir: &Path, name: &str) -> Result<FakeDriver, SysrootError> {
    let path = path(dir, name);
    match fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| SysrootError::Fake { path, msg: e.to_string() }),
        // No file: a driver that implements nothing (as veth).
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FakeDriver::default()),
        Err(e) => Err(SysrootError::Fake { path, msg: e.to_string() }),
    }
}

/// What the fake driver of `name` reports: driver name, channels, RSS, hashed fields.
pub(crate) type DriverParts = (Option<String>, Reported<Channels>, Reported<Rss>, Reported<Vec<FlowHash>>);

/// Reads the fake driver of `name` as the ethtool ioctls would answer.
pub(crate) fn device(dir: &Path, name: &str) -> Result<DriverParts, SysrootError> {
    let f = read(dir, name)?;
    fn not<T>(what: &str) -> Reported<T> {
        Reported::Unsupported { reason: format!("{what}: operation not supported by the driver") }
    }
    let channels = match f.combined {
        Some(c) => {
            // nicres: max_combined from the file when it says.
            let max_combined = f.max_combined.unwrap_or(c).max(c);
            Reported::Supported(Channels { combined_count: c, max_combined, ..Channels::default() })
        }
        None => not("ETHTOOL_GCHANNELS"),
    };
    let rss = match &f.rss {
        Some(r) => Reported::Supported(Rss {
            key: unhex(&r.key).unwrap_or_default(),
            indir: r.table.clone(),
            hfunc: vec!["toeplitz".into()],
            input_xfrm: ethtool::xfrm_names(r.input_xfrm.unwrap_or(0)),
            source: "ETHTOOL_GRSSH",
        }),
        None => not("ETHTOOL_GRSSH"),
    };
    let hash = match &f.hash {
        Some(m) => Reported::Supported(
            ethtool::FLOW_TYPES
                .iter()
                .filter_map(|ft| {
                    let raw = *m.get(ft.name)?;
                    Some(FlowHash { flow: ft.name, raw, fields: ethtool::rxh_fields(raw) })
                })
                .collect(),
        ),
        None => not("ETHTOOL_GRXFH"),
    };
    Ok((f.driver.clone(), channels, rss, hash))
}

/// The fake driver's rules as the ioctls would answer: each line parsed,
/// built as the kernel's `ethtool_rxnfc` bytes, and decoded from them.
pub(crate) fn rules(dir: &Path, name: &str) -> Result<Reported<RuleTable>, SysrootError> {
    let f = read(dir, name)?;
    let Some(lines) = &f.rules else {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_GRXCLSRLCNT: operation not supported by the driver".into(),
        });
    };
    let mut entries = Vec::new();
    for line in lines {
        let rule =
            parse_rule(line).map_err(|e| SysrootError::Fake { path: path(dir, name), msg: e.to_string() })?;
        let bytes = rxnfc::encode_rule(rxnfc::ETHTOOL_SRXCLSRLINS, &rule);
        entries.push(RuleEntry { location: rule.location, rule: rxnfc::decode_rule(&bytes) });
    }
    entries.sort_by_key(|e| e.location);
    Ok(Reported::Supported(RuleTable { size: 1024, special_locations: true, entries }))
}

/// The fake driver's RSS context `context` (`ETHTOOL_GRSSH` with `rss_context`).
pub(crate) fn context_rss(
    dir: &Path,
    name: &str,
    context: u32,
) -> Result<Reported<ContextRss>, SysrootError> {
    let f = read(dir, name)?;
    match f.contexts.get(&context.to_string()) {
        Some(r) => Ok(Reported::Supported(ContextRss {
            context,
            rss: Rss {
                key: unhex(&r.key).unwrap_or_default(),
                indir: r.table.clone(),
                hfunc: vec!["toeplitz".into()],
                input_xfrm: vec![],
                source: "ETHTOOL_GRSSH",
            },
        })),
        None => Ok(Reported::Unsupported {
            reason: "ETHTOOL_GRSSH: No such file or directory (os error 2)".into(),
        }),
    }
}

/// `ETHTOOL_SRSSH` on the fake driver.
pub(crate) fn set_rss(
    dir: &Path,
    name: &str,
    indir: Option<&[u32]>,
    key: Option<&[u8]>,
) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return Ok(Reported::Unsupported { reason: format!("ETHTOOL_SRSSH: {r}") });
    }
    let Some(cur) = f.rss.as_mut() else {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_SRSSH: operation not supported by the driver".into(),
        });
    };
    // The request as bytes, parsed as the kernel does.
    let req = ethtool::rssh_set_request(indir, key);
    let (t, k) = match ethtool::parse_set_request(&req) {
        Ok(x) => x,
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    let rings = f.combined.unwrap_or(u32::MAX);
    if let Some(t) = t {
        if t.len() != cur.table.len() || t.iter().any(|&r| r >= rings) {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_SRSSH: Invalid argument (os error 22) (the driver refused the \
                         table: a ring it does not have, or a size other than the device's)"
                    .into(),
            });
        }
        cur.table = t;
    }
    if let Some(k) = k {
        if k.len() != unhex(&cur.key).map_or(0, |b| b.len()) {
            return Ok(Reported::Unsupported {
                reason: "ETHTOOL_SRSSH: Invalid argument (os error 22) (key size other than the \
                         device's)"
                    .into(),
            });
        }
        cur.key = hex(&k);
    }
    let path = path(dir, name);
    let text = serde_json::to_string_pretty(&f).expect("plain data");
    fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })?;
    Ok(Reported::Supported(()))
}

/// symplan: `ETHTOOL_MSG_RSS_SET` with only `input-xfrm` on the fake
/// driver: refused, as the kernel does, unless every bit is one the driver
/// supports; 0 (none) always taken, and kept as "absent" so that a restore
/// gives back the file it found.
pub(crate) fn set_input_xfrm(dir: &Path, name: &str, bits: u8) -> Result<Reported<()>, SysrootError> {
    const WHAT: &str = "ETHTOOL_MSG_RSS_SET";
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return refused(WHAT, r);
    }
    let supported = f.input_xfrm_supported.unwrap_or(0);
    let Some(cur) = f.rss.as_mut() else { return refused(WHAT, NOT_SUPPORTED) };
    if bits & !supported != 0 {
        return refused(WHAT, "Operation not supported (os error 95) (the driver has no such input_xfrm)");
    }
    cur.input_xfrm = (bits != 0).then_some(bits);
    let path = path(dir, name);
    let text = serde_json::to_string_pretty(&f).expect("plain data");
    fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })?;
    Ok(Reported::Supported(()))
}

/// `ETHTOOL_SRXFH` on the fake driver.
pub(crate) fn set_flow_hash(
    dir: &Path,
    name: &str,
    flow: &str,
    raw: u64,
) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return Ok(Reported::Unsupported { reason: format!("ETHTOOL_SRXFH: {r}") });
    }
    let Some(code) = ethtool::FLOW_TYPES.iter().find(|t| t.name == flow).map(|t| t.code) else {
        return Ok(Reported::Unsupported { reason: format!("ETHTOOL_SRXFH: unknown flow type '{flow}'") });
    };
    let Some(map) = f.hash.as_mut() else {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_SRXFH: operation not supported by the driver".into(),
        });
    };
    // The request as bytes, parsed as the kernel does.
    let (flow, raw) = match ethtool::parse_srxfh_request(&ethtool::srxfh_request(code, raw)) {
        Ok(x) => x,
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    map.insert(flow.to_string(), raw);
    let path = path(dir, name);
    let text = serde_json::to_string_pretty(&f).expect("plain data");
    fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })?;
    Ok(Reported::Supported(()))
}

// ------------------------------------------------ service isolation writes

const NOT_SUPPORTED: &str = "operation not supported by the driver";

fn write_back(dir: &Path, name: &str, f: &FakeDriver) -> Result<(), SysrootError> {
    let path = path(dir, name);
    let text = serde_json::to_string_pretty(f).expect("plain data");
    fs::write(&path, text).map_err(|e| SysrootError::Fake { path, msg: e.to_string() })
}

fn refused<T>(what: &str, why: &str) -> Result<Reported<T>, SysrootError> {
    Ok(Reported::Unsupported { reason: format!("{what}: {why}") })
}

/// Whether the fake driver has RSS contexts (the probe of `ETHTOOL_GRSSH` with a context).
pub(crate) fn context_support(dir: &Path, name: &str) -> Result<Reported<()>, SysrootError> {
    let f = read(dir, name)?;
    if f.no_contexts || f.rss.is_none() {
        return refused("ETHTOOL_GRSSH with an RSS context", NOT_SUPPORTED);
    }
    Ok(Reported::Supported(()))
}

/// `ETHTOOL_SRSSH` with `ETH_RXFH_CONTEXT_ALLOC`: the request built as bytes,
/// parsed as the kernel does; the new context gets the lowest free id.
pub(crate) fn create_context(
    dir: &Path,
    name: &str,
    indir: &[u32],
    key: Option<&[u8]>,
) -> Result<Reported<u32>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return refused("ETHTOOL_SRSSH", r);
    }
    let Some(main) = f.rss.clone().filter(|_| !f.no_contexts) else {
        return refused("ETHTOOL_SRSSH", NOT_SUPPORTED);
    };
    let main_key = unhex(&main.key).unwrap_or_default();
    let req = rxnfc::context_set_request(rxnfc::ETH_RXFH_CONTEXT_ALLOC, indir, key);
    let (indir, key) = match rxnfc::parse_context_request(&req, main.table.len(), main_key.len()) {
        Ok(rxnfc::ContextRequest::Create { indir, key }) => (indir, key),
        Ok(other) => return refused("ETHTOOL_SRSSH", &format!("parsed as {other:?}")),
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    let rings = f.combined.unwrap_or(u32::MAX);
    if indir.iter().any(|&q| q >= rings) {
        return refused("ETHTOOL_SRSSH", "Invalid argument (os error 22) (a ring the device does not have)");
    }
    let id = (1u32..).find(|i| !f.contexts.contains_key(&i.to_string())).expect("a free id");
    let key = hex(&key.unwrap_or(main_key));
    f.contexts.insert(id.to_string(), FakeRss { key, table: indir, input_xfrm: None });
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(id))
}

/// `ETHTOOL_SRSSH` deleting context `id`. As kernels since 6.13
/// (`ethtool_check_rss_ctx_busy`), a context a rule still names is refused
/// (`EBUSY`): rules go first. An unknown id is `ENOENT`, as the kernel's.
pub(crate) fn delete_context(dir: &Path, name: &str, id: u32) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return refused("ETHTOOL_SRSSH", r);
    }
    let Some(main) = f.rss.clone().filter(|_| !f.no_contexts) else {
        return refused("ETHTOOL_SRSSH", NOT_SUPPORTED);
    };
    let req = rxnfc::context_delete_request(id);
    let id = match rxnfc::parse_context_request(&req, main.table.len(), 0) {
        Ok(rxnfc::ContextRequest::Delete { context }) => context,
        Ok(other) => return refused("ETHTOOL_SRSSH", &format!("parsed as {other:?}")),
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    if !f.contexts.contains_key(&id.to_string()) {
        return refused("ETHTOOL_SRSSH", "No such file or directory (os error 2)");
    }
    let used = f.rules.iter().flatten().filter_map(|l| parse_rule(l).ok()).any(
        |r| matches!(r.action, rsskit_core::flowrule::RuleAction::Context { context, .. } if context == id),
    );
    if used {
        return refused("ETHTOOL_SRSSH", "Device or resource busy (os error 16) (a rule uses the context)");
    }
    f.contexts.remove(&id.to_string());
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(()))
}

/// `ETHTOOL_SRXCLSRLINS`: the request built as bytes and decoded; at
/// `RX_CLS_LOC_ANY` the highest free location is taken (ethtool's own
/// choice for "any": the lowest priority), else the asked one if free.
pub(crate) fn insert_rule(
    dir: &Path,
    name: &str,
    rule: &rsskit_core::flowrule::FlowRule,
    any_location: bool,
) -> Result<Reported<u32>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return refused("ETHTOOL_SRXCLSRLINS", r);
    }
    let req = rxnfc::rule_insert_request(rule, any_location);
    let (loc, mut rule) = match rxnfc::parse_rule_insert(&req) {
        Ok(x) => x,
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    let contexts = f.contexts.clone();
    let Some(lines) = f.rules.as_mut() else {
        return refused("ETHTOOL_SRXCLSRLINS", NOT_SUPPORTED);
    };
    let taken: Vec<u32> = lines.iter().filter_map(|l| parse_rule(l).ok()).map(|r| r.location).collect();
    if let rsskit_core::flowrule::RuleAction::Context { context, .. } = rule.action {
        if context != 0 && !contexts.contains_key(&context.to_string()) {
            return refused("ETHTOOL_SRXCLSRLINS", "Invalid argument (os error 22) (no such RSS context)");
        }
    }
    let loc = if loc == rxnfc::RX_CLS_LOC_ANY {
        match (0..1024u32).rev().find(|l| !taken.contains(l)) {
            Some(l) => l,
            None => return refused("ETHTOOL_SRXCLSRLINS", "No space left on device (os error 28)"),
        }
    } else if loc >= 1024 || taken.contains(&loc) {
        return refused(
            "ETHTOOL_SRXCLSRLINS",
            "Invalid argument (os error 22) (location taken or out of range)",
        );
    } else {
        loc
    };
    rule.location = loc;
    lines.push(rule.to_string());
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(loc))
}

/// `ETHTOOL_SRXCLSRLDEL` of the rule at `location`.
pub(crate) fn delete_rule(dir: &Path, name: &str, location: u32) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    if let Some(r) = &f.refuse_set {
        return refused("ETHTOOL_SRXCLSRLDEL", r);
    }
    let loc = match rxnfc::parse_rule_delete(&rxnfc::rule_delete_request(location)) {
        Ok(l) => l,
        Err(e) => return Ok(Reported::Unsupported { reason: e }),
    };
    let Some(lines) = f.rules.as_mut() else {
        return refused("ETHTOOL_SRXCLSRLDEL", NOT_SUPPORTED);
    };
    let before = lines.len();
    lines.retain(|l| parse_rule(l).map_or(true, |r| r.location != loc));
    if lines.len() == before {
        return refused("ETHTOOL_SRXCLSRLDEL", "No such file or directory (os error 2)");
    }
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(()))
}

/// napi: pins a fake kernel thread: its `proc/PID/status` gets the new
/// `Cpus_allowed_list` (a test tree's PIDs are not this machine's).
pub(crate) fn set_thread_cpus(
    _dir: &Path,
    roots: &rsskit_linux::netdev::Roots,
    pid: u32,
    cpus: &[usize],
) -> Result<Reported<()>, SysrootError> {
    let path = roots.proc.join(format!("{pid}/status"));
    let bad = |msg: String| SysrootError::Fake { path: path.clone(), msg };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    let list = rsskit_linux::cpulist::format(cpus);
    let out: Vec<String> = text
        .lines()
        .map(|l| match l.starts_with("Cpus_allowed_list:") {
            true => format!("Cpus_allowed_list:\t{list}"),
            false => l.to_string(),
        })
        .collect();
    std::fs::write(&path, out.join("\n") + "\n").map_err(|e| bad(e.to_string()))?;
    Ok(Reported::Supported(()))
}

// nicres: ring sizes and coalescing on the fake driver.

fn not_supported<T>(what: &str) -> Reported<T> {
    Reported::Unsupported { reason: format!("{what}: operation not supported by the driver") }
}

/// `ETHTOOL_GRINGPARAM` on the fake driver.
pub(crate) fn rings(dir: &Path, name: &str) -> Result<Reported<Rings>, SysrootError> {
    Ok(read(dir, name)?.rings.map_or_else(|| not_supported("ETHTOOL_GRINGPARAM"), Reported::Supported))
}

/// `ETHTOOL_SRINGPARAM` on the fake driver: refused past the maxima or at
/// 0 (as the kernel's `ethnl_set_rings` and the ioctl do), rounded up to
/// `ring_align` when the file says.
pub(crate) fn set_rings(dir: &Path, name: &str, rx: u32, tx: u32) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    let align = f.ring_align.unwrap_or(1).max(1);
    let Some(r) = f.rings.as_mut() else { return Ok(not_supported("ETHTOOL_SRINGPARAM")) };
    if rx == 0 || tx == 0 || rx > r.rx_max || tx > r.tx_max {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_SRINGPARAM: Invalid argument (os error 22)".into(),
        });
    }
    r.rx = rx.div_ceil(align).saturating_mul(align).min(r.rx_max);
    r.tx = tx.div_ceil(align).saturating_mul(align).min(r.tx_max);
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(()))
}

/// `ETHTOOL_GCOALESCE` on the fake driver.
pub(crate) fn coalesce(dir: &Path, name: &str) -> Result<Reported<Coalesce>, SysrootError> {
    Ok(read(dir, name)?.coalesce.map_or_else(|| not_supported("ETHTOOL_GCOALESCE"), Reported::Supported))
}

/// `ETHTOOL_SCOALESCE` on the fake driver.
pub(crate) fn set_coalesce(dir: &Path, name: &str, c: &Coalesce) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    if f.coalesce.is_none() {
        return Ok(not_supported("ETHTOOL_SCOALESCE"));
    }
    if f.no_adaptive == Some(true) && (c.adaptive_rx || c.adaptive_tx) {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_SCOALESCE: Operation not supported (os error 95)".into(),
        });
    }
    f.coalesce = Some(*c);
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(()))
}

/// `ETHTOOL_SCHANNELS` (combined) on the fake driver, with what the
/// kernel and an MSI-X driver do around it: refused past `max_combined`
/// or while the table names a queue past the new count; queue directories
/// created (RPS and XPS off) or removed; one IRQ per new queue, numbered
/// after the highest, named as queue 0's, on every online CPU; the IRQs of
/// removed queues gone. Queues and IRQs that stay are not touched.
pub(crate) fn set_channels(
    dir: &Path,
    roots: &rsskit_linux::netdev::Roots,
    name: &str,
    n: u32,
) -> Result<Reported<()>, SysrootError> {
    let mut f = read(dir, name)?;
    let Some(cur) = f.combined else { return Ok(not_supported("ETHTOOL_SCHANNELS")) };
    let max = f.max_combined.unwrap_or(cur).max(cur);
    let table_past = f.rss.as_ref().is_some_and(|r| r.table.iter().any(|&q| q >= n));
    if n == 0 || n > max || table_past {
        return Ok(Reported::Unsupported {
            reason: "ETHTOOL_SCHANNELS: Invalid argument (os error 22)".into(),
        });
    }
    let fake = |e: io::Error| SysrootError::Fake { path: roots.sys.clone(), msg: e.to_string() };
    let queues = roots.sys.join(format!("class/net/{name}/queues"));
    let (cur, n) = (cur as usize, n as usize);
    for q in n..cur {
        fs::remove_dir_all(queues.join(format!("rx-{q}"))).map_err(fake)?;
        fs::remove_dir_all(queues.join(format!("tx-{q}"))).map_err(fake)?;
    }
    for q in cur..n {
        for (d, files) in [
            ("rx", &[("rps_cpus", "00000000\n"), ("rps_flow_cnt", "0\n")][..]),
            ("tx", &[("xps_cpus", "00000000\n")][..]),
        ] {
            let qd = queues.join(format!("{d}-{q}"));
            fs::create_dir_all(&qd).map_err(fake)?;
            for (file, text) in files {
                fs::write(qd.join(file), text).map_err(fake)?;
            }
        }
    }
    let irqs = rsskit_linux::netdev::iface_irqs(roots, name, &rsskit_linux::netdev::interrupts(roots));
    let ipath = roots.proc.join("interrupts");
    let text = fs::read_to_string(&ipath).map_err(fake)?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let msi = roots.sys.join(format!("class/net/{name}/device/msi_irqs"));
    for x in irqs
        .iter()
        .filter(|x| x.queue.is_some_and(|q| q >= n) && x.kind != rsskit_linux::netdev::IrqKind::Other)
    {
        lines.retain(|l| l.split(':').next().map(str::trim) != Some(&x.irq.to_string()));
        let _ = fs::remove_dir_all(roots.proc.join(format!("irq/{}", x.irq)));
        let _ = fs::remove_file(msi.join(x.irq.to_string()));
    }
    if n > cur {
        let first = irqs.iter().find(|x| x.queue == Some(0) && x.name.ends_with('0'));
        let Some(first) = first else { return Ok(not_supported("ETHTOOL_SCHANNELS (no queue IRQ to copy)")) };
        let prefix = &first.name[..first.name.len() - 1];
        let top =
            lines.iter().filter_map(|l| l.split(':').next()?.trim().parse::<u32>().ok()).max().unwrap_or(0);
        let at = lines
            .iter()
            .rposition(|l| l.trim_end().ends_with(&format!("{prefix}{}", cur - 1)))
            .map_or(lines.len(), |i| i + 1);
        let ncpu = lines.first().map_or(1, |h| h.split_whitespace().count());
        let online =
            rsskit_linux::cpulist::format(&rsskit_linux::topology::Topology::read_from(&roots.sys).online);
        for (i, q) in (cur..n).enumerate() {
            let irq = top + 1 + i as u32;
            let counts: String = (0..ncpu).map(|_| format!("{:>11}", 0)).collect();
            lines.insert(at + i, format!("{irq:>3}:{counts}  IR-PCI-MSIX-fake    {q}-edge      {prefix}{q}"));
            let d = roots.proc.join(format!("irq/{irq}"));
            fs::create_dir_all(&d).map_err(fake)?;
            fs::write(d.join("smp_affinity_list"), format!("{online}\n")).map_err(fake)?;
            fs::write(d.join("effective_affinity_list"), "0\n").map_err(fake)?;
            if msi.is_dir() {
                fs::write(msi.join(irq.to_string()), "msix\n").map_err(fake)?;
            }
        }
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    fs::write(&ipath, out).map_err(fake)?;
    f.combined = Some(n as u32);
    write_back(dir, name, &f)?;
    Ok(Reported::Supported(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        assert_eq!(unhex(&hex(&[0, 0x6d, 0xff])).unwrap(), vec![0, 0x6d, 0xff]);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }

    #[test]
    fn contexts_and_rules_are_written_as_the_readers_expect() {
        let dir = std::env::temp_dir().join(format!("rsskit-fixture-iso-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let f = FakeDriver {
            combined: Some(4),
            rss: Some(FakeRss {
                key: "6d".repeat(40),
                table: vec![0, 1, 2, 3, 0, 1, 2, 3],
                input_xfrm: None,
            }),
            rules: Some(vec!["tcp4 dst-port 22 queue 0 loc 1023".into()]),
            ..FakeDriver::default()
        };
        write_back(&dir, "eth0", &f).unwrap();
        assert_eq!(context_support(&dir, "eth0").unwrap(), Reported::Supported(()));
        let id = create_context(&dir, "eth0", &[2, 3, 2, 3, 2, 3, 2, 3], None).unwrap();
        assert_eq!(id, Reported::Supported(1));
        assert!(
            create_context(&dir, "eth0", &[4; 8], None).unwrap().reason().is_some(),
            "ring 4 is not there"
        );
        assert!(create_context(&dir, "eth0", &[2; 4], None).unwrap().reason().is_some(), "table size");
        let c = context_rss(&dir, "eth0", 1).unwrap();
        assert_eq!(c.ok().unwrap().rss.indir, vec![2, 3, 2, 3, 2, 3, 2, 3]);
        assert_eq!(c.ok().unwrap().rss.key, vec![0x6d; 40], "the main key when none is given");
        let rule = parse_rule("udp4 dst-port 443 context 1 loc 0").unwrap();
        // Any location: the highest free one (1023 is taken).
        assert_eq!(insert_rule(&dir, "eth0", &rule, true).unwrap(), Reported::Supported(1022));
        assert!(insert_rule(&dir, "eth0", &rule, false).unwrap().reason().is_none(), "loc 0 is free");
        assert!(insert_rule(&dir, "eth0", &rule, false).unwrap().reason().is_some(), "loc 0 is taken now");
        let bad = parse_rule("udp4 dst-port 443 context 9 loc 5").unwrap();
        assert!(insert_rule(&dir, "eth0", &bad, false).unwrap().reason().is_some(), "no context 9");
        let listed = rules(&dir, "eth0").unwrap();
        let locs: Vec<u32> = listed.ok().unwrap().entries.iter().map(|e| e.location).collect();
        assert_eq!(locs, vec![0, 1022, 1023]);
        assert!(delete_context(&dir, "eth0", 1).unwrap().reason().unwrap().contains("busy"));
        assert_eq!(delete_rule(&dir, "eth0", 1022).unwrap(), Reported::Supported(()));
        assert_eq!(delete_rule(&dir, "eth0", 0).unwrap(), Reported::Supported(()));
        assert!(delete_rule(&dir, "eth0", 0).unwrap().reason().is_some());
        assert_eq!(delete_context(&dir, "eth0", 1).unwrap(), Reported::Supported(()));
        assert!(context_rss(&dir, "eth0", 1).unwrap().reason().is_some());
        write_back(&dir, "eth0", &FakeDriver { no_contexts: true, ..f }).unwrap();
        assert!(context_support(&dir, "eth0").unwrap().reason().is_some());
        assert!(create_context(&dir, "eth0", &[2; 8], None).unwrap().reason().is_some());
        fs::remove_dir_all(&dir).unwrap();
    }
}
