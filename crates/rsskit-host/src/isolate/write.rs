//! Service isolation on the host: creating a device's contexts and rules
//! (rolled back when one fails) and deleting exactly what a save file
//! records (what now holds other content is someone else's: left alone).
//!
//! Order. Creating: the context first (no flow reaches it yet), then the
//! rules (the service's flows move to queues the context's table has),
//! and only then, in the settings `apply` writes after this, the main
//! table shrinks (the other flows leave the isolated queues). At every
//! step each flow goes to a queue some table has and whose IRQ is served.
//! Removing is the reverse: the main table grows back first (a restored
//! setting), then the rules go, then the context (kernels since 6.12
//! refuse to delete a context a rule still names).

use super::{judge_context, judge_rule, Found, IsolationPlan};
use crate::plan::DevicePlan;
use crate::sysroot::{Sysroot, SysrootError};
use crate::tune::Created;
use rsskit_core::flowrule::FlowRule;
use rsskit_linux::ethtool::Reported;

/// A context or rule that could not be created; what was rolled back.
#[derive(Debug, thiserror::Error)]
pub enum IsolateWriteError {
    /// Reading or writing the host.
    #[error(transparent)]
    Host(#[from] SysrootError),
    /// The driver refused; what this run had created was removed (or, if
    /// not, is listed).
    #[error("{device}: {what} for isolation {spec:?} refused: {reason}{}", left_text(.left))]
    Refused {
        /// The interface.
        device: String,
        /// The isolation spec.
        spec: String,
        /// What was being created.
        what: String,
        /// The driver's answer.
        reason: String,
        /// What this run created and could not remove again.
        left: Vec<String>,
    },
    /// The plan's isolation does not hold a rule rsskit can write.
    #[error("{device}: isolation {spec:?}: {why}")]
    Plan {
        /// The interface.
        device: String,
        /// The spec.
        spec: String,
        /// Why.
        why: String,
    },
}

fn left_text(left: &[String]) -> String {
    if left.is_empty() {
        "; nothing this run created is left".into()
    } else {
        format!("; left on the device (remove by hand): {}", left.join(", "))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()).collect()
}

/// A free location for a driver that takes no `RX_CLS_LOC_ANY`: the highest
/// one below the table size (the lowest priority, as ethtool chooses).
fn free_location(size: u32, taken: &[u32]) -> Option<u32> {
    (0..size).rev().find(|l| !taken.contains(l))
}

/// Creates `dev`'s isolation: per spec its context, then its rules. Each
/// object is reported as it is made. On a refusal everything this run
/// created is deleted again (rules, then contexts) before the error.
pub fn create(
    sys: &Sysroot,
    dev: &DevicePlan,
    observe: &mut dyn FnMut(&Created),
) -> Result<Vec<Created>, IsolateWriteError> {
    let mut made: Vec<Created> = Vec::new();
    for iso in &dev.isolation {
        if let Err(e) = create_one(sys, &dev.name, iso, &mut made, observe) {
            let left = remove(sys, &made)
                .into_iter()
                .filter(|(_, r)| !matches!(r, Removal::Removed))
                .map(|(c, r)| format!("{} ({r:?})", c.describe()))
                .collect();
            return Err(match e {
                IsolateWriteError::Refused { device, spec, what, reason, .. } => {
                    IsolateWriteError::Refused { device, spec, what, reason, left }
                }
                other => other,
            });
        }
    }
    Ok(made)
}

fn create_one(
    sys: &Sysroot,
    name: &str,
    iso: &IsolationPlan,
    made: &mut Vec<Created>,
    observe: &mut dyn FnMut(&Created),
) -> Result<(), IsolateWriteError> {
    let refused = |what: String, reason: String| IsolateWriteError::Refused {
        device: name.to_string(),
        spec: iso.spec.clone(),
        what,
        reason,
        left: Vec::new(),
    };
    let id = match sys.create_context(name, &iso.table, None)? {
        Reported::Supported(id) => id,
        Reported::Unsupported { reason } => return Err(refused("an RSS context".into(), reason)),
    };
    // Recorded as read back: the key is the driver's choice.
    let (table, key) = match sys.context_rss(name, id)? {
        Reported::Supported(c) => (c.rss.indir, hex(&c.rss.key)),
        Reported::Unsupported { .. } => (iso.table.clone(), String::new()),
    };
    let ctx = Created::RssContext { device: name.to_string(), id, table, key };
    observe(&ctx);
    made.push(ctx);
    let rules = iso.rules_into(id).map_err(|why| IsolateWriteError::Plan {
        device: name.to_string(),
        spec: iso.spec.clone(),
        why,
    })?;
    for mut rule in rules {
        let (special, size, taken) = match sys.rules(name)? {
            Reported::Supported(t) => {
                (t.special_locations, t.size, t.entries.iter().map(|e| e.location).collect::<Vec<_>>())
            }
            Reported::Unsupported { reason } => return Err(refused(format!("rule '{rule}'"), reason)),
        };
        if !special {
            match free_location(size, &taken) {
                Some(l) => rule.location = l,
                None => {
                    return Err(refused(format!("rule '{rule}'"), format!("no free location among {size}")))
                }
            }
        }
        let location = match sys.insert_rule(name, &rule, special)? {
            Reported::Supported(l) => l,
            Reported::Unsupported { reason } => return Err(refused(format!("rule '{rule}'"), reason)),
        };
        rule.location = location;
        let c = Created::FlowRule { device: name.to_string(), location, rule: rule.to_string() };
        observe(&c);
        made.push(c);
    }
    Ok(())
}

/// Whether `iso` is already on the device: each of its rules, with the
/// same match, sends into one context whose table is the planned one.
pub fn in_place(sys: &Sysroot, name: &str, iso: &IsolationPlan) -> Result<bool, SysrootError> {
    let Reported::Supported(t) = sys.rules(name)? else { return Ok(false) };
    let Ok(wanted) = iso.rules_into(0) else { return Ok(false) };
    let mut context = None;
    for w in &wanted {
        let hit = t.entries.iter().filter_map(|e| e.rule.as_ref().ok()).find_map(|r| match r.action {
            rsskit_core::flowrule::RuleAction::Context { context: c, offset: 0 }
                if c != 0 && r.matcher.normalized() == w.matcher.normalized() =>
            {
                Some(c)
            }
            _ => None,
        });
        match (hit, context) {
            (None, _) => return Ok(false),
            (Some(c), Some(k)) if c != k => return Ok(false),
            (Some(c), _) => context = Some(c),
        }
    }
    let Some(c) = context else { return Ok(false) };
    Ok(sys.context_rss(name, c)?.ok().is_some_and(|x| x.rss.indir == iso.table))
}

/// What became of one recorded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Deleted.
    Removed,
    /// Already gone: nothing to do.
    Gone,
    /// Now holds other content: someone else's, left alone.
    Foreign(String),
    /// The driver refused to delete it.
    Refused(String),
}

/// What the device holds now at a recorded object's id.
pub fn found(sys: &Sysroot, c: &Created) -> Result<Found, SysrootError> {
    Ok(match c {
        Created::FlowRule { device, location, .. } => {
            let Some(recorded) = c.flow_rule() else { return Ok(Found::Foreign("unreadable record".into())) };
            match sys.rules(device)? {
                Reported::Supported(t) => match t.entries.iter().find(|e| e.location == *location) {
                    None => judge_rule(&recorded, None),
                    Some(e) => match &e.rule {
                        Ok(r) => judge_rule(&recorded, Some(r)),
                        Err(why) => Found::Foreign(format!("a rule rsskit cannot read ({why})")),
                    },
                },
                Reported::Unsupported { reason } => Found::Foreign(format!("rules not readable: {reason}")),
            }
        }
        Created::RssContext { device, id, table, key } => match sys.context_rss(device, *id)? {
            Reported::Supported(now) => {
                judge_context(table, &unhex(key), Some((&now.rss.indir, &now.rss.key)))
            }
            // The ioctl answers ENOENT or EINVAL for a context that is not there.
            Reported::Unsupported { .. } => judge_context(table, &unhex(key), None),
        },
    })
}

/// Deletes what `created` records and still holds what was recorded: the
/// rules first, then the contexts. Each with what became of it.
pub fn remove<'a>(sys: &Sysroot, created: &'a [Created]) -> Vec<(&'a Created, Removal)> {
    let rules = created.iter().filter(|c| matches!(c, Created::FlowRule { .. })).rev();
    let contexts = created.iter().filter(|c| matches!(c, Created::RssContext { .. })).rev();
    rules
        .chain(contexts)
        .map(|c| {
            let outcome = match found(sys, c) {
                Err(e) => Removal::Refused(e.to_string()),
                Ok(Found::Gone) => Removal::Gone,
                Ok(Found::Foreign(w)) => Removal::Foreign(w),
                Ok(Found::Ours) => {
                    let r = match c {
                        Created::FlowRule { device, location, .. } => sys.delete_rule(device, *location),
                        Created::RssContext { device, id, .. } => sys.delete_context(device, *id),
                    };
                    match r {
                        Ok(Reported::Supported(())) => Removal::Removed,
                        Ok(Reported::Unsupported { reason }) => Removal::Refused(reason),
                        Err(e) => Removal::Refused(e.to_string()),
                    }
                }
            };
            (c, outcome)
        })
        .collect()
}

/// A recorded rule put back at its recorded location (the repair of a rule
/// someone deleted: the record's id stays true); the location it took.
pub fn put_back(sys: &Sysroot, rule: &FlowRule, device: &str) -> Result<Reported<u32>, SysrootError> {
    sys.insert_rule(device, rule, false)
}
