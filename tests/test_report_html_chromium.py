"""The HTML report of a real experiment, opened in a real browser (headless Chromium, offline):
the charts and tables are in the rendered DOM, nothing points outside the file, nothing fails to
load, the screenshot shows the charts painted, and the recommendation starts on the first screen
of a 1280x800 window (of this page and of the stored demo suite's, seven workloads by seven variants)."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import installed_allocators, missing_prerequisite, require_allocator, run_cli
from test_golden_reports import FIXTURES, STORES

# Its tests share one rendered page: one worker runs them all (make test: --dist loadgroup).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("chromium")]
OPS = "ops=ops/s: (\\d+)"
WIDTH, HEIGHT = 1400, 3000


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    missing_prerequisite("Chromium is not installed (apt-get install -y chromium; `make setup-deb-test` does it)")


def run_chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120)


class Inventory(HTMLParser):
    """Counts what the rendered DOM holds and every reference that could load something."""

    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.classes: dict[str, int] = {}
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name == "class":
                for c in (value or "").split():
                    self.classes[f"{tag}.{c}"] = self.classes.get(f"{tag}.{c}", 0) + 1
            if name in ("src", "href", "xlink:href", "srcset", "poster", "data"):
                self.refs.append((tag, name, value or ""))


@pytest.fixture(scope="module")
def report(build, tmp_path_factory) -> Path:
    require_allocator("jemalloc")
    prog = build("churn")
    d = tmp_path_factory.mktemp("html")
    variants = ["glibc", "jemalloc"] + (["mimalloc"] if "mimalloc" in installed_allocators() else [])
    out = d / "report.html"
    p = run_cli(["compare", "--db", str(d / "h.db"), "--runs", "3", "--metric", OPS,
                 *[x for v in variants for x in ("-a", v)], "--report", "html", "--report-file", str(out),
                 "--", str(prog), "1500", "32"], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.fixture(scope="module")
def rendered(report, tmp_path_factory) -> dict:
    """One browser run: the DOM after rendering on stdout, the screenshot in a file."""
    d = tmp_path_factory.mktemp("chromium")
    shot = d / "report.png"
    p = run_chromium(d / "profile", "--dump-dom", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                     report.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    return {"dom": p.stdout, "log": p.stderr, "shot": shot}


def test_rendered_dom_has_charts_and_tables_and_loads_nothing(rendered):
    dom = Inventory()
    dom.feed(rendered["dom"])
    # The primary metric's chart, peak RSS, speed/memory, RSS over time.
    assert dom.classes.get("svg.chart", 0) >= 4, dom.classes
    assert dom.tags.get("path", 0) > 50 and dom.tags.get("text", 0) > 30  # drawn, with labels as text
    assert dom.classes.get("table.results") == 1 and dom.classes.get("table.meta") == 1
    assert dom.classes.get("section.rec") == 1 and dom.classes.get("section.banner", 0) >= 1
    # Self-contained: no script, stylesheet or image from anywhere; links are anchors or data: URIs.
    assert "script" not in dom.tags and "link" not in dom.tags and "iframe" not in dom.tags
    assert all(v.startswith(("#", "data:")) for _, _, v in dom.refs), dom.refs
    assert "Failed to load resource" not in rendered["log"] and "net::ERR_" not in rendered["log"]


def test_screenshot_shows_the_report_painted(rendered):
    from PIL import Image

    img = Image.open(rendered["shot"]).convert("RGB")
    assert img.size == (WIDTH, HEIGHT)
    colours = img.getcolors(maxcolors=WIDTH * HEIGHT)
    assert len(colours) > 200  # text, tables and charts, not a blank or error page
    counts = {rgb: n for n, rgb in colours}
    # The verified banner's green and the first variant's chart blue are painted.
    assert counts.get((0xda, 0xfb, 0xe1), 0) > 1000
    blue = sum(n for rgb, n in counts.items() if abs(rgb[0] - 0x4c) < 24 and abs(rgb[1] - 0x72) < 24
               and abs(rgb[2] - 0xb0) < 24)
    assert blue > 200


def test_the_page_opens_with_the_picture(rendered):
    # Before the first table, after the banners: the verdict map, drawn as a chart with a cell per
    # workload and variant, and painted inside the first screen (the top 900 pixels).
    dom = rendered["dom"]
    assert 0 < dom.index('id="picture"') < dom.index('class="results"'), "the picture does not come first"
    section = dom[dom.index('id="picture"'):dom.index("</section>", dom.index('id="picture"'))]
    assert "<svg" in section and "<image" in section   # the cells, an image inside the chart
    from PIL import Image

    # Cells are filled with a verdict's colour (an undecided one with a flat grey); the text and
    # banners above them are dark or pale.
    top = Image.open(rendered["shot"]).convert("RGB").crop((0, 0, WIDTH, 900))
    strong = sum(n for n, rgb in top.getcolors(maxcolors=WIDTH * 900)
                 if max(rgb) - min(rgb) > 60 or rgb == (191, 191, 191))
    assert strong > 5000, f"the first screen shows no verdict cells ({strong} coloured pixels)"


VIEWPORT = (1280, 800)
# The report has no script of its own (above): a copy of it gets this one, which writes where each
# section's top lies, once laid out in the window, into the DOM that --dump-dom prints.
PROBE = ('<script>for (const id of ["picture", "recommendation"]) { const e = document.getElementById(id); '
         'if (e) document.body.setAttribute("data-top-" + id, String(e.getBoundingClientRect().top)); }</script>')


def tops(page: Path, profile: Path) -> dict[str, float]:
    """The sections' tops, in CSS pixels from the top of a VIEWPORT window scrolled to the start."""
    text = page.read_text()
    assert text.count("</body>") == 1
    probe = page.with_name(page.stem + "-probe.html")
    probe.write_text(text.replace("</body>", PROBE + "</body>"))
    p = run_chromium(profile, "--dump-dom", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", probe.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    found = {m[1]: float(m[2]) for m in re.finditer(r'data-top-(\w+)="(-?[\d.]+)"', p.stdout)}
    assert "recommendation" in found, "the probe wrote nothing: " + p.stdout[:500]
    return found


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("demo-html")
    shutil.copyfile(FIXTURES / STORES["demo"], d / "demo.db")
    p = run_cli(["report", "--db", str(d / "demo.db"), "-f", "html", "-o", str(d / "demo.html")], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    return d / "demo.html"


@pytest.mark.parametrize("which", ["this run", "the stored demo"])
def test_the_recommendation_starts_on_the_first_screen(which, report, demo_page, tmp_path):
    at = tops(report if which == "this run" else demo_page, tmp_path / "profile")
    assert 0 < at["recommendation"] < VIEWPORT[1], at
    if "picture" in at:   # right under it
        assert at["picture"] < at["recommendation"], at
