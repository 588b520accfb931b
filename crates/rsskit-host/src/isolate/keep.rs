//! A persisted plan's isolation kept on its device (`apply --persist`,
//! `persist apply`, the agent): rsskit owns only the contexts and rules it
//! created, recorded by id and content in
//! `ROOT/var/lib/rsskit/isolation/IDENTITY.json` (root's, 0600). Each pass
//! judges every recorded object ([`super::write::found`]): rsskit's stays;
//! a rule of rsskit's that someone deleted is put back at its location; an
//! id that now holds other content is someone else's: reported, dropped
//! from the record, never touched; what the plan asks and the record lacks
//! is created. Rules and contexts not in the record are never looked at.

use super::write::{self, found};
use super::{Found, IsolationPlan};
use crate::persist::Identity;
use crate::plan::DevicePlan;
use crate::sysroot::Sysroot;
use crate::tune::Created;
use rsskit_linux::ethtool::Reported;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// What one pass did to a device's isolation, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepEvent {
    /// Created (the plan asked for it and the record had none).
    Created(Created),
    /// A rule of rsskit's was gone: put back at its location.
    PutBack(Created),
    /// A recorded id holds someone else's content now: left alone, no longer rsskit's.
    Foreign(Created, String),
    /// Something could not be done.
    Failed(String),
}

impl std::fmt::Display for KeepEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeepEvent::Created(c) => write!(f, "{}: isolation: created {}", c.device(), c.describe()),
            KeepEvent::PutBack(c) => {
                write!(f, "{}: isolation: {} was deleted by someone else: put back", c.device(), c.describe())
            }
            KeepEvent::Foreign(c, why) => write!(
                f,
                "{}: isolation: {} is foreign now ({why}): left alone, no longer rsskit's",
                c.device(),
                c.describe()
            ),
            KeepEvent::Failed(why) => write!(f, "isolation: {why}"),
        }
    }
}

/// The record file of a persisted device.
pub fn record_path(root: &Path, id: &Identity) -> PathBuf {
    root.join("var/lib/rsskit/isolation").join(id.file_name())
}

/// The record (empty when there is none; an unreadable or invalid one is an
/// error: nothing is then owned, so nothing is touched).
pub fn read_record(root: &Path, id: &Identity) -> Result<Vec<Created>, String> {
    let path = record_path(root, id);
    let text = match crate::trusted::read_to_string(&path, 1 << 20) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let v: Vec<Created> = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not an isolation record: {e}", path.display()))?;
    for c in &v {
        c.check().map_err(|e| format!("{}: {}: {e}", path.display(), c.describe()))?;
    }
    Ok(v)
}

/// Writes the record atomically (0600, in a 0700 directory).
pub fn write_record(root: &Path, id: &Identity, record: &[Created]) -> Result<(), String> {
    let path = record_path(root, id);
    let dir = path.parent().expect("a directory");
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    fs::create_dir_all(dir).map_err(fail)?;
    fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(fail)?;
    let tmp = dir.join(format!(".{}.tmp{}", id.file_name(), std::process::id()));
    let _ = fs::remove_file(&tmp);
    let text = serde_json::to_string_pretty(record).expect("plain data") + "\n";
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(fail)?;
    let r = f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).and_then(|()| fs::rename(&tmp, &path));
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r.map_err(fail)
}

/// The recorded context whose table is `iso`'s, and whether every rule of
/// `iso` into it is recorded.
fn recorded_for<'a>(record: &'a [Created], iso: &IsolationPlan) -> Option<(&'a Created, bool)> {
    let ctx =
        record.iter().find(|c| matches!(c, Created::RssContext { table, .. } if *table == iso.table))?;
    let Created::RssContext { id, device, .. } = ctx else { return None };
    let wanted = iso.rules_into(*id).ok()?;
    let all = wanted.iter().all(|w| {
        record
            .iter()
            .filter(|c| c.device() == device)
            .filter_map(Created::flow_rule)
            .any(|r| r.matcher.normalized() == w.matcher.normalized() && r.action == w.action)
    });
    Some((ctx, all))
}

/// One pass over `dev`'s isolation on interface `name` (the plan's device
/// as it is named now). Returns the events and writes the record back.
///
/// `may_put_back` is asked before a recorded object found gone is put back
/// (a rule) or made again (a context): the agent's [`crate::keeper::Keeper`]
/// answers no while the object is contested (someone keeps deleting it),
/// and the object then stays in the record, untouched this pass.
pub fn keep(
    sys: &Sysroot,
    root: &Path,
    id: &Identity,
    name: &str,
    dev: &DevicePlan,
    may_put_back: &mut dyn FnMut(&Created) -> bool,
) -> Vec<KeepEvent> {
    let mut events = Vec::new();
    let mut record = match read_record(root, id) {
        Ok(r) => r,
        Err(e) => return vec![KeepEvent::Failed(format!("{name}: {e}; nothing is touched"))],
    };
    // The record names the device as it was; objects are looked up on `name`.
    for c in &mut record {
        match c {
            Created::RssContext { device, .. } | Created::FlowRule { device, .. } => {
                *device = name.to_string()
            }
        }
    }
    // Nothing recorded and nothing to isolate: no record is read or
    // written (a host with no isolation may have a read-only /var).
    if record.is_empty() && dev.isolation.is_empty() {
        return events;
    }
    let as_read = record.clone();
    let mut kept: Vec<Created> = Vec::new();
    for c in std::mem::take(&mut record) {
        match found(sys, &c) {
            Ok(Found::Ours) => kept.push(c),
            Ok(Found::Foreign(why)) => events.push(KeepEvent::Foreign(c, why)),
            Ok(Found::Gone) if !may_put_back(&c) => kept.push(c),
            Ok(Found::Gone) => match &c {
                Created::FlowRule { .. } => {
                    let rule = c.flow_rule().expect("checked");
                    match write::put_back(sys, &rule, name) {
                        Ok(Reported::Supported(_)) => {
                            events.push(KeepEvent::PutBack(c.clone()));
                            kept.push(c);
                        }
                        Ok(Reported::Unsupported { reason }) => events.push(KeepEvent::Failed(format!(
                            "{name}: putting back {}: {reason}",
                            c.describe()
                        ))),
                        Err(e) => events.push(KeepEvent::Failed(format!("{name}: {e}"))),
                    }
                }
                // A context gone: its rules are re-made with a new one below.
                Created::RssContext { .. } => {}
            },
            Err(e) => {
                events.push(KeepEvent::Failed(format!("{name}: {e}")));
                kept.push(c);
            }
        }
    }
    // Rules into a context no longer recorded are rsskit's but useless: deleted.
    let contexts: Vec<u32> = kept
        .iter()
        .filter_map(|c| if let Created::RssContext { id, .. } = c { Some(*id) } else { None })
        .collect();
    let (orphans, mut kept): (Vec<Created>, Vec<Created>) = kept.into_iter().partition(|c| {
        c.flow_rule().is_some_and(|r| {
            matches!(r.action, rsskit_core::flowrule::RuleAction::Context { context, .. } if !contexts.contains(&context))
        })
    });
    for (c, r) in write::remove(sys, &orphans) {
        if !matches!(r, write::Removal::Removed | write::Removal::Gone) {
            events.push(KeepEvent::Failed(format!("{name}: removing {}: {r:?}", c.describe())));
        }
    }
    for iso in &dev.isolation {
        match recorded_for(&kept, iso) {
            Some((_, true)) => continue,
            Some((ctx, false)) => {
                // The context is there, a rule is missing from the record: create the rules anew.
                let Created::RssContext { id: cid, .. } = ctx.clone() else { continue };
                match iso.rules_into(cid) {
                    Ok(rules) => {
                        for rule in rules {
                            let have = kept.iter().filter_map(Created::flow_rule).any(|r| {
                                r.matcher.normalized() == rule.matcher.normalized() && r.action == rule.action
                            });
                            if have {
                                continue;
                            }
                            match sys.insert_rule(name, &rule, true) {
                                Ok(Reported::Supported(loc)) => {
                                    let mut r = rule;
                                    r.location = loc;
                                    let c = Created::FlowRule {
                                        device: name.into(),
                                        location: loc,
                                        rule: r.to_string(),
                                    };
                                    events.push(KeepEvent::Created(c.clone()));
                                    kept.push(c);
                                }
                                Ok(Reported::Unsupported { reason }) => {
                                    events.push(KeepEvent::Failed(format!("{name}: rule '{rule}': {reason}")))
                                }
                                Err(e) => events.push(KeepEvent::Failed(format!("{name}: {e}"))),
                            }
                        }
                    }
                    Err(e) => events.push(KeepEvent::Failed(format!("{name}: {e}"))),
                }
            }
            None => {
                let mut one = dev.clone();
                one.name = name.to_string();
                one.isolation = vec![iso.clone()];
                match write::create(sys, &one, &mut |_| {}) {
                    Ok(all) => {
                        events.extend(all.iter().cloned().map(KeepEvent::Created));
                        kept.extend(all);
                    }
                    Err(e) => events.push(KeepEvent::Failed(e.to_string())),
                }
            }
        }
    }
    if kept == as_read {
        return events;
    }
    if let Err(e) = write_record(root, id, &kept) {
        events.push(KeepEvent::Failed(format!("{name}: the record could not be written: {e}")));
    }
    events
}

/// `apply --persist`: what this apply created on a persisted device becomes its record.
pub fn record_created(root: &Path, id: &Identity, created: &[Created], device: &str) -> Result<(), String> {
    let mut record = read_record(root, id).unwrap_or_default();
    for c in created.iter().filter(|c| c.device() == device) {
        if !record.iter().any(|r| r.same_object(c)) {
            record.push(c.clone());
        }
    }
    write_record(root, id, &record)
}

/// `persist remove`: the plan of `id` goes, and so do the contexts and rules
/// rsskit created for it that still hold what was recorded (rules first;
/// others' are left and said). With its device absent the record stays,
/// so nothing is forgotten that could still be removed. One line per object.
pub fn forget(sys: &Sysroot, root: &Path, id: &Identity) -> Vec<String> {
    let record = match read_record(root, id) {
        Ok(r) if r.is_empty() => return Vec::new(),
        Ok(r) => r,
        Err(e) => return vec![format!("isolation record left in place: {e}")],
    };
    let name = sys
        .interfaces()
        .unwrap_or_default()
        .into_iter()
        .find(|n| crate::persist::identity(sys, n).as_ref() == Some(id));
    let Some(name) = name else {
        return vec![format!(
            "isolation record {} kept: its device is not here to remove its {} context(s) and rule(s) from",
            record_path(root, id).display(),
            record.len()
        )];
    };
    let record: Vec<Created> = record
        .into_iter()
        .map(|mut c| {
            match &mut c {
                Created::RssContext { device, .. } | Created::FlowRule { device, .. } => {
                    *device = name.clone()
                }
            }
            c
        })
        .collect();
    let mut lines = Vec::new();
    let mut refused = false;
    for (c, r) in write::remove(sys, &record) {
        refused |= matches!(r, write::Removal::Refused(_));
        lines.push(match r {
            write::Removal::Removed => format!("{name}: deleted {}", c.describe()),
            write::Removal::Gone => format!("{name}: {} already gone", c.describe()),
            write::Removal::Foreign(why) => {
                format!("{name}: {} is foreign now ({why}): left alone", c.describe())
            }
            write::Removal::Refused(why) => format!("{name}: {} could not be deleted: {why}", c.describe()),
        });
    }
    if !refused {
        let _ = fs::remove_file(record_path(root, id));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rsskit-isokeep-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("sys/class/net/eth0/queues")).unwrap();
        fs::create_dir_all(d.join("ethtool")).unwrap();
        fs::write(
            d.join("ethtool/eth0.json"),
            r#"{"combined": 4, "rss": {"key": "00", "table": [0, 1, 2, 3]},
                "rules": ["udp4 dst-port 443 context 1 loc 9"],
                "contexts": {"1": {"key": "00", "table": [2, 3, 2, 3]}}}"#,
        )
        .unwrap();
        d
    }

    #[test]
    fn a_record_round_trips_and_a_bad_one_touches_nothing() {
        let d = tree("rec");
        let sys = Sysroot::tree(&d);
        let id = Identity::PermanentMac("00:1b:21:aa:bb:cc".into());
        let rec = vec![
            Created::RssContext { device: "eth0".into(), id: 1, table: vec![2, 3, 2, 3], key: "00".into() },
            Created::FlowRule {
                device: "eth0".into(),
                location: 9,
                rule: "udp4 dst-port 443 context 1 loc 9".into(),
            },
        ];
        write_record(&d, &id, &rec).unwrap();
        assert_eq!(read_record(&d, &id).unwrap(), rec);
        // A record naming a rule at another location than its own: refused whole.
        fs::write(
            record_path(&d, &id),
            r#"[{"kind": "flow_rule", "device": "eth0", "location": 3, "rule": "udp4 dst-port 443 context 1 loc 9"}]"#,
        )
        .unwrap();
        let before = fs::read_to_string(d.join("ethtool/eth0.json")).unwrap();
        let plan = crate::isolate::tests::dev(&[0, 1, 2, 3], &[0, 1, 2, 3]);
        let ev = keep(&sys, &d, &id, "eth0", &plan, &mut |_| true);
        assert!(matches!(&ev[..], [KeepEvent::Failed(w)] if w.contains("nothing is touched")), "{ev:?}");
        assert_eq!(fs::read_to_string(d.join("ethtool/eth0.json")).unwrap(), before);
        fs::remove_dir_all(&d).unwrap();
    }
    // A plan without isolation on a host without a record: no record is
    // written (the agent in a pod or guest has a read-only /var).
    #[test]
    fn no_isolation_and_no_record_writes_nothing() {
        let d = tree("none");
        let sys = Sysroot::tree(&d);
        let id = Identity::PermanentMac("00:1b:21:aa:bb:cc".into());
        let mut plan = crate::isolate::tests::dev(&[0, 1, 2, 3], &[0, 1, 2, 3]);
        plan.isolation.clear();
        let ev = keep(&sys, &d, &id, "eth0", &plan, &mut |_| true);
        assert!(ev.is_empty(), "{ev:?}");
        let dir = record_path(&d, &id).parent().unwrap().to_path_buf();
        assert!(!dir.exists(), "no record directory made: {}", dir.display());
        fs::remove_dir_all(&d).unwrap();
    }

    // isolate2: a rule found gone is put back only when `may_put_back` says so;
    // held back, it stays rsskit's (in the record) and nothing is written.
    #[test]
    fn a_gone_rule_held_back_stays_recorded_and_untouched() {
        let d = tree("held");
        let sys = Sysroot::tree(&d);
        let id = Identity::PermanentMac("00:1b:21:aa:bb:cc".into());
        let rule = Created::FlowRule {
            device: "eth0".into(),
            location: 9,
            rule: "udp4 dst-port 443 context 1 loc 9".into(),
        };
        let rec = vec![
            Created::RssContext { device: "eth0".into(), id: 1, table: vec![2, 3, 2, 3], key: "00".into() },
            rule.clone(),
        ];
        write_record(&d, &id, &rec).unwrap();
        // Someone deletes rsskit's rule.
        let drv = d.join("ethtool/eth0.json");
        let gone = fs::read_to_string(&drv).unwrap().replace(r#""udp4 dst-port 443 context 1 loc 9""#, "");
        fs::write(&drv, &gone).unwrap();
        let mut plan = crate::isolate::tests::dev(&[0, 1, 2, 3], &[0, 1, 2, 3]);
        plan.isolation.clear();
        let mut asked = Vec::new();
        let ev = keep(&sys, &d, &id, "eth0", &plan, &mut |c| {
            asked.push(c.describe());
            false
        });
        assert_eq!(asked, vec![rule.describe()], "asked once, for the gone rule only");
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(fs::read_to_string(&drv).unwrap(), gone, "nothing written while held back");
        assert_eq!(read_record(&d, &id).unwrap(), rec, "still rsskit's");
        // Allowed: put back at its location.
        let ev = keep(&sys, &d, &id, "eth0", &plan, &mut |_| true);
        assert_eq!(ev, vec![KeepEvent::PutBack(rule)], "{ev:?}");
        assert!(fs::read_to_string(&drv).unwrap().contains("udp4 dst-port 443 context 1 loc 9"));
        fs::remove_dir_all(&d).unwrap();
    }
}
