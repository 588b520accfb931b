#!/usr/bin/env bash
# Debian packages the build and the tests need, installed when missing (as
# root): `ip` for namespaces and veths, nginx as the HTTP peer and wrk as
# its load, clang and libbpf's headers to compile the eBPF programs in
# crates/rsskit-linux/bpf;
# for the Debian package test (scripts/test-package.sh): lintian, mmdebstrap,
# pkg-config; python3-venv for the Kubernetes manifest validator (PyPI).
#
# Installing nginx must not start the package's service (tests start their
# own nginx, and port 80 may be someone else's): while apt-get runs, a
# policy-rc.d answering 101 ("action forbidden", honoured by invoke-rc.d and
# deb-systemd-invoke) keeps every installed service from starting. Nothing
# is killed by name: a nginx the user runs is left alone.
# RSSKIT_POLICY_RC_D overrides the policy file's path (for the test of this
# script, crates/rsskit/tests/install_deps.rs).
set -euo pipefail
# The repository root, without dirname (the test of this script runs it with a PATH of stubs only).
here=${BASH_SOURCE[0]}
[[ $here == */* ]] || here=./$here
cd "${here%/*}/.."
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
# wrk: the HTTP load of bench/scale, whose short mode is a test (tests/bench_scale.rs).
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
# systemd-analyze verifies rsskit's units (deploy/systemd); nothing is started.
[ -x /usr/bin/systemd-analyze ] || need+=(systemd)
# The QEMU lab (scripts/lab): the emulator, a static busybox for the guest's
# initramfs, cpio to pack it, ethtool and python3 (run in the guest from the
# host's root, and the lab's driver).
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
# mmdebstrap: the package test's clean root, the lab's systemd guest
# (scripts/lab boot --system: a Debian image under target/lab/system), and
# the trixie root that builds netdevsim for the 7.3 lab (scripts/lab setup
# --kernel 7.3).
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing: ${need[*]}"
    policy="${RSSKIT_POLICY_RC_D:-/usr/sbin/policy-rc.d}"
    # An existing policy (containers often have one) is the admin's: kept
    # as it is, and never removed.
    own_policy=
    if [ ! -e "$policy" ] && [ ! -L "$policy" ]; then
      printf '#!/bin/sh\n# rsskit install-deps.sh: no service starts during its apt-get install\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      own_policy=1
      trap 'rm -f -- "$policy"' EXIT
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # Under an admin's policy that lets services start, the nginx package
    # (not installed before this run) may have started its unit: stop that
    # unit only. A nginx not started by systemd is not in it.
    if [ -z "$own_policy" ] && [[ " ${need[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1; then
      systemctl stop nginx.service >/dev/null 2>&1 || true
    fi
  else
    echo "warning: missing ${need[*]} and not root: the build or tests that need them will fail" >&2
  fi
fi

# promtool and prometheus for the agent's metrics tests: extracted from
# Debian's prometheus package into /opt/rsskit-deps/prometheus, not
# installed (installing it would enable and start a prometheus service).
prom=/opt/rsskit-deps/prometheus
if [ ! -x "$prom/usr/bin/promtool" ] || [ ! -x "$prom/usr/bin/prometheus" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    echo "== extracting Debian's prometheus package to $prom"
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download -qq prometheus >/dev/null; })
    mkdir -p "$prom"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$prom"
    rm -rf "$tmp"
  else
    echo "warning: $prom missing (not root, or no apt-get or dpkg-deb): the agent metrics tests will fail" >&2
  fi
fi

# The Kubernetes schema validator for deploy/kubernetes (tests/package_deb.rs),
# pinned, in a venv under target/ (Debian's python refuses system-wide pip).
# A venv holds absolute paths (its scripts' #! line names the venv's python,
# which links to the python it was made with): after the checkout moves, or
# that python goes, the validator is still executable but no longer runs.
# So it is run, and the venv made again (removed first) unless it answers
# with the pinned version (which also follows a change of the pin).
validator_version=1.37.0
venv=target/tools/venv
validator=$venv/bin/kubernetes-validate
if [ "$("$validator" --version 2>/dev/null)" = "$validator_version" ]; then
  :
elif ! command -v python3 >/dev/null 2>&1; then
  echo "warning: no python3: the Kubernetes manifest test will fail" >&2
else
  if [ -e "$venv" ] || [ -L "$venv" ]; then
    echo "== $venv does not run kubernetes-validate $validator_version (checkout moved, or its python changed): making it again"
    rm -rf -- "$venv"
  fi
  echo "== installing kubernetes-validate (PyPI) into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$validator_version"
fi
