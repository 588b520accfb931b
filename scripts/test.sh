#!/usr/bin/env bash
# The whole rsskit test suite: installs what the tests need on a fresh
# Debian machine (when run as root), then runs every crate's tests.
#
# Tests that build network namespaces and veth pairs need root; they fail
# loudly (never pass silently) when run without it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: `ip` for namespaces and veths, nginx as the
# HTTP peer of the load tester.
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing: ${need[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The package's own nginx service is not wanted: tests start their own.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop nginx >/dev/null 2>&1 || true; fi
    pkill -x nginx >/dev/null 2>&1 || true
  else
    echo "warning: missing ${need[*]} and not root: the tests that need them will fail" >&2
  fi
fi

# Tests this machine cannot run are `#[ignore]`d with the reason (see
# build/host_probe.rs); list them at the end so a green run hides nothing.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace "$@" 2>&1 | tee "$log"
echo "== tests not run here (ignored, with the reason):"
grep -E '^test .* \.\.\. ignored' "$log" | sed 's/^test /  /' || echo "  none"
# One closing line over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
