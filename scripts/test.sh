#!/usr/bin/env bash
# The whole rsskit test suite: installs what the tests need on a fresh
# Debian machine (when run as root), then runs every crate's tests.
#
# Tests that build network namespaces and veth pairs need root; they fail
# loudly (never pass silently) when run without it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

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
