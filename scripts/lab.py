#!/usr/bin/env python3
"""The rsskit lab: a QEMU guest with hardware-RSS NICs, on two kernels.

`boot --kernel 6.1` (the default): Debian 12's 6.1 kernel (fetched with
`apt-get download`, unpacked under target/lab/, never into the host's
/boot) and the host's QEMU; eth1 is an e1000e (no RSS: refusal paths).
`boot --kernel 7.3`: trixie-backports' 7.3 kernel and bookworm-backports'
QEMU 10.0 (which emulates igb), fetched with a private apt state (the
host's sources are never changed) into the cache (RSSKIT_LAB_CACHE,
default /var/cache/rsskit-lab/<package>_<version>/, shared by checkouts);
eth1 is an igb (82576: hardware RSS, one MSI-X vector per queue pair).
`setup --kernel 7.3` also builds netdevsim.ko for that kernel once (a
trixie root with gcc-14, `build_netdevsim`), which the 7.3 guest loads;
`nsim` makes a netdevsim device in it.
Either guest boots a busybox initramfs on 4 vCPUs in 2 NUMA nodes. The guest mounts the host's root read-only over 9p
and runs every command chrooted into it, so it runs the freshly built
rsskit, ethtool and iproute2 of the host. eth0 is a 4-queue virtio-net with
RSS (QEMU hashes in software), eth1 the e1000e or igb above.
QEMU runs inside a network namespace the lab creates, so both taps live
there and the host's own interfaces are never touched; `send` writes raw
frames into tap0 from that namespace.

Commands run over a virtio-serial port (`lab.agent`): one request line,
one answer (exit status, base64 stdout and stderr), so no terminal echo or
line discipline gets in the way. The serial console goes to
target/lab/run/console.log.

Usage: scripts/lab setup [--kernel K] | boot [--kernel K] | run [--timeout S] -- CMD | shell | send | nsim | stop | status
"""

import argparse
import base64
import fcntl
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
LAB = os.path.join(ROOT, "target", "lab")
RUN = os.path.join(LAB, "run")
# One lab per checkout: the namespace name derives from the checkout's path.
NETNS = "rsklab" + hashlib.sha1(ROOT.encode()).hexdigest()[:8]
GUEST_MAC = "52:54:00:77:00:02"
GUEST_MAC1 = "52:54:00:77:01:02"
TAP_MAC = "02:00:00:00:77:01"
GUEST_V4, TAP_V4 = "10.77.0.2", "10.77.0.1"
GUEST_V6, TAP_V6 = "fd77:77::2", "fd77:77::1"
# eth1's addresses (7.3's igb gets traffic of its own through tap1).
GUEST1_V4, GUEST1_V6 = "10.77.1.2", "fd77:78::2"
# Modules the guest loads, in dependency order (resolved from each .ko's
# .modinfo `depends=`: the package ships no modules.dep).
WANTED = ["virtio_pci", "virtio_net", "virtio_console", "e1000e", "9pnet_virtio", "9p"]
# 7.3: igb instead of e1000e; built-in ones (virtio_pci, virtio_console
# there) are skipped through the package's modules.builtin.
WANTED_73 = ["virtio_pci", "virtio_net", "virtio_console", "igb", "9pnet_virtio", "9p"]
KERNELS = ["6.1", "7.3"]
# Where the 7.3 lab's downloads and unpacked packages live, outside any
# checkout: <package>_<version>/ each, reused by every later run.
CACHE = os.environ.get("RSSKIT_LAB_CACHE", "/var/cache/rsskit-lab")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR = os.environ.get("RSSKIT_LAB_MIRROR", "http://deb.debian.org/debian")

# The guest's end of the command channel (`agent_request`), the same loop in
# both guests: each sets `port` (the virtio-serial port), `d` (where a
# command's files go) and `run_cmd ID` (runs $d/cmd.ID, in the busybox
# guest chrooted into the host's root) before it. `base64 | tr`, not
# `base64 -w0`: busybox's base64 has no -w.
AGENT_LOOP = r"""exec 3<>$port
# A read while no host is connected returns end-of-file: poll again.
while true; do
while read -r verb id tmo b64 <&3; do
  case "$verb" in
    PING) echo "PONG $id" >&3 ;;
    RUN)
      echo "$b64" | base64 -d > $d/cmd.$id
      run_cmd $id </dev/null >$d/out.$id 2>$d/err.$id
      rc=$?
      printf 'DONE %s %s %s %s\n' "$id" "$rc" "$(base64 $d/out.$id | tr -d '\n')" "$(base64 $d/err.$id | tr -d '\n')" >&3
      rm -f $d/cmd.$id $d/out.$id $d/err.$id ;;
  esac
done
sleep 0.2
done
"""

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.list); do insmod /lib/modules/$m.ko || echo "lab: insmod $m failed"; done
# boot --system: the Debian image (9p, read-write) becomes the root and
# systemd its init; its lab-agent.service answers on the port instead.
if grep -q ' lab.system' /proc/cmdline; then
  mkdir -p /newroot
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose sysroot /newroot || echo "lab: sysroot mount failed"
  umount /proc /sys /dev
  exec switch_root /newroot /lib/systemd/systemd
fi
mkdir -p /host
# cache=loose: under TCG every uncached 9p read costs (boot 55 s instead of
# 12, each command seconds); files the host changes while the guest runs are
# then not seen: reboot the lab after rebuilding rsskit.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host || echo "lab: 9p mount failed"
# A checkout under /tmp, /run or /dev (scripts/lab.py GUEST_MOUNTS) would be
# hidden by the guest's own mounts there: its 9p view is kept aside first
# (a bind mount) and bound back at its path on top of them, so that the
# guest runs this checkout's build wherever it lies.
KEEP=@KEEP@
if [ -n "$KEEP" ]; then mkdir -p /keep && mount -o bind "/host$KEEP" /keep || echo "lab: bind mount of $KEEP failed"; fi
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
# netdevsim's knobs (error injection, ring maxima) are in debugfs.
mount -t debugfs debugfs /host/sys/kernel/debug || echo "lab: debugfs mount failed"
mount -t devtmpfs dev /host/dev
mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
if [ -n "$KEEP" ]; then mkdir -p "/host$KEEP" && mount -o bind /keep "/host$KEEP" || echo "lab: $KEEP not put back"; fi
mkdir -p /host/tmp/lab
# eth0: the virtio-net NIC, eth1: the e1000e (6.1) or igb (7.3), whatever the probe order.
for d in /sys/class/net/*; do
  n=${d##*/}; drv=$(basename "$(readlink $d/device/driver 2>/dev/null)" 2>/dev/null)
  case "$drv" in
    virtio_net) ip link set "$n" name labv ;;
    e1000e|igb) ip link set "$n" name labe ;;
  esac
done
ip link set labv name eth0; ip link set labe name eth1
# Absolute paths: busybox runs its own applets for bare names.
H="chroot /host /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp"
$H sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
$H ip link set lo up
$H ip link set eth0 up
$H ip link set eth1 up
$H ip addr add @GUEST_V4@/24 dev eth0
$H ip -6 addr add @GUEST_V6@/64 dev eth0 nodad
$H ip route add default via @TAP_V4@
$H ip -6 route add default via @TAP_V6@
$H ip neigh replace @TAP_V4@ lladdr @TAP_MAC@ dev eth0 nud permanent
$H ip -6 neigh replace @TAP_V6@ lladdr @TAP_MAC@ dev eth0 nud permanent
# Packets counted per queue and per CPU one by one (no GRO merging).
$H ethtool -K eth0 gro off >/dev/null 2>&1
@ETH1@
port=$(ls /dev/vport*p1 | head -n 1)
echo "lab: agent on $port"
d=/host/tmp/lab
# The command, chrooted into the host's root (where $d is /tmp/lab).
run_cmd() { timeout "$tmo" $H /bin/sh -c "cd /tmp && . /tmp/lab/cmd.$1"; }
""" + AGENT_LOOP


# The guest's own file systems over the host's root (INIT), in which the
# host's files are hidden: the checkout is kept visible (INIT's KEEP) when
# under one it can be put back on, and refused under one it cannot.
GUEST_MOUNTS = ["/tmp", "/run", "/dev"]
GUEST_MOUNTS_NO_KEEP = ["/proc", "/sys"]


def log(msg):
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def die(msg, code=1):
    log(msg)
    sys.exit(code)


def sh(args, check=True, **kw):
    return subprocess.run(args, check=check, **kw)


# ---------------------------------------------------------------- setup


def kernel_paths(kernel="6.1"):
    """(vmlinuz, initramfs) of KERNEL's guest."""
    if kernel == "6.1":
        return os.path.join(LAB, "vmlinuz"), os.path.join(LAB, "initramfs.cpio.gz")
    kdir, _ = cached_73()
    return find_vmlinuz(kdir), os.path.join(LAB, "k7.3", "initramfs.cpio.gz")


def find_vmlinuz(tree):
    for dirpath, _, files in os.walk(tree):
        for f in files:
            if f.startswith("vmlinuz"):
                return os.path.join(dirpath, f)
    die(f"no vmlinuz in {tree}")


def fetch_kernel():
    """The newest linux-image-6.1 package: apt-get download, dpkg-deb -x."""
    vmlinuz = os.path.join(LAB, "vmlinuz")
    kdir = os.path.join(LAB, "kernel")
    if os.path.exists(vmlinuz) and os.path.isdir(kdir):
        return
    os.makedirs(LAB, exist_ok=True)
    deps = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True).stdout
    m = re.search(r"Depends: (linux-image-6\.1\.0-[0-9]+-amd64)\b", deps)
    if not m:
        sh(["apt-get", "update", "-qq"])
        deps = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True).stdout
        m = re.search(r"Depends: (linux-image-6\.[0-9.]+-[0-9]+-amd64)\b", deps)
    if not m:
        die("no linux-image-6.1.0-*-amd64 package found through apt-cache (Debian 12 expected)")
    pkg = m.group(1)
    log(f"fetching {pkg} (apt-get download; unpacked under {LAB}, never into /boot)")
    dl = os.path.join(LAB, "dl")
    shutil.rmtree(dl, ignore_errors=True)
    os.makedirs(dl)
    sh(["apt-get", "download", "-qq", pkg], cwd=dl, stderr=subprocess.DEVNULL)
    deb = [f for f in os.listdir(dl) if f.endswith(".deb")][0]
    tmp = kdir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    sh(["dpkg-deb", "-x", os.path.join(dl, deb), tmp])
    shutil.rmtree(kdir, ignore_errors=True)
    os.rename(tmp, kdir)
    boot = os.path.join(kdir, "boot")
    vm = [f for f in os.listdir(boot) if f.startswith("vmlinuz-")][0]
    shutil.copy(os.path.join(boot, vm), vmlinuz + ".tmp")
    os.rename(vmlinuz + ".tmp", vmlinuz)
    shutil.rmtree(dl, ignore_errors=True)


# ---------------------------------------------------------------- the 7.3 cache


def check_cache_dir():
    """The cache holds what runs as root (QEMU, the kernel): root's, and
    writable by no one else, or refused."""
    os.makedirs(CACHE, mode=0o755, exist_ok=True)
    st = os.stat(CACHE)
    if st.st_uid != 0 or st.st_mode & 0o022:
        die(f"the lab cache {CACHE} (RSSKIT_LAB_CACHE) must be root's and not group/world-writable "
            f"(owner uid {st.st_uid}, mode {st.st_mode & 0o777:o})")


def apt_opts():
    """apt with its own sources, lists and archives under the cache: the
    host's /etc/apt and /var/lib/apt are not touched."""
    a = os.path.join(CACHE, "apt")
    return ["-o", f"Dir::Etc::SourceList={a}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={a}/lists", "-o", f"Dir::Cache={a}/cache",
            "-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=/dev/null",
            # The downloads go to root's cache, which _apt cannot write.
            "-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1"]


def apt_update():
    a = os.path.join(CACHE, "apt")
    for d in ["lists/partial", "cache/archives/partial"]:
        os.makedirs(os.path.join(a, d), exist_ok=True)
    with open(os.path.join(a, "sources.list"), "w") as f:
        for suite in ["trixie-backports", "bookworm-backports"]:
            # Verified with Debian's archive keyring, whatever the host trusts.
            f.write(f"deb [signed-by={KEYRING}] {MIRROR} {suite} main\n")
    log(f"apt-get update (private state under {a})")
    sh(["apt-get", *apt_opts(), "update", "-qq"])


def apt_versions(pkg):
    """{suite: version} of PKG in the private lists (apt-cache madison)."""
    out = subprocess.run(["apt-cache", *apt_opts(), "madison", pkg], capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) == 3 and f[0] == pkg:
            suite = f[2].split()[1].split("/")[0] if len(f[2].split()) > 1 else ""
            found.setdefault(suite, f[1])
    return found


def newest_kernel_abi(series):
    """The newest ABI name of SERIES (7.3 -> 7.3.4+deb13-amd64) in trixie-backports."""
    out = subprocess.run(["apt-cache", *apt_opts(), "search", "--names-only",
                          f"^linux-binary-unsigned-{re.escape(series)}\\.[0-9]+\\+deb[0-9]+-amd64$"],
                         capture_output=True, text=True).stdout
    abis = re.findall(rf"^linux-binary-unsigned-({re.escape(series)}\.([0-9]+)\+deb[0-9]+-amd64) ", out, re.M)
    if not abis:
        die(f"no linux-binary-unsigned-{series}.* package in trixie-backports ({MIRROR})")
    return max(abis, key=lambda a: int(a[1]))[0]


def cache_name(pkg, version):
    # No ':' (LD_LIBRARY_PATH and QEMU's option syntax split on it).
    return f"{pkg}_{version.replace(':', '%3a')}"


def fetch_unpack(name, pkgs):
    """apt-get download PKGS (pkg=version) into CACHE/NAME.tmp, dpkg-deb -x
    each, then rename to CACHE/NAME: a half-done fetch is never used."""
    final = os.path.join(CACHE, name)
    if os.path.isdir(final):
        return final
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    dl = os.path.join(tmp, ".dl")
    os.makedirs(dl)
    log(f"fetching {', '.join(pkgs)} into {final}")
    sh(["apt-get", *apt_opts(), "download", "-qq", *pkgs], cwd=dl)
    for deb in sorted(os.listdir(dl)):
        sh(["dpkg-deb", "-x", os.path.join(dl, deb), tmp])
    shutil.rmtree(dl)
    os.rename(tmp, final)
    return final


def cached_73(refresh=False):
    """(kernel tree, QEMU tree) of the 7.3 lab, fetched once into the cache;
    later runs read CACHE/current-7.3.json and download nothing."""
    current = os.path.join(CACHE, "current-7.3.json")

    def cached():
        """The trees current-7.3.json names, when both are there."""
        try:
            cur = json.load(open(current))
            if os.path.isdir(cur["kernel"]) and os.path.isdir(cur["qemu"]):
                return cur["kernel"], cur["qemu"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    if not refresh and cached():
        return cached()
    check_cache_dir()
    lock = open(os.path.join(CACHE, ".lock"), "w")
    # Two checkouts fetching at once: one fetches, the other then reuses.
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if not refresh and cached():
            return cached()
        for tool in ["apt-get", "apt-cache", "dpkg-deb"]:
            if not shutil.which(tool):
                die(f"{tool} is missing (Debian's apt and dpkg)")
        apt_update()
        abi = newest_kernel_abi("7.3")
        kver = apt_versions(f"linux-binary-unsigned-{abi}").get("trixie-backports")
        if not kver:
            die(f"linux-binary-unsigned-{abi} is not in trixie-backports")
        kdir = fetch_unpack(cache_name(f"linux-{abi}", kver),
                            [f"linux-binary-unsigned-{abi}={kver}", f"linux-modules-{abi}={kver}",
                             f"linux-base-{abi}={kver}"])
        qver = apt_versions("qemu-system-x86").get("bookworm-backports")
        sver = apt_versions("seabios").get("bookworm-backports")
        if not qver or not sver:
            die("qemu-system-x86 or seabios is not in bookworm-backports (QEMU >= 8.0 is needed for igb)")
        qdir = fetch_unpack(cache_name("qemu", qver),
                            [f"qemu-system-x86={qver}", f"qemu-system-common={qver}",
                             f"qemu-system-data={qver}", f"seabios={sver}"])
        check_qemu(qdir)
        with open(current + ".tmp", "w") as f:
            json.dump({"kernel": kdir, "qemu": qdir, "kernel_version": kver, "qemu_version": qver}, f)
        os.rename(current + ".tmp", current)
        return kdir, qdir
    finally:
        lock.close()


# ---------------------------------------------------------------- netdevsim (7.3)

# Debian's 7.3 build leaves netdevsim out (`# CONFIG_NETDEVSIM is not set`)
# and was compiled with gcc-14, which this Debian 12 host lacks: the module
# is built out of tree in a trixie root (mmdebstrap) against the kernel's
# own headers package, from the netdevsim sources of linux-source-7.3, and
# only the .ko (with its build log and sources) is kept, keyed by the exact
# kernel package version: CACHE/netdevsim-<abi>_<version>/.
NSIM_SUITES = ["trixie", "trixie-backports"]
# gcc-14 comes with the headers (gcc-14-for-host); make and libc6-dev are
# what kbuild needs on top for a module (no vmlinux there: BTF is skipped).
NSIM_ROOT_PACKAGES = ["make", "libc6-dev", "gcc-14", "xz-utils", "kmod"]


def kernel_abi(kdir):
    """7.3.4+deb13-amd64: the one release under the kernel tree's lib/modules."""
    rels = os.listdir(os.path.join(kdir, "usr/lib/modules"))
    if len(rels) != 1:
        die(f"expected one kernel release under {kdir}/usr/lib/modules, found {rels}")
    return rels[0]


def nsim_dir():
    """Where the 7.3 kernel's netdevsim.ko is (or would be) cached."""
    kdir, _ = cached_73()
    kver = json.load(open(os.path.join(CACHE, "current-7.3.json")))["kernel_version"]
    return os.path.join(CACHE, cache_name(f"netdevsim-{kernel_abi(kdir)}", kver)), kver


def nsim_module():
    """The cached netdevsim.ko for the 7.3 kernel, or None when not built."""
    ko = os.path.join(nsim_dir()[0], "netdevsim.ko")
    return ko if os.path.isfile(ko) else None


def build_netdevsim():
    """netdevsim.ko for the 7.3 lab's kernel, built once into the cache (a
    second run finds it and does nothing); dies naming the failed step."""
    final, kver = nsim_dir()
    if os.path.isfile(os.path.join(final, "netdevsim.ko")):
        return os.path.join(final, "netdevsim.ko")
    check_cache_dir()
    lock = open(os.path.join(CACHE, ".lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if os.path.isfile(os.path.join(final, "netdevsim.ko")):
            return os.path.join(final, "netdevsim.ko")
        if not shutil.which("mmdebstrap"):
            die("mmdebstrap is missing (scripts/install-deps.sh installs it): it makes the trixie root "
                "that builds netdevsim")
        abi = kernel_abi(cached_73()[0])
        series = ".".join(abi.split(".")[:2])
        t0 = time.monotonic()
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        apt_update()
        src = nsim_sources(tmp, series, kver)
        root = os.path.join(tmp, "root")
        sources = [f"deb [signed-by={KEYRING}] {MIRROR} {suite} main" for suite in NSIM_SUITES]
        log(f"making a trixie root for the netdevsim build (mmdebstrap: {', '.join(NSIM_ROOT_PACKAGES)}, "
            f"linux-headers-{abi}={kver}) in {root}")
        sh(["mmdebstrap", "--quiet", "--variant=minbase", "--mode=root",
            "--include=" + ",".join(NSIM_ROOT_PACKAGES + [f"linux-headers-{abi}={kver}"]),
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*", "trixie", root, *sources])
        t_root = time.monotonic() - t0
        shutil.copytree(src, os.path.join(root, "build"))
        headers = f"/usr/src/linux-headers-{abi}"
        log(f"building netdevsim against {headers}")
        # CONFIG_NETDEVSIM=m: the headers' .config has it unset, and the
        # Makefile's `obj-$(CONFIG_NETDEVSIM)` needs it to build anything.
        # objtool reads /proc: mounted in a mount namespace of the build's
        # own, so nothing stays mounted if it is killed. The debug info
        # goes (9 MB -> under 1 MB in the initramfs); .BTF stays.
        build = (f"mount -t proc proc {shlex.quote(root)}/proc && exec chroot {shlex.quote(root)} "
                 "/usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp sh -c "
                 + shlex.quote(f"make -j{os.cpu_count() or 1} -C {headers} M=/build CONFIG_NETDEVSIM=m modules "
                               "&& strip --strip-debug /build/netdevsim.ko"))
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", build],
                           capture_output=True, text=True)
        open(os.path.join(tmp, "build.log"), "w").write(r.stdout + r.stderr)
        ko = os.path.join(root, "build", "netdevsim.ko")
        if r.returncode != 0 or not os.path.isfile(ko):
            die(f"the netdevsim build failed (exit {r.returncode}; log {tmp}/build.log):\n"
                + (r.stdout + r.stderr)[-3000:])
        shutil.copy(ko, os.path.join(tmp, "netdevsim.ko"))
        vermagic = modinfo(os.path.join(tmp, "netdevsim.ko"), "vermagic")
        if not vermagic.startswith(abi + " "):
            die(f"the built netdevsim.ko is for {vermagic!r}, not {abi}")
        # Only the module is needed: the root (~600 MB) goes.
        shutil.rmtree(root)
        took = time.monotonic() - t0
        json.dump({"abi": abi, "kernel_version": kver, "vermagic": vermagic,
                   "depends": modinfo(os.path.join(tmp, "netdevsim.ko"), "depends"),
                   "root_seconds": round(t_root), "total_seconds": round(took)},
                  open(os.path.join(tmp, "build.json"), "w"))
        os.rename(tmp, final)
        log(f"netdevsim.ko built in {took:.0f} s (root {t_root:.0f} s) into {final}")
        return os.path.join(final, "netdevsim.ko")
    finally:
        lock.close()


def modinfo(ko, field):
    """One field of a module's .modinfo, read from the ELF (no kmod needed)."""
    m = re.search(rb"\x00" + field.encode() + rb"=([^\x00]*)\x00", b"\x00" + open(ko, "rb").read())
    return m.group(1).decode() if m else ""


def nsim_sources(tmp, series, kver):
    """TMP/src: drivers/net/netdevsim out of linux-source-SERIES=KVER, read
    from the package's tarball as a stream (the 170 MB .deb is not kept)."""
    dl = os.path.join(tmp, ".dl")
    os.makedirs(dl)
    log(f"fetching linux-source-{series}={kver} (for the netdevsim sources)")
    sh(["apt-get", *apt_opts(), "download", "-qq", f"linux-source-{series}={kver}"], cwd=dl)
    deb = os.path.join(dl, os.listdir(dl)[0])
    top = f"linux-source-{series}"
    unpack = os.path.join(tmp, "unpack")
    os.makedirs(unpack)
    fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
    inner = subprocess.Popen(["tar", "-xO", f"./usr/src/{top}.tar.xz"], stdin=fsys.stdout, stdout=subprocess.PIPE)
    fsys.stdout.close()
    sh(["tar", "-xJ", "-C", unpack, f"{top}/drivers/net/netdevsim"], stdin=inner.stdout)
    inner.stdout.close()
    if inner.wait() or fsys.wait():
        die(f"could not read {top}.tar.xz out of {deb}")
    src = os.path.join(tmp, "src")
    os.rename(os.path.join(unpack, top, "drivers/net/netdevsim"), src)
    shutil.rmtree(unpack)
    shutil.rmtree(dl)
    return src


def qemu_env(qdir):
    """QEMU's environment: its own modules (the host's 7.2 ones refuse to
    load into another build) and any unpacked libraries."""
    env = dict(os.environ)
    env["QEMU_MODULE_DIR"] = os.path.join(qdir, "usr/lib/x86_64-linux-gnu/qemu")
    libs = os.path.join(qdir, "usr/lib/x86_64-linux-gnu")
    env["LD_LIBRARY_PATH"] = libs + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def check_qemu(qdir):
    """The cached QEMU runs on this host and emulates igb, or a clear error
    naming the libraries it lacks."""
    binary = os.path.join(qdir, "usr/bin/qemu-system-x86_64")
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, env=qemu_env(qdir)).stdout
    missing = [line.split()[0] for line in ldd.splitlines() if "not found" in line]
    if missing:
        die(f"{binary} needs libraries this host lacks: {', '.join(missing)}")
    # `-device igb,help`, not `-device help`: that loads every module, and
    # those this package lacks (OpenGL, GUI) come from the host's QEMU 7.2,
    # which aborts it; a lab run loads none of them.
    r = subprocess.run([binary, "-device", "igb,help"], capture_output=True, text=True, env=qemu_env(qdir))
    if r.returncode != 0 or "igb options" not in r.stdout:
        die(f"{binary} does not emulate igb: {(r.stdout + r.stderr)[-500:]}")


# ---------------------------------------------------------------- initramfs


def module_files(tree):
    """{name: path} of every module under TREE, compressed or not."""
    mods = {}
    for dirpath, _, files in os.walk(tree):
        for f in files:
            m = re.match(r"(.+)\.ko(\.xz|\.zst|\.gz)?$", f)
            if m:
                mods[m.group(1).replace("-", "_")] = os.path.join(dirpath, f)
    return mods


def builtin_modules(tree):
    """Names in the package's modules.builtin (7.3 builds virtio_pci in)."""
    names = set()
    for dirpath, _, files in os.walk(tree):
        if "modules.builtin" in files:
            for line in open(os.path.join(dirpath, "modules.builtin")):
                names.add(os.path.basename(line.strip()).removesuffix(".ko").replace("-", "_"))
    return names


def module_bytes(path):
    """A module's ELF bytes: busybox's insmod reads no compressed ones."""
    if path.endswith(".xz"):
        import lzma

        return lzma.decompress(open(path, "rb").read())
    if path.endswith(".gz"):
        import gzip

        return gzip.decompress(open(path, "rb").read())
    if path.endswith(".zst"):
        if not shutil.which("zstd"):
            die(f"{path} is zstd-compressed and zstd is missing (apt-get install zstd)")
        return sh(["zstd", "-dc", path], capture_output=True).stdout
    return open(path, "rb").read()


class MissingModule(Exception):
    pass


def module_order(mods, wanted, builtin=frozenset()):
    """WANTED and their dependencies (each .ko's .modinfo `depends=`: the
    packages ship no modules.dep), in load order, built-in ones left out."""
    order = []
    data = {}

    def visit(name):
        name = name.replace("-", "_")
        if name in order or name in builtin:
            return
        if name not in mods:
            raise MissingModule(name)
        data[name] = module_bytes(mods[name])
        m = re.search(rb"\x00depends=([^\x00]*)\x00", data[name])
        for dep in (m.group(1).decode().split(",") if m and m.group(1) else []):
            visit(dep)
        order.append(name)

    for w in wanted:
        visit(w)
    return order, data


def under(path, top):
    return path == top or path.startswith(top + "/")


def hidden_checkout():
    """ROOT when a guest's own mount (GUEST_MOUNTS) would hide it, else "";
    dies where the guest could not put it back."""
    for top in GUEST_MOUNTS_NO_KEEP:
        if under(ROOT, top):
            die(f"the checkout {ROOT} is under {top}, which the guest mounts its own {top[1:]} on: move it elsewhere")
    for top in GUEST_MOUNTS:
        if ROOT == top:
            die(f"the checkout is {top} itself, which the guest needs as its own (writable) {top}: move it into a folder")
        if under(ROOT, top):
            # The guest's command files (INIT's $d) go to /tmp/lab.
            if under(ROOT, "/tmp/lab") or under("/tmp/lab", ROOT):
                die(f"the checkout {ROOT} overlaps /tmp/lab, the guest's own command folder: move or rename it")
            return ROOT
    return ""


def init_text(kernel):
    init = INIT
    eth1 = ""
    if kernel == "7.3":
        # The igb gets frames of its own (send --nic eth1), counted one by one.
        eth1 = "\n".join([
            f"$H ip addr add {GUEST1_V4}/24 dev eth1",
            f"$H ip -6 addr add {GUEST1_V6}/64 dev eth1 nodad",
            "$H ethtool -K eth1 gro off >/dev/null 2>&1",
        ])
    # The stamp below covers KEEP: a checkout moved gets its initramfs again.
    keep = hidden_checkout()
    for k, v in dict(GUEST_V4=GUEST_V4, GUEST_V6=GUEST_V6, TAP_V4=TAP_V4, TAP_V6=TAP_V6, TAP_MAC=TAP_MAC,
                     KEEP=shlex.quote(keep), ETH1=eth1).items():
        init = init.replace(f"@{k}@", v)
    return init


def build_initramfs(kernel="6.1"):
    _, initrd = kernel_paths(kernel)
    init = init_text(kernel)
    wanted = WANTED if kernel == "6.1" else WANTED_73
    tree_src = os.path.join(LAB, "kernel", "lib", "modules") if kernel == "6.1" else cached_73()[0]
    # 7.3: netdevsim from the cache, when built (`setup --kernel 7.3` builds
    # it), loaded at boot with its dependencies from the kernel's tree.
    nsim = nsim_module() if kernel == "7.3" else None
    if nsim:
        wanted = wanted + ["netdevsim"]
    stamp = hashlib.sha1((init + ",".join(wanted) + tree_src + (nsim or "")).encode()).hexdigest()
    stamp_file = initrd + ".stamp"
    if os.path.exists(initrd) and os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(busybox):
        die("busybox is missing (scripts/install-deps.sh installs busybox-static)")
    builtin = builtin_modules(tree_src) if kernel != "6.1" else frozenset()
    mods = module_files(tree_src)
    if nsim:
        mods["netdevsim"] = nsim
    try:
        order, data = module_order(mods, wanted, builtin)
    except MissingModule as e:
        if kernel != "6.1":
            die(f"kernel module {e} not in {tree_src}")
        # Pruned for an older module list: fetch the package again.
        shutil.rmtree(os.path.join(LAB, "kernel"), ignore_errors=True)
        os.unlink(os.path.join(LAB, "vmlinuz"))
        fetch_kernel()
        mods = module_files(tree_src)
        try:
            order, data = module_order(mods, wanted, builtin)
        except MissingModule as e:
            die(f"kernel module {e} not in the kernel package")
    os.makedirs(os.path.dirname(initrd), exist_ok=True)
    tree = initrd + ".tree"
    shutil.rmtree(tree, ignore_errors=True)
    for d in ["bin", "proc", "sys", "dev", "tmp", "host", "lib/modules"]:
        os.makedirs(os.path.join(tree, d))
    shutil.copy(busybox, os.path.join(tree, "bin", "busybox"))
    for name in order:
        with open(os.path.join(tree, "lib", "modules", name + ".ko"), "wb") as f:
            f.write(data[name])
    with open(os.path.join(tree, "modules.list"), "w") as f:
        f.write("\n".join(order) + "\n")
    with open(os.path.join(tree, "init"), "w") as f:
        f.write(init)
    os.chmod(os.path.join(tree, "init"), 0o755)
    files = sh(["find", "."], cwd=tree, capture_output=True, text=True).stdout
    cpio = sh(["cpio", "-o", "-H", "newc", "--quiet"], cwd=tree, input=files.encode(), capture_output=True).stdout
    import gzip

    with gzip.open(initrd + ".tmp", "wb", compresslevel=1) as f:
        f.write(cpio)
    os.rename(initrd + ".tmp", initrd)
    open(stamp_file, "w").write(stamp)
    shutil.rmtree(tree, ignore_errors=True)
    if kernel == "6.1":
        # Keep only the modules the guest loads (the package unpacks to 400 MB);
        # the 7.3 cache is shared and kept whole.
        keep = {mods[name] for name in order}
        for path in mods.values():
            if path not in keep:
                os.unlink(path)


def cmd_setup(args=None):
    if os.geteuid() != 0:
        die("the lab needs root (network namespace, tap devices)")
    kernel = getattr(args, "kernel", "6.1") or "6.1"
    # A checkout the guest cannot see is refused now, not deep in a test.
    hidden_checkout()
    sh([os.path.join(ROOT, "scripts", "install-deps.sh")])
    for tool in ["qemu-system-x86_64", "cpio", "dpkg-deb", "apt-get"]:
        if not shutil.which(tool):
            die(f"{tool} is missing (scripts/install-deps.sh installs qemu-system-x86 and cpio)")
    if kernel == "6.1":
        fetch_kernel()
    else:
        cached_73(refresh=getattr(args, "refresh", False))
        build_netdevsim()
    build_initramfs(kernel)


# ---------------------------------------------------------------- system image

SYSTEM = os.path.join(LAB, "system")
# minbase + what the persistence proofs need; no recommends, no docs.
SYSTEM_PACKAGES = ["systemd", "systemd-sysv", "udev", "irqbalance", "ethtool", "kmod", "iproute2", "procps"]

# The command channel of the system guest: the initramfs loop of INIT, run
# by systemd (lab-agent.service), commands run directly (no chroot).
SYSTEM_AGENT = r"""#!/bin/bash
d=/run/lab
mkdir -p $d
port=/dev/virtio-ports/lab.agent
for i in $(seq 100); do [ -e $port ] && break; sleep 0.2; done
run_cmd() { (cd /tmp && timeout "$tmo" /bin/sh -c ". $d/cmd.$1"); }
""" + AGENT_LOOP

# The addresses INIT gives eth0 (the host side sends to them).
SYSTEM_NET = r"""#!/bin/sh
for i in $(seq 100); do [ -e /sys/class/net/eth0 ] && [ -e /sys/class/net/eth1 ] && break; sleep 0.2; done
sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
ip link set lo up
ip link set eth0 up
ip link set eth1 up
ip addr replace @GUEST_V4@/24 dev eth0
ip -6 addr replace @GUEST_V6@/64 dev eth0 nodad
ip route replace default via @TAP_V4@
ip -6 route replace default via @TAP_V6@
ip neigh replace @TAP_V4@ lladdr @TAP_MAC@ dev eth0 nud permanent
ip -6 neigh replace @TAP_V6@ lladdr @TAP_MAC@ dev eth0 nud permanent
ethtool -K eth0 gro off >/dev/null 2>&1
exit 0
"""

SYSTEM_AGENT_UNIT = """[Unit]
Description=rsskit lab: command channel on virtio-serial (scripts/lab.py)
After=systemd-udevd.service

[Service]
ExecStartPre=/usr/local/sbin/lab-net
ExecStart=/usr/local/sbin/lab-agent
Environment=HOME=/root
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
"""

# Units a lab guest does not need (each costs seconds under TCG).
SYSTEM_MASK = [
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer", "fstrim.timer",
    "systemd-tmpfiles-clean.timer", "getty@tty1.service", "serial-getty@ttyS0.service", "getty.target",
    "systemd-timesyncd.service", "systemd-networkd-wait-online.service", "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service", "systemd-random-seed.service", "systemd-pstore.service",
    "systemd-journal-catalog-update.service", "ldconfig.service", "systemd-hwdb-update.service",
    "e2scrub_reap.service", "systemd-remount-fs.service",
]

# What `rsskit apply --persist` writes into the image; boot --system removes
# it so that each boot starts from the image as built (`persist remove`
# takes it away inside the guest; a failed run must not leak into the next).
SYSTEM_RSSKIT_STATE = ["etc/rsskit", "var/lib/rsskit", "etc/udev/rules.d/90-rsskit.rules", "etc/systemd/system/rsskit-apply@.service",
                       "etc/systemd/system/rsskit-agent.service",
                       "etc/systemd/system/multi-user.target.wants/rsskit-agent.service"]


def system_files():
    net = SYSTEM_NET
    for k, v in dict(GUEST_V4=GUEST_V4, GUEST_V6=GUEST_V6, TAP_V4=TAP_V4, TAP_V6=TAP_V6, TAP_MAC=TAP_MAC).items():
        net = net.replace(f"@{k}@", v)
    return {
        "usr/local/sbin/lab-agent": (SYSTEM_AGENT, 0o755),
        "usr/local/sbin/lab-net": (net, 0o755),
        "etc/systemd/system/lab-agent.service": (SYSTEM_AGENT_UNIT, 0o644),
        "etc/hostname": ("rsklab\n", 0o644),
        # A persistent journal costs ~18 s of flushing over 9p at each boot.
        "etc/systemd/journald.conf.d/lab.conf": ("[Journal]\nStorage=volatile\n", 0o644),
        "etc/fstab": ("# the root is the lab's 9p share (scripts/lab.py INIT)\n", 0o644),
    }


def build_system_image():
    """A Debian bookworm root (mmdebstrap, minbase) for `boot --system`,
    cached under target/lab/system; rebuilt when its recipe changes."""
    files = system_files()
    stamp = hashlib.sha1(json.dumps([SYSTEM_PACKAGES, SYSTEM_MASK, sorted(files.items())]).encode()).hexdigest()
    stamp_file = SYSTEM + ".stamp"
    if os.path.isdir(SYSTEM) and os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return
    if not shutil.which("mmdebstrap"):
        die("mmdebstrap is missing (scripts/install-deps.sh installs it)")
    tmp = SYSTEM + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"building the system image (mmdebstrap bookworm, minbase + {', '.join(SYSTEM_PACKAGES)}) in {SYSTEM}")
    t0 = time.monotonic()
    sh(["mmdebstrap", "--quiet", "--variant=minbase", "--include=" + ",".join(SYSTEM_PACKAGES),
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*",
        "bookworm", tmp])
    finish_system_tree(tmp, files)
    shutil.rmtree(SYSTEM, ignore_errors=True)
    os.rename(tmp, SYSTEM)
    open(stamp_file, "w").write(stamp)
    log(f"system image built in {time.monotonic() - t0:.0f} s")


def finish_system_tree(tmp, files):
    for rel, (text, mode) in files.items():
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
    wants = os.path.join(tmp, "etc/systemd/system/multi-user.target.wants")
    os.makedirs(wants, exist_ok=True)
    os.symlink("/etc/systemd/system/lab-agent.service", os.path.join(wants, "lab-agent.service"))
    for unit in SYSTEM_MASK:
        link = os.path.join(tmp, "etc/systemd/system", unit)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink("/dev/null", link)
    # The package's irqbalance options, restored at each boot.
    shutil.copy(os.path.join(tmp, "etc/default/irqbalance"), os.path.join(tmp, "etc/default/irqbalance.lab-orig"))


def prepare_system_image(rsskit):
    """This build's rsskit as /usr/bin/rsskit, and no rsskit state left."""
    for rel in SYSTEM_RSSKIT_STATE:
        path = os.path.join(SYSTEM, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    shutil.copy(os.path.join(SYSTEM, "etc/default/irqbalance.lab-orig"), os.path.join(SYSTEM, "etc/default/irqbalance"))
    if not os.path.isfile(rsskit):
        die(f"{rsskit} is missing: cargo build -p rsskit first (or give --rsskit PATH)")
    dst = os.path.join(SYSTEM, "usr/bin/rsskit")
    if os.path.lexists(dst):
        os.unlink(dst)
    # A hard link (same file system under target/): no 100 MB copy.
    try:
        os.link(rsskit, dst)
    except OSError:
        shutil.copy(rsskit, dst)


# ---------------------------------------------------------------- boot / stop


def state_path(name):
    return os.path.join(RUN, name)


def qemu_pid():
    try:
        pid = int(open(state_path("qemu.pid")).read().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return None
    # Only the QEMU this lab started (its pidfile path is on its command line).
    return pid if state_path("qemu.pid").encode() in cmdline else None


def netns_exists():
    return os.path.exists(f"/run/netns/{NETNS}")


def kvm_usable():
    if os.environ.get("RSSKIT_LAB_ACCEL", "auto") == "tcg":
        return False, "RSSKIT_LAB_ACCEL=tcg"
    failed = os.path.join(LAB, "kvm-failed")
    if os.path.exists(failed):
        return False, "KVM failed to boot the guest here before (" + open(failed).read().strip() + ")"
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
        os.close(fd)
    except OSError as e:
        return False, f"/dev/kvm: {e.strerror}"
    return True, ""


def system_mode():
    return os.path.exists(state_path("system"))


def booted_kernel():
    try:
        return open(state_path("kernel")).read().strip() or "6.1"
    except OSError:
        return "6.1"


def qemu_args(accel, system=False, kernel="6.1"):
    vmlinuz, initrd = kernel_paths(kernel)
    append = "console=ttyS0 loglevel=4 panic=-1 mitigations=off"
    if system:
        # Kernel names (eth0: virtio-net, loaded first), multi-user only.
        append += " lab.system net.ifnames=0 systemd.unit=multi-user.target systemd.show_status=0"
    qemu, firmware, rom = "qemu-system-x86_64", [], ""
    if kernel == "7.3":
        _, qdir = cached_73()
        qemu = os.path.join(qdir, "usr/bin/qemu-system-x86_64")
        # Its own firmware (the host's SeaBIOS is older than it wants), and
        # no option ROMs: the guest boots with -kernel, not over the network.
        firmware = ["-L", os.path.join(qdir, "usr/share/qemu"), "-L", os.path.join(qdir, "usr/share/seabios")]
        rom = ",romfile="
    args = [
        qemu,
        *firmware,
        "-name", "rsskit-lab",
        "-machine", f"q35,accel={accel}",
        "-cpu", "max" if accel == "tcg" else "host",
        "-smp", "4,sockets=2,cores=2,threads=1",
        "-m", "1024",
        "-object", "memory-backend-ram,id=mem0,size=512M",
        "-object", "memory-backend-ram,id=mem1,size=512M",
        "-numa", "node,nodeid=0,cpus=0-1,memdev=mem0",
        "-numa", "node,nodeid=1,cpus=2-3,memdev=mem1",
        "-kernel", vmlinuz,
        "-initrd", initrd,
        "-append", append,
        "-no-reboot",
        "-display", "none",
        "-nodefaults",
        "-serial", "file:" + state_path("console.log"),
        "-pidfile", state_path("qemu.pid"),
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-serial-pci,bus=pcie.0",
        "-chardev", f"socket,id=agent,path={state_path('agent.sock')},server=on,wait=off",
        "-device", "virtserialport,chardev=agent,name=lab.agent",
        # The RSS NIC behind a PCIe expander bridge on NUMA node 1.
        "-device", "pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0",
        "-device", "pcie-root-port,id=rp1,bus=pxb1,chassis=1,slot=1",
        "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no,queues=4,vhost=off",
        "-device", f"virtio-net-pci,netdev=n0,bus=rp1,mac={GUEST_MAC},mq=on,rss=on,vectors=10{rom}",
        "-netdev", "tap,id=n1,ifname=tap1,script=no,downscript=no,vhost=off",
        # 6.1: e1000e (no RSS: the refusal paths); 7.3: igb, the 82576
        # model (hardware RSS, 8 queue pairs, one MSI-X vector each).
        "-device", f"{'igb' if kernel == '7.3' else 'e1000e'},netdev=n1,bus=pcie.0,mac={GUEST_MAC1}{rom}",
    ]
    if system:
        # A guest reboot restarts the guest (the persistence proofs reboot).
        args.remove("-no-reboot")
        args += ["-fsdev", f"local,id=sysroot,path={SYSTEM},security_model=passthrough",
                 "-device", "virtio-9p-pci,fsdev=sysroot,mount_tag=sysroot,bus=pcie.0"]
    return args


def ns_sh(cmd):
    sh(["ip", "netns", "exec", NETNS, "sh", "-c", cmd], stdout=subprocess.DEVNULL)


# Set by start() when it gave up on a guest stuck in an RCU stall.
STALLED = [False]
# Seconds a guest may stay silent after an RCU stall report before start()
# gives up on it (one that recovers answers well within this).
STALL_GRACE = 60


def start(accel, timeout):
    """Starts QEMU in the lab's namespace; True once the agent answers."""
    STALLED[0] = False
    stall_at = None
    for f in ["qemu.pid", "agent.sock", "console.log"]:
        try:
            os.unlink(state_path(f))
        except FileNotFoundError:
            pass
    log_f = open(state_path("qemu.log"), "w")
    # Its own session: a test's Ctrl-C does not reach QEMU half-way; `stop`
    # (or the watcher) ends it.
    kernel = booted_kernel()
    p = subprocess.Popen(
        ["ip", "netns", "exec", NETNS] + qemu_args(accel, system_mode(), kernel),
        stdin=subprocess.DEVNULL, stdout=log_f, stderr=log_f, start_new_session=True,
        env=qemu_env(cached_73()[1]) if kernel == "7.3" else None,
    )
    open(state_path("accel"), "w").write(accel)
    deadline = time.monotonic() + timeout
    tap_up = False
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log(f"QEMU ({accel}) exited with {p.returncode}: " + open(state_path("qemu.log")).read().strip()[-2000:])
            return False
        if not tap_up and os.path.exists(f"/run/netns/{NETNS}"):
            r = subprocess.run(["ip", "-n", NETNS, "link", "show", "tap1"], capture_output=True)
            if r.returncode == 0:
                sh(["ip", "-n", NETNS, "link", "set", "tap0", "address", TAP_MAC])
                sh(["ip", "-n", NETNS, "link", "set", "tap0", "up"])
                sh(["ip", "-n", NETNS, "link", "set", "tap1", "up"])
                tap_up = True
        if tap_up and os.path.exists(state_path("agent.sock")):
            try:
                agent_request("PING", None, 3)
                return True
            except (OSError, TimeoutError):
                pass
        if stall_at is None and console_has("rcu_preempt kthread starved"):
            stall_at = time.monotonic()
        if stall_at is not None and time.monotonic() - stall_at > STALL_GRACE:
            log(f"the guest ({accel}) reported an RCU stall and has not answered {STALL_GRACE} s later; console tail:\n"
                + console_tail())
            STALLED[0] = True
            return False
        time.sleep(1)
    log(f"the guest did not answer within {timeout} s ({accel}); console tail:\n" + console_tail())
    return False


def console_has(text):
    try:
        with open(state_path("console.log"), errors="replace") as f:
            return text in f.read()
    except OSError:
        return False


def console_tail():
    try:
        return "".join(open(state_path("console.log"), errors="replace").readlines()[-25:])
    except OSError:
        return "(no console log)"


def cmd_boot(args):
    if qemu_pid():
        log(f"already running (pid {qemu_pid()}, {open(state_path('accel')).read()}); scripts/lab stop first")
        return 0
    if args.system and args.kernel != "6.1":
        die("boot --system boots the 6.1 kernel only (its image has no 7.3 modules)", 2)
    cmd_setup(args)
    cmd_stop(quiet=True)
    os.makedirs(RUN, exist_ok=True)
    open(state_path("kernel"), "w").write(args.kernel)
    try:
        os.unlink(state_path("system"))
    except FileNotFoundError:
        pass
    if args.system:
        build_system_image()
        prepare_system_image(args.rsskit)
        open(state_path("system"), "w").write("1")
    sh(["ip", "netns", "add", NETNS])
    # No router solicitations or DAD from the host side: the guest's queue
    # counters then see only the frames the lab sends.
    ns_sh("echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6")
    sh(["ip", "-n", NETNS, "link", "set", "lo", "up"])
    if args.owner_pid:
        start_watcher(args.owner_pid, args.max_seconds)
    t0 = time.monotonic()
    ok, why = kvm_usable()
    accel = None
    if ok:
        if start("kvm", 40):
            accel = "kvm"
        else:
            open(os.path.join(LAB, "kvm-failed"), "w").write(f"{time.strftime('%F %T')}, host kernel {os.uname().release}")
            why = "KVM did not boot the guest (recorded in target/lab/kvm-failed)"
            kill_qemu()
    if accel is None:
        ok = start("tcg", args.timeout)
        if not ok and STALLED[0]:
            # A guest whose vCPU starved (host overloaded) does not recover:
            # one fresh boot.
            log("the guest stalled at boot (RCU stall under TCG on a loaded host): booting it again once")
            kill_qemu()
            ok = start("tcg", args.timeout)
        if ok:
            accel = "tcg"
        else:
            cmd_stop(quiet=True)
            return 3
    numa, release = (run_cmd("cat /sys/class/net/eth0/device/../numa_node; uname -r", 30)[1].split() + ["?", "?"])[:2]
    log(f"guest up in {time.monotonic() - t0:.0f} s, accelerator {accel.upper()}"
        + (f" (not KVM: {why})" if accel == "tcg" else "")
        + f"; kernel {release}; eth0 (virtio-net, 4 queues) on NUMA node {numa}, "
        + f"eth1 {'igb' if args.kernel == '7.3' else 'e1000e'}; namespace {NETNS}")
    return 0


def start_watcher(owner, max_seconds):
    """A detached process that stops the lab when OWNER exits or after
    MAX_SECONDS, whichever comes first (a killed test leaves nothing)."""
    pid = os.fork()
    if pid:
        return
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    open(state_path("watcher.pid"), "w").write(str(os.getpid()))
    end = time.monotonic() + max_seconds
    while time.monotonic() < end:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    cmd_stop(quiet=True, from_watcher=True)
    os._exit(0)


def kill_qemu():
    pid = qemu_pid()
    if not pid:
        return
    try:
        os.killpg(os.getpgid(pid), signal.SIGTERM)
    except OSError:
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)


def cmd_stop(args=None, quiet=False, from_watcher=False):
    was = qemu_pid()
    kill_qemu()
    if not from_watcher:
        try:
            wpid = int(open(state_path("watcher.pid")).read())
            if wpid != os.getpid():
                os.kill(wpid, signal.SIGTERM)
        except (OSError, ValueError):
            pass
    if netns_exists():
        subprocess.run(["ip", "netns", "del", NETNS], stderr=subprocess.DEVNULL)
    for f in ["qemu.pid", "agent.sock", "watcher.pid", "accel", "system", "kernel"]:
        try:
            os.unlink(state_path(f))
        except FileNotFoundError:
            pass
    if not quiet:
        log("stopped" if was else "not running; namespace and state cleaned")
    return 0


def cmd_status(_args):
    pid = qemu_pid()
    if not pid:
        print("not running")
        return 1
    try:
        rc, out, _ = run_cmd("uname -r", 30)
        release = out.strip() if rc == 0 else f"unknown (uname -r: exit {rc})"
    except (OSError, TimeoutError) as e:
        release = f"unknown (the guest does not answer: {e})"
    print(f"running: pid {pid}, accelerator {open(state_path('accel')).read()}, kernel {release} "
          f"(lab {booted_kernel()}), namespace {NETNS}")
    return 0


# ---------------------------------------------------------------- agent


def agent_request(verb, payload, timeout, tmo_guest=0):
    """One request on the agent port; returns the answer line's fields."""
    rid = f"{os.getpid()}x{random.randrange(1 << 30)}"
    lock = open(state_path("agent.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(state_path("agent.sock"))
        b64 = base64.b64encode(payload.encode()).decode() if payload is not None else "-"
        s.sendall(f"{verb} {rid} {tmo_guest} {b64}\n".encode())
        buf = b""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                fields = line.decode(errors="replace").split(" ")
                if len(fields) >= 2 and fields[1] == rid:
                    s.close()
                    return fields
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from the guest within {timeout} s")
            s.settimeout(left)
            chunk = s.recv(1 << 16)
            if not chunk:
                raise OSError("the agent connection closed")
            buf += chunk
    finally:
        lock.close()


def run_cmd(command, timeout):
    if not qemu_pid():
        die("the lab is not running (scripts/lab boot)", 3)
    # This checkout's build first: `rsskit` is the one just built.
    command = f"export PATH={shlex.quote(os.path.join(ROOT, 'target', 'debug'))}:$PATH\n{command}"
    f = agent_request("RUN", command, timeout + 15, tmo_guest=timeout)
    rc = int(f[2])
    out = base64.b64decode(f[3]) if len(f) > 3 else b""
    err = base64.b64decode(f[4]) if len(f) > 4 else b""
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


def boot_id(timeout):
    rc, out, _ = run_cmd("cat /proc/sys/kernel/random/boot_id", timeout)
    return out.strip() if rc == 0 else None


def cmd_reboot(args):
    """boot --system only: a clean `systemctl poweroff` of the guest (QEMU
    exits with it), then the same guest started again: a full shutdown and
    boot of the image. A warm `systemctl reboot` works too, but the kernel's
    second start under TCG took 60 s more than a cold one (160-200 s in all
    against ~80 s)."""
    if not system_mode():
        die("reboot: only a `boot --system` guest reboots (the busybox guest has no init to do it)", 2)
    before = boot_id(30)
    if not before:
        die("reboot: the guest does not answer")
    pid = qemu_pid()
    accel = open(state_path("accel")).read().strip()
    t0 = time.monotonic()
    # A transient timer outside the agent's unit: the answer gets out before
    # the agent is stopped.
    run_cmd("systemd-run --quiet --on-active=1 --timer-property=AccuracySec=100ms systemctl poweroff", 30)
    deadline = t0 + args.timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.5)
    if os.path.exists(f"/proc/{pid}"):
        log(f"the guest did not power off within {args.timeout} s; console tail:\n" + console_tail())
        return 3
    log(f"guest powered off cleanly in {time.monotonic() - t0:.0f} s")
    if not start(accel, max(30, int(deadline - time.monotonic()))):
        return 3
    now = boot_id(30)
    if not now or now == before:
        log(f"after the restart the guest reports boot id {now!r} (before: {before})")
        return 3
    log(f"guest rebooted in {time.monotonic() - t0:.0f} s")
    return 0


def cmd_run(args):
    command = args.cmd
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        die("run: no command (scripts/lab run -- CMD ...)", 2)
    text = command[0] if len(command) == 1 else shlex.join(command)
    rc, out, err = run_cmd(text, args.timeout)
    sys.stdout.write(out)
    sys.stderr.write(err)
    if rc == 124 or rc == 143:
        log(f"the command timed out in the guest after {args.timeout} s")
    return rc


# A netdevsim device in the 7.3 guest: one port with QUEUES combined
# channels (`ID PORTS QUEUES` into new_device), renamed NAME and up. Prints
# the name and the port's debugfs directory (ethtool/set_err, ring/...).
NSIM_NEW = r"""
bus=/sys/bus/netdevsim
[ -d $bus ] || { echo "netdevsim is not loaded (scripts/lab setup --kernel 7.3 builds it; boot --kernel 7.3 loads it)" >&2; exit 3; }
[ -e $bus/devices/netdevsim$ID ] && { echo "netdevsim$ID exists already (scripts/lab nsim --del $ID)" >&2; exit 2; }
echo "$ID 1 $QUEUES" > $bus/new_device || exit 1
n=
for i in $(seq 100); do
  n=$(ls $bus/devices/netdevsim$ID/net 2>/dev/null | head -n 1)
  [ -n "$n" ] && break
  sleep 0.1
done
[ -n "$n" ] || { echo "netdevsim$ID has no netdev after 10 s" >&2; exit 1; }
if [ "$n" != "$NAME" ]; then ip link set "$n" name "$NAME" || exit 1; fi
ip link set "$NAME" up || exit 1
echo "$NAME /sys/kernel/debug/netdevsim/netdevsim$ID/ports/0"
"""


def cmd_nsim(args):
    """netdevsim devices in the 7.3 guest: a new one, or --del ID."""
    if not qemu_pid():
        die("the lab is not running (scripts/lab boot --kernel 7.3)", 3)
    if booted_kernel() != "7.3":
        die("nsim: netdevsim is in the 7.3 lab only (scripts/lab boot --kernel 7.3)", 2)
    if args.delete is not None:
        text = (f"[ -e /sys/bus/netdevsim/devices/netdevsim{args.delete} ] || "
                f"{{ echo 'no netdevsim device {args.delete}' >&2; exit 2; }}\n"
                f"echo {args.delete} > /sys/bus/netdevsim/del_device")
    else:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,14}", args.name):
            die(f"nsim: {args.name!r} is not an interface name", 2)
        text = f"ID={args.id} QUEUES={args.queues} NAME={args.name}\n{NSIM_NEW}"
    rc, out, err = run_cmd(text, 60)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def cmd_shell(args):
    print("rsskit lab: commands run in the guest, chrooted into the host's root (read-only; /tmp is the guest's).")
    print("Each line is its own shell (cd does not carry over); Ctrl-D leaves. The guest keeps running: scripts/lab stop.")
    while True:
        try:
            line = input("lab# ")
        except EOFError:
            print()
            return 0
        if line.strip():
            rc, out, err = run_cmd(line, args.timeout)
            sys.stdout.write(out)
            sys.stderr.write(err)
            if rc:
                print(f"[exit {rc}]")


# ---------------------------------------------------------------- traffic


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src, dst, sport, dport, proto, payload=b"rsskit-lab", to_mac=GUEST_MAC):
    """An Ethernet frame to the guest's NIC TO_MAC with any tuple."""
    import ipaddress

    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    pnum = 6 if proto == "tcp" else 17
    if proto == "tcp":
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
    else:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    if s.version == 4:
        pseudo = s.packed + d.packed + struct.pack("!BBH", 0, pnum, len(l4))
    else:
        pseudo = s.packed + d.packed + struct.pack("!IxxxB", len(l4), pnum)
    c = csum(pseudo + l4)
    off = 16 if proto == "tcp" else 6
    l4 = l4[:off] + struct.pack("!H", c or 0xFFFF) + l4[off + 2:]
    if s.version == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, pnum, 0, s.packed, d.packed)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        etype = 0x0800
    else:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(l4), pnum, 64, s.packed, d.packed)
        etype = 0x86DD
    mac = bytes.fromhex(to_mac.replace(":", ""))
    return mac + bytes.fromhex(TAP_MAC.replace(":", "")) + struct.pack("!H", etype) + ip + l4


def parse_udp(fr):
    """(src, sport, dst, dport, payload) of a UDP frame, else None."""
    import ipaddress

    if len(fr) < 14:
        return None
    etype = struct.unpack("!H", fr[12:14])[0]
    if etype == 0x0800 and len(fr) >= 34 and fr[23] == 17:
        ihl = (fr[14] & 15) * 4
        src, dst, l4 = ipaddress.ip_address(fr[26:30]), ipaddress.ip_address(fr[30:34]), fr[14 + ihl:]
    elif etype == 0x86DD and len(fr) >= 62 and fr[20] == 17:
        src, dst, l4 = ipaddress.ip_address(fr[22:38]), ipaddress.ip_address(fr[38:54]), fr[54:]
    else:
        return None
    sport, dport, ulen = struct.unpack("!HHH", l4[:6])
    return str(src), sport, str(dst), dport, l4[8:ulen]


def tap_tx_dropped(tap="tap0"):
    """TAP's tx_dropped (frames toward the guest lost at the tap), read in the lab's namespace."""
    with open(f"/sys/class/net/{tap}/statistics/tx_dropped") as f:
        return int(f.read().strip())


def cmd_send(args):
    """Flows as JSON lines on stdin: {"src","dst","sport","dport","proto","count"[,"payload": hex]}.
    Written into tap0 from the lab's namespace. Prints {"sent": N}, then with
    --capture S every UDP datagram the guest sent back within S seconds."""
    if not args.in_netns:
        if not netns_exists():
            die("the lab is not running (scripts/lab boot)", 3)
        cmd = ["ip", "netns", "exec", NETNS, sys.executable, os.path.abspath(__file__), "send", "--in-netns",
               "--capture", str(args.capture), "--nic", args.nic]
        return subprocess.run(cmd).returncode
    flows = [json.loads(line) for line in sys.stdin if line.strip()]
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    # eth0 behind tap0, eth1 (7.3's igb) behind tap1.
    tap, to_mac = ("tap0", GUEST_MAC) if args.nic == "eth0" else ("tap1", GUEST_MAC1)
    sock.bind((tap, 0))
    dropped_before = tap_tx_dropped(tap)
    sent = 0
    for fl in flows:
        payload = bytes.fromhex(fl["payload"]) if "payload" in fl else b"rsskit-lab"
        fr = frame(fl["src"], fl["dst"], int(fl.get("sport", 0)), int(fl.get("dport", 0)), fl["proto"], payload,
                   to_mac)
        for _ in range(int(fl.get("count", 1))):
            sock.send(fr)
            sent += 1
            # Paced: QEMU reads the tap in TCG time; a burst would overflow
            # the tap's queue and lose frames.
            if sent % 32 == 0:
                time.sleep(0.002)
    # Frames the tap itself dropped never reached the guest's NIC (its
    # queue was full while QEMU, in TCG on a loaded host, did not read it):
    # said, so that a caller does not take them for the NIC's doing.
    print(json.dumps({"sent": sent, "tap_dropped": tap_tx_dropped(tap) - dropped_before}), flush=True)
    guest = bytes.fromhex(to_mac.replace(":", ""))
    end = time.monotonic() + args.capture
    while args.capture > 0 and time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            fr, addr = sock.recvfrom(65536)
        except socket.timeout:
            break
        if addr[2] == socket.PACKET_OUTGOING or fr[6:12] != guest:
            continue
        u = parse_udp(fr)
        if u:
            print(json.dumps({"src": u[0], "sport": u[1], "dst": u[2], "dport": u[3], "payload": u[4].hex()}))
    return 0


def main():
    ap = argparse.ArgumentParser(prog="scripts/lab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd_name", required=True)
    st = sub.add_parser("setup", help="install packages, fetch the kernel (and for 7.3 QEMU), build the initramfs")
    st.add_argument("--kernel", choices=KERNELS, default="6.1")
    st.add_argument("--refresh", action="store_true", help="7.3: look for newer packages than the cached ones")
    b = sub.add_parser("boot", help="start the guest (setup first)")
    b.add_argument("--kernel", choices=KERNELS, default="6.1",
                   help="6.1: Debian 12's kernel, eth1 e1000e; 7.3: trixie-backports', QEMU 10.0, eth1 igb")
    b.add_argument("--timeout", type=int, default=240, help="seconds to wait for the guest (TCG)")
    b.add_argument("--owner-pid", type=int, help="stop the lab when this process exits")
    b.add_argument("--max-seconds", type=int, default=3600, help="with --owner-pid: stop after this long at the latest")
    b.add_argument("--system", action="store_true",
                   help="boot the Debian image (target/lab/system, mmdebstrap) with systemd as init instead of busybox")
    b.add_argument("--rsskit", default=os.path.join(ROOT, "target", "debug", "rsskit"),
                   help="with --system: the rsskit binary installed as the image's /usr/bin/rsskit")
    rb = sub.add_parser("reboot", help="(boot --system) reboot the guest and wait for it")
    rb.add_argument("--timeout", type=int, default=300)
    r = sub.add_parser("run", help="run a shell command in the guest (chrooted into the host's root)")
    r.add_argument("--timeout", type=int, default=120)
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    s = sub.add_parser("shell", help="an interactive loop over `run`")
    s.add_argument("--timeout", type=int, default=120)
    se = sub.add_parser("send", help="write raw frames (JSON lines on stdin) into tap0")
    se.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    se.add_argument("--capture", type=float, default=0, help="then print the guest's UDP datagrams for S seconds")
    se.add_argument("--nic", choices=["eth0", "eth1"], default="eth0",
                    help="the guest NIC the frames go to (eth1: 7.3's igb, through tap1)")
    ns = sub.add_parser("nsim", help="(7.3) create a netdevsim device in the guest, or delete one")
    ns.add_argument("--id", type=int, default=1, help="netdevsim bus device id")
    ns.add_argument("--queues", type=int, default=4, help="combined channels (the device's maximum too)")
    ns.add_argument("--name", default="nsim0", help="the netdev's name in the guest")
    ns.add_argument("--del", dest="delete", type=int, metavar="ID", help="delete netdevsim device ID instead")
    sub.add_parser("stop", help="stop QEMU and delete the lab's namespace")
    sub.add_parser("status")
    args = ap.parse_args()
    if os.geteuid() != 0:
        die("the lab needs root (network namespace, tap devices)")
    os.makedirs(RUN, exist_ok=True)
    fn = {"setup": cmd_setup, "boot": cmd_boot, "run": cmd_run, "shell": cmd_shell, "send": cmd_send,
          "stop": cmd_stop, "status": cmd_status, "reboot": cmd_reboot, "nsim": cmd_nsim}[args.cmd_name]
    sys.exit(fn(args) or 0)


if __name__ == "__main__":
    main()
