#!/usr/bin/env bash
# Checks the .debs scripts/package makes (rsskit, rsskit-dev) as an operator
# and a C developer would meet them, the install in a clean Debian root
# (never on this machine):
#   lintian: no errors (the warnings kept are listed in docs/PACKAGING.md);
#   /usr/bin/rsskit has no debug info or symbol table; /etc/rsskit/README is
#   a conffile;
#   a minbase bookworm root (mmdebstrap, with man-db and bash-completion;
#   cached as target/pkgtest/bookworm-minbase.tar, so reruns are fast);
#   the C example compiles and links against rsskit-dev's library, header and
#   pkg-config file (extracted here: the minbase root has no compiler, and
#   rsskit-dev depends on libc6-dev, which minbase lacks);
#   dpkg -i; rsskit --version; man rsskit-plan; bash completion of `rsskit pl`;
#   dpkg --purge leaves the root's file list as it was before the install.
# Needs root (chroot) and the Debian tools scripts/install-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
deb="target/debian/rsskit_${version}_amd64.deb"
dev_deb="target/debian/rsskit-dev_${version}_amd64.deb"
for f in "$deb" "$dev_deb"; do
  [ -f "$f" ] || { echo "test-package: $f missing: run scripts/package first" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (chroot into a scratch Debian root)" >&2; exit 1; }
for tool in lintian mmdebstrap dpkg-deb pkg-config cc readelf; do
  command -v "$tool" >/dev/null || { echo "test-package: $tool missing: run scripts/install-deps.sh" >&2; exit 1; }
done
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }

echo "== lintian $deb $dev_deb"
# --fail-on error: warnings are printed (and justified in docs/PACKAGING.md),
# errors fail. Run as root, lintian refuses without --allow-root.
lintian --allow-root --fail-on error "$deb" "$dev_deb" || fail "lintian reports errors"

echo "== package contents"
contents=$(dpkg-deb --contents "$deb" | awk '{print $6}')
for path in ./usr/bin/rsskit ./usr/share/man/man8/rsskit.8.gz ./usr/share/man/man8/rsskit-plan.8.gz \
  ./usr/share/bash-completion/completions/rsskit ./usr/share/zsh/vendor-completions/_rsskit \
  ./usr/share/fish/vendor_completions.d/rsskit.fish ./etc/rsskit/README ./usr/share/doc/rsskit/copyright \
  ./usr/share/doc/rsskit/changelog.gz; do
  grep -qx "$path" <<<"$contents" || fail "$path not in $deb"
done
dev_contents=$(dpkg-deb --contents "$dev_deb" | awk '{print $6}')
for path in ./usr/lib/x86_64-linux-gnu/librsskit_capi.a ./usr/include/rsskit.h \
  ./usr/lib/x86_64-linux-gnu/pkgconfig/rsskit.pc ./usr/share/doc/rsskit-dev/copyright; do
  grep -qx "$path" <<<"$dev_contents" || fail "$path not in $dev_deb"
done
# One man page per committed page: none dropped by the asset glob.
pages=$(grep -c '^./usr/share/man/man8/rsskit.*\.8\.gz$' <<<"$contents")
committed=$(find docs/man -name '*.8' | wc -l)
[ "$pages" = "$committed" ] || fail "$pages man pages packaged, $committed in docs/man"

work=$(mktemp -d /tmp/rsskit-pkgtest.XXXXXX)
root="$work/root"
trap 'rm -rf --one-file-system "$work"' EXIT

echo "== /usr/bin/rsskit stripped, /etc/rsskit/README a conffile"
dpkg-deb -x "$deb" "$work/main"
sections=$(readelf -S --wide "$work/main/usr/bin/rsskit")
if grep -q -E '\.debug_info|\.symtab' <<<"$sections"; then fail "/usr/bin/rsskit has debug info or a symbol table"; fi
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/rsskit/README ||
  fail "/etc/rsskit/README is not a conffile"

echo "== the C example against rsskit-dev (pkg-config --static)"
dpkg-deb -x "$dev_deb" "$work/deb"
pc_dir="$work/deb/usr/lib/x86_64-linux-gnu/pkgconfig"
# The .pc's prefix (/usr) pointed at the extracted tree.
flags=$(pkg-config --with-path="$pc_dir" --define-variable=prefix="$work/deb/usr" --static --cflags --libs rsskit) ||
  fail "pkg-config rsskit failed"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Werror -o "$work/udp_echo" crates/rsskit-capi/examples/udp_echo.c $flags ||
  fail "the C example does not build against the package (flags: $flags)"
rc=0; "$work/udp_echo" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "the packaged C example's usage exit is not 2"

tarball=target/pkgtest/bookworm-minbase.tar
if [ ! -f "$tarball" ]; then
  echo "== mmdebstrap --variant=minbase bookworm (cached as $tarball)"
  mkdir -p target/pkgtest
  timeout 900 mmdebstrap --quiet --format=tar --variant=minbase --include=man-db,bash-completion \
    bookworm "$tarball.part"
  mv "$tarball.part" "$tarball"
fi
mkdir "$root"
tar -C "$root" -xf "$tarball"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

# Every path in the root (dpkg's own bookkeeping excepted: its status
# backups and log change with any install), to compare after the purge.
list_root() {
  (cd "$root" && find . -xdev -path ./proc -prune -o -print) |
    grep -v -E '^\./var/lib/dpkg/(status|available|diversions|statoverride)(-old)?$|^\./var/log/' | sort
}
# man-db's cache is man-db's, not the package's: let mandb create it (its
# CACHEDIR.TAGs) before the first listing, and view the page below at a width
# other than 80, at which man-db saves no formatted copy (/var/cache/man/cat8;
# its daily cron job expires those).
in_root mandb --quiet
list_root >"$work/before"

cp "$deb" "$root/tmp/rsskit.deb"
echo "== dpkg -i"
in_root dpkg -i /tmp/rsskit.deb >/dev/null || fail "dpkg -i failed in a clean bookworm root"
rm "$root/tmp/rsskit.deb"

echo "== rsskit --version"
got=$(in_root rsskit --version) || fail "rsskit --version failed"
[ "$got" = "rsskit $version" ] || fail "rsskit --version printed '$got', want 'rsskit $version'"
echo "   $got"

echo "== man rsskit-plan"
page=$(in_root env MANPAGER=cat MANWIDTH=100 man rsskit-plan 2>&1) || fail "man rsskit-plan: $page"
grep -q 'rsskit-plan - Tuning plan per device' <<<"$page" || fail "man rsskit-plan has no NAME line: $page"
grep -q -- '--iface' <<<"$page" || fail "man rsskit-plan lists no --iface"
echo "   $(grep -m1 'rsskit-plan - ' <<<"$page" | sed 's/^ *//')"

echo "== bash completion of 'rsskit pl<TAB>' and 'rsskit completions <TAB>'"
# bash-completion loads /usr/share/bash-completion/completions/rsskit on
# first use; then the completion function is called as bash would on TAB.
complete_words() {
  in_root bash -c '
    source /usr/share/bash-completion/bash_completion
    _completion_loader rsskit
    spec=$(complete -p rsskit) || exit 3
    func=$(sed -n "s/.*-F \([^ ]*\) .*/\1/p" <<<"$spec")
    COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    "$func" rsskit "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}"' bash "$@"
}
got=$(complete_words rsskit pl | tr '\n' ' ') || fail "bash completion failed"
[ "$got" = "plan " ] || fail "rsskit pl<TAB> completed to '$got', want 'plan'"
echo "   rsskit pl<TAB> -> $got"
got=$(complete_words rsskit completions '' | sort | tr '\n' ' ')
grep -qw bash <<<"$got" && grep -qw zsh <<<"$got" && grep -qw fish <<<"$got" ||
  fail "rsskit completions <TAB> offered '$got'"

echo "== dpkg --purge"
in_root dpkg --purge rsskit >/dev/null || fail "dpkg --purge failed"
list_root >"$work/after"
if ! diff -u "$work/before" "$work/after"; then
  fail "the root's file list differs after purge (above: - gone, + left behind)"
fi
echo "   nothing left behind ($(wc -l <"$work/before") paths compared)"
echo "test-package: ok"
