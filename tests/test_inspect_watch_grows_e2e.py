"""`alloclab inspect --watch` names the part that grew: two real programs that grow different parts
of glibc's heap while they are watched (tests/programs/growparts.c: the main heap's free top under
a raised trim threshold, or the live bytes), each sampled by the real CLI, which says on the terminal
and in the JSON which part grew from the first sample to the last, in bytes and as a share of the
anonymous RSS's growth, with a line a sample while it watches; and the page of `-f html -o FILE`,
self-contained, with the parts over time as a picture (its screenshot: test_inspect_watch_chromium.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from inspect_helpers import pause_argv

pytestmark = [pytest.mark.e2e]

MIB = 1 << 20
SAMPLES = 4


def watch(cli, build, mode: str, *extra: str):
    """The CLI's watch of growparts in MODE (4 samples, 0.5 s apart), the program let go on every path."""
    p = pause_argv([str(build("growparts")), mode])
    try:
        r = cli("inspect", str(p.pid), "--watch", "0.5", "--count", str(SAMPLES), *extra)
    finally:
        out, _, rc = p.go()
    assert rc == 0 and out.startswith(b"steps: "), (rc, out)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.mark.parametrize("mode, part, words", [("top", "free_top", "free at the top"), ("live", "live", "live")])
def test_the_part_that_grew_is_named_in_json_and_on_the_terminal(cli, build, mode, part, words):
    r = watch(cli, build, mode, "-f", "json")
    got = json.loads(r.stdout)
    (g,) = got["growth"]
    snaps = [i["snapshot"] for i in got["inspections"]]
    assert g["pid"] == snaps[0]["pid"] and g["samples"] == SAMPLES
    assert g["t_s"] == pytest.approx(snaps[-1]["t_s"] - snaps[0]["t_s"], abs=1e-3) and g["t_s"] >= 1.4
    assert g["grew"] == part and g["change"] >= 2 * MIB, g
    rows = {row["part"]: row for row in g["parts"]}
    assert rows[part]["change"] == g["change"] == rows[part]["last"] - rows[part]["first"]
    assert rows[part]["last"] == snaps[-1]["split"]["parts"][part]
    # The other part stayed: neither program grows both.
    other = "live" if part == "free_top" else "free_top"
    assert rows[other]["change"] < MIB, rows
    # Most of the anonymous RSS's growth, read from smaps apart from the walk (so not exactly all).
    assert g["anon_last"] - g["anon_first"] > 0 and 0.7 <= g["share"] <= 1.3, g
    if part == "free_top":   # and the rule for a top kept by a raised trim threshold fires on it
        assert "glibc-trim-raised" in {f["rule"] for f in got["inspections"][-1]["answer"]["fired"]}
    # On the terminal (stderr, the JSON being stdout): a line a sample, then what grew.
    lines = [ln for ln in r.stderr.splitlines() if re.match(r"\+\s*[\d.]+ s ", ln)]
    assert len(lines) == SAMPLES and all(f" {g['pid']} " in ln and "anon " in ln for ln in lines), r.stderr
    said = re.search(rf"Process {g['pid']} over [\d.]+ s \({SAMPLES} samples\): {words} grew most, "
                     rf"\+([\d.]+) MiB, (\d+)% of the anonymous RSS's growth", r.stderr)
    assert said, r.stderr
    assert float(said[1]) == pytest.approx(g["change"] / MIB, abs=0.06)
    assert int(said[2]) == round(g["share"] * 100)


def test_the_terminal_watch_shows_lines_then_the_answer_and_what_grew(cli, build):
    r = watch(cli, build, "live")
    out = r.stdout
    lines = [ln for ln in out.splitlines() if re.match(r"\+\s*[\d.]+ s ", ln)]
    assert len(lines) == SAMPLES, out
    # The full answer once, at the last sample, after the lines; then which part grew.
    assert out.count("where its ") == 1 and out.index(lines[-1]) < out.index("where its ")
    assert re.search(r"live grew most, \+[\d.]+ MiB", out) and "alloclab diff " in out, out
    exp = json.loads(cli("experiments", "--json").stdout)[-1]
    again = cli("report", str(exp["id"]))
    assert again.returncode == 0 and "live grew most" in again.stdout, again.stdout + again.stderr


def test_the_html_page_draws_the_parts_over_time_and_says_what_grew(cli, build, tmp_path):
    page = tmp_path / "watch.html"
    r = watch(cli, build, "top", "-f", "html", "-o", str(page))
    assert f"Inspection written to {page}" in r.stderr and "free at the top grew most" in r.stderr
    html = page.read_text()
    assert html.startswith("<!doctype html>") and html.count('<svg') == 1 and 'class="chart"' in html
    assert "free at the top grew most" in html and "glibc-trim-raised" in html
    # A row a sample in the table, and the picture's areas (matplotlib's paths) in the parts' colours.
    assert html.count("<tr>") == SAMPLES + 1
    assert "#e67e22" in html.lower()   # free at the top's colour (report/fingerprint_charts.py)
    # Self-contained: nothing to load from anywhere.
    assert "<script" not in html and "<link" not in html and not re.search(r'(src|href)="(?!#|data:)', html)
    # The stored watch gives the same page again.
    exp = json.loads(cli("experiments", "--json").stdout)[-1]
    again = tmp_path / "again.html"
    assert cli("report", str(exp["id"]), "-f", "html", "-o", str(again)).returncode == 0
    assert "free at the top grew most" in again.read_text() and again.read_text().count("<svg") == 1


def test_one_sample_has_nothing_to_compare(cli, build, tmp_path):
    page: Path = tmp_path / "one.html"
    p = pause_argv([str(build("growparts")), "live"])
    try:
        r = cli("inspect", str(p.pid), "-f", "json")
        h = cli("inspect", str(p.pid), "-f", "html", "-o", str(page))
    finally:
        p.go()
    assert r.returncode == 0 and json.loads(r.stdout)["growth"] == [], r.stdout + r.stderr
    assert h.returncode == 0 and "one sample, nothing to compare it with" in page.read_text(), h.stderr
