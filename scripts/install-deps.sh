#!/usr/bin/env bash
# Debian packages the build and the tests need, installed when missing (as
# root): `ip` for namespaces and veths, nginx as the HTTP peer, clang and
# libbpf's headers to compile the eBPF programs in crates/rsskit-linux/bpf;
# for the Debian package test (scripts/test-package.sh): lintian, mmdebstrap,
# pkg-config; python3-venv for the Kubernetes manifest validator (PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The package's own nginx service is not wanted: tests start their own.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop nginx >/dev/null 2>&1 || true; fi
    pkill -x nginx >/dev/null 2>&1 || true
  else
    echo "warning: missing ${need[*]} and not root: the build or tests that need them will fail" >&2
  fi
fi

# The Kubernetes schema validator for deploy/kubernetes (tests/package_deb.rs),
# pinned, in a venv under target/ (Debian's python refuses system-wide pip).
validator=target/tools/venv/bin/kubernetes-validate
if [ ! -x "$validator" ]; then
  echo "== installing kubernetes-validate (PyPI) into target/tools/venv"
  python3 -m venv target/tools/venv
  target/tools/venv/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi
