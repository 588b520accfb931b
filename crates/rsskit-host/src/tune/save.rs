//! The save file's format: what `apply` replaced, by target and value,
//! never by path. No I/O: a restore runs as root, so every entry of a file
//! is parsed and validated here before the host is looked at.

use super::setting::{printable, quoted, shown, valid_value, Setting, Target, TARGET_KINDS};
use rsskit_linux::ethtool::FLOW_TYPES;
use rsskit_linux::netdev::valid_name;
use serde::{Deserialize, Serialize};

/// The save file format written and read by this build. Version 1 named
/// a file path per setting, which a restore running as root cannot trust;
/// it is refused (see [`parse_save`]).
pub const SAVE_VERSION: u32 = 2;

/// Largest save file read (bytes): far more than any host's settings.
pub const MAX_SAVE_BYTES: u64 = 4 << 20;

/// One saved setting: which, and the value to put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedValue {
    /// Which setting.
    pub target: Target,
    /// The value to restore (valid for its kind).
    pub value: String,
}

/// The save file: what `apply` replaced, for `--restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveFile {
    /// Seconds since the epoch.
    pub saved_at: u64,
    /// The settings with the values to put back.
    pub settings: Vec<SavedValue>,
    /// Service isolation: the contexts and rules this apply created, to delete.
    pub created: Vec<Created>,
}

/// One entry as the file spells it: a kind, what it belongs to, a value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    irq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flow: Option<String>,
    /// napi: the NAPI id of a `napi_thread_cpus` entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    napi: Option<u64>,
    value: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm<E> {
    version: u32,
    saved_at: u64,
    settings: Vec<E>,
    // Service isolation (issue 33 item 3); absent in older save files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    created: Vec<Created>,
}

impl Entry {
    fn of(s: &SavedValue) -> Entry {
        let mut e = Entry { kind: s.target.name().into(), value: s.value.clone(), ..Entry::default() };
        if s.target != Target::RpsSockFlowEntries {
            e.device = Some(s.target.device().to_string());
        }
        match &s.target {
            Target::HashFields { flow, .. } => e.flow = Some(flow.to_string()),
            Target::IrqAffinity { irq, .. } => e.irq = Some(u64::from(*irq)),
            Target::RpsCpus { queue, .. }
            | Target::RpsFlowCnt { queue, .. }
            | Target::XpsCpus { queue, .. } => e.queue = Some(u64::from(*queue)),
            Target::NapiThreadCpus { napi_id, .. } => e.napi = Some(u64::from(*napi_id)),
            _ => {}
        }
        e
    }

    /// The target and value, or why not (never quoting what the file says
    /// unescaped).
    fn check(self) -> Result<SavedValue, String> {
        let Some(&kind) = TARGET_KINDS.iter().find(|k| **k == self.kind) else {
            return Err(format!("unknown kind {} (known: {})", quoted(&self.kind), TARGET_KINDS.join(", ")));
        };
        let needs_device = kind != "rps_sock_flow_entries";
        let needs_queue = matches!(kind, "rps_cpus" | "rps_flow_cnt" | "xps_cpus");
        let needs_irq = kind == "irq_affinity";
        let needs_flow = kind == "hash_fields";
        let needs_napi = kind == "napi_thread_cpus";
        for (name, given, needed) in [
            ("napi", self.napi.is_some(), needs_napi),
            ("device", self.device.is_some(), needs_device),
            ("queue", self.queue.is_some(), needs_queue),
            ("irq", self.irq.is_some(), needs_irq),
            ("flow", self.flow.is_some(), needs_flow),
        ] {
            if given && !needed {
                return Err(format!("{kind} takes no {name}"));
            }
            if needed && !given {
                return Err(format!("{kind} needs a {name}"));
            }
        }
        let device = match self.device {
            Some(d) if valid_name(&d) => d,
            Some(d) => return Err(format!("{} is not an interface name", quoted(&d))),
            None => String::new(),
        };
        let queue = match self.queue.map(u32::try_from) {
            Some(Ok(q)) if q < 65_536 => q,
            Some(_) => return Err("the queue number is out of range".into()),
            None => 0,
        };
        let irq = match self.irq.map(u32::try_from) {
            Some(Ok(i)) => i,
            Some(Err(_)) => return Err("the IRQ number is out of range".into()),
            None => 0,
        };
        let flow = match self.flow {
            Some(f) => match FLOW_TYPES.iter().find(|t| t.name == f) {
                Some(t) => t.name,
                None => return Err(format!("{} is not a flow type", quoted(&f))),
            },
            None => "",
        };
        let napi_id = match self.napi.map(u32::try_from) {
            Some(Ok(n)) => n,
            Some(Err(_)) => return Err("the NAPI id is out of range".into()),
            None => 0,
        };
        let target = match kind {
            "rss_table" => Target::RssTable { device },
            "rss_key" => Target::RssKey { device },
            "hash_fields" => Target::HashFields { device, flow },
            "irq_affinity" => Target::IrqAffinity { device, irq },
            "rps_cpus" => Target::RpsCpus { device, queue },
            "rps_flow_cnt" => Target::RpsFlowCnt { device, queue },
            "xps_cpus" => Target::XpsCpus { device, queue },
            "napi_threaded" => Target::NapiThreaded { device },
            // napi:
            "napi_thread_cpus" => Target::NapiThreadCpus { device, napi_id },
            "napi_defer_hard_irqs" => Target::NapiDeferHardIrqs { device },
            "gro_flush_timeout" => Target::GroFlushTimeout { device },
            // nicres
            "rx_ring" => Target::RxRing { device },
            "tx_ring" => Target::TxRing { device },
            "coalesce" => Target::Coalesce { device },
            "channels" => Target::Channels { device },
            // symplan
            "input_xfrm" => Target::InputXfrm { device },
            _ => Target::RpsSockFlowEntries,
        };
        valid_value(target.kind(), &self.value).map_err(|e| format!("the value is {e}"))?;
        Ok(SavedValue { target, value: self.value })
    }
}

/// The entry named for people: `entry 3 (rps_cpus eth0 rx-2)`.
fn entry_name(i: usize, e: Option<&Entry>) -> String {
    let Some(e) = e else { return format!("entry {i}") };
    let mut parts =
        vec![if TARGET_KINDS.contains(&e.kind.as_str()) { e.kind.clone() } else { quoted(&e.kind) }];
    if let Some(d) = &e.device {
        parts.push(shown(d));
    }
    if let Some(q) = e.queue {
        parts.push(format!("queue {q}"));
    }
    if let Some(q) = e.irq {
        parts.push(format!("IRQ {q}"));
    }
    if let Some(n) = e.napi {
        parts.push(format!("NAPI {n}"));
    }
    format!("entry {i} ({})", parts.join(" "))
}

/// Parses and validates a save file's text. Every entry must name a known
/// kind with exactly the device/queue/IRQ/flow that kind takes, an
/// interface name the kernel would accept, and a valid value of the kind;
/// no target twice. `Err` lists every bad entry (1-based), each named.
pub fn parse_save(text: &str) -> Result<SaveFile, Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| vec![format!("not an rsskit save file (not JSON: {})", printable(&e.to_string()))])?;
    match v.get("version").and_then(serde_json::Value::as_u64) {
        Some(n) if n == u64::from(SAVE_VERSION) => {}
        Some(1) => {
            return Err(vec![format!(
                "save file version 1 (from an older rsskit) names file paths, which restore no longer \
                 trusts; this rsskit restores version {SAVE_VERSION} files only. Put the values back by hand \
                 (e.g. rerun `rsskit apply` with the old settings) or reboot"
            )])
        }
        Some(n) => {
            return Err(vec![format!(
                "save file version {n} is not one this rsskit reads (version {SAVE_VERSION})"
            )])
        }
        None => return Err(vec!["not an rsskit save file (no version number)".into()]),
    }
    let form: FileForm<serde_json::Value> = serde_json::from_value(v)
        .map_err(|e| vec![format!("not an rsskit save file: {}", printable(&e.to_string()))])?;
    let mut problems = Vec::new();
    let mut settings: Vec<SavedValue> = Vec::new();
    for (i, raw) in form.settings.into_iter().enumerate() {
        let i = i + 1;
        // What the entry says it is, to name it even when it does not parse.
        let field = |k: &str| raw.get(k).and_then(serde_json::Value::as_str).map(str::to_string);
        let hint = Entry {
            kind: field("kind").unwrap_or_default(),
            device: field("device"),
            queue: raw.get("queue").and_then(serde_json::Value::as_u64),
            irq: raw.get("irq").and_then(serde_json::Value::as_u64),
            napi: raw.get("napi").and_then(serde_json::Value::as_u64),
            ..Entry::default()
        };
        let hint = Some(&hint).filter(|h| !h.kind.is_empty());
        let e = match serde_json::from_value::<Entry>(raw.clone()) {
            Ok(e) => e,
            Err(err) => {
                problems.push(format!("{}: {}", entry_name(i, hint), printable(&err.to_string())));
                continue;
            }
        };
        let name = entry_name(i, Some(&e));
        match e.check() {
            Ok(s) if settings.iter().any(|x| x.target == s.target) => {
                problems.push(format!("{name}: names the same setting as an earlier entry"))
            }
            Ok(s) => settings.push(s),
            Err(why) => problems.push(format!("{name}: {why}")),
        }
    }
    for (i, c) in form.created.iter().enumerate() {
        let dup = form.created[..i].iter().any(|x| x.same_object(c));
        match c.check() {
            Err(why) => problems.push(format!("created entry {} ({}): {why}", i + 1, c.describe())),
            Ok(()) if dup => {
                problems.push(format!("created entry {} ({}): named twice", i + 1, c.describe()))
            }
            Ok(()) => {}
        }
    }
    if problems.is_empty() {
        Ok(SaveFile { saved_at: form.saved_at, settings, created: form.created })
    } else {
        Err(problems)
    }
}

/// The save file's text.
pub fn save_text(save: &SaveFile) -> String {
    let form = FileForm {
        version: SAVE_VERSION,
        saved_at: save.saved_at,
        settings: save.settings.iter().map(Entry::of).collect(),
        created: save.created.clone(),
    };
    serde_json::to_string_pretty(&form).expect("plain data") + "\n"
}

/// What to save before applying `changes`: each with its old value as the
/// value to restore. Settings whose old value is unreadable (or not valid)
/// cannot be restored and are left out (the caller reports them), and so
/// are values written again unchanged ([`push_hash_fields`](super::push_hash_fields)).
pub fn save_of(changes: &[Setting], now: u64) -> SaveFile {
    let settings = changes
        .iter()
        .filter(|s| !s.unchanged())
        .filter_map(|s| Some(SavedValue { target: s.target.clone(), value: s.old.clone()? }))
        .collect();
    SaveFile { saved_at: now, settings, created: Vec::new() }
}

// Service isolation (issue 33 item 3): what `apply` created, by id and
// content, so that `--restore` deletes exactly that and nothing else.
/// An RSS context or flow rule `apply` created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Created {
    /// An RSS context: its id, and the table and key it was created with (key hex).
    RssContext {
        /// Interface.
        device: String,
        /// The id the kernel gave it.
        id: u32,
        /// Its table.
        table: Vec<u32>,
        /// Its key (hex) as read back; empty: not read.
        key: String,
    },
    /// A flow rule: its location and its whole text (`udp4 dst-port 443 context 1 loc 1022`).
    FlowRule {
        /// Interface.
        device: String,
        /// Where the driver put it.
        location: u32,
        /// The rule, in ethtool -N words.
        rule: String,
    },
}

impl Created {
    /// The interface.
    pub fn device(&self) -> &str {
        match self {
            Created::RssContext { device, .. } | Created::FlowRule { device, .. } => device,
        }
    }

    /// For people: `RSS context 1` or `flow rule 1022 (udp4 dst-port 443 context 1)`.
    pub fn describe(&self) -> String {
        match self {
            Created::RssContext { id, .. } => format!("RSS context {id}"),
            Created::FlowRule { location, rule, .. } => format!("flow rule {location} ({})", printable(rule)),
        }
    }

    /// Whether both name the same object (device and id or location).
    pub fn same_object(&self, o: &Created) -> bool {
        match (self, o) {
            (Created::RssContext { device: a, id: x, .. }, Created::RssContext { device: b, id: y, .. }) => {
                a == b && x == y
            }
            (
                Created::FlowRule { device: a, location: x, .. },
                Created::FlowRule { device: b, location: y, .. },
            ) => a == b && x == y,
            _ => false,
        }
    }

    /// The rule it holds (a [`Created::FlowRule`] that checks).
    pub fn flow_rule(&self) -> Option<rsskit_core::flowrule::FlowRule> {
        match self {
            Created::FlowRule { rule, location, .. } => {
                rsskit_core::flowrule::parse_rule(rule).ok().filter(|r| r.location == *location)
            }
            Created::RssContext { .. } => None,
        }
    }

    /// Whether a restore may act on it: a kernel interface name, a context
    /// id other than 0 and "new", a table and key of a device's size, a rule
    /// that parses at its own location.
    pub fn check(&self) -> Result<(), String> {
        if !valid_name(self.device()) {
            return Err(format!("{} is not an interface name", quoted(self.device())));
        }
        match self {
            Created::RssContext { id, table, key, .. } => {
                if *id == 0 || *id == u32::MAX {
                    return Err(format!("{id} is not a context rsskit creates"));
                }
                valid_value(
                    super::setting::Kind::RssTable,
                    &table.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                )
                .map_err(|e| format!("the table is {e}"))?;
                if !key.is_empty() {
                    valid_value(super::setting::Kind::RssKey, key).map_err(|e| format!("the key is {e}"))?;
                }
                Ok(())
            }
            Created::FlowRule { .. } => match self.flow_rule() {
                Some(_) => Ok(()),
                None => Err("the rule does not parse, or names another location".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysroot::Sysroot;
    use crate::tune::file_of;
    use crate::tune::setting::tests::rps;
    use std::path::Path;

    #[test]
    fn save_keeps_old_values_and_round_trips() {
        let s = rps("eth0", "00000000", "00000003");
        let unreadable = Setting { old: None, ..s.clone() };
        let irq = Setting {
            target: Target::IrqAffinity { device: "eth0".into(), irq: 41 },
            what: String::new(),
            old: Some("0-5".into()),
            new: "3".into(),
        };
        let flow = Setting {
            target: Target::HashFields { device: "eth0".into(), flow: "udp4" },
            what: String::new(),
            old: Some("ip_src,ip_dst".into()),
            new: "ip_src".into(),
        };
        let host = Setting {
            target: Target::RpsSockFlowEntries,
            what: String::new(),
            old: Some("0".into()),
            new: "4".into(),
        };
        let f = save_of(&[s, unreadable, irq, flow, host], 7);
        assert_eq!(f.settings.len(), 4);
        assert_eq!(f.settings[0].value, "00000000");
        let text = save_text(&f);
        assert!(!text.contains("path"), "{text}");
        assert!(text.contains("\"kind\": \"irq_affinity\""), "{text}");
        assert_eq!(parse_save(&text).unwrap(), f);
    }

    fn one(entry: &str) -> Result<SaveFile, Vec<String>> {
        parse_save(&format!("{{\"version\": 2, \"saved_at\": 1, \"settings\": [{entry}]}}"))
    }

    #[test]
    fn save_entries_are_validated_and_named() {
        let bad: [(&str, &str); 14] = [
            (
                r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0", "path": "/etc/passwd"}"#,
                "unknown field `path`",
            ),
            (r#"{"kind": "file", "device": "eth0", "value": "0"}"#, "unknown kind \"file\""),
            (
                r#"{"kind": "rps_cpus", "device": "../../../etc", "queue": 0, "value": "0"}"#,
                "\"../../../etc\" is not an interface name",
            ),
            (
                r#"{"kind": "rps_cpus", "device": "eth0/../x", "queue": 0, "value": "0"}"#,
                "is not an interface name",
            ),
            (r#"{"kind": "rps_cpus", "device": "..", "queue": 0, "value": "0"}"#, "is not an interface name"),
            (
                r#"{"kind": "rps_cpus", "device": "a very long name", "queue": 0, "value": "0"}"#,
                "is not an interface name",
            ),
            (r#"{"kind": "rps_cpus", "device": "eth0", "value": "0"}"#, "rps_cpus needs a queue"),
            (
                r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "irq": 4, "value": "0"}"#,
                "rps_cpus takes no irq",
            ),
            (r#"{"kind": "rps_cpus", "device": "eth0", "queue": -1, "value": "0"}"#, "entry 1"),
            (r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0-5"}"#, "not a CPU mask"),
            (
                r#"{"kind": "irq_affinity", "device": "eth0", "irq": 41, "value": "root:x:0:0"}"#,
                "not a CPU list",
            ),
            (r#"{"kind": "rps_flow_cnt", "device": "eth0", "queue": 0, "value": "1e9"}"#, "not a count"),
            (
                r#"{"kind": "hash_fields", "device": "eth0", "flow": "udp9", "value": "ip_src"}"#,
                "\"udp9\" is not a flow type",
            ),
            (r#"{"kind": "rss_key", "device": "eth0", "value": "6d5"}"#, "not an RSS key"),
        ];
        for (entry, want) in bad {
            let e = one(entry).expect_err(entry);
            assert_eq!(e.len(), 1, "{entry}: {e:?}");
            assert!(e[0].starts_with("entry 1"), "{entry}: {e:?}");
            assert!(e[0].contains(want), "{entry}: want {want} in {e:?}");
        }
        // Control characters from the file are escaped, never printed raw.
        let e = one("{\"kind\": \"\\u001b[2J\", \"value\": \"0\"}").unwrap_err();
        assert!(!e[0].contains('\u{1b}') && e[0].contains("\\u{1b}"), "{e:?}");
        // Every bad entry is named, the good ones are not.
        let good = r#"{"kind": "rps_cpus", "device": "eth0", "queue": 0, "value": "0"}"#;
        let e = parse_save(&format!(
            "{{\"version\": 2, \"saved_at\": 1, \"settings\": [{good}, {}, {good}]}}",
            r#"{"kind": "xps_cpus", "device": "eth0", "queue": 1, "value": "zz"}"#
        ))
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("entry 2 (xps_cpus eth0 queue 1): the value is not a CPU mask"), "{e:?}");
        assert!(e[1].starts_with("entry 3") && e[1].contains("same setting as an earlier entry"), "{e:?}");
        let ok = one(r#"{"kind": "rps_sock_flow_entries", "value": "32768"}"#).unwrap();
        assert_eq!(ok.settings[0].target, Target::RpsSockFlowEntries);
    }

    #[test]
    fn save_versions() {
        let v1 = r#"{"version": 1, "saved_at": 1, "settings": [{"device": "eth0", "what": "x", "kind": "count",
            "path": "/etc/passwd", "old": null, "new": "0"}]}"#;
        let e = parse_save(v1).unwrap_err();
        assert!(e[0].contains("version 1") && e[0].contains("no longer trusts"), "{e:?}");
        let e = parse_save(r#"{"version": 3, "saved_at": 1, "settings": []}"#).unwrap_err();
        assert!(e[0].contains("version 3 is not one this rsskit reads"), "{e:?}");
        let e = parse_save(r#"{"saved_at": 1, "settings": []}"#).unwrap_err();
        assert!(e[0].contains("no version"), "{e:?}");
        assert!(parse_save("root:x:0:0:root:/root:/bin/bash").is_err());
    }

    /// Mutations of a valid save (the fuzz target's invariants, on inputs
    /// close to real ones): no panic; what is accepted has valid values and
    /// paths of a device's queue or an IRQ only; errors print safely.
    #[test]
    fn mutated_saves_never_escape() {
        let seed = save_text(&SaveFile {
            saved_at: 1,
            settings: vec![
                SavedValue { target: Target::RpsCpus { device: "eth0".into(), queue: 1 }, value: "3".into() },
                SavedValue {
                    target: Target::IrqAffinity { device: "eth0".into(), irq: 41 },
                    value: "0-2".into(),
                },
                SavedValue {
                    target: Target::HashFields { device: "eth0".into(), flow: "udp4" },
                    value: "ip_src,ip_dst".into(),
                },
                SavedValue { target: Target::RpsSockFlowEntries, value: "0".into() },
            ],
            created: Vec::new(),
        });
        let root = Sysroot::tree(Path::new("/t"));
        let pieces: [&[u8]; 10] =
            [b"..", b"/", b"\\u001b", b"\"", b"path", b"-1", b"99999999999", b"kind", b",", b"\\u0000"];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut ok, mut bad) = (0, 0);
        for _ in 0..20_000 {
            let mut b = seed.clone().into_bytes();
            for _ in 0..1 + next(3) {
                let at = next(b.len());
                match next(3) {
                    0 => b[at] = b"0123456789abcdef.,/-\\"[next(21)],
                    1 => drop(b.splice(at..at, pieces[next(pieces.len())].iter().copied())),
                    _ => drop(b.remove(at)),
                }
            }
            let Ok(text) = std::str::from_utf8(&b) else { continue };
            match parse_save(text) {
                Ok(save) => {
                    ok += 1;
                    for e in &save.settings {
                        assert!(valid_value(e.target.kind(), &e.value).is_ok(), "{e:?}");
                        if let Some(p) = file_of(&root, &e.target) {
                            assert!(
                                p.components().all(|c| matches!(
                                    c,
                                    std::path::Component::RootDir | std::path::Component::Normal(_)
                                )),
                                "{p:?}"
                            );
                            assert!(
                                p.starts_with("/t/sys/class/net/")
                                    || p.starts_with("/t/proc/irq/")
                                    || p == Path::new("/t/proc/sys/net/core/rps_sock_flow_entries"),
                                "{p:?}"
                            );
                        }
                    }
                }
                Err(problems) => {
                    bad += 1;
                    assert!(problems.iter().all(|p| !p.chars().any(char::is_control)), "{problems:?}");
                }
            }
        }
        assert!(ok > 100 && bad > 100, "the mutations reach both sides: {ok} accepted, {bad} refused");
    }

    // Service isolation: created entries round-trip, are checked, and a
    // file without them (every earlier one) still reads.
    #[test]
    fn created_entries_round_trip_and_are_checked() {
        let ctx = Created::RssContext { device: "eth0".into(), id: 1, table: vec![2, 3], key: "6d5a".into() };
        let rule = Created::FlowRule {
            device: "eth0".into(),
            location: 1022,
            rule: "udp4 dst-port 443 context 1 loc 1022".into(),
        };
        let save = SaveFile { saved_at: 5, settings: vec![], created: vec![ctx.clone(), rule.clone()] };
        let text = save_text(&save);
        assert!(
            text.contains("\"kind\": \"rss_context\"") && text.contains("\"kind\": \"flow_rule\""),
            "{text}"
        );
        assert_eq!(parse_save(&text), Ok(save));
        let old = "{\"version\": 2, \"saved_at\": 1, \"settings\": []}";
        assert_eq!(parse_save(old).unwrap().created, vec![]);
        for bad in [
            Created::FlowRule {
                device: "eth0".into(),
                location: 7,
                rule: "udp4 dst-port 443 context 1 loc 8".into(),
            },
            Created::FlowRule { device: "eth0".into(), location: 7, rule: "udp9 loc 7".into() },
            Created::RssContext { device: "eth0".into(), id: 0, table: vec![1], key: String::new() },
            Created::RssContext { device: "../x".into(), id: 2, table: vec![1], key: String::new() },
            Created::RssContext { device: "eth0".into(), id: 2, table: vec![], key: String::new() },
        ] {
            let t = save_text(&SaveFile { saved_at: 1, settings: vec![], created: vec![bad.clone()] });
            assert!(parse_save(&t).is_err(), "{bad:?}");
        }
        let twice = save_text(&SaveFile { saved_at: 1, settings: vec![], created: vec![ctx.clone(), ctx] });
        assert!(parse_save(&twice).unwrap_err()[0].contains("named twice"));
        let unknown = text.replace("\"location\"", "\"path\": \"/etc\", \"location\"");
        assert!(parse_save(&unknown).is_err(), "unknown fields are refused");
    }

    // symplan
    #[test]
    fn input_xfrm_entries() {
        let f = one(r#"{"kind": "input_xfrm", "device": "eth0", "value": "none"}"#).unwrap();
        assert_eq!(f.settings[0].target, Target::InputXfrm { device: "eth0".into() });
        assert_eq!(parse_save(&save_text(&f)).unwrap(), f, "round trip");
        let e = one(r#"{"kind": "input_xfrm", "device": "eth0", "value": "sym-xor;reboot"}"#).unwrap_err();
        assert!(e[0].contains("not an input transform"), "{e:?}");
        let e = one(r#"{"kind": "input_xfrm", "device": "eth0", "queue": 0, "value": "none"}"#).unwrap_err();
        assert!(e[0].contains("input_xfrm takes no queue"), "{e:?}");
    }

    // nicres
    #[test]
    fn ring_and_coalescing_entries() {
        let f = one(r#"{"kind": "rx_ring", "device": "eth0", "value": "4096"}"#).unwrap();
        assert_eq!(f.settings[0].target, Target::RxRing { device: "eth0".into() });
        let c = "adaptive_rx=0,adaptive_tx=0,rx_usecs=50,rx_frames=0,tx_usecs=3,tx_frames=0";
        let f = one(&format!(r#"{{"kind": "coalesce", "device": "eth0", "value": "{c}"}}"#)).unwrap();
        assert_eq!(f.settings[0].target, Target::Coalesce { device: "eth0".into() });
        assert_eq!(parse_save(&save_text(&f)).unwrap(), f, "round trip");
        let e = one(r#"{"kind": "tx_ring", "device": "eth0", "queue": 1, "value": "512"}"#).unwrap_err();
        assert!(e[0].contains("tx_ring takes no queue"), "{e:?}");
        let e = one(r#"{"kind": "coalesce", "device": "eth0", "value": "rx_usecs=x"}"#).unwrap_err();
        assert!(e[0].contains("not a coalescing value"), "{e:?}");
        let e = one(r#"{"kind": "rx_ring", "device": "eth0", "value": "-1"}"#).unwrap_err();
        assert!(e[0].contains("not a count"), "{e:?}");
    }
}
