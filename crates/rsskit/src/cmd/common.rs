//! Argument types shared by several subcommands: keys, endpoints, protocols,
//! CPU counts and lists, durations, the UDP hash flags, JSON output, the
//! signal stop flag.

use anyhow::{anyhow, bail, Context, Result};
use rsskit_core::keycheck::KeyUse;
use rsskit_core::rss::RssError;
use rsskit_core::{Buckets, CpuId, HashConfig, L4Proto, RssKey, RssPolicy};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// `--key default|microsoft|symmetric|random|nic:IF|HEX`. `random`: a fresh
/// key from the OS random source that passed `rsskit_core::keycheck`;
/// `nic:IF`: the device's own key ([`nic`]). The key is judged later, by
/// [`check_key`], once the command knows how it uses it (hash types, bucket
/// bits): every command that takes `--key` calls it before it starts.
pub fn parse_key(s: &str) -> Result<RssKey> {
    if let Some(iface) = nic_spec(s)? {
        let n = nic(iface).context("--key")?;
        return RssKey::from_bytes(&n.key).map_err(|e| anyhow!("--key {s}: {e}"));
    }
    Ok(match s {
        "default" | "microsoft" => RssKey::microsoft(),
        "symmetric" => RssKey::symmetric(),
        "random" => RssKey::random().map_err(|e| anyhow!("--key random: {e}"))?,
        hex => RssKey::from_hex(hex).map_err(|e| anyhow!("--key: {e}"))?,
    })
}

/// `nic:IF` -> `Some(IF)` (the one parser of `--key nic:IF`, `--table
/// nic:IF`); `None` for any other value.
pub fn nic_spec(s: &str) -> Result<Option<&str>> {
    match s.strip_prefix("nic:") {
        None => Ok(None),
        Some(i) if rsskit_linux::netdev::valid_name(i) => Ok(Some(i)),
        Some(i) => bail!("'{s}': '{i}' is not an interface name (nic:IF)"),
    }
}

/// The device's steering (key, table, queue CPUs), read as `info` reads it.
/// `RSSKIT_SYSROOT=DIR` reads a tree shaped like /sys and /proc instead (tests).
pub fn nic(iface: &str) -> Result<rsskit_host::landing::NicSteering> {
    Ok(rsskit_host::landing::NicSteering::read(&steering_root()?, iface)?)
}

/// Where [`nic`] reads: the live host, or `RSSKIT_SYSROOT=DIR` (tests; a
/// binary built without rsskit-host's `fixtures` feature refuses it).
pub fn steering_root() -> Result<rsskit_host::sysroot::Sysroot> {
    Ok(match std::env::var_os("RSSKIT_SYSROOT") {
        Some(d) => {
            rsskit_host::sysroot::Sysroot::fixture_tree(std::path::Path::new(&d)).context("RSSKIT_SYSROOT")?
        }
        None => rsskit_host::sysroot::Sysroot::live(),
    })
}

/// Table entry -> CPU (one value, so clap does not take it for a list),
/// and the UDP hashed fields of the NIC it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketCpus(pub Vec<CpuId>, pub NicUdp);

/// What a NIC named by `nic:IF` hashes for UDP, per family: `4-tuple`,
/// `2-tuple`, `none`, `other` ([`rsskit_linux::ethtool::FlowHash::tuple`]),
/// `None` when the driver does not report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicUdp {
    pub iface: String,
    pub udp4: Option<&'static str>,
    pub udp6: Option<&'static str>,
    /// The fields as ethtool names them, per family (for messages).
    pub fields4: String,
    pub fields6: String,
    /// The NIC's input transform (symmetric-xor...), which the policy applies.
    pub xfrm: rsskit_core::InputXfrm,
}

impl NicUdp {
    fn of(n: &rsskit_host::landing::NicSteering) -> NicUdp {
        let fields = |flow: &str| {
            n.hash_fields
                .as_ref()
                .and_then(|h| h.iter().find(|f| f.flow == flow))
                .map(|f| if f.fields.is_empty() { "nothing".to_string() } else { f.fields.join(",") })
                .unwrap_or_default()
        };
        NicUdp {
            iface: n.iface.clone(),
            udp4: n.tuple("udp4"),
            udp6: n.tuple("udp6"),
            fields4: fields("udp4"),
            fields6: fields("udp6"),
            xfrm: n.xfrm,
        }
    }
}

/// `--key` as given: the key, and the NIC's UDP fields when it was `nic:IF`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyArg {
    pub key: RssKey,
    pub nic: Option<NicUdp>,
}

/// Clap value parser for `--key` where the NIC's hashed fields matter too.
pub fn key_nic_arg(s: &str) -> Result<KeyArg, String> {
    let nic_of = |i: &str| nic(i).map(|n| NicUdp::of(&n)).map_err(|e| format!("--key: {e:#}"));
    let nic = nic_spec(s).map_err(|e| format!("{e:#}"))?.map(nic_of).transpose()?;
    Ok(KeyArg { key: key_arg(s)?, nic })
}

/// `--table nic:IF`: table entry -> CPU, from interface IF's indirection
/// table and its queues' IRQ CPUs.
pub fn table_arg(s: &str) -> Result<BucketCpus, String> {
    match nic_spec(s).map_err(|e| format!("{e:#}"))? {
        Some(i) => {
            let n = nic(i).map_err(|e| format!("{e:#}"))?;
            Ok(BucketCpus(n.bucket_cpus()?.into_iter().map(|c| CpuId(c as u32)).collect(), NicUdp::of(&n)))
        }
        None => Err(format!("'{s}' is not nic:IF (the table of interface IF)")),
    }
}

/// The one key check of the CLI ([`rsskit_core::keycheck::vet`]), for the
/// hash types and bucket bits the command uses: refuses a key that cannot
/// reach every bucket unless `allow_weak_key` (`--allow-weak-key`; the
/// message always offers it: a NIC's own key must stay usable), and warns
/// on stderr about the rest (a field that alone cannot reach every bucket,
/// piling ports).
pub fn check_key(key: &RssKey, key_use: KeyUse, allow_weak_key: bool) -> Result<()> {
    let problems = rsskit_core::keycheck::vet(key, key_use, allow_weak_key)
        .map_err(|e| anyhow!("--key: {e}; use --allow-weak-key to use it anyway"))?;
    for p in &problems {
        eprintln!("rsskit: warning: --key: {p}");
    }
    Ok(())
}

/// The policy flags every command that steers by an RSS policy shares:
/// `--key` (its help is the command's own, see [`PolicyArgs::key`]).
#[derive(clap::Args, Debug, Clone)]
pub struct PolicyArgs {
    /// RSS key: default (Microsoft), symmetric, random, nic:IF (the NIC's
    /// key, and its UDP hashed fields), or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_nic_arg)]
    pub key: KeyArg,
}

/// Where a policy's workers run ([`PolicyArgs::build`]).
#[derive(Debug, Clone, Copy)]
pub enum Workers<'a> {
    /// Worker `i` on the `i`-th CPU.
    On(&'a [CpuId]),
    /// This many workers, unpinned (worker `i` said to run on CPU `i`).
    Count(usize),
}

/// The uses the key is judged for ([`PolicyArgs::build`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyCheck {
    /// Every hash type of the policy, over its buckets.
    Policy,
    /// Only this protocol over the family (`true`: IPv6), over the policy's buckets.
    Proto(L4Proto, bool),
    /// Not judged here (the caller's other policy with the same key is).
    None,
}

/// Why [`PolicyArgs::build`] failed: the library refused the CPUs, bits or
/// table (the caller words it: each command has its own error for it), or
/// the flags (the key check, `--table` without `--cpus`).
#[derive(Debug)]
pub enum PolicyError {
    Policy(RssError),
    Flags(anyhow::Error),
}

impl PolicyError {
    /// As an error, [`PolicyError::Policy`] worded by `f`.
    pub fn policy_as(self, f: impl FnOnce(RssError) -> anyhow::Error) -> anyhow::Error {
        match self {
            PolicyError::Policy(e) => f(e),
            PolicyError::Flags(e) => e,
        }
    }
}

impl From<PolicyError> for anyhow::Error {
    fn from(e: PolicyError) -> Self {
        e.policy_as(anyhow::Error::from)
    }
}

impl PolicyArgs {
    /// A command's own `--key` (its help, its default), for
    /// `#[command(mut_args(PolicyArgs::key(|a| a.help(..))))]` (`mut_args`
    /// keeps the flags in their order; `mut_arg` would move `--key` last).
    pub fn key(mut f: impl FnMut(clap::Arg) -> clap::Arg) -> impl FnMut(clap::Arg) -> clap::Arg {
        move |a| if a.get_id() == "key" { f(a) } else { a }
    }

    /// The one way from flags to a policy: the key of `--key`, the hash
    /// types `hash`, the workers, buckets round-robin over `bits` bucket
    /// bits or following `table` (`--table nic:IF`, which needs pinned
    /// workers), through [`RssPolicy::build`]; then the key is judged
    /// ([`check_key`]) as `check` says, a weak one refused unless
    /// `allow_weak_key`.
    pub fn build(
        &self,
        hash: HashConfig,
        workers: Workers<'_>,
        bits: Option<u32>,
        table: Option<&BucketCpus>,
        check: KeyCheck,
        allow_weak_key: bool,
    ) -> Result<RssPolicy, PolicyError> {
        let policy = build_policy(self.key.key.clone(), hash, workers, bits, table, check, allow_weak_key)?;
        // `--key nic:IF`: the NIC's hash, its input transform included.
        Ok(match &self.key.nic {
            Some(n) => policy.with_xfrm(n.xfrm),
            None => policy,
        })
    }
}

/// [`PolicyArgs::build`] for a key the command holds itself (`hash` and
/// `find`'s model, the demo's Microsoft key): every policy the CLI makes
/// from its flags is made here.
pub fn build_policy(
    key: RssKey,
    hash: HashConfig,
    workers: Workers<'_>,
    bits: Option<u32>,
    table: Option<&BucketCpus>,
    check: KeyCheck,
    allow_weak_key: bool,
) -> Result<RssPolicy, PolicyError> {
    let numbered;
    let cpus = match (workers, table) {
        (Workers::On(cpus), _) => cpus,
        (Workers::Count(_), Some(_)) => {
            return Err(PolicyError::Flags(anyhow!(
                "--table nic:IF needs --cpus: the workers must be pinned to the queues' CPUs"
            )))
        }
        (Workers::Count(n), None) => {
            numbered = RssPolicy::numbered_cpus(n);
            &numbered[..]
        }
    };
    let buckets = table.map_or(Buckets::RoundRobin(bits), |t| Buckets::Table(&t.0));
    let policy = RssPolicy::build(key, hash, cpus, buckets).map_err(PolicyError::Policy)?;
    let key_use = match check {
        KeyCheck::Policy => KeyUse::of_policy(&policy),
        KeyCheck::Proto(proto, v6) => KeyUse::of_proto(hash, proto, v6, policy.bits()),
        KeyCheck::None => return Ok(policy),
    };
    check_key(policy.key(), key_use, allow_weak_key).map_err(PolicyError::Flags)?;
    Ok(policy)
}

/// Clap value parser for `--key`.
pub fn key_arg(s: &str) -> Result<RssKey, String> {
    parse_key(s).map_err(|e| format!("{e:#}"))
}

/// `ADDR` or `ADDR:PORT` (`[V6]:PORT` for IPv6 with a port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: Option<u16>,
}

impl std::str::FromStr for Endpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(addr) = s.parse::<IpAddr>() {
            return Ok(Endpoint { addr, port: None });
        }
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Ok(Endpoint { addr: sa.ip(), port: Some(sa.port()) });
        }
        Err(format!("'{s}' is not an address: expected ADDR, ADDR:PORT or [IPV6]:PORT with PORT 0-65535"))
    }
}

/// Transport protocol on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Proto {
    Tcp,
    Udp,
}

impl From<Proto> for rsskit_core::L4Proto {
    fn from(p: Proto) -> Self {
        match p {
            Proto::Tcp => rsskit_core::L4Proto::Tcp,
            Proto::Udp => rsskit_core::L4Proto::Udp,
        }
    }
}

/// Online CPU count of this machine.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A positive count (CPUs, rings...). Unbounded: prefer [`int_in`].
#[allow(dead_code)]
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number from 1 up")),
    }
}

/// Most CPUs a count may name, and the bound of CPU ids: Linux's largest
/// NR_CPUS (CONFIG_MAXSMP).
pub const MAX_CPUS: usize = rsskit_linux::cpulist::MAX_CPUS;

/// Most seconds a duration or timeout flag takes (about 116 days).
pub const MAX_SECONDS: f64 = 1e7;

/// Clap value parser: a whole number in `lo..=hi` (shared with the
/// benchmark examples, which cannot depend on this crate).
pub use rsskit_core::netparse::int_in;

/// Clap value parser: a finite number above `lo` and at most `hi`, of
/// `unit` (named in the error).
pub fn float_in(
    lo: f64,
    hi: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > lo && v <= hi => Ok(v),
        _ => Err(format!("'{s}' is not a number of {unit} above {lo} and at most {hi}")),
    }
}

/// Clap value parser: a number in `[lo, hi]` (both ends allowed).
pub fn float_from(
    lo: f64,
    hi: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= lo && v <= hi => Ok(v),
        _ => Err(format!("'{s}' is not a number of {unit} from {lo} to {hi}")),
    }
}

/// Clap value parser for durations and timeouts: seconds in
/// (0, [`MAX_SECONDS`]).
pub fn seconds_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < MAX_SECONDS => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds above 0 and below {MAX_SECONDS}")),
    }
}

/// Clap value parser: a CPU list (`0-3,6`, ids below [`MAX_CPUS`]),
/// checked for syntax and kept as written (online-ness is checked later).
pub fn cpu_list_arg(s: &str) -> Result<String, String> {
    rsskit_linux::cpulist::parse(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

/// Clap value parser: a CPU count 1..=[`MAX_CPUS`] or a CPU list, kept as
/// written.
pub fn cpu_count_or_list_arg(s: &str) -> Result<String, String> {
    if s.trim().bytes().all(|b| b.is_ascii_digit()) && !s.trim().is_empty() {
        return int_in(1usize, MAX_CPUS)(s).map(|_| s.to_string());
    }
    cpu_list_arg(s)
}

/// Prints one JSON object on stdout.
pub fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v).context("encoding JSON")?);
    Ok(())
}

/// A positive number of seconds below 10^7, as a `Duration`; `name` is
/// the flag, for the error.
pub fn seconds(name: &str, s: f64) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s < 1e7) {
        bail!("{name} must be a positive number of seconds, not {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// `--cpus LIST` restricted to online CPUs, default every online CPU.
pub fn worker_cpus(list: Option<&str>) -> Result<Vec<usize>> {
    match list {
        Some(s) => rsskit_linux::cpulist::parse_online(s).map_err(|e| anyhow!("--cpus: {e}")),
        None => Ok(rsskit_linux::cpulist::online()),
    }
}

/// [`worker_cpus`] as the policy's CPU ids.
pub fn worker_cpu_ids(list: Option<&str>) -> Result<Vec<CpuId>> {
    Ok(worker_cpus(list)?.into_iter().map(|c| CpuId(c as u32)).collect())
}

/// A stop flag set by SIGINT or SIGTERM (the long-running commands stop
/// cleanly and print their final counters).
pub fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing a signal handler")?;
    }
    Ok(stop)
}

/// The bucket table of `rsskit hash` and `rsskit find`: key, bucket bits,
/// CPU count.
#[derive(clap::Args, Debug, Clone)]
pub struct BucketArgs {
    /// RSS key: default (Microsoft), symmetric, random (checked), or 40+ bytes of hex.
    #[arg(long, default_value = "default", value_parser = key_nic_arg)]
    pub key: KeyArg,
    /// Bucket bits (1-7); default FreeBSD's fls(ncpus-1)+1.
    #[arg(long, value_parser = int_in(1u32, 7))]
    pub bits: Option<u32>,
    /// CPUs the buckets are spread over, 1-8192 (default: online CPUs).
    #[arg(long, value_parser = int_in(1usize, MAX_CPUS))]
    pub cpus: Option<usize>,
}

impl BucketArgs {
    /// `--cpus`, or the online CPU count.
    pub fn ncpus(&self) -> usize {
        self.cpus.unwrap_or_else(online_cpus)
    }

    /// FreeBSD's model: worker i on CPU i, buckets round-robin over them,
    /// every hash type, with the NIC's input transform when the key is
    /// `nic:IF`; the key is judged by the caller for its own use.
    pub fn policy(&self) -> Result<RssPolicy> {
        let workers = Workers::Count(self.ncpus());
        let p = build_policy(
            self.key.key.clone(),
            HashConfig::all(),
            workers,
            self.bits,
            None,
            KeyCheck::None,
            false,
        )
        .map_err(|e| e.policy_as(|e| anyhow!("{e}")))?;
        Ok(p.with_xfrm(self.xfrm()))
    }

    /// The input transform of the NIC named by `--key nic:IF` (else none).
    pub fn xfrm(&self) -> rsskit_core::InputXfrm {
        self.key.nic.as_ref().map_or(rsskit_core::InputXfrm::None, |n| n.xfrm)
    }
}

/// The server's UDP hash configuration, as `rsskit udp-echo` and `rsskit
/// udp-load` take it (they must agree).
#[derive(clap::Args, Debug, Clone)]
pub struct UdpHashArgs {
    /// Hash UDP on addresses and ports (then streams are spread by source
    /// port); default: addresses only, as FreeBSD (spread by source address).
    #[arg(long)]
    pub udp_4tuple: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Bucket bits of the server's table (1-7); default FreeBSD's
    /// fls(workers-1)+1.
    #[arg(long, value_parser = int_in(1u32, 7))]
    pub bits: Option<u32>,
}

impl UdpHashArgs {
    /// The hash types in force for UDP over IPv6 (`v6`) or IPv4: from
    /// `--udp-4tuple`, or, when the key or `table` comes from a NIC
    /// (`nic:IF`), from what that NIC hashes for UDP, per family (the
    /// policy's hash types are per family, so udp4 on 4-tuple with udp6 on
    /// 2-tuple is followed as is). Refused by name when the NIC hashes the
    /// family on fields the policy cannot express, when two NICs named
    /// disagree, or when `--udp-4tuple` contradicts the NIC: any of those
    /// would steer datagrams to workers the NIC does not send them to.
    pub fn hash_config(&self, table: Option<&NicUdp>, v6: bool) -> Result<HashConfig> {
        let fam = if v6 { "udp6" } else { "udp4" };
        let mut nics: Vec<&NicUdp> = table.into_iter().chain(self.policy.key.nic.as_ref()).collect();
        nics.dedup_by(|a, b| a.iface == b.iface);
        let mut four = None::<(bool, &str)>;
        for n in &nics {
            let (tuple, fields) = if v6 { (n.udp6, &n.fields6) } else { (n.udp4, &n.fields4) };
            let this = match tuple {
                Some("4-tuple") => true,
                Some("2-tuple") => false,
                None => {
                    eprintln!(
                        "rsskit: warning: {} does not report the fields it hashes for {fam}: assuming {}",
                        n.iface,
                        if self.udp_4tuple { "4-tuple (--udp-4tuple)" } else { "2-tuple" }
                    );
                    continue;
                }
                Some(_) => bail!(
                    "{} hashes {fam} on {fields}, which rsskit's policy cannot express (addresses, or \
                     addresses and ports): set it with `rsskit apply --iface {} --hash-fields {fam}=4-tuple` \
                     (or 2-tuple)",
                    n.iface,
                    n.iface
                ),
            };
            match four {
                Some((other, name)) if other != this => bail!(
                    "{name} hashes {fam} on {} but {} on {}: name one NIC in --key nic:IF and --table nic:IF",
                    tuple_name(other),
                    n.iface,
                    tuple_name(this)
                ),
                _ => four = Some((this, &n.iface)),
            }
        }
        let udp = match four {
            None => self.udp_4tuple,
            Some((false, name)) if self.udp_4tuple => bail!(
                "--udp-4tuple, but {name} hashes {fam} on addresses only (2-tuple): drop --udp-4tuple, or \
                 make the NIC hash ports with `rsskit apply --iface {name} --hash-fields {fam}=4-tuple`"
            ),
            Some((four, _)) => four,
        };
        let t = if v6 { rsskit_core::HashType::UdpIpv6 } else { rsskit_core::HashType::UdpIpv4 };
        // The other family as the flag says (or the NIC, when it is plain).
        let mut c = HashConfig::default().with_udp_4tuple(self.udp_4tuple);
        if let [n] = nics.as_slice() {
            let (other, ot) = if v6 {
                (n.udp4, rsskit_core::HashType::UdpIpv4)
            } else {
                (n.udp6, rsskit_core::HashType::UdpIpv6)
            };
            match other {
                Some("4-tuple") => c = c.with(ot),
                Some("2-tuple") => c = c.without(ot),
                _ => {}
            }
        }
        Ok(if udp { c.with(t) } else { c.without(t) })
    }
}

fn tuple_name(four: bool) -> &'static str {
    if four {
        "4-tuple"
    } else {
        "2-tuple"
    }
}

/// Checks that both ends are of one address family.
pub fn same_family(a: IpAddr, b: IpAddr) -> Result<()> {
    if a.is_ipv4() != b.is_ipv4() {
        bail!("--src {a} and --dst {b} are of different address families");
    }
    Ok(())
}

/// The median of the benchmarks' samples (the mean of the middle two for
/// an even count). Panics on no samples.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// splitmix64: the benchmarks' input generator (the C harness repeats it).
pub use rsskit_core::rng::SplitMix64 as SplitMix;

/// The eBPF reuseport program's counters and how many buckets moved live,
/// one line (`udp-echo`, `http-serve` with `--steer ebpf`).
pub fn ebpf_line(e: &rsskit_linux::ebpf::reuseport::Counters, moves: usize) -> String {
    format!(
        "eBPF program: steered {} no-socket {} fallback {} errors {}; {moves} bucket move(s) live",
        e.steered, e.no_socket, e.fallback, e.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.5]), 7.5);
    }

    #[test]
    fn endpoints() {
        let e: Endpoint = "1.2.3.4:80".parse().unwrap();
        assert_eq!(e.port, Some(80));
        let e: Endpoint = "::1".parse().unwrap();
        assert_eq!(e.port, None);
        let e: Endpoint = "[::1]:9".parse().unwrap();
        assert_eq!(e.port, Some(9));
        assert!("1.2.3.4:99999".parse::<Endpoint>().is_err());
        assert!("300.1.1.1".parse::<Endpoint>().is_err());
    }

    #[test]
    fn weak_keys_are_refused_offering_the_override() {
        let zero = RssKey::from_hex(&"00".repeat(40)).unwrap();
        let e = format!("{:#}", check_key(&zero, KeyUse::full(), false).unwrap_err());
        assert!(e.starts_with("--key: weak RSS key: it cannot reach every one of the 128 buckets"), "{e}");
        assert!(e.contains("--allow-weak-key"), "{e}");
        for k in ["default", "microsoft", "symmetric", "random"] {
            assert!(check_key(&parse_key(k).unwrap(), KeyUse::full(), false).is_ok(), "{k}");
        }
    }

    #[test]
    fn ranged_parsers_name_the_range() {
        let p = int_in(1usize, 8192);
        assert_eq!(p("8192"), Ok(8192));
        assert_eq!(p(" 1 "), Ok(1));
        assert_eq!(p("0").unwrap_err(), "must be at least 1 (range 1-8192)");
        assert_eq!(p("8193").unwrap_err(), "must be at most 8192 (range 1-8192)");
        for bad in ["-1", "4294967296000000000000", "1e300", "", "x"] {
            assert!(p(bad).unwrap_err().contains("range 1-8192"), "{bad}");
        }
        assert_eq!(int_in(0u64, u64::MAX)("18446744073709551615"), Ok(u64::MAX));
        let f = float_in(0.0, 3600.0, "seconds");
        assert_eq!(f("3600"), Ok(3600.0));
        for bad in ["0", "-1", "3600.5", "NaN", "inf", "1e300"] {
            assert!(f(bad).unwrap_err().contains("at most 3600"), "{bad}");
        }
        assert_eq!(seconds_arg("0.5"), Ok(0.5));
        for bad in ["0", "-0.1", "1e7", "nan", "1e300"] {
            assert!(seconds_arg(bad).unwrap_err().contains("below 10000000"), "{bad}");
        }
        assert_eq!(cpu_list_arg("0-3,6"), Ok("0-3,6".to_string()));
        assert!(cpu_list_arg("0-18446744073709551615").unwrap_err().contains("0-8191"));
        assert_eq!(cpu_count_or_list_arg("8192"), Ok("8192".to_string()));
        assert!(cpu_count_or_list_arg("8193").unwrap_err().contains("range 1-8192"));
        assert!(cpu_count_or_list_arg("0").is_err());
        assert_eq!(cpu_count_or_list_arg("0-1"), Ok("0-1".to_string()));
    }

    #[test]
    fn seconds_and_cpus() {
        assert_eq!(seconds("--d", 1.5).unwrap(), Duration::from_millis(1500));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e8] {
            let e = seconds("--duration", bad).unwrap_err().to_string();
            assert!(e.starts_with("--duration must be a positive number"), "{e}");
        }
        assert_eq!(worker_cpus(None).unwrap(), rsskit_linux::cpulist::online());
        assert_eq!(worker_cpus(Some("0")).unwrap(), vec![0]);
        assert!(worker_cpus(Some("99999")).unwrap_err().to_string().starts_with("--cpus: "));
    }
}
