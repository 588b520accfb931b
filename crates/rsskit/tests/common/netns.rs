//! Network-namespace fixtures for the integration tests: namespaces, a
//! multi-queue veth between them, and child processes, all removed/killed on
//! drop (also when the test fails).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Path of the `rsskit` binary under test.
pub fn rsskit() -> PathBuf {
    assert_cmd::cargo::cargo_bin("rsskit")
}

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `ip` ({e}): these tests need iproute2 and root (CI installs iproute2)")
    });
    assert!(
        out.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Fails loudly unless we are root with `ip` available.
pub fn require_root_and_ip() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "network-namespace tests need root (CI runs them as root)");
    let ok = Command::new("ip").arg("-V").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok, "the `ip` command (iproute2) is missing: install iproute2");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique name: prefix, pid, sequence number (max 15 chars for interfaces).
pub fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100000)
}

/// A veth pair, `a.0` in namespace `a.1` and its peer `b.0` in `b.1`,
/// each end with `queues` TX and RX queues (`None`: the kernel's one).
pub fn veth(a: (&str, &Netns), b: (&str, &Netns), queues: Option<usize>) {
    let q = queues.map(|n| n.to_string());
    let qs: Vec<&str> = q.as_deref().map_or(Vec::new(), |q| vec!["numtxqueues", q, "numrxqueues", q]);
    let mut args = vec!["link", "add", a.0];
    args.extend(&qs);
    args.extend(["netns", &a.1.name, "type", "veth", "peer", "name", b.0]);
    args.extend(&qs);
    args.extend(["netns", &b.1.name]);
    ip(&args);
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Netns {
        let name = unique(prefix);
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) {
        let mut v = vec!["-n", &self.name];
        v.extend_from_slice(args);
        ip(&v);
    }

    /// A command run inside the namespace (`ip netns exec`).
    pub fn command(&self, prog: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(prog);
        c
    }

    /// Writes a sysctl inside the namespace through /proc/sys (no procps
    /// needed); best effort: reports on stderr when the key is missing.
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", &format!("echo {value} > {path}")])
            .output()
            .expect("running sh");
        if !out.status.success() {
            eprintln!(
                "note: sysctl {key}={value} in {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }

    /// Writes a file from inside the namespace (sysfs is per-namespace only
    /// through a namespace's own view, so use `sh -c` under `ip netns exec`).
    pub fn write(&self, path: &str, value: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", &format!("echo {value} > {path}")])
            .output()
            .expect("running sh");
        assert!(out.status.success(), "writing {value} to {path}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn read(&self, path: &str) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "cat", path])
            .output()
            .expect("running cat");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).stderr(Stdio::null()).status();
    }
}

/// Two namespaces joined by a veth with 2 rx/tx queues, addresses on both
/// ends (IPv4 198.18.0.1 server / 198.18.0.2 client, IPv6 fd77::1 / fd77::2),
/// `extra` extra client source addresses of each family (198.18.1.x,
/// fd77:1::x), RPS on the server's veth over all CPUs.
pub struct Pair {
    pub server: Netns,
    pub client: Netns,
    /// The server's end of the veth.
    pub vs: String,
    /// The client's end.
    pub vc: String,
}

pub const SERVER_V4: &str = "198.18.0.1";
pub const CLIENT_V4: &str = "198.18.0.2";
pub const SERVER_V6: &str = "fd77::1";
pub const CLIENT_V6: &str = "fd77::2";
pub const EXTRA_V4_NET: &str = "198.18.1.0/24";
pub const EXTRA_V6_NET: &str = "fd77:1::/64";

impl Pair {
    pub fn new(extra: u8) -> Pair {
        Pair::with(extra, Some(2), true)
    }

    /// `queues` TX/RX queues per end (`None`: the kernel's one); `rps`:
    /// RPS over every CPU on the server's queues, else RPS off.
    pub fn with(extra: u8, queues: Option<usize>, rps: bool) -> Pair {
        require_root_and_ip();
        let server = Netns::new("rsks");
        let client = Netns::new("rskc");
        let vs = unique("vs");
        let vc = unique("vc");
        veth((&vs, &server), (&vc, &client), queues);
        for (ns, dev) in [(&server, &vs), (&client, &vc)] {
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "0");
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0");
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0");
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0");
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0");
            ns.ip(&["link", "set", dev, "up"]);
        }
        server.ip(&["addr", "add", &format!("{SERVER_V4}/24"), "dev", &vs]);
        client.ip(&["addr", "add", &format!("{CLIENT_V4}/24"), "dev", &vc]);
        server.ip(&["-6", "addr", "add", &format!("{SERVER_V6}/64"), "dev", &vs, "nodad"]);
        client.ip(&["-6", "addr", "add", &format!("{CLIENT_V6}/64"), "dev", &vc, "nodad"]);
        for i in 1..=extra {
            client.ip(&["addr", "add", &format!("198.18.1.{i}/32"), "dev", &vc]);
            client.ip(&["-6", "addr", "add", &format!("fd77:1::{i:x}/128"), "dev", &vc, "nodad"]);
        }
        // Replies to the extra sources go via the client's main address
        // (no neighbour resolution of each extra address needed).
        server.ip(&["route", "add", EXTRA_V4_NET, "via", CLIENT_V4]);
        server.ip(&["-6", "route", "add", EXTRA_V6_NET, "via", CLIENT_V6]);
        // RPS on the receiving side over every CPU (or off).
        let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(32);
        let mask = if rps { format!("{:x}", (1u64 << ncpu) - 1) } else { "0".into() };
        for q in 0..queues.unwrap_or(1) {
            server.write(&format!("/sys/class/net/{vs}/queues/rx-{q}/rps_cpus"), &mask);
        }
        Pair { server, client, vs, vc }
    }
}

/// A child process killed (and reaped) on drop.
pub struct Proc(pub Option<Child>);

impl Proc {
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        Proc(Some(cmd.spawn().expect("spawning a child")))
    }

    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// Waits at most `limit` for the child to exit, then kills it (and fails).
    pub fn wait(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().expect("running");
        let t = Instant::now();
        loop {
            if let Some(_st) = child.try_wait().expect("try_wait") {
                return child.wait_with_output().expect("collect output");
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collect output");
                panic!(
                    "child did not exit within {limit:?}; stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until `path`-style condition holds or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Every online CPU as a list for `--cpus` / `--server-cpus` (`0` or `0-N`).
pub fn all_cpus() -> String {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if n == 1 {
        "0".into()
    } else {
        format!("0-{}", n - 1)
    }
}

/// `addr:port`, with brackets around an IPv6 address.
pub fn bracket(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// A port for the next test server: `base` plus this process's share of
/// `span`, different for every call (namespaces are private, so any port
/// is free there; varying it keeps a lingering socket out of the way).
pub fn test_port(base: u16, span: u16) -> u16 {
    base + (std::process::id() % span as u32) as u16
        + NEXT_PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Runs `f` on a thread inside namespace `ns` (sockets made there stay
/// there) and returns its result.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::os::fd::AsRawFd;
    let ns = ns.to_string();
    std::thread::spawn(move || {
        let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace file");
        // SAFETY: setns on a valid namespace fd; affects this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread")
}

impl Netns {
    /// `ethtool -K DEV tx off` through the legacy `ETHTOOL_STXCSUM` ioctl
    /// from inside the namespace (no ethtool binary needed; the binary is
    /// the fallback). Locally sent UDP on a veth leaves its checksum to the
    /// "NIC"; a frame that XDP redirects or a bridge forwards loses that
    /// mark and would fail the receiver's checksum check.
    pub fn tx_csum_off(&self, dev: &str) {
        use std::os::fd::AsRawFd;
        #[repr(C)]
        struct EthtoolValue {
            cmd: u32,
            data: u32,
        }
        #[repr(C)]
        struct IfReq {
            name: [u8; 16],
            data: *mut EthtoolValue,
            _pad: [u8; 16],
        }
        const SIOCETHTOOL: libc::c_ulong = 0x8946;
        const ETHTOOL_STXCSUM: u32 = 0x17;
        let devname = dev.to_string();
        let ioctl_ok = in_netns(&self.name, move || {
            let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("socket in namespace");
            let mut v = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
            let mut ifr = IfReq { name: [0; 16], data: &mut v, _pad: [0; 16] };
            ifr.name[..devname.len()].copy_from_slice(devname.as_bytes());
            // SAFETY: SIOCETHTOOL with a valid ifreq whose data points at a
            // live ethtool_value for the duration of the call.
            unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr as *mut IfReq) == 0 }
        });
        if ioctl_ok {
            return;
        }
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "ethtool", "-K", dev, "tx", "off"])
            .output();
        let ok = out.as_ref().map(|o| o.status.success()).unwrap_or(false);
        assert!(
            ok,
            "cannot turn off tx checksum offload on {dev} (ETHTOOL_STXCSUM ioctl failed, ethtool: {out:?})"
        );
    }
}

/// The JSON a command printed on stdout (the test fails with both streams
/// if there is none).
pub fn json_of(out: &Output, what: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: no JSON on stdout ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `v[k]` as a number (the test fails naming the key if it is not one).
pub fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no number '{k}' in {v}"))
}

/// A directory removed (with everything in it) on drop.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Netns {
    /// The veth pair `a`-`b` inside this namespace, `a` with MAC `mac`
    /// (a stable identity to persist a plan by), `queues` RX and TX queues
    /// each, both up.
    pub fn veth_with_mac(&self, a: &str, b: &str, mac: &str, queues: &str) {
        self.ip(&[
            "link",
            "add",
            a,
            "address",
            mac,
            "numtxqueues",
            queues,
            "numrxqueues",
            queues,
            "type",
            "veth",
            "peer",
            "name",
            b,
            "numtxqueues",
            queues,
            "numrxqueues",
            queues,
        ]);
        self.ip(&["link", "set", b, "up"]);
        self.ip(&["link", "set", a, "up"]);
    }

    /// The CPUs of a hex CPU mask file (`rps_cpus`, `xps_cpus`) in this namespace's sysfs.
    pub fn mask(&self, path: &str) -> Vec<usize> {
        rsskit_linux::netdev::parse_hex_mask(&self.read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }
}
