"""`-f json` follows its published schema, docs/report.schema.json (JSON Schema 2020-12): the real
exports of the three stored experiments (the demo suite, the PostgreSQL and the redis recipe: real
runs, tests/fixtures), written by the real CLI, validate against it, and one changed field does not.
Schema 3's answer is numbers: the picks by label with the results' own effects, one metric key; a
schema 2 export (tests/fixtures/postgres-export-schema2.json, as schema 2 wrote it) is still read."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import jsonschema
import pytest

from conftest import run_cli
from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("report-schema")

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    d = tmp_path_factory.mktemp("schema")
    out = {}
    for name, file in STORES.items():
        shutil.copyfile(FIXTURES / file, d / file)
        p = run_cli(["report", "--db", str(d / file), "-o", str(d / f"{name}.json")], timeout=120)
        assert p.returncode == 0, p.stderr
        out[name] = json.loads((d / f"{name}.json").read_text())
    return out


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_real_export_validates(exports, name):
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in
              jsonschema.Draft202012Validator(SCHEMA).iter_errors(exports[name])]
    assert not errors, "\n".join(errors[:20])


def test_the_schema_sees_a_changed_field(exports):
    # A schema that accepts anything checks nothing: a verdict of the old schema, a missing
    # section and a text where a number goes are each refused.
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for change in (lambda d: d["results"][0]["metrics"][0]["cells"][1]["comparison"].update(verdict="same"),
                   lambda d: d.pop("recommendation"),
                   lambda d: d["recommendation"]["overall"]["across"]["tallies"][0].update(better=4),
                   lambda d: d["runs"][0]["metrics"].update(wall_s="fast")):
        broken = copy.deepcopy(exports["demo"])
        change(broken)
        assert not validator.is_valid(broken)


def test_the_schema_is_version_3(exports):
    assert SCHEMA["properties"]["schema"] == {"const": 3}
    assert {d["schema"] for d in exports.values()} == {3}


def test_a_compare_export_on_stdout_validates():
    # `report -f json` on stdout, as a script reads it: the demo suite's real runs.
    p = run_cli(["report", "--db", str(_copy(DEMO)), "-f", "json"], timeout=120)
    assert p.returncode == 0, p.stderr
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in
              jsonschema.Draft202012Validator(SCHEMA).iter_errors(json.loads(p.stdout))]
    assert not errors, "\n".join(errors[:20])


def _copy(name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix="schema3-"))
    shutil.copyfile(FIXTURES / name, d / name)
    return d / name


DEMO = STORES["demo"]


def _metric_keys(d) -> set[str]:
    """Every metric the export names anywhere outside the results' own rows: each "metric" and
    "metrics" key's value, at any depth (the answers, their mechanisms, the bounds, the picks, tune's)."""
    if isinstance(d, list):
        return set().union(*map(_metric_keys, d)) if d else set()
    if not isinstance(d, dict):
        return set()
    keys = {d["metric"]} if isinstance(d.get("metric"), str) else set()
    keys |= {m for m in d.get("metrics", []) if isinstance(m, str)} if isinstance(d.get("metrics"), list) else set()
    return keys.union(*(_metric_keys(v) for k, v in d.items() if k not in ("results", "runs", "metric_defs")))


@pytest.mark.parametrize("name", sorted(STORES))
def test_one_metric_key_everywhere(exports, name):
    # The answer names each metric as the results do ("ns_per_pair"), never "ns_per_pair (ns)".
    d = exports[name]
    results = {m["name"] for w in d["results"] for m in w["metrics"]}
    keys = _metric_keys(d)
    assert keys and keys <= results, keys - results


@pytest.mark.parametrize("name", sorted(STORES))
def test_the_picks_are_labels_with_the_results_numbers(exports, name):
    # Each pick is a variant's label, its effect and interval the numbers of that variant's primary
    # comparison in the results (ratio - 1), not a sentence.
    d = exports[name]
    labels = {v["label"] for v in d["variants"]}
    picked = 0
    for w, c in zip(d["results"], d["recommendation"]["workloads"]):
        assert set(c["front"]) <= labels
        if c["pick"] is None:
            assert c["effect"] is None
            continue
        picked += 1
        assert c["pick"] in labels
        row = next(m for m in w["metrics"] if m["name"] == c["metric"])
        cmp = next(x["comparison"] for x in row["cells"] if x["variant"] == c["pick"])
        for ours, theirs in (("effect", "ratio"), ("low", "ci_low"), ("high", "ci_high")):
            assert isinstance(c["effect"][ours], float)
            assert c["effect"][ours] == pytest.approx(cmp[theirs] - 1)
        assert c["effect"]["verdict"] == cmp["verdict"] and c["effect"]["p"] == cmp["p_adjusted"]
    assert picked or name == "redis"   # redis: undecided everywhere, as its report says
    for x in d["answers"]:
        assert x["variant"] in labels and "text" not in x
        assert x["effect"] is None or isinstance(x["effect"], float)


def test_the_schema_refuses_the_schema_2_shapes(exports):
    # What schema 2 wrote is refused under 3: a pick as an index, an answer as a sentence, a metric
    # key with its unit, a bound as a sentence.
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert validator.is_valid(exports["demo"])
    for change in (lambda d: d["recommendation"]["workloads"][0].update(pick=4),
                   lambda d: d["recommendation"]["workloads"][0].update(front=[0, 2]),
                   lambda d: d["answers"][0].update(effect="-38.0% [-44.8, -30.5]"),
                   lambda d: d["answers"][0].update(metric="ns_per_pair (ns)"),
                   lambda d: d["recommendation"]["workloads"][0]["effect"].update(low="-44.8"),
                   lambda d: d.update(cpu_bounds=["simple: ns_per_pair (ns) undecided"]),
                   lambda d: d.update(schema=2)):
        broken = copy.deepcopy(exports["demo"])
        change(broken)
        assert not validator.is_valid(broken)


def test_a_schema_2_export_is_still_read(tmp_path):
    # Exports written before schema 3 (here the PostgreSQL recipe's, as schema 2 wrote it) are read
    # as before: diffed against the same runs exported now, every summary agrees.
    old = FIXTURES / "postgres-export-schema2.json"
    assert json.loads(old.read_text())["schema"] == 2
    new = tmp_path / "new.json"
    p = run_cli(["report", "--db", str(_copy(STORES["postgres"])), "-o", str(new)], timeout=120)
    assert p.returncode == 0, p.stderr
    p = run_cli(["diff", str(old), str(new), "-f", "json"], timeout=120)
    assert p.returncode == 0, p.stderr
    cells = [c for w in json.loads(p.stdout)["workloads"] for r in w["rows"] for c in r["cells"]]
    assert cells and all(c["a"] == c["b"] and c["a"]["n"] > 0 for c in cells)
