"""`-f json` follows its published schema, docs/report.schema.json (JSON Schema 2020-12): the real
exports of the three stored experiments (the demo suite, the PostgreSQL and the redis recipe: real
runs, tests/fixtures), written by the real CLI, validate against it, and one changed field does not."""

from __future__ import annotations

import copy
import json
import shutil
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
