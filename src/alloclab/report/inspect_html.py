"""A watch of running processes (`alloclab inspect --watch S --count N -f html -o FILE`) as one
self-contained HTML page, like the experiments' report (report/html.py): per process, which part
grew from the first sample to the last, the parts over time as a picture (report/inspect_charts.py),
a row per sample, and the answer at the last sample. No script, no stylesheet or image from
elsewhere. Renders the Inspection records and their growth (store/inspect_model.py); computes nothing."""

from __future__ import annotations

from datetime import datetime, timezone

import jinja2

from alloclab import __version__
from alloclab.report.fingerprint import PART_WORDS, _size
from alloclab.report.inspect import _environment, _how, changes_line, growth_line
from alloclab.store.fingerprint_model import PARTS
from alloclab.store.inspect_model import Inspection, growth

_env = jinja2.Environment(loader=jinja2.PackageLoader("alloclab.report", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"]),
                          trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def _row(ins: Inspection, shown: list[str]) -> dict:
    s = ins.snapshot
    parts = s.split.parts if s.split else {}
    return {"t": f"{s.t_s:.1f}", "anon": _size(s.split.anon) if s.split else "?",
            "parts": [_size(parts.get(k, 0)) for k in shown], "rss": _size(s.rss),
            "stops": str(s.pauses) if s.stopped else "not stopped",
            "longest": f"{s.pause_max_ms:.1f} ms" if s.stopped else "",
            "rules": ", ".join(f.rule for f in ins.answer.fired)}


def _fired(ins: Inspection) -> list[dict]:
    return [{"rule": f.rule, "mechanism": f.mechanism, "why": f.why,
             "lines": [ln for st in f.settings for ln in [st.env_line, *_environment(st.systemd)] if ln]}
            for f in ins.answer.fired]


def render_html(items: list[Inspection], experiment: int | None, every_s: float | None) -> str:
    from alloclab.report.charts import reset_ids
    from alloclab.report.inspect_charts import parts_over_time_chart

    reset_ids()
    by_pid: dict[int, list[Inspection]] = {}
    for ins in items:
        by_pid.setdefault(ins.snapshot.pid, []).append(ins)
    grown = {g.pid: g for g in growth(items)}
    shown = [k for k in PARTS if any(i.snapshot.split and i.snapshot.split.parts.get(k) for i in items)]
    processes = []
    for pid, its in by_pid.items():
        last = its[-1]
        g = grown.get(pid)
        command = " ".join(last.snapshot.cmdline)[:200] or last.snapshot.exe
        processes.append({
            "pid": pid, "command": command,
            "grew": growth_line(g) if g else f"Process {pid}: one sample, nothing to compare it with.",
            "changes": changes_line(g) if g else "",
            "svg": parts_over_time_chart([i.snapshot for i in its], g),
            "caption": "The anonymous RSS of each sample in the split's parts (resident bytes, stacked), the "
                       "anonymous RSS itself (solid, a dot a sample) and the whole RSS (dashed): a part that "
                       "widens is what grew.",
            "rows": [_row(i, shown) for i in its], "how": "; ".join(_how(last.snapshot)),
            "fired": _fired(last), "said": last.answer.said, "race": last.answer.race})
    first, final = items[0].snapshot, items[-1].snapshot
    every = f" every {every_s:g} s" if every_s else ""
    sub = (f"{len(items)} sample{'s' if len(items) != 1 else ''}{every} of {len(by_pid)} "
           f"process{'es' if len(by_pid) != 1 else ''}, {first.when} to {final.when}"
           + (f"; stored as experiment {experiment} (`alloclab diff {experiment}:0 {experiment}:-1`)"
              if experiment is not None else ""))
    title = (f"{first.pid}: " + (" ".join(first.cmdline)[:120] or first.exe)) if len(by_pid) == 1 else \
        ", ".join(map(str, by_pid))
    return _env.get_template("inspect.html.j2").render(
        version=__version__, title=title, sub=sub, processes=processes,
        part_heads=[PART_WORDS[k] for k in shown],
        footer=f"generated {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
