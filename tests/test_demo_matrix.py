"""scripts/demo_matrix.py: the table of the demo's Sec. 7-9 verdicts over dtype and threads
(issue 42). The four demos are long; their table is built from claims lists here."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("demo_matrix", Path(__file__).parents[1] / "scripts" / "demo_matrix.py")
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
    assert rows == [{"id": "A1", "section": "8 Circuits of transformers A-C", "cells": {"x": "PASS", "y": "-"}, "agree": False}]


def test_markdown_marks_flips_and_resumed_runs():
    a = [claim("8 Circuits of transformers A-C", "A3", "PASS"), claim("8 Circuits of transformers A-C", "A4", "FAIL")]
    b = [claim("8 Circuits of transformers A-C", "A3", "PASS"), claim("8 Circuits of transformers A-C", "A4", "PASS")]
    text = demo_matrix.markdown(demo_matrix.verdict_rows({"x": a, "y": b}), {"x": 90.0, "y": None})
    lines = text.splitlines()
    assert lines[0] == "| claim | x | y | same verdict |"
    assert lines[2] == "| A3 | PASS | PASS | yes |"
    assert lines[3] == "| A4 | FAIL | PASS | **no** |"
    assert lines[4] == "| wall time of the run | 1.5 min | resumed | |"


def test_a_failing_cell_stops_with_one_line_and_keeps_nothing_half_written(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr("sys.argv", ["demo_matrix.py", str(tmp_path / "m"), "--preset", "no-such-preset"])
    assert demo_matrix.main() == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1] == "demo_matrix: float32-t1: reproduce exited 2; rerun the same line to resume it"
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "m" / "verdicts.md").exists()
