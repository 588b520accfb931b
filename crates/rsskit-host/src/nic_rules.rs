//! A NIC's flow rules and the RSS contexts they reach, as landing needs
//! them: a flow meets the rules first (lowest location first), and only a
//! flow no rule takes is hashed with the main table. A context is read
//! when a rule names it. What cannot be known (a rule not understood, a
//! context the driver does not show, a rule on a field a tuple lacks) is
//! kept as such, so a prediction says "unknown" instead of guessing.

use crate::sysroot::{Sysroot, SysrootError};
use rsskit_core::flowrule::{classify_among, Classified, FlowRule, RuleAction};
use rsskit_core::{FlowTuple, InputXfrm};
use rsskit_linux::ethtool::{self, Reported};
use serde::Serialize;
use std::collections::BTreeMap;

/// An RSS context other than the main one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicContext {
    /// Its id.
    pub id: u32,
    /// Its key.
    pub key: Vec<u8>,
    /// Its indirection table (entries are queue numbers before the rule's offset).
    pub table: Vec<u32>,
    /// Its input transform, by ethtool name.
    #[serde(serialize_with = "crate::landing::xfrm_name")]
    pub xfrm: InputXfrm,
}

/// A rule whose bytes rsskit did not understand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpaqueRule {
    /// Its location.
    pub location: u32,
    /// Why it was not understood.
    pub reason: String,
}

/// The rules of one device and the contexts they reach.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NicRules {
    /// The rules rsskit understood, by ascending location.
    #[serde(serialize_with = "rule_texts")]
    pub rules: Vec<FlowRule>,
    /// Rules it did not understand: any flow that reaches one is "unknown".
    pub opaque: Vec<OpaqueRule>,
    /// The contexts the rules name, by id; a missing one could not be read.
    pub contexts: BTreeMap<u32, NicContext>,
    /// Why a named context could not be read, by id.
    pub unreadable_contexts: BTreeMap<u32, String>,
    /// When the driver lists no rules: its answer (a driver without rules support).
    pub not_listed: Option<String>,
}

fn rule_texts<S: serde::Serializer>(rules: &[FlowRule], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(rules.iter().map(|r| r.to_string()))
}

/// Where the NIC's rules send one flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// No rule takes it: the main table.
    Main,
    /// A rule sends it to one queue.
    Queue {
        /// The rule.
        rule: &'a FlowRule,
        /// The queue.
        queue: u32,
    },
    /// A rule hashes it with a context's key and table, plus an offset.
    Context {
        /// The rule.
        rule: &'a FlowRule,
        /// The context (id 0: the main table's key and table).
        context: Option<&'a NicContext>,
        /// Added to the table's queue.
        offset: u32,
    },
    /// A rule keeps it from every queue of this device: dropped, wake-on-LAN, or a VF's queue.
    NoQueue {
        /// The rule.
        rule: &'a FlowRule,
    },
    /// rsskit cannot know which way the NIC sends it.
    Unknown {
        /// Why, naming the rule or context.
        reason: String,
    },
}

impl NicRules {
    /// Reads `iface`'s rules and the contexts they name. A driver that
    /// lists no rules has none in effect for rsskit (it says so in `not_listed`).
    pub fn read(root: &Sysroot, iface: &str) -> Result<NicRules, SysrootError> {
        let mut out = NicRules::default();
        let table = match root.rules(iface)? {
            Reported::Supported(t) => t,
            Reported::Unsupported { reason } => {
                out.not_listed = Some(reason);
                return Ok(out);
            }
        };
        for e in table.entries {
            match e.rule {
                Ok(r) => out.rules.push(r),
                Err(err) => out.opaque.push(OpaqueRule { location: e.location, reason: err.to_string() }),
            }
        }
        let wanted: Vec<u32> = out
            .rules
            .iter()
            .filter_map(|r| match r.action {
                RuleAction::Context { context, .. } if context != 0 => Some(context),
                _ => None,
            })
            .collect();
        for id in wanted {
            if out.contexts.contains_key(&id) || out.unreadable_contexts.contains_key(&id) {
                continue;
            }
            match root.context_rss(iface, id)? {
                Reported::Supported(c) => {
                    let bits = ethtool::xfrm_bits(&c.rss.input_xfrm).unwrap_or(0xff);
                    match InputXfrm::from_bits(bits) {
                        Ok(xfrm) if !c.rss.indir.is_empty() && !c.rss.key.is_empty() => {
                            out.contexts
                                .insert(id, NicContext { id, key: c.rss.key, table: c.rss.indir, xfrm });
                        }
                        Ok(_) => {
                            out.unreadable_contexts
                                .insert(id, "the driver reports no key or table for it".into());
                        }
                        Err(e) => {
                            out.unreadable_contexts.insert(
                                id,
                                format!("input transform 0x{:02x}, which rsskit does not model", e.0),
                            );
                        }
                    }
                }
                Reported::Unsupported { reason } => {
                    out.unreadable_contexts.insert(id, reason);
                }
            }
        }
        Ok(out)
    }

    /// Whether the device has any rule (understood or not).
    pub fn any(&self) -> bool {
        !self.rules.is_empty() || !self.opaque.is_empty()
    }

    // --- isolate2: which queues the rules reach (for queues the main table leaves out) ---

    /// Of `queues`, those some rule sends flows to: by a queue action, or
    /// through a context's table plus the rule's offset. Grouped by how they
    /// are reached, each with its words: "rule(s) 1022, 1023 through RSS
    /// context 2". Empty when no rule reaches any of them.
    pub fn reaching(&self, queues: &[usize]) -> Vec<(Vec<usize>, String)> {
        // For one queue: [(context, or None for a queue action; rule location)].
        type Reach = Vec<(Option<u32>, u32)>;
        let mut how: BTreeMap<usize, Reach> = BTreeMap::new();
        for r in &self.rules {
            let to: Vec<(Option<u32>, u64)> = match r.action {
                RuleAction::Queue(q) => vec![(None, q.into())],
                RuleAction::Context { context, offset } if context != 0 => {
                    self.contexts.get(&context).map_or_else(Vec::new, |c| {
                        c.table.iter().map(|&e| (Some(context), u64::from(e) + u64::from(offset))).collect()
                    })
                }
                _ => Vec::new(),
            };
            for (ctx, q) in to {
                let Some(q) = usize::try_from(q).ok().filter(|q| queues.contains(q)) else { continue };
                let e = how.entry(q).or_default();
                if !e.contains(&(ctx, r.location)) {
                    e.push((ctx, r.location));
                }
            }
        }
        let mut groups: Vec<(Reach, Vec<usize>)> = Vec::new();
        for (q, h) in how {
            match groups.iter_mut().find(|(g, _)| *g == h) {
                Some((_, qs)) => qs.push(q),
                None => groups.push((h, vec![q])),
            }
        }
        groups
            .into_iter()
            .map(|(h, qs)| {
                let mut contexts: Vec<u32> = h.iter().filter_map(|(c, _)| *c).collect();
                contexts.sort_unstable();
                contexts.dedup();
                let locs: Vec<String> = h.iter().map(|(_, l)| l.to_string()).collect();
                let mut words = format!("rule(s) {}", locs.join(", "));
                if !contexts.is_empty() {
                    let c: Vec<String> = contexts.iter().map(u32::to_string).collect();
                    words += &format!(" through RSS context {}", c.join(", "));
                }
                (qs, words)
            })
            .collect()
    }

    /// Where the rules send `flow`.
    pub fn route(&self, flow: &FlowTuple) -> Route<'_> {
        let opaque: Vec<u32> = self.opaque.iter().map(|o| o.location).collect();
        let rule = match classify_among(&self.rules, &opaque, flow) {
            Classified::NoRule => return Route::Main,
            Classified::Opaque(loc) => {
                let why = self.opaque.iter().find(|o| o.location == loc).map_or("", |o| o.reason.as_str());
                return Route::Unknown { reason: format!("rule {loc} may take it: {why}") };
            }
            Classified::Unknown { rule, field } => {
                return Route::Unknown {
                    reason: format!(
                        "rule {} ({rule}) compares the {}, which a flow's addresses and ports do not give",
                        rule.location,
                        field.name()
                    ),
                }
            }
            Classified::Rule(rule) => rule,
        };
        match rule.action {
            RuleAction::Queue(queue) => Route::Queue { rule, queue },
            RuleAction::Context { context: 0, offset } => Route::Context { rule, context: None, offset },
            RuleAction::Context { context, offset } => match self.contexts.get(&context) {
                Some(c) => Route::Context { rule, context: Some(c), offset },
                None => Route::Unknown {
                    reason: format!(
                        "rule {} sends it into RSS context {context}, which could not be read ({})",
                        rule.location,
                        self.unreadable_contexts.get(&context).map_or("not listed", String::as_str)
                    ),
                },
            },
            RuleAction::Drop | RuleAction::Wake | RuleAction::Vf { .. } => Route::NoQueue { rule },
        }
    }
}

/// What `iface` offers for service isolation, as `info` reads it: RSS
/// contexts (`ETHTOOL_GRSSH` on a context) and flow rules (`ETHTOOL_GRXCLSRLCNT`).
pub fn isolation_support(
    root: &Sysroot,
    iface: &str,
) -> Result<crate::isolate::IsolationSupport, SysrootError> {
    Ok(crate::isolate::IsolationSupport {
        no_contexts: root.context_support(iface)?.reason().map(str::to_string),
        no_rules: root.rules(iface)?.reason().map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_core::flowrule::parse_rule;
    use rsskit_core::L4Proto;

    fn flow(dport: u16) -> FlowTuple {
        FlowTuple::new([10, 0, 0, 1].into(), 1000, [10, 0, 0, 2].into(), dport, L4Proto::Udp)
    }

    #[test]
    fn a_rule_not_understood_before_the_match_makes_it_unknown() {
        let rules = NicRules {
            rules: vec![parse_rule("udp4 dst-port 443 queue 2 loc 5").unwrap()],
            opaque: vec![OpaqueRule { location: 3, reason: "flow type 0x4".into() }],
            ..NicRules::default()
        };
        // Rule 3 (not understood) stands before rule 5, and before "no rule".
        assert!(matches!(rules.route(&flow(443)), Route::Unknown { reason } if reason.contains("rule 3")));
        assert!(matches!(rules.route(&flow(80)), Route::Unknown { .. }));
        // Behind the match, it does not matter.
        let later = NicRules { opaque: vec![OpaqueRule { location: 9, reason: "x".into() }], ..rules };
        assert!(matches!(later.route(&flow(443)), Route::Queue { queue: 2, .. }));
        assert!(matches!(later.route(&flow(80)), Route::Unknown { .. }), "no rule matched: rule 9 may");
        assert!(matches!(NicRules::default().route(&flow(80)), Route::Main));
    }
    // isolate2: queues the main table leaves out, and the rules that reach them.
    #[test]
    fn reaching_names_the_rules_and_contexts_that_serve_a_queue() {
        let mut r = NicRules {
            rules: vec![
                parse_rule("udp4 dst-port 53 queue 5 loc 1").unwrap(),
                parse_rule("tcp4 dst-port 22 context 1 loc 2").unwrap(),
                parse_rule("udp6 dst-port 443 context 1 loc 7").unwrap(),
                parse_rule("tcp4 dst-port 80 drop loc 9").unwrap(),
            ],
            ..NicRules::default()
        };
        // Context 1 not read: its queues are not known to be reached.
        assert_eq!(r.reaching(&[2, 3, 5, 6]), vec![(vec![5], "rule(s) 1".to_string())]);
        r.contexts.insert(
            1,
            NicContext { id: 1, key: vec![0; 40], table: vec![2, 3, 3, 2], xfrm: InputXfrm::None },
        );
        assert_eq!(
            r.reaching(&[2, 3, 5, 6]),
            vec![
                (vec![2, 3], "rule(s) 2, 7 through RSS context 1".to_string()),
                (vec![5], "rule(s) 1".to_string()),
            ]
        );
        // Only the queues asked about; the drop rule reaches none.
        assert_eq!(r.reaching(&[6]), Vec::<(Vec<usize>, String)>::new());
    }
}
