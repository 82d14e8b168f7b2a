"""tools/maintenance/demo_matrix.py: the table of the demo's Sec. 7-9 verdicts over dtype and threads.
The four demos are long; their table is built from claims lists here."""

import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("demo_matrix", Path(__file__).parents[1] / "tools" / "maintenance" / "demo_matrix.py")
demo_matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo_matrix)  # its main() runs only as a script


def claim(section, cid, verdict):
    return {"section": section, "id": cid, "verdict": verdict}


def test_rows_keep_sec7_to_9_in_order_and_mark_a_flip():
    a = [claim("5 Theory of information flow", "T1", "PASS"), claim("7 Implicit curriculum and layers", "C0", "FAIL"),
         claim("9 Emergence in transformer D", "E3", "FAIL")]
    b = [claim("5 Theory of information flow", "T1", "FAIL"), claim("7 Implicit curriculum and layers", "C0", "FAIL"),
         claim("9 Emergence in transformer D", "E3", "INCONCLUSIVE")]
    rows = demo_matrix.verdict_rows({"float32-t1": a, "bfloat16-t2": b})
    assert [r["id"] for r in rows] == ["C0", "E3"]  # T1 differs but is not a trained claim
    assert [r["agree"] for r in rows] == [True, False]
    assert rows[1]["cells"] == {"float32-t1": "FAIL", "bfloat16-t2": "INCONCLUSIVE"}


def test_a_claim_missing_from_a_cell_does_not_agree():
    a = [claim("8 Circuits of transformers A-C", "A1", "PASS")]
    rows = demo_matrix.verdict_rows({"x": a, "y": []})
    assert rows == [{"id": "A1", "section": "8 Circuits of transformers A-C", "cells": {"x": "PASS", "y": "-"},
                     "seeds": {"x": "", "y": ""}, "agree": False}]


def seeded(section, cid, verdict, seeds):
    return {**claim(section, cid, verdict), "readings": [
        {"reading": "other", "primary": False, "verdict": "FAIL", "seeds": {"0": "FAIL"}},
        {"reading": "main", "primary": True, "verdict": verdict, "seeds": dict(enumerate(seeds))}]}


def test_markdown_marks_flips_resumed_runs_and_every_cells_machine():
    a = [claim("8 Circuits of transformers A-C", "A3", "PASS"), claim("8 Circuits of transformers A-C", "A4", "FAIL")]
    b = [claim("8 Circuits of transformers A-C", "A3", "PASS"), claim("8 Circuits of transformers A-C", "A4", "PASS")]
    text = demo_matrix.markdown(demo_matrix.verdict_rows({"x": a, "y": b}), {"x": 90.0, "y": None}, {"x": "A", "y": "A"})
    lines = text.splitlines()
    assert lines[0] == "| claim | x | y | same verdict | seeds, where the cells count alike |"
    assert lines[2] == "| A3 | PASS | PASS | yes |  |"
    assert lines[3] == "| A4 | FAIL | PASS | **no** |  |"
    assert lines[4] == "| wall time of the run | 1.5 min | resumed | | |"
    assert lines[5] == "| machine | A | A | | |"  # named even where the cells share one


def test_per_seed_counts_come_from_the_primary_reading_and_show_per_cell_where_they_differ():
    e = "9 Emergence in transformer D"
    x = [seeded(e, "E1", "PASS", ["PASS"] * 4), seeded(e, "E3", "FAIL", ["PASS", "FAIL", "PASS", "INCONCLUSIVE"])]
    y = [seeded(e, "E1", "PASS", ["PASS"] * 4), seeded(e, "E3", "FAIL", ["FAIL", "FAIL", "PASS", "PASS"])]
    assert demo_matrix.seed_counts(x[1]) == "2 PASS, 1 FAIL, 1 INCONCLUSIVE of 4"
    assert demo_matrix.seed_counts(claim(e, "E9", "PASS")) == ""  # judged on no seeds
    led = {**x[1], "seeds": {"0": "FAIL", "1": "DEPENDS ON READING"}}  # what the claim leads with wins
    assert demo_matrix.seed_counts(led) == "1 FAIL, 1 DEPENDS ON READING of 2"
    lines = demo_matrix.markdown(demo_matrix.verdict_rows({"x": x, "y": y}), {"x": 60.0, "y": 60.0},
                                 {"x": "A", "y": "B"}).splitlines()
    assert lines[2] == "| E1 | PASS | PASS | yes | 4 PASS of 4 |"
    assert lines[3] == "| E3 | FAIL (2 PASS, 1 FAIL, 1 INCONCLUSIVE of 4) | FAIL (2 PASS, 2 FAIL of 4) | yes |  |"


def test_the_reproduce_page_shows_the_stored_matrix():
    """docs/reproduce.md's table of the demo's verdicts is the stored matrix's, row for row."""
    root = Path(__file__).parents[1]
    stored = json.loads((root / "docs" / "notes" / "demo-matrix" / "verdicts.json").read_text())
    table = demo_matrix.markdown(stored["rows"], stored["wall_s"], stored["machines"])
    assert table in (root / "docs" / "reproduce.md").read_text()
    assert table in (root / "docs" / "notes" / "demo-matrix" / "verdicts.md").read_text()
    for cell, machine in stored["machines"].items():  # each cell names its CPU's flags
        assert "flags:" in machine, cell


def test_a_failing_cell_stops_with_one_line_and_keeps_nothing_half_written(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(tmp_path / "m"), "--preset", "no-such-preset"])
    assert demo_matrix.main() == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1] == "demo_matrix: float32-t1: reproduce exited 2; rerun the same line to resume it"
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "m" / "verdicts.md").exists()


def test_cells_are_named_and_a_wrong_one_is_one_line(tmp_path, monkeypatch, capfd):
    assert demo_matrix.parse_cells("bfloat16-t2, float32-t1") == [("float32", 1), ("bfloat16", 2)]  # the table's order
    assert demo_matrix.parse_cells(None) == demo_matrix.CELLS
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(tmp_path / "m"), "--cells", "float32-t3"])
    assert demo_matrix.main() == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == ["demo_matrix: --cells: float32-t3: not a cell (cells: float32-t1, float32-t2, bfloat16-t1, bfloat16-t2)"]


def record(cell, preset="quick", skip=("llm",), machine="M", verdict="PASS", sha=None):
    dtype, t = cell.split("-t")
    return {"cell": cell, "dtype": dtype, "threads": int(t), "device": "cpu", "preset": preset, "skip": list(skip),
            "preset_sha": sha or demo_matrix.current_fingerprint(preset), "commit": "0" * 40, "machine": machine,
            "wall_s": 60.0,
            "claims": [claim("9 Emergence in transformer D", "E3", verdict)]}


def test_records_of_earlier_runs_fill_the_table_in_order_and_another_preset_is_refused(tmp_path, monkeypatch, capfd):
    for cell, m in (("bfloat16-t2", "N"), ("float32-t1", "M")):
        (tmp_path / f"{cell}.json").write_text(json.dumps(record(cell, machine=m)))
    recs = demo_matrix.read_records(tmp_path, "quick", ["llm"])
    assert list(recs) == ["float32-t1", "bfloat16-t2"]
    (tmp_path / "float32-t2.json").write_text(json.dumps(record("float32-t2", preset="smoke")))
    with pytest.raises(ValueError, match="float32-t2.json: preset smoke"):
        demo_matrix.read_records(tmp_path, "quick", ["llm"])
    # with a record for every cell nothing runs: the table of the records, and a flip is exit 1
    (tmp_path / "float32-t2.json").write_text(json.dumps(record("float32-t2", machine="M")))
    (tmp_path / "bfloat16-t1.json").write_text(json.dumps(record("bfloat16-t1", machine="M", verdict="FAIL")))
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(tmp_path)])
    assert demo_matrix.main() == 1
    lines = (tmp_path / "verdicts.md").read_text().splitlines()
    assert lines[2] == "| claim | float32-t1 | float32-t2 | bfloat16-t1 | bfloat16-t2 | same verdict | seeds, where the cells count alike |"
    assert lines[4] == "| E3 | PASS | PASS | FAIL | PASS | **no** |  |"
    assert lines[-1] == "| machine | M | M | M | N | | |"
    assert not any(p.is_dir() for p in tmp_path.iterdir())  # no cell was run
    capfd.readouterr()
    # main refuses a mixed folder before it runs anything
    (tmp_path / "float32-t2.json").write_text(json.dumps(record("float32-t2", preset="smoke")))
    (tmp_path / "bfloat16-t1.json").unlink()
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(tmp_path), "--cells", "bfloat16-t1"])
    assert demo_matrix.main() == 2
    assert capfd.readouterr().err.count("\n") == 1
    assert not (tmp_path / "bfloat16-t1").exists()


def test_cells_at_once_each_log_their_output_and_every_failure_is_named(tmp_path, monkeypatch, capfd):
    out = tmp_path / "m"
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(out), "--preset", "no-such-preset", "--parallel",
                                     "--cells", "float32-t1,float32-t2"])
    assert demo_matrix.main() == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [f"demo_matrix: {c}: reproduce exited 2 (its output: {out / c}.log); rerun the same line to resume it"
                   for c in ("float32-t1", "float32-t2")]
    for c in ("float32-t1", "float32-t2"):
        assert "no-such-preset" in (out / f"{c}.log").read_text()
    assert not (out / "verdicts.md").exists()


def test_a_record_of_the_preset_before_a_change_is_refused(tmp_path):
    """A cell keeps the fingerprint of the settings it ran (its config.json), so records made
    before the preset changed under the same name never join the new table."""
    from dataclasses import asdict

    from stackedheads import presets

    ran = json.loads(json.dumps(asdict(presets.REPRODUCE.get("quick"))))
    assert demo_matrix.fingerprint(ran) == demo_matrix.current_fingerprint("quick")
    # A setting added since, at its None default, is the same settings; set, it is not.
    assert demo_matrix.fingerprint({**ran, "emergence": {**ran["emergence"], "new_knob": None}}) == demo_matrix.current_fingerprint("quick")
    assert demo_matrix.fingerprint({**ran, "emergence": {**ran["emergence"], "new_knob": 1}}) != demo_matrix.current_fingerprint("quick")
    ran["figure4"]["layers"] = [1, 2]  # the same name at other settings
    (tmp_path / "float32-t1.json").write_text(json.dumps(record("float32-t1", sha=demo_matrix.fingerprint(ran))))
    with pytest.raises(ValueError, match="float32-t1.json: made with preset quick at other settings"):
        demo_matrix.read_records(tmp_path, "quick", ["llm"])
    old = record("float32-t1")
    del old["preset_sha"]  # a record from before fingerprints
    (tmp_path / "float32-t1.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="not recorded"):
        demo_matrix.read_records(tmp_path, "quick", ["llm"])
