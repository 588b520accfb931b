//! NIC resources in the plan, no I/O: the channel count (one combined
//! queue per planned CPU up to the device's maximum, or kept), ring sizes
//! checked against the device's maxima, and interrupt coalescing as the
//! fields it sets. `plan` calls [`plan_resources`]; `tune` writes them.

use crate::plan::{DevicePlan, PlanError, PlanOptions};
use crate::sysroot::DeviceState;
use crate::tune::setting::{coalesce_pairs, MAX_COALESCE};
use rsskit_linux::ethtool::{Channels, Reported};
use serde::{Deserialize, Serialize};

/// Interrupt coalescing as asked (`--coalesce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoalesceChoice {
    /// Adaptive moderation on, RX and TX (the driver picks usecs by load).
    Adaptive,
    /// Adaptive RX moderation off, a fixed RX delay and, if given, frame count.
    Fixed {
        /// `rx_usecs`.
        usecs: u32,
        /// `rx_frames`, if given.
        frames: Option<u32>,
    },
}

impl CoalesceChoice {
    /// Parses `adaptive` or `fixed:USECS[,FRAMES]`; `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<CoalesceChoice, String> {
        let usage = "expected adaptive or fixed:USECS[,FRAMES] (e.g. fixed:50 or fixed:50,32)";
        if s == "adaptive" {
            return Ok(CoalesceChoice::Adaptive);
        }
        let rest = s.strip_prefix("fixed:").ok_or_else(|| usage.to_string())?;
        let num = |x: &str| -> Result<u32, String> {
            match x.parse::<u32>() {
                Ok(n) if n <= MAX_COALESCE && x.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
                _ => Err(format!("{usage}: {x:?} is not a number from 0 to {MAX_COALESCE}")),
            }
        };
        match rest.split_once(',') {
            Some((u, f)) => Ok(CoalesceChoice::Fixed { usecs: num(u)?, frames: Some(num(f)?) }),
            None => Ok(CoalesceChoice::Fixed { usecs: num(rest)?, frames: None }),
        }
    }

    /// The coalescing value that sets it: only the fields it decides.
    pub fn value(&self) -> String {
        match self {
            CoalesceChoice::Adaptive => "adaptive_rx=1,adaptive_tx=1".into(),
            CoalesceChoice::Fixed { usecs, frames: None } => format!("adaptive_rx=0,rx_usecs={usecs}"),
            CoalesceChoice::Fixed { usecs, frames: Some(f) } => {
                format!("adaptive_rx=0,rx_usecs={usecs},rx_frames={f}")
            }
        }
    }
}

/// The channel count as asked (`--channels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelChoice {
    /// Keep the count the device has (the default: a change resets every
    /// queue and IRQ of a live NIC).
    #[default]
    Keep,
    /// One combined queue per planned CPU, up to the device's maximum.
    Auto,
    /// This many combined queues.
    Count(u32),
}

impl ChannelChoice {
    /// Parses `keep`, `auto` or a count.
    pub fn parse(s: &str) -> Result<ChannelChoice, String> {
        match s {
            "keep" => Ok(ChannelChoice::Keep),
            "auto" => Ok(ChannelChoice::Auto),
            n => match n.parse::<u32>() {
                Ok(c) if c > 0 && n.bytes().all(|b| b.is_ascii_digit()) => Ok(ChannelChoice::Count(c)),
                _ => Err(format!("expected keep, auto or a count above 0, not {n:?}")),
            },
        }
    }
}

/// The channel count decided for a device, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPlan {
    /// Combined channels now.
    pub now: u32,
    /// Combined channels chosen (equal to `now` when kept).
    pub chosen: u32,
    /// The device's maximum (`max_combined`).
    pub max: u32,
    /// Why, in words: `channels 4 -> 8: one queue per planned CPU (8 CPUs, device max 63)`.
    pub reason: String,
}

impl ChannelPlan {
    /// Whether the plan changes the count.
    pub fn changes(&self) -> bool {
        self.chosen != self.now
    }
}

/// The channel count for `ncpus` planned CPUs. `None` when the device
/// reports no channels or has separate RX/TX channels only (noted).
pub fn choose_channels(
    device: &str,
    ch: &Reported<Channels>,
    ncpus: usize,
    choice: ChannelChoice,
    notes: &mut Vec<String>,
) -> Result<Option<ChannelPlan>, PlanError> {
    let asked = choice != ChannelChoice::Keep;
    let c = match ch {
        Reported::Supported(c) => *c,
        Reported::Unsupported { reason } => {
            if asked {
                notes.push(format!("channels not planned: the driver reports none ({reason})"));
            }
            return Ok(None);
        }
    };
    if c.max_combined == 0 {
        if asked {
            notes.push(format!(
                "channels not planned: the device has separate channels only ({} RX, {} TX; rsskit sets \
                 combined channels): set them with ethtool -L",
                c.rx_count, c.tx_count
            ));
        }
        return Ok(None);
    }
    let (now, max) = (c.combined_count, c.max_combined);
    let cpus = u32::try_from(ncpus).unwrap_or(u32::MAX);
    let (chosen, why) = match choice {
        ChannelChoice::Keep => {
            let auto = cpus.min(max);
            let hint =
                if auto != now { format!("; --channels auto would set {auto}") } else { String::new() };
            (now, format!("kept (--channels keep, the default){hint}"))
        }
        ChannelChoice::Auto => {
            let n = cpus.min(max);
            let cap = if cpus > max { ", capped at the device's maximum" } else { "" };
            (n, format!("one queue per planned CPU ({ncpus} CPUs, device max {max}{cap})"))
        }
        ChannelChoice::Count(n) => {
            if n > max {
                return Err(PlanError::OutOfRange {
                    device: device.into(),
                    field: "channels",
                    asked: n,
                    max,
                });
            }
            (n, format!("as asked (--channels {n}, device max {max})"))
        }
    };
    let reason = match chosen == now {
        true => format!("channels {now}: {why}"),
        false => format!("channels {now} -> {chosen}: {why}"),
    };
    Ok(Some(ChannelPlan { now, chosen, max, reason }))
}

/// `d` as it will be with `n` combined queues: queues past the current
/// ones as the kernel creates them (RPS and XPS off), those past `n` gone,
/// and the IRQs of gone queues dropped. New queues' IRQs are unknown until
/// the driver allocates them: they are found after the change
/// ([`after_channels`]).
pub fn resized(d: &DeviceState, n: u32, notes: &mut Vec<String>) -> DeviceState {
    let n = n as usize;
    let mut r = d.clone();
    let (old_rx, old_tx) = (d.rx.len(), d.tx.len());
    r.rx = (0..n)
        .map(|q| {
            d.rx.get(q).cloned().unwrap_or(rsskit_linux::netdev::RxQueue {
                queue: q,
                rps_mask: Some("0".into()),
                rps_cpus: Some(Vec::new()),
                rps_flow_cnt: Some(0),
            })
        })
        .collect();
    r.tx = (0..n)
        .map(|q| {
            d.tx.get(q).cloned().unwrap_or(rsskit_linux::netdev::TxQueue {
                queue: q,
                xps_mask: Some("0".into()),
                xps_cpus: Some(Vec::new()),
            })
        })
        .collect();
    r.irqs.retain(|x| x.queue.is_none_or(|q| q < n) || x.kind == rsskit_linux::netdev::IrqKind::Other);
    if let Reported::Supported(c) = &mut r.channels {
        c.combined_count = n as u32;
    }
    if n > old_rx.min(old_tx) {
        notes.push(format!(
            "queues {}-{} are planned before they exist: apply sets the channels first, then pins their \
             IRQs, found by what they serve (their numbers exist only after the change)",
            old_rx.min(old_tx),
            n - 1
        ));
    }
    r
}

/// The device plan `d` (made for a channel change) on `dev` as it is after
/// the change: each queue IRQ found by what it serves and put on its
/// queue's CPU, the way `plan` pins IRQs it knows. No I/O.
pub fn after_channels(d: &DevicePlan, dev: &DeviceState) -> DevicePlan {
    use rsskit_linux::netdev::{rx_irq, tx_irq, IrqKind};
    let mut p = d.clone();
    let n = d.cpus.len().max(1);
    p.irqs = dev
        .irqs
        .iter()
        .filter(|x| x.kind != IrqKind::Other)
        .filter_map(|x| {
            let q = x.queue?;
            let cpu = if x.kind.serves_rx() && q < d.rx.len() {
                d.rx[q].cpu
            } else if x.kind.serves_tx() && q < d.tx.len() {
                d.tx[q].cpu
            } else {
                None
            }
            .or_else(|| d.cpus.get(q % n).copied())?;
            Some(crate::plan::IrqPlan { irq: x.irq, name: x.name.clone(), cpus: vec![cpu] })
        })
        .collect();
    for q in &mut p.rx {
        q.irq = rx_irq(&dev.irqs, q.queue).map(|x| x.irq);
    }
    for q in &mut p.tx {
        q.irq = tx_irq(&dev.irqs, q.queue).map(|x| x.irq);
    }
    p
}

/// What [`plan_resources`] decided for one device.
#[derive(Debug, Default)]
pub struct Resources {
    /// RX ring size to write.
    pub rx_ring: Option<u32>,
    /// TX ring size to write.
    pub tx_ring: Option<u32>,
    /// Coalescing value to write.
    pub coalesce: Option<String>,
}

/// Rings and coalescing for `d`:
/// ring sizes past the device's maxima are refused (naming the field); a
/// device that reports no rings or coalescing gets a note instead.
pub fn plan_resources(
    d: &DeviceState,
    opts: &PlanOptions,
    notes: &mut Vec<String>,
) -> Result<Resources, PlanError> {
    let mut out = Resources::default();
    if opts.rx_ring.is_some() || opts.tx_ring.is_some() {
        match &d.rings {
            Reported::Supported(r) => {
                for (field, asked, max, slot) in [
                    ("rx_ring", opts.rx_ring, r.rx_max, &mut out.rx_ring),
                    ("tx_ring", opts.tx_ring, r.tx_max, &mut out.tx_ring),
                ] {
                    let Some(n) = asked else { continue };
                    if n == 0 || n > max {
                        return Err(PlanError::OutOfRange { device: d.name.clone(), field, asked: n, max });
                    }
                    *slot = Some(n);
                }
            }
            Reported::Unsupported { reason } => {
                notes.push(format!("ring sizes not planned: the driver reports none ({reason})"))
            }
        }
    }
    if let Some(c) = opts.coalesce {
        match &d.coalesce {
            Reported::Supported(_) => out.coalesce = Some(c.value()),
            Reported::Unsupported { reason } => {
                notes.push(format!("coalescing not planned: the driver reports none ({reason})"))
            }
        }
    }
    Ok(out)
}

/// Checks a plan file's NIC resources (it may come from anywhere).
pub fn validate(d: &DevicePlan) -> Result<(), String> {
    for (field, v) in [("rx_ring", d.rx_ring), ("tx_ring", d.tx_ring)] {
        if v == Some(0) {
            return Err(format!("{field} is 0"));
        }
    }
    if let Some(c) = &d.coalesce {
        coalesce_pairs(c).map_err(|e| format!("coalesce is {e}"))?;
    }
    if let Some(c) = &d.channels {
        if c.chosen == 0 || c.chosen > c.max.max(c.now) {
            return Err(format!("channels {} is out of range (device max {})", c.chosen, c.max));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::nic;
    use rsskit_linux::ethtool::params::{Coalesce, Rings};

    fn ch(now: u32, max: u32) -> Reported<Channels> {
        Reported::Supported(Channels { combined_count: now, max_combined: max, ..Channels::default() })
    }

    #[test]
    fn one_queue_per_planned_cpu_up_to_the_maximum() {
        let mut notes = vec![];
        let p = choose_channels("eth0", &ch(4, 63), 8, ChannelChoice::Auto, &mut notes).unwrap().unwrap();
        assert_eq!((p.now, p.chosen), (4, 8));
        assert_eq!(p.reason, "channels 4 -> 8: one queue per planned CPU (8 CPUs, device max 63)");
        let p = choose_channels("eth0", &ch(4, 6), 8, ChannelChoice::Auto, &mut notes).unwrap().unwrap();
        assert_eq!(p.chosen, 6, "capped: {}", p.reason);
        assert!(p.reason.contains("capped"));
        let p = choose_channels("eth0", &ch(4, 63), 8, ChannelChoice::Keep, &mut notes).unwrap().unwrap();
        assert!(!p.changes());
        assert!(p.reason.contains("--channels auto would set 8"), "{}", p.reason);
        let p = choose_channels("eth0", &ch(4, 63), 8, ChannelChoice::Count(2), &mut notes).unwrap().unwrap();
        assert_eq!(p.chosen, 2);
        let e = choose_channels("eth0", &ch(4, 6), 8, ChannelChoice::Count(7), &mut notes).unwrap_err();
        assert_eq!(e, PlanError::OutOfRange { device: "eth0".into(), field: "channels", asked: 7, max: 6 });
        assert!(e.to_string().contains("channels 7 is out of range: the device takes 1 to 6"));
        assert!(notes.is_empty());
    }

    #[test]
    fn rx_tx_only_and_silent_drivers_are_noted() {
        let mut notes = vec![];
        let split = Reported::Supported(Channels {
            rx_count: 4,
            tx_count: 4,
            max_rx: 8,
            max_tx: 8,
            ..Channels::default()
        });
        assert_eq!(choose_channels("eth0", &split, 8, ChannelChoice::Auto, &mut notes).unwrap(), None);
        assert!(notes[0].contains("separate channels only"), "{notes:?}");
        let none = Reported::Unsupported { reason: "EOPNOTSUPP".into() };
        assert_eq!(choose_channels("veth0", &none, 8, ChannelChoice::Keep, &mut notes).unwrap(), None);
        assert_eq!(notes.len(), 1, "keep says nothing about a device without channels");
    }

    #[test]
    fn rings_are_checked_against_the_maxima() {
        let mut d = nic("eth0", 4, None, 128);
        d.rings = Reported::Supported(Rings { rx: 256, tx: 256, rx_max: 4096, tx_max: 1024 });
        d.coalesce = Reported::Supported(Coalesce::default());
        let mut notes = vec![];
        let opts = PlanOptions { rx_ring: Some(4096), tx_ring: Some(2048), ..PlanOptions::default() };
        let e = plan_resources(&d, &opts, &mut notes).unwrap_err();
        assert_eq!(
            e,
            PlanError::OutOfRange { device: "eth0".into(), field: "tx_ring", asked: 2048, max: 1024 }
        );
        let opts = PlanOptions {
            rx_ring: Some(4096),
            coalesce: Some(CoalesceChoice::Fixed { usecs: 50, frames: None }),
            ..PlanOptions::default()
        };
        let r = plan_resources(&d, &opts, &mut notes).unwrap();
        assert_eq!((r.rx_ring, r.tx_ring), (Some(4096), None));
        assert_eq!(r.coalesce.as_deref(), Some("adaptive_rx=0,rx_usecs=50"));
        let e = plan_resources(&d, &PlanOptions { rx_ring: Some(0), ..opts.clone() }, &mut notes);
        assert!(matches!(e, Err(PlanError::OutOfRange { field: "rx_ring", asked: 0, .. })));
        // A driver without rings: a note, not an error.
        d.rings = Reported::Unsupported { reason: "ETHTOOL_GRINGPARAM: not supported".into() };
        let r = plan_resources(&d, &opts, &mut notes).unwrap();
        assert_eq!(r.rx_ring, None);
        assert!(notes.iter().any(|n| n.starts_with("ring sizes not planned")), "{notes:?}");
    }

    #[test]
    fn choices_parse() {
        assert_eq!(CoalesceChoice::parse("adaptive").unwrap().value(), "adaptive_rx=1,adaptive_tx=1");
        assert_eq!(
            CoalesceChoice::parse("fixed:50,32").unwrap().value(),
            "adaptive_rx=0,rx_usecs=50,rx_frames=32"
        );
        for bad in ["", "fixed", "fixed:", "fixed:-1", "fixed:1,", "fixed:+5", "on", "fixed:99999999"] {
            assert!(CoalesceChoice::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(ChannelChoice::parse("auto").unwrap(), ChannelChoice::Auto);
        assert_eq!(ChannelChoice::parse("16").unwrap(), ChannelChoice::Count(16));
        assert!(ChannelChoice::parse("0").is_err() && ChannelChoice::parse("+1").is_err());
    }

    #[test]
    fn planned_for_the_new_count_then_pinned_after_it() {
        use crate::plan::{plan_device, tests::topo};
        let t = topo(8);
        let mut d = nic("eth0", 4, None, 128);
        d.channels = ch(4, 8);
        let opts = PlanOptions { channels: ChannelChoice::Auto, ..PlanOptions::default() };
        let p = plan_device(&t, &d, &opts, 0).unwrap();
        assert_eq!(p.channels.as_ref().map(|c| (c.now, c.chosen)), Some((4, 8)));
        assert_eq!(p.rx.len(), 8, "planned for 8 queues");
        assert_eq!(p.table.as_ref().unwrap().iter().max(), Some(&7), "the table spreads over all 8");
        assert_eq!(p.irqs.len(), 4, "only the IRQs that exist now have numbers");
        assert!(p.rx[4..].iter().all(|q| q.irq.is_none()));
        assert!(
            p.notes.iter().any(|n| n.contains("queues 4-7 are planned before they exist")),
            "{:?}",
            p.notes
        );
        // After the change the driver has 8 queue IRQs (new numbers).
        let after = nic("eth0", 8, None, 128);
        let a = after_channels(&p, &after);
        assert_eq!(a.irqs.len(), 8);
        for q in 0..8 {
            assert_eq!(a.rx[q].irq, Some(100 + q as u32));
            assert_eq!(a.irqs[q].cpus, vec![p.rx[q].cpu.unwrap()], "IRQ of rx-{q} on its queue's CPU");
        }
        // Keep: planned on the queues there are.
        let p = plan_device(&t, &d, &PlanOptions::default(), 0).unwrap();
        assert_eq!((p.rx.len(), p.channels.unwrap().chosen), (4, 4));
    }
}
