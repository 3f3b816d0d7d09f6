"""Where results go is checked before anything is measured: a bad path is a one-paragraph error at
once, never a traceback after the whole experiment."""

from __future__ import annotations

import pytest

from alloclab.cli.outputs import check_outputs
from alloclab.errors import AlloclabError

TOML = """\
[experiment]
name = "true"
variants = ["glibc"]

[[command]]
command = ["true"]
"""


def _target(tmp_path) -> list[str]:
    f = tmp_path / "true.toml"
    f.write_text(TOML)
    return [str(f)]


@pytest.mark.parametrize("command", [["compare", "-a", "glibc", "--runs", "1"], ["suite", "--workload", "threadcache"],
                                     ["run"]])
@pytest.mark.parametrize("option, fix", [(["--export-json", "/nonexistent/dir/x.json"], "mkdir -p /nonexistent/dir"),
                                         (["--report-file", "/nonexistent/r.html"], "mkdir -p /nonexistent"),
                                         (["--report-file", "{tmp}"], "is a directory, not a file"),
                                         (["--report-file", "{tmp}/r.docx"], "Cannot tell the report format")])
def test_a_bad_destination_stops_compare_suite_and_run_before_any_run(cli, tmp_path, command, option, fix):
    option = [o.replace("{tmp}", str(tmp_path)) for o in option]
    args = [*command, *option] + (_target(tmp_path) if command == ["run"] else []) + (
        ["--", "true"] if command[0] == "compare" else [])
    p = cli(*args)
    assert p.returncode == 2 and fix in p.stderr, p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert not cli.db.exists()   # nothing was measured, not even a record opened


def test_the_database_directory_is_checked_too(tmp_path):
    with pytest.raises(AlloclabError, match="the directory .*missing does not exist"):
        check_outputs(db=tmp_path / "missing" / "x.db")
    (tmp_path / "file").write_text("")
    with pytest.raises(AlloclabError, match="is not a directory"):
        check_outputs(export_json=tmp_path / "file" / "x.json")
    check_outputs(db=tmp_path / "x.db", report="md", report_file=tmp_path / "anything.out",
                  export_json=tmp_path / "x.json", output=None)


def test_a_read_only_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    import os
    if os.access(ro, os.W_OK):
        pytest.skip("running as root: every directory is writable")
    with pytest.raises(AlloclabError, match="not writable"):
        check_outputs(export_json=ro / "x.json")
