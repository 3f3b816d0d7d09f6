"""The page of a watch (`alloclab inspect --watch S --count N -f html -o FILE PID`), opened in a real
browser (headless Chromium, offline, as tests/test_report_html_chromium.py drives it): the picture
is in the rendered DOM, nothing points outside the file, nothing fails to load, and the screenshot
shows the picture painted, the part that grew in its colour."""

from __future__ import annotations

import pytest

from conftest import run_cli
from inspect_helpers import pause_argv
from test_report_html_chromium import Inventory, run_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("chromium")]
WIDTH, HEIGHT = 1400, 1400
FREE_TOP = (0xe6, 0x7e, 0x22)    # free at the top's colour (report/fingerprint_charts.py's PART_COLOURS)


@pytest.fixture(scope="module")
def rendered(build, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("watch")
    page = d / "watch.html"
    p = pause_argv([str(build("growparts")), "top"])
    try:
        r = run_cli(["inspect", str(p.pid), "--watch", "0.5", "--count", "4", "-f", "html", "-o", str(page),
                     "--db", str(d / "w.db")], timeout=240)
    finally:
        out, _, rc = p.go()
    assert rc == 0, out
    assert r.returncode == 0, r.stdout + r.stderr
    shot = d / "watch.png"
    c = run_chromium(d / "profile", "--dump-dom", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                     page.as_uri())
    assert c.returncode == 0, c.stderr[-2000:]
    return {"dom": c.stdout, "log": c.stderr, "shot": shot}


def test_rendered_dom_has_the_picture_and_loads_nothing(rendered):
    dom = Inventory()
    dom.feed(rendered["dom"])
    assert dom.classes.get("svg.chart") == 1 and dom.classes.get("table.samples") == 1, dom.classes
    assert dom.tags.get("path", 0) > 10 and dom.tags.get("text", 0) > 10   # areas, lines, labels as text
    assert dom.classes.get("p.grew") == 1 and "free at the top grew most" in rendered["dom"]
    assert "script" not in dom.tags and "link" not in dom.tags and "iframe" not in dom.tags
    assert all(v.startswith(("#", "data:")) for _, _, v in dom.refs), dom.refs
    assert "Failed to load resource" not in rendered["log"] and "net::ERR_" not in rendered["log"]


def test_screenshot_shows_the_picture_painted(rendered):
    from PIL import Image

    img = Image.open(rendered["shot"]).convert("RGB")
    assert img.size == (WIDTH, HEIGHT)
    colours = img.getcolors(maxcolors=WIDTH * HEIGHT)
    assert len(colours) > 100    # text, table and picture, not a blank or error page
    counts = {rgb: n for n, rgb in colours}
    white = counts.get((255, 255, 255), 0)
    assert white < 0.9 * WIDTH * HEIGHT, f"{white} of {WIDTH * HEIGHT} pixels white"
    # The free top's area, the part that grew, fills much of the chart (antialiased edges aside),
    # and it is painted within the first screen, under the sentence that names it.
    orange = [(n, rgb) for n, rgb in colours if all(abs(a - b) < 20 for a, b in zip(rgb, FREE_TOP))]
    assert sum(n for n, _ in orange) > 50_000, sorted(orange, reverse=True)[:5]
    top = img.crop((0, 0, WIDTH, 700)).getcolors(maxcolors=WIDTH * 700)
    assert sum(n for n, rgb in top if all(abs(a - b) < 20 for a, b in zip(rgb, FREE_TOP))) > 30_000
