//! Persistent plans: one file per device under `/etc/rsskit/devices/`
//! (every path under a root, `/` on a live host), matched by a stable
//! identity rather than the interface name, applied again whenever the
//! device appears (udev `add` -> `rsskit-apply@IF.service` -> `rsskit
//! persist apply IF`) and kept true by `rsskit agent`.
//!
//! The files are root-owned input to a root service, so reading trusts
//! nothing: size-bounded, unknown fields refused, every value range-checked,
//! the file name must be the one its identity gives, and no path, command or
//! program is ever taken from one (a plan with `xdp_steer` is refused: it
//! names a command).

use crate::plan::{DevicePlan, IrqPlan, Plan, PLAN_VERSION};
use crate::sysroot::{DeviceState, Sysroot};
use rsskit_linux::netdev::{self, classify_irq, IrqKind};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The persisted file format written and read by this build.
pub const PERSIST_VERSION: u32 = 1;
/// Where the plans live, relative to the root.
pub const PLANS_DIR: &str = "etc/rsskit/devices";
/// Bound on a plan file (a 64 Ki-entry table is ~400 KiB of JSON).
const MAX_FILE: u64 = 1 << 20;

/// The udev rule: on a net device's `add` event, start the unit.
pub const UDEV_RULE: &str = include_str!("../../../deploy/udev/90-rsskit.rules");
/// The templated unit that applies one device's plan.
pub const APPLY_UNIT: &str = include_str!("../../../deploy/systemd/rsskit-apply@.service");
/// The agent's unit.
pub const AGENT_UNIT: &str = include_str!("../../../deploy/systemd/rsskit-agent.service");

/// (relative path under the root where `--persist` installs it, the
/// directories a package may have put it in instead, content).
pub const INSTALLED: [(&str, &[&str], &str); 2] = [
    ("etc/udev/rules.d/90-rsskit.rules", &["lib/udev/rules.d", "usr/lib/udev/rules.d"], UDEV_RULE),
    (
        "etc/systemd/system/rsskit-apply@.service",
        &["lib/systemd/system", "usr/lib/systemd/system"],
        APPLY_UNIT,
    ),
];

/// Errors of the persisted plans.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file (or the plans directory) not read: unreadable, or one rsskit
    /// will not trust ([`crate::trusted`]).
    #[error(transparent)]
    Read(#[from] crate::trusted::TrustError),
    /// A persisted file is not valid; nothing from it is used.
    #[error("{path}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The device has nothing stable to be recognised by.
    #[error("{0} has no stable identity (no permanent MAC address, no bus device, no MAC set by the administrator): give it a fixed MAC (ip link set dev {0} address ...) to persist its plan")]
    NoIdentity(String),
    /// A plan rsskit will not persist.
    #[error("{device}: {msg}")]
    Refused {
        /// The interface.
        device: String,
        /// Why.
        msg: String,
    },
}

/// What a device is recognised by, most stable first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case", deny_unknown_fields)]
pub enum Identity {
    /// The burnt-in MAC (`addr_assign_type` 0), `aa:bb:cc:dd:ee:ff`.
    PermanentMac(String),
    /// The bus address of the device (`/sys/class/net/IF/device`), e.g. `0000:03:00.0`.
    BusPath(String),
    /// A MAC the administrator set (`addr_assign_type` 3): stable as long as
    /// the configuration that sets it (veth, bonds, VMs).
    SetMac(String),
}

fn valid_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn valid_bus(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b':' || b == b'.' || b == b'-')
}

impl Identity {
    /// Whether the value has the shape of its kind.
    pub fn valid(&self) -> bool {
        match self {
            Identity::PermanentMac(m) | Identity::SetMac(m) => valid_mac(m) && m.to_ascii_lowercase() == *m,
            Identity::BusPath(p) => valid_bus(p),
        }
    }

    /// The file name of its plan: derived from the identity only.
    pub fn file_name(&self) -> String {
        match self {
            Identity::PermanentMac(m) => format!("mac-{}.json", m.replace(':', "")),
            Identity::SetMac(m) => format!("setmac-{}.json", m.replace(':', "")),
            Identity::BusPath(p) => format!("bus-{}.json", p.replace(':', "_")),
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::PermanentMac(m) => write!(f, "permanent MAC {m}"),
            Identity::SetMac(m) => write!(f, "MAC {m} (set by the administrator)"),
            Identity::BusPath(p) => write!(f, "bus device {p}"),
        }
    }
}

fn read_small(p: &Path) -> Option<String> {
    let mut s = String::new();
    fs::File::open(p).ok()?.take(256).read_to_string(&mut s).ok()?;
    Some(s.trim().to_string())
}

/// The identity of interface `name` under `root`: permanent MAC, else its
/// bus device, else a MAC set by the administrator.
pub fn identity(root: &Sysroot, name: &str) -> Option<Identity> {
    if !netdev::valid_name(name) {
        return None;
    }
    let dir = root.roots.sys.join("class/net").join(name);
    let assign = read_small(&dir.join("addr_assign_type")).and_then(|s| s.parse::<u32>().ok());
    let mac = read_small(&dir.join("address")).map(|m| m.to_ascii_lowercase()).filter(|m| valid_mac(m));
    if let (Some(0), Some(m)) = (assign, &mac) {
        if m != "00:00:00:00:00:00" {
            return Some(Identity::PermanentMac(m.clone()));
        }
    }
    if let Ok(target) = fs::read_link(dir.join("device")) {
        if let Some(b) = target.file_name().and_then(|b| b.to_str()).filter(|b| valid_bus(b)) {
            return Some(Identity::BusPath(b.to_string()));
        }
    }
    match (assign, mac) {
        (Some(3), Some(m)) => Some(Identity::SetMac(m)),
        _ => None,
    }
}

/// One persisted plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persisted {
    /// [`PERSIST_VERSION`].
    pub version: u32,
    /// What the device is recognised by.
    pub identity: Identity,
    /// Seconds since the epoch when persisted.
    pub saved_at: u64,
    /// Channels (RX, TX queues) the plan was made for: set first.
    pub channels: Channels,
    /// The device's plan (its `name` is the name it had then).
    pub plan: DevicePlan,
}

/// Queue counts of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channels {
    /// RX queues.
    pub rx: usize,
    /// TX queues.
    pub tx: usize,
}

/// The plans directory under `root`.
pub fn plans_dir(root: &Path) -> PathBuf {
    root.join(PLANS_DIR)
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every check a read plan must pass before anything of it is used.
pub fn validate(p: &Persisted) -> Result<(), String> {
    if p.version != PERSIST_VERSION {
        return Err(format!("version {} (this rsskit reads {PERSIST_VERSION})", p.version));
    }
    if !p.identity.valid() {
        return Err("the identity is malformed".into());
    }
    let d = &p.plan;
    const MAX_CPU: usize = 8191;
    const MAX_Q: usize = 4096;
    if !netdev::valid_name(&d.name) {
        return Err(format!("'{}' is not an interface name", d.name.escape_debug()));
    }
    if d.xdp_steer.is_some() {
        return Err(
            "plans with XDP software RSS cannot be persisted (the program lives with its process)".into()
        );
    }
    if d.cpus.iter().any(|&c| c > MAX_CPU) || d.cpus.is_empty() {
        return Err("CPUs out of range".into());
    }
    if p.channels.rx != d.rx.len() || p.channels.tx != d.tx.len() || d.rx.len() > MAX_Q || d.tx.len() > MAX_Q
    {
        return Err("channel counts do not match the queues".into());
    }
    let cpus_ok = |v: &[usize]| v.len() <= MAX_CPU + 1 && v.iter().all(|&c| c <= MAX_CPU);
    for (i, q) in d.rx.iter().enumerate() {
        if q.queue != i || !cpus_ok(&q.rps_cpus) || q.rps_flow_cnt.is_some_and(|n| n > 1 << 30) {
            return Err(format!("RX queue {i} is malformed"));
        }
    }
    for (i, q) in d.tx.iter().enumerate() {
        if q.queue != i || !q.xps_cpus.as_deref().is_none_or(cpus_ok) {
            return Err(format!("TX queue {i} is malformed"));
        }
    }
    if d.irqs.len() > 2 * MAX_Q {
        return Err("too many IRQs".into());
    }
    for x in &d.irqs {
        if x.cpus.is_empty() || !cpus_ok(&x.cpus) || x.name.len() > 64 || x.name.chars().any(char::is_control)
        {
            return Err(format!("IRQ {} is malformed", x.irq));
        }
    }
    if let Some(t) = &d.table {
        if t.is_empty() || t.len() > 65536 || t.iter().any(|&r| r as usize >= d.rx.len().max(1)) {
            return Err(
                "the indirection table is malformed (empty, too long or names a ring the plan has not)"
                    .into(),
            );
        }
    }
    if let Some(k) = &d.key {
        if k.is_empty() || k.len() > 512 || !k.len().is_multiple_of(2) || !is_hex(k) {
            return Err("the key is not hex".into());
        }
    }
    // Service isolation (issue 33 item 3): the same checks as a plan file's.
    for iso in &d.isolation {
        iso.validate(d)?;
    }
    for h in &d.hash_fields {
        if !rsskit_linux::ethtool::FLOW_TYPES.iter().any(|f| f.name == h.flow) {
            return Err(format!("unknown flow type '{}'", h.flow.escape_debug()));
        }
        let names: Vec<&str> = h.fields.iter().map(String::as_str).collect();
        rsskit_linux::ethtool::rxh_from_names(&names).map_err(|e| format!("{}: {e}", h.flow))?;
    }
    // nicres
    crate::nicres::validate(d)?;
    Ok(())
}

/// The persisted plan of device `dev` (read now) with `plan`.
pub fn persisted_of(root: &Sysroot, plan: &DevicePlan, now: u64) -> Result<Persisted, PersistError> {
    if plan.xdp_steer.is_some() {
        return Err(PersistError::Refused {
            device: plan.name.clone(),
            msg: "XDP software RSS lives with the `rsskit xdp-steer` process: run it as a service instead"
                .into(),
        });
    }
    let identity = identity(root, &plan.name).ok_or_else(|| PersistError::NoIdentity(plan.name.clone()))?;
    let p = Persisted {
        version: PERSIST_VERSION,
        identity,
        saved_at: now,
        channels: Channels { rx: plan.rx.len(), tx: plan.tx.len() },
        plan: plan.clone(),
    };
    validate(&p).map_err(|msg| PersistError::Refused { device: plan.name.clone(), msg })?;
    Ok(p)
}

/// Writes `text` to `path` atomically (temporary file in the same
/// directory, fsync, rename) with `mode`.
pub fn write_atomic(path: &Path, text: &str, mode: u32) -> Result<(), PersistError> {
    let io_err = |source| PersistError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().expect("paths rsskit builds have a parent");
    // 0755 at most whatever the umask: rsskit reads only from directories
    // no one else can write (crate::trusted).
    fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(io_err)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io_err)?;
    let r = f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).and_then(|()| fs::rename(&tmp, path));
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r.map_err(io_err)
}

/// Stores `p` (0600: it holds the RSS key); returns its path.
pub fn store(root: &Path, p: &Persisted) -> Result<PathBuf, PersistError> {
    let path = plans_dir(root).join(p.identity.file_name());
    write_atomic(&path, &(serde_json::to_string_pretty(p).expect("plain data") + "\n"), 0o600)?;
    Ok(path)
}

/// Reads one plan file and validates it (the file and its directory must
/// pass [`crate::trusted`]'s checks first).
pub fn read(path: &Path) -> Result<Persisted, PersistError> {
    let invalid = |msg: String| PersistError::Invalid { path: path.to_path_buf(), msg };
    let text = crate::trusted::read_to_string(path, MAX_FILE)?;
    let p: Persisted =
        serde_json::from_str(&text).map_err(|e| invalid(format!("not an rsskit persisted plan: {e}")))?;
    validate(&p).map_err(invalid)?;
    if path.file_name().and_then(|n| n.to_str()) != Some(p.identity.file_name().as_str()) {
        return Err(invalid(format!("its identity belongs in {}", p.identity.file_name())));
    }
    Ok(p)
}

/// Every persisted plan: the good ones, and the files refused with why
/// (nothing of a refused file is used). A plans directory that cannot be
/// read, or is not trusted, is one refusal naming it: an unreadable plan is
/// not the same as no plan.
pub fn load_all(root: &Path) -> (Vec<Persisted>, Vec<PersistError>) {
    let dir = plans_dir(root);
    let mut good = Vec::new();
    let mut bad = Vec::new();
    match crate::trusted::check_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => return (good, bad),
        Err(e) => return (good, vec![e.into()]),
    }
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (good, bad),
        Err(source) => return (good, vec![PersistError::Io { path: dir, source }]),
    };
    let mut names: Vec<PathBuf> = Vec::new();
    for e in entries {
        match e {
            Ok(e) => names.push(e.path()),
            Err(source) => bad.push(PersistError::Io { path: dir.clone(), source }),
        }
    }
    names.retain(|p| {
        p.extension().is_some_and(|x| x == "json")
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
    });
    names.sort();
    for p in names {
        match read(&p) {
            Ok(x) => good.push(x),
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

/// The plan to apply on `dev` now: renamed to its current name, and each
/// IRQ found again by what it serves (its kind and queue), since a driver
/// reload or reboot may number IRQs differently.
pub fn resolve(p: &Persisted, dev: &DeviceState, online: &[usize]) -> Plan {
    let mut d = p.plan.clone();
    d.name = dev.name.clone();
    d.irqs = p
        .plan
        .irqs
        .iter()
        .filter_map(|x| {
            let (kind, queue) = classify_irq(&x.name);
            let now =
                dev.irqs.iter().find(|i| i.kind == kind && i.queue == queue && kind != IrqKind::Other)?;
            Some(IrqPlan { irq: now.irq, name: now.name.clone(), cpus: x.cpus.clone() })
        })
        .collect();
    // napi: each NAPI thread found again by the queue it polls (a driver
    // reload renumbers NAPI instances); none while threading is off, so the
    // agent pins the threads again once they are re-created.
    d.napi_threads = p
        .plan
        .napi_threads
        .iter()
        .filter_map(|t| {
            let thread = if t.tx { dev.napi.tx_thread_of(t.queue) } else { dev.napi.thread_of(t.queue) };
            let napi_id = thread?.napi_id?;
            Some(crate::plan::NapiThreadPlan { napi_id, ..t.clone() })
        })
        .collect();
    Plan {
        version: PLAN_VERSION,
        online_cpus: online.to_vec(),
        rps_sock_flow_entries: None,
        devices: vec![d],
    }
}

/// The persisted plan whose identity is `id`, if any.
pub fn find<'a>(plans: &'a [Persisted], id: &Identity) -> Option<&'a Persisted> {
    plans.iter().find(|p| p.identity == *id)
}

/// Installs the udev rule and the apply unit under `root/etc` unless they
/// (ours or a package's) are already there; returns the paths written.
pub fn install_units(root: &Path) -> Result<Vec<PathBuf>, PersistError> {
    let mut written = Vec::new();
    for (rel, pkg_dirs, text) in INSTALLED {
        let path = root.join(rel);
        let name = Path::new(rel).file_name().expect("a file name");
        if path.exists() || pkg_dirs.iter().any(|d| root.join(d).join(name).exists()) {
            continue;
        }
        write_atomic(&path, text, 0o644)?;
        written.push(path);
    }
    Ok(written)
}

/// The rule and unit under `root` whose text is exactly what `--persist`
/// installs (read as [`crate::trusted`] reads: a FIFO there blocks nothing).
pub fn installed_units(root: &Path) -> Vec<PathBuf> {
    INSTALLED
        .iter()
        .map(|(rel, _, text)| (root.join(rel), text))
        .filter(|(path, text)| {
            crate::trusted::read_to_string(path, text.len() as u64 + 1).is_ok_and(|t| t == **text)
        })
        .map(|(path, _)| path)
        .collect()
}

/// Removes the rule and unit `--persist` installed: only files whose text
/// is exactly ours (an edited copy is the operator's and stays).
pub fn remove_units(root: &Path) -> Result<Vec<PathBuf>, PersistError> {
    let mut removed = Vec::new();
    for path in installed_units(root) {
        fs::remove_file(&path).map_err(|source| PersistError::Io { path: path.clone(), source })?;
        removed.push(path);
    }
    Ok(removed)
}

/// Removes one plan file.
pub fn remove(root: &Path, id: &Identity) -> Result<PathBuf, PersistError> {
    let path = plans_dir(root).join(id.file_name());
    fs::remove_file(&path).map_err(|source| PersistError::Io { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{nic, topo};
    use crate::plan::{plan_device, PlanOptions};

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rsskit-persist-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn sample() -> Persisted {
        let plan = plan_device(&topo(4), &nic("eth0", 4, None, 128), &PlanOptions::default(), 0).unwrap();
        Persisted {
            version: PERSIST_VERSION,
            identity: Identity::PermanentMac("00:11:22:33:44:55".into()),
            saved_at: 1,
            channels: Channels { rx: 4, tx: 4 },
            plan,
        }
    }

    #[test]
    fn store_and_read_round_trip_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tmp("rt");
        let p = sample();
        let path = store(&root, &p).unwrap();
        assert_eq!(path, root.join("etc/rsskit/devices/mac-001122334455.json"));
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&path).unwrap(), p);
        let (good, bad) = load_all(&root);
        assert_eq!((good.len(), bad.len()), (1, 0));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let root = tmp("bad");
        let dir = plans_dir(&root);
        fs::create_dir_all(&dir).unwrap();
        let put = |name: &str, p: &Persisted| {
            fs::write(dir.join(name), serde_json::to_string(p).unwrap()).unwrap();
        };
        let mut p = sample();
        put("mac-aaaaaaaaaaaa.json", &p); // wrong file name for its identity
        p.plan.key = Some("zz".into());
        put("mac-001122334455.json", &p);
        let mut q = sample();
        q.identity = Identity::BusPath("../../etc".into());
        put("bus-x.json", &q);
        let mut r = sample();
        r.plan.table = Some(vec![9; 128]);
        r.identity = Identity::SetMac("00:11:22:33:44:66".into());
        put("setmac-001122334466.json", &r);
        fs::write(dir.join("mac-0.json"), "{\"version\":1,\"extra\":true}").unwrap();
        let (good, bad) = load_all(&root);
        assert!(good.is_empty());
        let msgs: Vec<String> = bad.iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 5, "{msgs:?}");
        let all = msgs.join("\n");
        for want in [
            "belongs in mac-001122334455.json",
            "the key is not hex",
            "identity is malformed",
            "names a ring",
            "not an rsskit persisted plan",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn identities_prefer_permanent_then_bus_then_set_mac() {
        let root = tmp("id");
        let sys = Sysroot::tree(&root);
        let dev = root.join("sys/class/net/eth0");
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("address"), "00:11:22:33:44:55\n").unwrap();
        fs::write(dev.join("addr_assign_type"), "0\n").unwrap();
        assert_eq!(identity(&sys, "eth0"), Some(Identity::PermanentMac("00:11:22:33:44:55".into())));
        fs::write(dev.join("addr_assign_type"), "3\n").unwrap();
        assert_eq!(identity(&sys, "eth0"), Some(Identity::SetMac("00:11:22:33:44:55".into())));
        std::os::unix::fs::symlink("../../../devices/pci0000:00/0000:03:00.0", dev.join("device")).unwrap();
        assert_eq!(identity(&sys, "eth0"), Some(Identity::BusPath("0000:03:00.0".into())));
        fs::remove_file(dev.join("device")).unwrap();
        fs::write(dev.join("addr_assign_type"), "1\n").unwrap();
        assert_eq!(identity(&sys, "eth0"), None, "a random MAC is no identity");
        assert_eq!(identity(&sys, "../x"), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn resolve_finds_irqs_by_queue_after_renumbering() {
        let p = sample();
        let mut now = nic("eth7", 4, None, 128);
        for i in &mut now.irqs {
            i.irq += 1000;
            i.name = i.name.replace("eth0", "eth7");
        }
        let plan = resolve(&p, &now, &[0, 1, 2, 3]);
        let d = &plan.devices[0];
        assert_eq!(d.name, "eth7");
        assert_eq!(d.irqs.iter().map(|x| x.irq).collect::<Vec<_>>(), vec![1100, 1101, 1102, 1103]);
        assert_eq!(
            d.irqs.iter().map(|x| x.cpus.clone()).collect::<Vec<_>>(),
            p.plan.irqs.iter().map(|x| x.cpus.clone()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn units_install_once_and_remove_only_our_text() {
        let root = tmp("units");
        let w = install_units(&root).unwrap();
        assert_eq!(w.len(), 2);
        assert!(install_units(&root).unwrap().is_empty(), "already there");
        fs::write(root.join(INSTALLED[0].0), "# edited by the operator\n").unwrap();
        let r = remove_units(&root).unwrap();
        assert_eq!(r, vec![root.join(INSTALLED[1].0)]);
        assert!(root.join(INSTALLED[0].0).exists(), "an edited rule stays");
        // A package's unit: nothing installed under /etc.
        let root2 = tmp("units2");
        fs::create_dir_all(root2.join("lib/systemd/system")).unwrap();
        fs::write(root2.join("lib/systemd/system/rsskit-apply@.service"), APPLY_UNIT).unwrap();
        assert_eq!(install_units(&root2).unwrap(), vec![root2.join(INSTALLED[0].0)]);
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&root2).unwrap();
    }
}
