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
# --no-fail-fast: every test binary runs even after one fails (cargo stops
# at the first failing binary otherwise, and the binaries after it would
# go untested and unlisted). Cargo's status is kept (pipefail: the
# pipeline's status is cargo's unless tee fails) and is the script's own,
# once the summary below is printed.
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
echo "== tests not run here (ignored, with the reason):"
grep -E '^test .* \.\.\. ignored' "$log" | sed 's/^test /  /' || echo "  none"
# One closing line over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
# Every failing test together (the run above is long, its failures far
# apart), with the binary it is in: its `test NAME ... FAILED` line, or its
# name in a `failures:` list (a test that prints without capture can split
# the `test` line). Cargo's own errors (a build error, a binary that died
# without libtest's summary) fail the run with no test named: said too.
if [ "$status" -ne 0 ]; then
  echo "== failed (cargo test exited with $status):"
  awk '/^ *(Running|Doc-tests) / { bin = $0; sub(/^ *(Running )?/, "", bin); next }
       /^test .* \.\.\. FAILED$/ { n = $0; sub(/^test /, "", n); sub(/ \.\.\. FAILED$/, "", n); add(n); next }
       /^failures:$/ { st = 1; next }
       st == 1 && /^$/ { next }
       st >= 1 && /^    [^ ]/ { st = 2; n = $0; sub(/^    /, "", n); add(n); next }
       { st = 0 }
       function add(n) { k = bin SUBSEP n; if (!(k in seen)) { seen[k] = 1; printf "  %s   [%s]\n", n, bin; any = 1 } }
       END { if (!any) print "  no test by name: see cargo'"'"'s errors" }' "$log"
  awk '/^error/ { e = 1; print "  " $0; next } e && /^    `/ { print "  " $0; next } { e = 0 }' "$log"
  exit "$status"
fi
