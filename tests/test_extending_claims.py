"""Adding a section of claims from outside the package (docs/extending.md, "Adding a section of
claims"): the test runs the very code the document shows, so the two cannot drift apart."""

from __future__ import annotations

import csv
import json
import re
import types
from pathlib import Path

import pytest

from stackedheads import claims

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
NAME = "theorem1-training"
FIELDS = ["formulation", "depth", "chains", "layers", "seed", "final_val_loss", "final_val_x3", "run"]


def _documented_module() -> types.ModuleType:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Adding a section of claims"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("theorem1_training")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


@pytest.fixture
def section():
    assert NAME not in claims.SECTIONS
    module = _documented_module()
    try:
        yield module
    finally:
        claims.SECTIONS.unregister(NAME)
    assert NAME not in claims.SECTIONS


def _reproduce_folder(tmp_path: Path, rows: list[dict] | None) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"preset": "custom"}))
    if rows is not None:
        (run / "figure4").mkdir()
        with (run / "figure4" / "summary.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    return run


def _row(layers: int, seed: int, x3: float, formulation: str = "ic") -> dict:
    return {"formulation": formulation, "depth": 3, "chains": 4, "layers": layers, "seed": seed,
            "final_val_loss": x3, "final_val_x3": x3, "run": f"{formulation}-D3-L{layers}"}


def _ours(found: list[claims.Claim]) -> list[claims.Claim]:
    return [c for c in found if c.id == "B1"]


def test_a_new_section_is_judged_in_order(section, tmp_path):
    plateau = 0.75  # 1 - 1/N at N = 4: nothing retrieved
    run = _reproduce_folder(tmp_path, [_row(1, 0, plateau), _row(1, 1, 0.74), _row(4, 0, 0.01),
                                       _row(1, 0, 0.01, "non-ic")])
    found = claims.collect(run)
    (b1,) = _ours(found)
    assert b1.verdict == claims.PASS
    assert "2 IC runs with fewer than log3(2D) = 1.63 layers" in b1.measured and "below 0.500 in 0" in b1.measured
    titles = list(dict.fromkeys(c.section for c in found))
    assert titles.index(section.TITLE) == titles.index("5 Theory of information flow") + 1  # order 5.5


def test_the_new_claim_can_fail_and_can_be_inconclusive(section, tmp_path):
    learned = _reproduce_folder(tmp_path / "a", [_row(1, 0, 0.75), _row(1, 1, 0.2)])
    (b1,) = _ours(section.evaluate(learned))
    assert b1.verdict == claims.FAIL and "ic-D3-L1 seed 1" in b1.measured
    deep_only = _reproduce_folder(tmp_path / "b", [_row(2, 0, 0.75), _row(4, 0, 0.01)])
    (b1,) = _ours(section.evaluate(deep_only))
    assert b1.verdict == claims.INCONCLUSIVE and "add 1 layer" in b1.measured
    (b1,) = _ours(section.evaluate(_reproduce_folder(tmp_path / "c", None)))
    assert b1.verdict == claims.NOT_RUN


def test_the_cli_shows_the_new_section(section, tmp_path, cli):
    run = _reproduce_folder(tmp_path, [_row(1, 0, 0.75)])
    r = cli("claims", run, "--json")
    assert r.code == 0, r.err
    found = json.loads(r.out)
    assert [c["verdict"] for c in found if c["id"] == "B1"] == [claims.PASS]
    assert list(dict.fromkeys(c["section"] for c in found)) == [s.title for s in claims.sections()]
