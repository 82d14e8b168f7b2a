"""The report command (stackedheads.report.html): capped answers, its lock, and damaged stage files
that it names in one line. Claims and report on the same damage: tests/test_claims.py."""

from __future__ import annotations

import json

import pytest
from helpers import Fixed, one_error, reproduce_folder

from stackedheads.llm import bench
from stackedheads.llm.bench import BenchConfig


def test_report_caps_huge_answers_and_skips_damaged_records(tmp_path, cli):
    run = reproduce_folder(tmp_path)
    bench.run_bench(Fixed("a"), BenchConfig(formulations=("equations", "kingdoms"), depths=(2,), n=3), run / "llm")
    lines = (run / "llm" / "samples.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    recs[0]["draws"][0]["text"] = "y" * 5_000_000  # as an uncapped (older) log stored it
    recs[0]["prompt"] = "z" * 5_000_000
    del recs[3]["prompt"]  # a record missing a key the report shows
    recs[4]["draws"] = "not a list"
    (run / "llm" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, _, stderr = cli("report", str(run))
    assert code == 0, stderr
    assert (run / "report" / "index.html").stat().st_size < 500_000


def test_report_command_locks_thereproduce_folder(tmp_path, held, cli):
    run = reproduce_folder(tmp_path)
    p = held(run)
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and f"in use by pid {p.pid}" in stderr
    assert not (run / "report").exists()


@pytest.mark.parametrize("content", ["{}", "[]", '{"wall_s": "soon"}'])
def test_report_on_a_done_marker_of_the_wrong_shape_is_one_line(tmp_path, content, cli):
    run = reproduce_folder(tmp_path)
    (run / "theory").mkdir()
    (run / "theory" / "done.json").write_text(content)
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and "done.json" in stderr, stderr


def test_report_on_a_circuit_summary_of_the_wrong_shape_is_one_line(tmp_path, cli):
    run = reproduce_folder(tmp_path)
    found = run / "circuits" / "discovered" / "seed0"
    found.mkdir(parents=True)
    (found / "summary.json").write_text('{"budgets": [0.1]}')  # no losses
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and "circuits" in stderr, stderr
