"""The command line as a user meets it: real subprocesses, exit codes, one-line errors."""

import json

import pytest

pytestmark = pytest.mark.slow  # real subprocesses, servers or whole pipelines: `make test-fast` skips them



def test_help_everywhere(cli_process):
    for args in ([], ["--help"], ["prompts", "--help"], ["theory", "--help"], ["reproduce", "--help"], ["report", "--help"]):
        r = cli_process(*args)
        assert r.code == 0, (args, r.err)
        assert "Usage" in r.out


def test_prompts_jsonl_is_deterministic(tmp_path, cli_process):
    args = ["prompts", "--formulation", "lives-with", "--depth", "3", "--chains", "3", "--n", "4", "--seed", "9"]
    a, b = cli_process(*args), cli_process(*args)
    assert a.code == 0 and a.out == b.out
    rows = [json.loads(line) for line in a.out.splitlines()]
    assert len(rows) == 4
    for r in rows:
        assert {"prompt", "answer", "acceptable", "formulation", "depth", "chains", "seed"} <= set(r)
        assert r["depth"] == 3 and r["chains"] == 3 and r["answer"] in r["acceptable"]
    out = tmp_path / "q.jsonl"
    assert cli_process(*args, "--out", str(out)).code == 0
    assert out.read_text() == a.out


def test_theory_json_keys(cli_process):
    r = cli_process("theory", "--max-depth", "4", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [x["depth"] for x in rows] == [1, 2, 3, 4]
    for x in rows:
        assert set(x) == {"depth", "paper_bound", "min_layers", "min_layers_causal", "min_layers_causal_per_position"}
        assert len(x["min_layers_causal_per_position"]) == x["depth"]


def test_theory_out_writes_plot(tmp_path, cli_process):
    r = cli_process("theory", "--max-depth", "3", "--out", str(tmp_path))
    assert r.code == 0
    assert (tmp_path / "theory.png").stat().st_size > 0 and (tmp_path / "theory.svg").exists()
    assert "┃" in r.out  # the table


@pytest.mark.parametrize(
    "args",
    [
        ["prompts", "--formulation", "nope"],
        ["prompts", "--formulation", "equations", "--depth", "0"],
        ["prompts", "--formulation", "lives-with", "--chains", "10000"],
        ["prompts", "--formulation", "functions", "--depth", "3"],
        ["prompts", "--formulation", "equations", "--n", "0"],
        ["theory", "--max-depth", "0"],
        ["theory", "--max-depth", "x"],
        ["theory", "--no-such-option"],
        ["reproduce", "--preset", "huge"],
        ["reproduce", "--preset", "smoke", "--skip", "nothing"],
        ["reproduce", "--preset", "paper"],
        ["reproduce", "--preset", "smoke", "--llm-model", "smollm2"],
        ["report", "/nonexistent/folder"],
        ["no-such-verb"],
    ],
)
def test_bad_input_is_one_line_exit_2(args, cli_process):
    r = cli_process(*args)
    assert r.code == 2, r
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stackedheads: error:"), r.err
