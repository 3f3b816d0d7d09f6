"""scripts/setup-deb, the set-up step of `make setup` and `make test`, against stand-ins for dpkg-query,
apt-get, apt-cache and id on PATH: nothing to do when everything is installed, the exact line when
not root, one apt-get for all, and a failed install that stops and names what failed (and the
system, where it is not Debian 12, whose package names the Makefile uses)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "scripts" / "setup-deb"

# Each stand-in logs its arguments; the packages are described by INSTALLED (dpkg knows them),
# AVAILABLE (the package sources have them) and BROKEN (available, but their dependencies cannot
# be met): space-separated lists in the environment.
STUBS = {
    "id": 'echo "$FAKE_UID"\n',
    "dpkg-query": """\
pkg=${@: -1}
for p in $INSTALLED; do [ "$p" = "$pkg" ] && { printf 'install ok installed'; exit 0; }; done
echo "dpkg-query: no packages found matching $pkg" >&2; exit 1
""",
    "apt-cache": """\
echo "apt-cache $*" >> "$CALLS"
pkg=${@: -1}
for p in $AVAILABLE $BROKEN; do
  [ "$p" = "$pkg" ] && { printf '%s:\\n  Installed: (none)\\n  Candidate: 1.0-1\\n' "$pkg"; exit 0; }
done
exit 0
""",
    "apt-get": """\
echo "apt-get $*" >> "$CALLS"
has() { local x=$1; shift; for p in "$@"; do [ "$p" = "$x" ] && return 0; done; return 1; }
args=(); simulate=0; sub=""
while [ $# -gt 0 ]; do
  case $1 in
    -o) shift 2; continue ;;
    -s) simulate=1 ;;
    -*) ;;
    update|install) [ -z "$sub" ] && sub=$1 || args+=("$1") ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ "$sub" = update ] && exit "${UPDATE_RC:-0}"
rc=0
for pkg in "${args[@]}"; do
  if has "$pkg" $BROKEN; then
    echo "E: Unable to correct problems, you have held broken packages." >&2; rc=100
  elif ! has "$pkg" $AVAILABLE; then
    echo "E: Unable to locate package $pkg" >&2; rc=100
  fi
done
[ $rc -ne 0 ] && exit $rc
[ $simulate -eq 1 ] || echo "$*" >> "$INSTALLS"
exit 0
""",
}

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
UBUNTU = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'


@pytest.fixture
def setup_deb(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    calls, installs = tmp_path / "calls", tmp_path / "installs"

    def _run(*packages: str, installed="", available="", broken="", root=True, os_release=DEBIAN_12):
        release = tmp_path / "os-release"
        release.write_text(os_release)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_UID": "0" if root else "1000",
               "INSTALLED": installed, "AVAILABLE": available, "BROKEN": broken, "CALLS": str(calls),
               "INSTALLS": str(installs), "ALLOCLAB_OS_RELEASE": str(release), "TMPDIR": str(tmp_path)}
        p = subprocess.run([str(SCRIPT), *packages], capture_output=True, text=True, env=env, timeout=60)
        p.calls = calls.read_text().splitlines() if calls.exists() else []
        p.installs = installs.read_text().splitlines() if installs.exists() else []
        return p
    return _run


def test_nothing_to_do_when_everything_is_installed(setup_deb):
    p = setup_deb("gcc", "linux-perf", installed="gcc linux-perf", os_release=UBUNTU)
    assert (p.returncode, p.stdout, p.stderr, p.calls) == (0, "", "", [])


def test_not_root_prints_the_exact_line_for_what_is_missing(setup_deb):
    p = setup_deb("gcc", "heaptrack", "fio", installed="gcc", available="heaptrack fio", root=False)
    assert p.returncode == 0 and p.calls == [], p
    assert "  apt-get install -y --no-install-recommends heaptrack fio\n" in p.stdout
    assert "warning" not in p.stderr


def test_one_install_for_everything_missing(setup_deb):
    p = setup_deb("gcc", "heaptrack", "fio", installed="gcc", available="heaptrack fio")
    assert p.returncode == 0, p.stderr
    assert [c for c in p.calls if c.startswith("apt-get")] == [
        "apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends heaptrack fio"]
    assert p.installs and p.stderr == ""


def test_a_package_the_sources_lack_stops_the_set_up_and_is_named(setup_deb):
    p = setup_deb("gcc", "heaptrack", "nosuchpkg", available="gcc heaptrack")
    assert p.returncode == 1 and not p.installs, p
    # Refreshed the package lists once and tried again before giving up.
    assert [c.split()[3] for c in p.calls if c.startswith("apt-get")] == ["install", "update", "install"]
    assert "E: Unable to locate package nosuchpkg" in p.stderr          # apt's own error
    assert "not available from this system's package sources: nosuchpkg\n" in p.stderr
    assert "apt-get install -y --no-install-recommends gcc heaptrack nosuchpkg" in p.stderr
    assert "warning" not in p.stderr                                   # Debian 12: nothing to warn of


def test_a_package_that_cannot_be_installed_is_found_one_by_one(setup_deb):
    p = setup_deb("gcc", "chromium", "fio", available="gcc fio", broken="chromium")
    assert p.returncode == 1 and not p.installs, p
    assert "held broken packages" in p.stderr
    assert "cannot be installed here: chromium (`apt-get install -s chromium` says why)" in p.stderr
    assert "apt-get -o DPkg::Lock::Timeout=600 install -s -qq --no-install-recommends fio" in p.calls


def test_elsewhere_than_debian_12_it_says_so_and_names_the_package(setup_deb):
    # Ubuntu has no linux-perf (its perf is in linux-tools-*).
    p = setup_deb("gcc", "linux-perf", available="gcc", os_release=UBUNTU)
    assert p.returncode == 1, p
    assert "not available from this system's package sources: linux-perf" in p.stderr
    assert ("this is Ubuntu 24.04.1 LTS, not Debian 12: alloclab supports Debian 12, and the package "
            "names it installs are Debian 12's (linux-perf may be named otherwise here, or not packaged)") in p.stderr


def test_elsewhere_than_debian_12_the_warning_comes_first_when_not_root_either(setup_deb):
    p = setup_deb("linux-perf", os_release=UBUNTU, root=False)
    assert p.returncode == 0 and "this is Ubuntu 24.04.1 LTS, not Debian 12" in p.stderr
    assert "apt-get install -y --no-install-recommends linux-perf" in p.stdout


def makefile_packages(variable: str) -> list[str]:
    """A package list of the Makefile, as make expands it."""
    p = subprocess.run(["make", "-s", "--no-print-directory", "--eval", f"print-it: ; @echo $({variable})", "print-it"],
                       cwd=SCRIPT.parent.parent, capture_output=True, text=True, timeout=60, check=True)
    return p.stdout.split()


def test_make_test_installs_heaptrack():
    # test_fingerprint_e2e checks the fingerprint's counts against heaptrack's.
    assert "heaptrack" in makefile_packages("DEB_TEST_PACKAGES")


def test_make_test_installs_what_inspects_tests_need():
    # test_inspect_oracle_e2e and test_inspect_layout read glibc's debug symbols; test_inspect_refusals_e2e
    # builds a musl program.
    assert {"libc6-dbg", "musl-tools"} <= set(makefile_packages("DEB_TEST_PACKAGES"))
