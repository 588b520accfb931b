//! `plan --symmetric` (issue 37 item 3): both directions of a flow on one
//! queue, by the NIC's input transform where its driver has one, else by
//! the symmetric key; the plan's notes say which and why. No I/O.
//!
//! Which drivers take a transform: no RSS read says so (the kernel keeps
//! `supported_input_xfrm` in the driver's ethtool ops and reports only the
//! transform in use), so a transform in use, or the driver's name, tells.
//! From the kernel sources: `ice` and `iavf` set `RXH_XFRM_SYM_XOR`,
//! `mlx5_core` `RXH_XFRM_SYM_OR_XOR` (6.15). `--symmetric xfrm` asks any
//! driver; a refusal is then `apply`'s answer, reported, never dropped.

use crate::tune::setting::input_xfrm_text;
use rsskit_core::InputXfrm;

/// How to make hashing symmetric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymmetricChoice {
    /// The driver's transform when it is known to take one, else the key.
    Auto,
    /// The transform (the driver's own, else symmetric-xor), whatever the driver.
    Xfrm,
    /// The symmetric key (a 2-byte pattern): every driver with a key.
    Key,
}

/// What a device gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SymmetricPlan {
    /// The `input_xfrm` value to write (`sym-xor`, `sym-or-xor`).
    pub input_xfrm: Option<String>,
    /// Write the symmetric key.
    pub key: bool,
}

/// The transform a driver is known to take.
pub fn driver_xfrm(driver: &str) -> Option<InputXfrm> {
    match driver {
        "ice" | "iavf" => Some(InputXfrm::SymXor),
        "mlx5_core" => Some(InputXfrm::SymOrXor),
        _ => None,
    }
}

/// The value of a transform as a plan and a save file name it (the
/// kernel's ethtool strings).
pub fn xfrm_text(x: InputXfrm) -> String {
    match x {
        InputXfrm::SymOrXor => "sym-or-xor",
        _ => "sym-xor",
    }
    .to_string()
}

/// What the choice reads of a device.
#[derive(Debug, Clone, Copy, Default)]
pub struct Device<'a> {
    /// Its driver.
    pub driver: Option<&'a str>,
    /// Its `input_xfrm` names as read.
    pub current: &'a [String],
    /// Hardware RSS with a key.
    pub rss: bool,
    /// Its key is a symmetric pattern now.
    pub key_sym: bool,
}

/// The choice for one device. The plan then judges the key in place
/// under the transform in place (`plan::key_under_xfrm`): the symmetric
/// key under symmetric-xor would hash every flow to 0.
pub fn choose(choice: SymmetricChoice, dev: &Device, notes: &mut Vec<String>) -> SymmetricPlan {
    let Device { driver, current, rss, key_sym } = *dev;
    if !rss {
        notes.push("symmetric hashing not planned: no hardware RSS with a key on this device".into());
        return SymmetricPlan::default();
    }
    let now = input_xfrm_text(current).filter(|t| t != "none");
    let dname = driver.unwrap_or("(unknown driver)");
    let known = driver.and_then(driver_xfrm);
    match (choice, now) {
        (SymmetricChoice::Key, _) => {
            notes.push(
                "symmetric hashing by the symmetric key (--symmetric key): both directions hash alike \
                 with 16 independent hash bits"
                    .into(),
            );
            SymmetricPlan { input_xfrm: None, key: true }
        }
        (_, Some(t)) => {
            notes.push(format!(
                "symmetric hashing already on: input_xfrm {t} (kept); any key hashes both directions alike"
            ));
            SymmetricPlan::default()
        }
        (SymmetricChoice::Auto, None) if key_sym => {
            notes.push("symmetric hashing already on: the symmetric key (kept)".into());
            SymmetricPlan::default()
        }
        (SymmetricChoice::Auto, None) if known.is_none() => {
            notes.push(format!(
                "symmetric hashing by the symmetric key: driver {dname} is not known to take an input \
                 transform (ice and iavf take sym-xor, mlx5_core sym-or-xor); --symmetric xfrm asks for \
                 one anyway"
            ));
            SymmetricPlan { input_xfrm: None, key: true }
        }
        (_, None) => {
            let x = known.unwrap_or(InputXfrm::SymXor);
            let why = match known {
                Some(_) => format!("driver {dname} takes it"),
                None => format!("driver {dname} is not known to take it: apply reports a refusal"),
            };
            notes.push(format!(
                "symmetric hashing by input_xfrm {} ({why}); the key is kept: under the transform any \
                 key hashes both directions alike",
                xfrm_text(x)
            ));
            SymmetricPlan { input_xfrm: Some(xfrm_text(x)), key: false }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: SymmetricChoice, drv: &str, cur: &[&str], rss: bool) -> (SymmetricPlan, String) {
        let mut notes = Vec::new();
        let cur: Vec<String> = cur.iter().map(|s| s.to_string()).collect();
        let dev = Device { driver: Some(drv), current: &cur, rss, key_sym: false };
        let p = choose(c, &dev, &mut notes);
        assert_eq!(notes.len(), 1, "one note says which and why: {notes:?}");
        (p, notes.remove(0))
    }

    #[test]
    fn auto_takes_the_drivers_transform_else_the_key() {
        let (p, n) = run(SymmetricChoice::Auto, "ice", &[], true);
        assert_eq!(p, SymmetricPlan { input_xfrm: Some("sym-xor".into()), key: false });
        assert!(n.contains("input_xfrm sym-xor") && n.contains("ice takes it"), "{n}");
        let (p, _) = run(SymmetricChoice::Auto, "mlx5_core", &[], true);
        assert_eq!(p.input_xfrm.as_deref(), Some("sym-or-xor"));
        let (p, n) = run(SymmetricChoice::Auto, "virtio_net", &[], true);
        assert_eq!(p, SymmetricPlan { input_xfrm: None, key: true });
        assert!(n.contains("symmetric key") && n.contains("virtio_net is not known"), "{n}");
    }

    #[test]
    fn xfrm_is_asked_of_any_driver_and_key_of_any() {
        let (p, n) = run(SymmetricChoice::Xfrm, "igb", &[], true);
        assert_eq!(p, SymmetricPlan { input_xfrm: Some("sym-xor".into()), key: false });
        assert!(n.contains("apply reports a refusal"), "{n}");
        let (p, _) = run(SymmetricChoice::Key, "ice", &[], true);
        assert_eq!(p, SymmetricPlan { input_xfrm: None, key: true });
    }

    #[test]
    fn a_transform_in_use_is_kept_and_no_rss_plans_nothing() {
        let (p, n) = run(SymmetricChoice::Auto, "igb", &["sym-or-xor"], true);
        assert_eq!(p, SymmetricPlan::default());
        assert!(n.contains("already on: input_xfrm sym-or-xor"), "{n}");
        // A transform rsskit does not model is not "already symmetric".
        let (p, _) = run(SymmetricChoice::Auto, "ice", &["bit5"], true);
        assert_eq!(p.input_xfrm.as_deref(), Some("sym-xor"));
        let mut notes = Vec::new();
        let dev = Device { driver: Some("ice"), current: &[], rss: true, key_sym: true };
        assert_eq!(choose(SymmetricChoice::Auto, &dev, &mut notes), SymmetricPlan::default());
        assert!(notes[0].contains("already on: the symmetric key"), "{notes:?}");
        let (p, n) = run(SymmetricChoice::Auto, "ice", &[], false);
        assert_eq!(p, SymmetricPlan::default());
        assert!(n.contains("no hardware RSS"), "{n}");
    }
}
