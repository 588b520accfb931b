#!/usr/bin/env bash
# Debian packages the build and the tests need, installed when missing (as
# root): `ip` for namespaces and veths, nginx as the HTTP peer, clang and
# libbpf's headers to compile the eBPF programs in crates/rsskit-linux/bpf.
set -euo pipefail
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
# The QEMU lab (scripts/lab): the emulator, a static busybox for the guest's
# initramfs, cpio to pack it, ethtool and python3 (run in the guest from the
# host's root, and the lab's driver).
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
command -v python3 >/dev/null 2>&1 || need+=(python3)
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
