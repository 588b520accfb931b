//! The agent's decisions, with no I/O and the time passed in: for each
//! setting of a persisted plan, whether to put it back now, and what to
//! log. The shell (`rsskit agent`) reads the host, asks [`Keeper::decide`],
//! writes, and reports the [`Outcome`](crate::tune::Outcome) back to
//! [`Keeper::outcome`].
//!
//! - Drifted and not held back: correct it (cause = why this check ran).
//! - Corrected `flips` times within `window`: something else writes it.
//!   Reported as contested once, then left alone for a back-off that
//!   doubles (up to `max_backoff`) each time it is contested again.
//! - Refused by the kernel or driver (or read back otherwise): reported
//!   once and not retried until the device appears again or the plans are
//!   reloaded ([`Keeper::forget`]).

use crate::tune::{Outcome, Setting};
use std::collections::{BTreeMap, VecDeque};

/// Why a check ran: the cause logged with a correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The agent started.
    Start,
    /// SIGHUP: the plans were read again.
    Reload,
    /// The periodic re-check.
    Periodic,
    /// rtnetlink: a new link (hotplug, driver bind, veth created).
    NewLink,
    /// rtnetlink: the link came up (many drivers reset IRQ affinity in open).
    LinkUp,
    /// The queue count differs from the last check (channels changed).
    ChannelsChanged,
}

impl Cause {
    /// Label value for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Start => "start",
            Cause::Reload => "reload",
            Cause::Periodic => "periodic",
            Cause::NewLink => "new_link",
            Cause::LinkUp => "link_up",
            Cause::ChannelsChanged => "channels_changed",
        }
    }

    /// In words, for the log.
    pub fn words(self) -> &'static str {
        match self {
            Cause::Start => "found at start",
            Cause::Reload => "found after reloading the plans",
            Cause::Periodic => "found by the periodic re-check",
            Cause::NewLink => "the device appeared (new link)",
            Cause::LinkUp => "the link came up",
            Cause::ChannelsChanged => "the channel count changed",
        }
    }
}

/// The setting's class: a low-cardinality metric label.
pub fn class(s: &Setting) -> &'static str {
    s.target.name()
}

/// How hard to hold a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Corrections within `window_ms` that make a setting contested.
    pub flips: usize,
    /// The window, milliseconds.
    pub window_ms: u64,
    /// First back-off, milliseconds.
    pub backoff_ms: u64,
    /// Longest back-off, milliseconds.
    pub max_backoff_ms: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { flips: 3, window_ms: 300_000, backoff_ms: 60_000, max_backoff_ms: 3_600_000 }
    }
}

/// What to do with one setting now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// As planned: nothing to do.
    InPlace,
    /// Drifted: write it.
    Correct,
    /// Refused before (already reported): not retried.
    Refused,
    /// Contested: left alone until this time (ms).
    BackingOff {
        /// When it may be corrected again.
        until_ms: u64,
    },
}

/// What to log (and count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Put back and read back.
    Corrected {
        /// Interface.
        device: String,
        /// The setting, for people.
        what: String,
        /// [`class`] of it.
        class: &'static str,
        /// The value found.
        old: String,
        /// The value written.
        new: String,
        /// Why the check ran.
        cause: Cause,
    },
    /// The kernel or driver did not take it; reported once.
    NotApplied {
        /// Interface.
        device: String,
        /// The setting.
        what: String,
        /// [`class`] of it.
        class: &'static str,
        /// The reason.
        reason: String,
    },
    /// Something else keeps writing it: left alone for a while.
    Contested {
        /// Interface.
        device: String,
        /// The setting.
        what: String,
        /// [`class`] of it.
        class: &'static str,
        /// Corrections within the window.
        flips: usize,
        /// How long it is left alone, seconds.
        backoff_s: u64,
        /// Who else writes it, when the shell can tell (irqbalance's pid).
        suspect: Option<String>,
    },
}

#[derive(Debug, Default)]
struct Entry {
    fixes: VecDeque<u64>,
    refused: bool,
    until_ms: u64,
    backoff_ms: u64,
}

/// The decisions' memory, per (device, setting).
#[derive(Debug, Default)]
pub struct Keeper {
    policy: Policy,
    entries: BTreeMap<(String, String), Entry>,
}

impl Keeper {
    /// A keeper with `policy`.
    pub fn new(policy: Policy) -> Keeper {
        Keeper { policy, entries: BTreeMap::new() }
    }

    fn key(s: &Setting) -> (String, String) {
        (s.device().to_string(), s.what.clone())
    }

    /// Whether to correct `s` (its `old` is the value read now) at `now_ms`.
    pub fn decide(&mut self, now_ms: u64, s: &Setting) -> Verdict {
        let e = self.entries.get_mut(&Self::key(s));
        if s.unchanged() {
            if let Some(e) = e {
                // In place again (e.g. the operator fixed what the driver refused).
                e.refused = false;
            }
            return Verdict::InPlace;
        }
        match e {
            Some(e) if e.refused => Verdict::Refused,
            Some(e) if e.until_ms > now_ms => Verdict::BackingOff { until_ms: e.until_ms },
            _ => Verdict::Correct,
        }
    }

    /// Records what writing `s` did; returns what to log.
    pub fn outcome(
        &mut self,
        now_ms: u64,
        s: &Setting,
        cause: Cause,
        o: &Outcome,
        suspect: Option<&str>,
    ) -> Vec<Event> {
        let p = self.policy;
        let e = self.entries.entry(Self::key(s)).or_default();
        let class = class(s);
        match o {
            Outcome::Applied => {
                let mut out = vec![Event::Corrected {
                    device: s.device().to_string(),
                    what: s.what.clone(),
                    class,
                    old: s.old.clone().unwrap_or_else(|| "(unreadable)".into()),
                    new: s.new.clone(),
                    cause,
                }];
                e.fixes.push_back(now_ms);
                while e.fixes.front().is_some_and(|&t| now_ms.saturating_sub(t) > p.window_ms) {
                    e.fixes.pop_front();
                }
                if e.fixes.len() >= p.flips {
                    e.backoff_ms = if e.backoff_ms == 0 {
                        p.backoff_ms
                    } else {
                        (e.backoff_ms * 2).min(p.max_backoff_ms)
                    };
                    e.until_ms = now_ms + e.backoff_ms;
                    out.push(Event::Contested {
                        device: s.device().to_string(),
                        what: s.what.clone(),
                        class,
                        flips: e.fixes.len(),
                        backoff_s: e.backoff_ms / 1000,
                        suspect: suspect.map(str::to_string),
                    });
                    e.fixes.clear();
                }
                out
            }
            Outcome::Refused { reason } | Outcome::Changed { reason, .. } => {
                if e.refused {
                    return Vec::new();
                }
                e.refused = true;
                let reason = match o {
                    Outcome::Changed { read_back, .. } => format!("reads back {read_back}: {reason}"),
                    _ => reason.clone(),
                };
                vec![Event::NotApplied {
                    device: s.device().to_string(),
                    what: s.what.clone(),
                    class,
                    reason,
                }]
            }
        }
    }

    /// Whether putting `s` back at `now_ms` would make it contested, so the
    /// shell looks for a suspect (a scan of every process) only then.
    pub fn would_contest(&self, now_ms: u64, s: &Setting) -> bool {
        let recent = self.entries.get(&Self::key(s)).map_or(0, |e| {
            e.fixes.iter().filter(|&&t| now_ms.saturating_sub(t) <= self.policy.window_ms).count()
        });
        recent + 1 >= self.policy.flips
    }

    /// Whether `s` is contested now (for the device's problems).
    pub fn contested(&self, now_ms: u64, s: &Setting) -> bool {
        self.entries.get(&Self::key(s)).is_some_and(|e| e.until_ms > now_ms)
    }

    /// Whether `s` was refused (and not retried).
    pub fn refused(&self, s: &Setting) -> bool {
        self.entries.get(&Self::key(s)).is_some_and(|e| e.refused)
    }

    /// Forgets a device (it appeared again, or the plans were reloaded):
    /// refused settings get one new try, back-offs end.
    pub fn forget(&mut self, device: &str) {
        self.entries.retain(|(d, _), _| d != device);
    }

    /// Forgets everything.
    pub fn forget_all(&mut self) {
        self.entries.clear();
    }

    // --- isolation objects (isolate2): rsskit's rules and contexts that keep vanishing ---
    // Keyed by (device, "isolation " + what), so they never meet a setting's entry.

    fn object_key(device: &str, what: &str) -> (String, String) {
        (device.to_string(), format!("isolation {what}"))
    }

    /// Whether to put back `what` (a rule or RSS context rsskit created,
    /// found gone) on `device` at `now_ms`: [`Verdict::Correct`], or
    /// [`Verdict::BackingOff`] while it is contested, as a setting's.
    pub fn decide_object(&self, now_ms: u64, device: &str, what: &str) -> Verdict {
        match self.entries.get(&Self::object_key(device, what)) {
            Some(e) if e.until_ms > now_ms => Verdict::BackingOff { until_ms: e.until_ms },
            _ => Verdict::Correct,
        }
    }

    /// Records that `what` was put back at `now_ms`: the `flips`-th time
    /// within the window makes it contested (the back-off starts, doubling
    /// up to the cap as for a setting), and the event to log is returned.
    pub fn object_put_back(&mut self, now_ms: u64, device: &str, what: &str) -> Option<Event> {
        let p = self.policy;
        let e = self.entries.entry(Self::object_key(device, what)).or_default();
        e.fixes.push_back(now_ms);
        while e.fixes.front().is_some_and(|&t| now_ms.saturating_sub(t) > p.window_ms) {
            e.fixes.pop_front();
        }
        if e.fixes.len() < p.flips {
            return None;
        }
        e.backoff_ms =
            if e.backoff_ms == 0 { p.backoff_ms } else { (e.backoff_ms * 2).min(p.max_backoff_ms) };
        e.until_ms = now_ms + e.backoff_ms;
        let flips = e.fixes.len();
        e.fixes.clear();
        Some(Event::Contested {
            device: device.to_string(),
            what: format!("isolation {what}"),
            class: "isolation",
            flips,
            backoff_s: e.backoff_ms / 1000,
            suspect: None,
        })
    }

    /// Whether `what` on `device` is contested now (for the device's problems).
    pub fn object_contested(&self, now_ms: u64, device: &str, what: &str) -> bool {
        self.entries.get(&Self::object_key(device, what)).is_some_and(|e| e.until_ms > now_ms)
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Corrected { device, what, old, new, cause, .. } => {
                write!(f, "{device}: corrected {what}: {old} -> {new} (cause: {})", cause.words())
            }
            Event::NotApplied { device, what, reason, .. } => {
                write!(f, "{device}: cannot apply {what}: {reason}; not retried until the device appears again or SIGHUP")
            }
            Event::Contested { device, what, flips, backoff_s, suspect, .. } => {
                write!(
                    f,
                    "{device}: {what} is contested: put back {flips} times, something else keeps writing it"
                )?;
                if let Some(s) = suspect {
                    write!(f, " (likely {s})")?;
                }
                write!(f, "; left alone for {backoff_s} s")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::Target;

    fn rps(old: &str) -> Setting {
        Setting {
            target: Target::RpsCpus { device: "veth0".into(), queue: 1 },
            what: "rx-1 rps_cpus".into(),
            old: Some(old.into()),
            new: "3".into(),
        }
    }

    fn policy() -> Policy {
        Policy { flips: 3, window_ms: 10_000, backoff_ms: 5_000, max_backoff_ms: 12_000 }
    }

    #[test]
    fn drift_is_corrected_with_its_cause() {
        let mut k = Keeper::new(policy());
        assert_eq!(k.decide(0, &rps("00000003")), Verdict::InPlace);
        let s = rps("0");
        assert_eq!(k.decide(0, &s), Verdict::Correct);
        let ev = k.outcome(0, &s, Cause::Periodic, &Outcome::Applied, None);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            ev[0].to_string(),
            "veth0: corrected rx-1 rps_cpus: 0 -> 3 (cause: found by the periodic re-check)"
        );
        assert!(matches!(&ev[0], Event::Corrected { class: "rps_cpus", cause: Cause::Periodic, .. }));
    }

    #[test]
    fn a_flipping_setting_is_contested_with_growing_backoff() {
        let mut k = Keeper::new(policy());
        let s = rps("0");
        let mut t = 0;
        for _ in 0..2 {
            assert_eq!(k.decide(t, &s), Verdict::Correct);
            assert_eq!(
                k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, Some("irqbalance (pid 9)")).len(),
                1
            );
            t += 1000;
        }
        let ev = k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, Some("irqbalance (pid 9)"));
        assert_eq!(ev.len(), 2);
        assert!(ev[1].to_string().contains("contested: put back 3 times"), "{}", ev[1]);
        assert!(ev[1].to_string().contains("likely irqbalance (pid 9)"));
        assert!(ev[1].to_string().ends_with("left alone for 5 s"));
        assert_eq!(k.decide(t + 4999, &s), Verdict::BackingOff { until_ms: t + 5000 });
        assert!(k.contested(t + 1, &s));
        // After the back-off it is tried again; contested again: doubled, capped.
        let mut t = t + 5000;
        for i in 0..3 {
            assert_eq!(k.decide(t, &s), Verdict::Correct);
            let ev = k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, None);
            assert_eq!(ev.len(), if i == 2 { 2 } else { 1 });
            t += 100;
        }
        assert_eq!(k.decide(t, &s), Verdict::BackingOff { until_ms: t - 100 + 10_000 });
        for _ in 0..3 {
            t += 20_000;
            for _ in 0..3 {
                k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, None);
            }
        }
        assert_eq!(k.decide(t, &s), Verdict::BackingOff { until_ms: t + 12_000 }, "capped");
    }

    #[test]
    fn would_contest_foretells_the_contested_event() {
        let mut k = Keeper::new(policy());
        let s = rps("0");
        // Bursts and pauses: inside and outside the window, through back-offs.
        let gaps = [0, 100, 100, 7000, 100, 11_000, 2000, 100, 100, 30_000, 5, 5, 5, 5];
        let (mut t, mut contested) = (0, 0);
        for g in gaps {
            t += g;
            if k.decide(t, &s) != Verdict::Correct {
                continue;
            }
            let foretold = k.would_contest(t, &s);
            let ev = k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, None);
            let is = ev.iter().any(|e| matches!(e, Event::Contested { .. }));
            assert_eq!(foretold, is, "at {t}: {ev:?}");
            contested += usize::from(is);
        }
        assert!(contested >= 2, "the sequence reaches contested more than once: {contested}");
    }

    #[test]
    fn slow_flips_outside_the_window_are_not_contested() {
        let mut k = Keeper::new(policy());
        let s = rps("0");
        for i in 0..10 {
            let t = i * 6000;
            assert_eq!(k.decide(t, &s), Verdict::Correct);
            assert_eq!(k.outcome(t, &s, Cause::Periodic, &Outcome::Applied, None).len(), 1, "at {t}");
        }
    }

    #[test]
    fn a_refused_setting_is_reported_once_until_forgotten() {
        let mut k = Keeper::new(policy());
        let s = Setting {
            target: Target::IrqAffinity { device: "veth0".into(), irq: 41 },
            what: "IRQ 41 (eth0-TxRx-1) affinity".into(),
            ..rps("0")
        };
        let no = Outcome::Refused { reason: "managed interrupt".into() };
        assert_eq!(k.decide(0, &s), Verdict::Correct);
        let ev = k.outcome(0, &s, Cause::Start, &no, None);
        assert_eq!(ev.len(), 1);
        assert!(ev[0].to_string().contains("cannot apply IRQ 41 (eth0-TxRx-1) affinity: managed interrupt"));
        assert_eq!(k.decide(1, &s), Verdict::Refused);
        assert!(k.outcome(1, &s, Cause::Periodic, &no, None).is_empty(), "once");
        assert!(k.refused(&s));
        k.forget("veth0");
        assert_eq!(k.decide(2, &s), Verdict::Correct, "the device appeared again: one new try");
        // A value that reads back otherwise counts as refused too.
        let ev = k.outcome(
            2,
            &s,
            Cause::NewLink,
            &Outcome::Changed { read_back: "0-1".into(), reason: "irqbalance".into() },
            None,
        );
        assert!(ev[0].to_string().contains("reads back 0-1: irqbalance"), "{}", ev[0]);
        assert_eq!(k.decide(3, &s), Verdict::Refused);
        // Fixed behind our back: in place, and refusals are lifted.
        assert_eq!(k.decide(4, &Setting { old: Some("3".into()), ..s.clone() }), Verdict::InPlace);
        assert_eq!(k.decide(5, &s), Verdict::Correct);
    }

    #[test]
    fn drifted_hash_fields_are_corrected_with_their_cause() {
        // ethtool -N eth0 rx-flow-hash udp4 sd behind the agent's back.
        let fields = |old: &str| Setting {
            target: Target::HashFields { device: "eth0".into(), flow: "udp4" },
            what: "udp4 hashed fields".into(),
            old: Some(old.into()),
            new: "ip_src,ip_dst,l4_src_port,l4_dst_port".into(),
        };
        let mut k = Keeper::new(policy());
        assert_eq!(
            k.decide(0, &fields("l4_dst_port,l4_src_port,ip_dst,ip_src")),
            Verdict::InPlace,
            "same set"
        );
        let s = fields("ip_src,ip_dst");
        assert_eq!(k.decide(0, &s), Verdict::Correct);
        let ev = k.outcome(0, &s, Cause::Periodic, &Outcome::Applied, None);
        assert_eq!(
            ev[0].to_string(),
            "eth0: corrected udp4 hashed fields: ip_src,ip_dst -> ip_src,ip_dst,l4_src_port,l4_dst_port \
             (cause: found by the periodic re-check)"
        );
        assert!(matches!(&ev[0], Event::Corrected { class: "hash_fields", .. }));
        // A driver that takes no fields for udp4: reported once.
        let no = Outcome::Refused { reason: "ETHTOOL_SRXFH: Operation not supported".into() };
        let t = fields("ip_src,ip_dst");
        let mut k = Keeper::new(policy());
        assert_eq!(k.outcome(1, &t, Cause::Start, &no, None).len(), 1);
        assert_eq!(k.decide(2, &t), Verdict::Refused);
    }

    #[test]
    fn classes_are_few() {
        let s = rps("0");
        assert_eq!(class(&s), "rps_cpus");
        let on = |target| Setting { target, ..s.clone() };
        assert_eq!(class(&on(Target::XpsCpus { device: "veth0".into(), queue: 0 })), "xps_cpus");
        assert_eq!(class(&on(Target::RssTable { device: "veth0".into() })), "rss_table");
        assert_eq!(class(&on(Target::RpsFlowCnt { device: "veth0".into(), queue: 0 })), "rps_flow_cnt");
        assert_eq!(class(&on(Target::Channels { device: "veth0".into() })), "channels");
    }
    // isolate2: a rule of rsskit's that someone deletes on every pass.
    #[test]
    fn a_vanishing_isolation_rule_is_contested_and_backed_off() {
        let mut k = Keeper::new(policy());
        let what = "flow rule 1023 (udp4 dst-port 443 context 2 loc 1023)";
        // Passes every second: put back twice quietly, the third time contested.
        assert_eq!(k.decide_object(0, "eth0", what), Verdict::Correct);
        assert_eq!(k.object_put_back(0, "eth0", what), None);
        assert_eq!(k.object_put_back(1_000, "eth0", what), None);
        let ev = k.object_put_back(2_000, "eth0", what).expect("contested on the third put-back");
        assert!(matches!(&ev, Event::Contested { class: "isolation", flips: 3, backoff_s: 5, .. }), "{ev:?}");
        assert!(ev.to_string().contains("eth0: isolation flow rule 1023"), "{ev}");
        assert!(ev.to_string().contains("left alone for 5 s"), "{ev}");
        // Held back for the back-off, then tried again.
        assert_eq!(k.decide_object(3_000, "eth0", what), Verdict::BackingOff { until_ms: 7_000 });
        assert!(k.object_contested(3_000, "eth0", what));
        assert_eq!(k.decide_object(7_000, "eth0", what), Verdict::Correct);
        // Contested again: the back-off doubles, then stays at the cap.
        for t in [7_000, 8_000] {
            assert_eq!(k.object_put_back(t, "eth0", what), None);
        }
        let ev = k.object_put_back(9_000, "eth0", what).unwrap();
        assert!(matches!(ev, Event::Contested { backoff_s: 10, .. }), "{ev:?}");
        for t in [19_000, 20_000] {
            assert_eq!(k.object_put_back(t, "eth0", what), None);
        }
        let ev = k.object_put_back(21_000, "eth0", what).unwrap();
        assert!(matches!(ev, Event::Contested { backoff_s: 12, .. }), "{ev:?}");
        // Another object, and a setting of the same words, are not affected.
        assert_eq!(k.decide_object(21_001, "eth0", "RSS context 2"), Verdict::Correct);
        assert!(!k.object_contested(21_001, "eth1", what));
        // Put back rarely (outside the window): never contested.
        let mut k = Keeper::new(policy());
        for t in [0, 20_000, 40_000, 60_000] {
            assert_eq!(k.object_put_back(t, "eth0", what), None);
        }
    }
}
