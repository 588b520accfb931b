//! Service isolation (`plan --isolate udp:443=8-15`, issue 33): a service's
//! flows get their own queues and CPUs. The queues whose IRQs the plan puts
//! on the service's CPUs go into a new RSS context (a table over exactly
//! those queues), one flow rule per match steers the service's flows into
//! it, and the main table leaves those queues out. No I/O here: the spec,
//! the plan and the judgement of what is rsskit's; [`write`] creates and
//! removes on the host.

pub mod keep;
pub mod write;

use crate::plan::DevicePlan;
use rsskit_core::flowrule::{parse_rule, FlowRule, RuleAction, RuleFlow, RuleMatch};
use rsskit_linux::cpulist;
use serde::{Deserialize, Serialize};

/// One `--isolate` spec: the flows and the CPUs they get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolateSpec {
    /// The spec as given.
    pub text: String,
    /// What the rules compare (two for `udp:443`: IPv4 and IPv6).
    pub matchers: Vec<RuleMatch>,
    /// The service's CPUs.
    pub cpus: Vec<usize>,
}

/// Why an isolation was refused; names the `isolate` spec and the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsolateError {
    /// The spec does not parse.
    #[error("isolate {spec:?}: {why} (the shape is MATCH=CPUS: udp:443=8-15, tcp4:8080=2,3, or ethtool -N words such as 'ip4 dst-ip 10.0.0.0/24=4-7')")]
    Spec {
        /// The spec.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// The device or the plan cannot take it.
    #[error("isolate {spec:?} on {device}: {why}")]
    Refused {
        /// The spec.
        spec: String,
        /// The interface.
        device: String,
        /// Why, in words.
        why: String,
    },
}

/// What a device offers for isolation, as `info` reads it: `Some(why)` when it lacks it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IsolationSupport {
    /// Why the device has no RSS contexts (`None`: it has).
    pub no_contexts: Option<String>,
    /// Why the device takes no flow rules (ntuple; `None`: it does).
    pub no_rules: Option<String>,
}

/// One isolation in a device's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationPlan {
    /// The spec it came from.
    pub spec: String,
    /// The service's CPUs.
    pub cpus: Vec<usize>,
    /// The RX queues whose IRQs the plan puts on those CPUs.
    pub queues: Vec<u32>,
    /// The new context's table (the device's table size, over `queues` only).
    pub table: Vec<u32>,
    /// What each rule into the context compares, in ethtool -N words (`udp4 dst-port 443`).
    pub rules: Vec<String>,
}

const ACTION_WORDS: [&str; 7] = ["queue", "context", "offset", "drop", "wake", "vf", "loc"];

/// Reads `MATCH=CPUS`. MATCH is `PROTO:PORT` (`udp`, `tcp`, `sctp`: IPv4 and
/// IPv6; `udp4`, `tcp6`...: one family) for a destination port, or ethtool -N
/// match words (`udp4 dst-ip 10.0.0.2 dst-port 443`) without an action.
pub fn parse_spec(text: &str) -> Result<IsolateSpec, IsolateError> {
    let bad = |why: String| IsolateError::Spec { spec: text.to_string(), why };
    let (m, c) = text.rsplit_once('=').ok_or_else(|| bad("no '=CPUS'".into()))?;
    let cpus = cpulist::parse(c.trim()).map_err(|e| bad(format!("CPUS {c:?}: {e}")))?;
    if cpus.is_empty() {
        return Err(bad("no CPUs".into()));
    }
    let m = m.trim();
    let words: Vec<String> = match m.split_once(':') {
        Some((proto, port)) if !m.contains(' ') => {
            let port: u16 = port.parse().map_err(|_| bad(format!("port {port:?} is not 0-65535")))?;
            let flows: &[&str] = match proto {
                "udp" => &["udp4", "udp6"],
                "tcp" => &["tcp4", "tcp6"],
                "sctp" => &["sctp4", "sctp6"],
                "udp4" | "udp6" | "tcp4" | "tcp6" | "sctp4" | "sctp6" => &[proto],
                _ => return Err(bad(format!("protocol {proto:?} is not udp, tcp or sctp (with 4 or 6)"))),
            };
            flows.iter().map(|f| format!("{f} dst-port {port}")).collect()
        }
        _ => {
            if let Some(w) = m.split_whitespace().find(|w| ACTION_WORDS.contains(w)) {
                return Err(bad(format!(
                    "{w:?}: the match takes no action or location (the rule's action is the new context)"
                )));
            }
            vec![m.to_string()]
        }
    };
    let mut matchers = Vec::new();
    for w in &words {
        let r = parse_rule(&format!("{w} context 0 loc 0")).map_err(|e| bad(format!("match {w:?}: {e}")))?;
        if r.matcher == RuleMatch::any(r.matcher.flow) && r.matcher.flow == RuleFlow::Ether {
            return Err(bad("an ether match without a field takes every frame".into()));
        }
        matchers.push(r.matcher);
    }
    Ok(IsolateSpec { text: text.to_string(), matchers, cpus })
}

/// The ethtool -N words of a match (a rule's text without its action and location).
pub fn match_words(m: &RuleMatch) -> String {
    let t = FlowRule { location: 0, matcher: *m, action: RuleAction::Context { context: 0, offset: 0 } }
        .to_string();
    t.strip_suffix(" context 0 loc 0").unwrap_or(&t).to_string()
}

impl IsolationPlan {
    /// The rules into context `context` (location 0 until the driver places them).
    pub fn rules_into(&self, context: u32) -> Result<Vec<FlowRule>, String> {
        self.rules
            .iter()
            .map(|w| {
                parse_rule(&format!("{w} context {context} loc 0")).map_err(|e| format!("rule {w:?}: {e}"))
            })
            .collect()
    }

    /// Checks a plan file's isolation against its device plan (as `Plan::from_json` checks the rest).
    pub fn validate(&self, d: &DevicePlan) -> Result<(), String> {
        let n = &d.name;
        if self.queues.is_empty() || self.rules.is_empty() {
            return Err(format!("{n}: isolation {:?} has no queues or no rules", self.spec));
        }
        if let Some(q) = self.queues.iter().find(|&&q| !d.rx.iter().any(|r| r.queue == q as usize)) {
            return Err(format!("{n}: isolation {:?} names rx-{q}, which the plan does not have", self.spec));
        }
        if self.table.is_empty() || self.table.iter().any(|q| !self.queues.contains(q)) {
            return Err(format!("{n}: isolation {:?}: its table must be over its queues only", self.spec));
        }
        if d.table.as_ref().is_none_or(|t| t.len() != self.table.len()) {
            return Err(format!("{n}: isolation {:?}: its table is not the main table's size", self.spec));
        }
        if let Some(c) = self.cpus.iter().find(|&&c| c >= cpulist::MAX_CPUS) {
            return Err(format!("{n}: isolation {:?} names CPU {c}", self.spec));
        }
        self.rules_into(1).map(|_| ()).map_err(|e| format!("{n}: isolation {:?}: {e}", self.spec))
    }
}

/// Plans `specs` on `dev` (its queues, IRQs and table already planned):
/// each spec's queues are those whose IRQ the plan puts on its CPUs; the
/// context's table cycles over them; the main table's entries of those
/// queues go to the other queues in turn. Refused, naming the reason, when
/// the device has no contexts or takes no rules, the CPUs serve no queue in
/// the plan, two specs share a CPU, or the main table would be empty.
pub fn isolate_device(
    dev: &mut DevicePlan,
    specs: &[IsolateSpec],
    support: &IsolationSupport,
) -> Result<(), IsolateError> {
    let refuse = |s: &IsolateSpec, why: String| IsolateError::Refused {
        spec: s.text.clone(),
        device: dev.name.clone(),
        why,
    };
    let Some(first) = specs.first() else { return Ok(()) };
    if let Some(why) = &support.no_contexts {
        return Err(refuse(first, format!("the NIC has no RSS contexts ({why})")));
    }
    if let Some(why) = &support.no_rules {
        return Err(refuse(first, format!("the NIC takes no flow rules (ntuple: {why})")));
    }
    let Some(main) = dev.table.clone().filter(|t| dev.hardware_rss && !t.is_empty()) else {
        return Err(refuse(first, "no hardware RSS table is planned for it".into()));
    };
    let mut out: Vec<IsolationPlan> = Vec::new();
    for s in specs {
        if let Some(other) = out.iter().find(|o| o.cpus.iter().any(|c| s.cpus.contains(c))) {
            return Err(refuse(s, format!("its CPUs overlap those of {:?}", other.spec)));
        }
        let queues: Vec<u32> = dev
            .rx
            .iter()
            .filter(|r| r.cpu.is_some_and(|c| s.cpus.contains(&c)))
            .map(|r| r.queue as u32)
            .collect();
        if queues.is_empty() {
            let served: Vec<usize> = dev.rx.iter().filter_map(|r| r.cpu).collect();
            return Err(refuse(
                s,
                format!(
                    "CPUs {} serve no RX queue in the plan (its queues' IRQs are on {})",
                    cpulist::format(&s.cpus),
                    cpulist::format(&served)
                ),
            ));
        }
        let table = (0..main.len()).map(|i| queues[i % queues.len()]).collect();
        let rules = s.matchers.iter().map(match_words).collect();
        out.push(IsolationPlan { spec: s.text.clone(), cpus: s.cpus.clone(), queues, table, rules });
    }
    let isolated: Vec<u32> = out.iter().flat_map(|o| o.queues.iter().copied()).collect();
    let mut rest: Vec<u32> = main.iter().copied().filter(|q| !isolated.contains(q)).collect();
    rest.sort_unstable();
    rest.dedup();
    if rest.is_empty() {
        return Err(refuse(
            specs.last().expect("one spec"),
            format!(
                "the main table would be empty: every queue of its table ({}) is isolated",
                queue_list(&main)
            ),
        ));
    }
    let mut next = 0;
    let table: Vec<u32> = main
        .iter()
        .map(|&q| {
            if isolated.contains(&q) {
                next += 1;
                rest[(next - 1) % rest.len()]
            } else {
                q
            }
        })
        .collect();
    dev.notes.push(format!(
        "isolation: the main table leaves out queues {} (its table mismatch counts were taken before)",
        queue_list(&isolated)
    ));
    dev.table = Some(table);
    dev.isolation = out;
    Ok(())
}

fn queue_list(q: &[u32]) -> String {
    let mut v: Vec<usize> = q.iter().map(|&q| q as usize).collect();
    v.sort_unstable();
    v.dedup();
    cpulist::format(&v)
}

/// Whether what rsskit recorded is still what the host holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The same content at the same id: rsskit's.
    Ours,
    /// Nothing there any more.
    Gone,
    /// Something else at that id: someone else's, never touched.
    Foreign(String),
}

/// Judges the rule at a recorded location: the recorded rule, or another.
pub fn judge_rule(recorded: &FlowRule, now: Option<&FlowRule>) -> Found {
    match now {
        None => Found::Gone,
        Some(r) if r.matcher.normalized() == recorded.matcher.normalized() && r.action == recorded.action => {
            Found::Ours
        }
        Some(r) => Found::Foreign(format!("location {} now holds '{r}'", recorded.location)),
    }
}

/// Judges a recorded context: its table (and key, when recorded) now.
pub fn judge_context(table: &[u32], key: &[u8], now: Option<(&[u32], &[u8])>) -> Found {
    match now {
        None => Found::Gone,
        Some((t, k)) if t == table && (key.is_empty() || k == key) => Found::Ours,
        Some(_) => Found::Foreign("its table or key is not the one rsskit wrote".into()),
    }
}

#[cfg(test)]
mod tests;
