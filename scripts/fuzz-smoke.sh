#!/usr/bin/env bash
# Builds the cargo-fuzz targets (fuzz/) and runs each briefly. Used by CI;
# exits non-zero on a build failure or a crash.
#
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20)
#
# Targets: parse (wire parser + hash), reassemble, rules (firewall rule
# parser), http (request head, path normalisation against a root), pcap
# (pcap/pcapng reader), netparse (CPU lists, CIDRs, port ranges), savefile
# (`apply --restore`'s save-file reader), plan (`apply`'s plan reader),
# nicrule (a NIC flow rule as the driver answers it), netdev_nl (the
# kernel's netdev generic netlink replies), ethtool_nl (the ethtool
# family's replies: RSS, channels, rings, coalescing). CI
# runs `scripts/fuzz-smoke.sh 10`: 10 x 10 s of fuzzing, the stage under ~3
# minutes with the build.
#
# Preferred: nightly + cargo-fuzz (coverage-guided, AddressSanitizer).
# Fallback when nightly or cargo-fuzz cannot be had: the same targets built
# on stable as plain libFuzzer binaries (no sanitizer, no coverage feedback:
# random mutation only) and run for a fixed number of inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
targets=(parse reassemble rules http pcap netparse savefile plan nicrule netdev_nl ethtool_nl)

have_nightly() { rustup toolchain list 2>/dev/null | grep -q '^nightly'; }

if ! have_nightly; then
  echo "== fuzz: installing nightly (minimal profile)"
  # Bounded: where the toolchain server is out of reach, fall back below.
  timeout 300 rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || true
fi
if have_nightly && ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== fuzz: installing cargo-fuzz"
  timeout 900 cargo install --locked cargo-fuzz >/dev/null 2>&1 || timeout 900 cargo install cargo-fuzz >/dev/null 2>&1 || true
fi

if have_nightly && command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== fuzz: cargo +nightly fuzz (ASan, coverage-guided), ${secs}s per target"
  (cd fuzz && cargo +nightly fuzz build -O)
  for t in "${targets[@]}"; do
    echo "-- fuzz target $t"
    mkdir -p "fuzz/corpus/$t"
    # Corpus: fuzz/corpus/T (kept between runs, not committed) and the
    # committed seeds in fuzz/seeds/T, if any.
    seeds=(); [ -d "fuzz/seeds/$t" ] && seeds=("seeds/$t")
    (cd fuzz && cargo +nightly fuzz run -O "$t" "corpus/$t" "${seeds[@]}" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3)
    # `set -o pipefail` makes a crash (non-zero from cargo fuzz) fail here.
  done
else
  echo "== fuzz: nightly/cargo-fuzz unavailable; stable plain libFuzzer binaries (no ASan)"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-fuzz/target}"
  cargo build --release --manifest-path fuzz/Cargo.toml
  for t in "${targets[@]}"; do
    echo "-- fuzz target $t"
    mkdir -p "fuzz/corpus/$t"
    seeds=(); [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    "$CARGO_TARGET_DIR/release/$t" -max_total_time="$secs" -runs=5000000 -rss_limit_mb=2048 "fuzz/corpus/$t" "${seeds[@]}" 2>&1 | tail -n 2
  done
fi
echo "== fuzz: all targets ran without a crash"
