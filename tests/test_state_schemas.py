"""Every state file is read against one declared schema with the ranges its values can take
(stackedheads.state.schemas): a value no run writes (a negative loss, a minimum of no heads) is one
line naming the file and the field, never a verdict judged from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import one_error

from stackedheads.state import schemas
from stackedheads.errors import UsageError

RESULTS = Path(__file__).resolve().parents[1] / "results"

SEC8 = "sec8/tl-stack"
TRAIN = "circuits/runs/transformers-A-C/summary.json"
FOUND = "circuits/discovered/seed0/summary.json"


def _set(data: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        data = data[key]
    data[last] = value


@pytest.mark.parametrize("ref, file, field, value", [
    (SEC8, TRAIN, "seeds.0.final_val_loss", -5),
    (SEC8, TRAIN, "seeds.0.final_val_loss", True),
    (SEC8, FOUND, "combined.loss", -5),
    (SEC8, FOUND, "theory_min_heads", 0),
    (SEC8, FOUND, "theory_min_heads", -1),
    ("sec9/gpt2", "emergence/discovered/seed0/summary.json", "combined.loss", -5),
    ("sec9/tl-stack", "emergence/timeline/seed0/timeline.json", "plateau_steps", -3),
])
def test_a_value_no_run_writes_is_one_line_in_claims_and_seeds(cli, tmp_path, ref, file, field, value):
    """seeds.0.final_val_loss = -5 gave A1 PASS "seed 0: -5.0000"; combined.loss -5 gave A3 (E1)
    PASS; theory_min_heads 0 gave A5 PASS."""
    folder = shutil.copytree(RESULTS / ref, tmp_path / "X")
    path = folder / file
    data = json.loads(path.read_text())
    _set(data, field, value)
    path.write_text(json.dumps(data))
    for verb in ("claims", "seeds"):
        r = cli(verb, folder)
        assert r.code == 2 and one_error(r.err), r.err
        assert str(path) in r.err and field in r.err and "PASS" not in r.out, r.err


def test_every_published_state_file_holds_values_its_schema_allows():
    """The schemas are those of the files this program writes: every tracked one passes."""
    checked = 0
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text())
        if path.name == "reference.json":
            schemas.check(schemas.ReferenceFile, data, path)
        elif path.name == "circuit.json":
            schemas.check(schemas.CircuitFile, data, path)
        elif path.name == "timeline.json":
            schemas.check(schemas.Timeline, data, path)
        elif path.name == "summary.json" and path.parent.parent.name == "discovered":
            schemas.check(schemas.DiscoverySummary, data, path)
        elif path.name == "summary.json" and path.parent.parent.name == "runs":
            schemas.check(schemas.TrainSummary, data, path)
        elif path.name == "claims.json" and isinstance(data, list):
            schemas.check_claims(data, path)
        else:
            continue
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("schema, data, says", [
    (schemas.TrainSummary, {"config": {"task": {"chains": 0, "depth": 3}}, "seeds": {}}, "config.task.chains"),
    (schemas.TrainSummary, {"config": {"task": {"chains": 2, "depth": 3}}, "seeds": {"0": {"final_val_loss": float("nan"), "final_partial": {}}}}, "seeds.0.final_val_loss: must be a finite"),
    (schemas.CircuitFile, {"depth": 2, "heads": [{"layer": -1, "head": 0}]}, "heads.0.layer"),
    (schemas.CircuitFile, {"depth": 2, "heads": [], "info": {"seed": -1}}, "info.seed"),
    (schemas.ReferenceFile, {"name": "a", "title": "", "command": "c", "commit": "0" * 7, "machine": "m", "wall_s": 1,
                             "date": "d", "files": []}, "title"),
    (schemas.ReferenceFile, {"name": "a", "title": "t", "command": "c", "commit": "0" * 7, "machine": "m", "wall_s": -5,
                             "date": "d", "files": []}, "wall_s"),
])
def test_a_schema_names_the_field_and_the_file(schema, data, says):
    with pytest.raises(UsageError, match=rf"^f\.json holds a value no run writes \({says}"):
        schemas.check(schema, data, "f.json")
