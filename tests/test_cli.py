"""The command line as a user meets it: real subprocesses, exit codes, one-line errors."""

import json

import pytest

pytestmark = pytest.mark.slow  # real subprocesses, servers or whole pipelines: `make test-fast` skips them



def test_help_everywhere(cli_process, cli, monkeypatch):
    import re

    import typer

    from stackedheads.cli import app

    r = cli_process("--help")  # once as a user's shell runs it
    assert r.code == 0 and r.out.lstrip().startswith("Usage: python -m stackedheads"), r.err
    monkeypatch.setenv("COLUMNS", "400")  # one line per option, whatever the terminal

    def walk(cmd, path: list[str]):  # typer vendors click: duck-typed groups and options
        yield path, cmd
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])

    seen = 0
    for path, cmd in walk(typer.main.get_command(app), []):
        r = cli(*path, "--help")
        assert r.code == 0, (path, r.err)
        usage = r"Usage: [^\[]*?" + re.escape(" ".join(["", *path])) + r" \["  # its own usage line
        assert re.match(usage, " ".join(r.out.split())), (path, r.out[:200])
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                assert param.opts[0] in r.out, (path, param.opts[0])  # every option is documented
        seen += 1
    assert seen >= 20  # every verb and sub-verb was visited (20 today)


def test_prompts_jsonl_is_deterministic(tmp_path, cli_process, cli):
    """The same bytes from a fresh interpreter (its own hash seed) and from this one."""
    args = ["prompts", "--formulation", "lives-with", "--depth", "3", "--chains", "3", "--n", "4", "--seed", "9"]
    a, b = cli_process(*args), cli(*args)
    assert a.code == 0 and a.out == b.out
    rows = [json.loads(line) for line in a.out.splitlines()]
    assert len(rows) == 4
    for r in rows:
        assert {"prompt", "answer", "acceptable", "formulation", "depth", "chains", "seed"} <= set(r)
        assert r["depth"] == 3 and r["chains"] == 3 and r["answer"] in r["acceptable"]
    out = tmp_path / "q.jsonl"
    assert cli(*args, "--out", str(out)).code == 0
    assert out.read_text() == a.out


def test_theory_json_keys(cli):
    r = cli("theory", "--max-depth", "4", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [x["depth"] for x in rows] == [1, 2, 3, 4]
    for x in rows:
        assert set(x) == {"depth", "paper_bound", "min_layers", "min_layers_causal", "min_layers_causal_per_position"}
        assert len(x["min_layers_causal_per_position"]) == x["depth"]


def test_theory_out_writes_plot(tmp_path, cli):
    r = cli("theory", "--max-depth", "3", "--out", str(tmp_path))
    assert r.code == 0
    from PIL import Image

    with Image.open(tmp_path / "theory.png") as im:  # a real raster image, not an empty file
        assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
    svg = (tmp_path / "theory.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "D" in svg
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
def test_bad_input_is_one_line_exit_2(args, cli):
    r = cli(*args)
    assert r.code == 2, r
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stackedheads: error:"), r.err


def test_bad_input_in_a_fresh_interpreter_is_one_line(cli_process):
    """The cases above run in this process (a fresh interpreter each costs ~3 s); one
    runs as a user's shell runs it, where a traceback would reach the terminal."""
    r = cli_process("theory", "--max-depth", "0")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.count("\n") == 1 and r.err.startswith("stackedheads: error:"), r.err


# --- Errors of any command: one line, the right exit code, nothing written, secrets redacted

import errno  # noqa: E402

import torch  # noqa: E402
from helpers import SECRET, one_error  # noqa: E402

from stackedheads.state import write  # noqa: E402
from stackedheads.errors import register_secret  # noqa: E402


def test_unexpected_error_traceback_is_redacted(monkeypatch, cli):
    register_secret(SECRET)

    def boom(*a, **k):
        raise RuntimeError(f"a bug that mentions Bearer {SECRET}")

    monkeypatch.setattr("stackedheads.theory.theory_table", boom)
    code, stdout, stderr = cli("theory", "--max-depth", "3")
    assert code == 1 and "Traceback" in stderr and "RuntimeError" in stderr  # a bug keeps its traceback
    assert SECRET not in stderr


def test_out_is_a_file(tmp_path, cli):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, stderr = cli("prompts", "-f", "equations", "--out", str(f / "q.jsonl"))
    assert code == 2 and "Traceback" not in stderr and str(f) in stderr
    code, _, stderr = cli("theory", "--max-depth", "3", "--out", str(f))
    assert code == 2 and "Traceback" not in stderr and one_error(stderr)


@pytest.mark.parametrize("err, code", [(errno.EROFS, 2), (errno.EACCES, 2), (errno.ENOSPC, 1), (errno.EIO, 1)])
def test_write_failures_are_one_line(tmp_path, monkeypatch, err, code, cli):
    """A read-only folder, no permission (we may run as root: simulated), a full disk, an I/O error."""

    def fail(path, data):
        raise OSError(err, __import__("os").strerror(err), str(path))

    monkeypatch.setattr(write, "atomic_write_bytes", fail)
    got, _, stderr = cli("prompts", "-f", "equations", "--out", str(tmp_path / "q.jsonl"))
    assert got == code and "Traceback" not in stderr and one_error(stderr)
    assert "q.jsonl" in stderr


def test_theory_and_prompts_limits(cli):
    code, _, stderr = cli("theory", "--max-depth", "100000")
    assert code == 2 and "between 1 and 200" in stderr
    code, _, stderr = cli("prompts", "-f", "equations", "--n", "10000000")
    assert code == 2 and "between 1 and 100000" in stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", [["train", "--preset", "smoke"], ["sweep", "figure4", "--preset", "smoke"],
                                     ["sweep", "depth", "--preset", "smoke"]])
def test_device_cuda_without_cuda_writes_nothing(tmp_path, command, cli):
    out = tmp_path / "out"
    code, _, stderr = cli(*command, "--device", "cuda", "--out", str(out))
    assert code == 2 and "no CUDA device" in stderr and one_error(stderr)
    assert not out.exists()  # so the corrected re-run (--device cpu) is not refused


def test_library_errors_name_fields_and_the_cli_writes_their_flags():
    """A UsageError names the config fields it is about; the CLI writes each as
    its flag (one mapping, cli._app.flag), and a worker process passes the fields on."""
    from stackedheads.cli._app import flag, flag_text
    from stackedheads.errors import UsageError
    from stackedheads.execution.executors import _worker_error

    e = UsageError("out: 'n_threads' must be >= 1; choose another 'out'", fields=("n_threads", "out"))
    assert flag_text(e) == "out: --threads must be >= 1; choose another --out"  # the bare word (a path) is left
    assert [flag(f) for f in ("few_shot", "n_layers", "formulations", "n_seqs")] == ["--few-shot", "--layers", "--formulation", "--seqs"]
    assert flag("concurrency", "--llm-") == "--llm-concurrency" and flag("n_threads", "--llm-") == "--llm-threads"
    passed = _worker_error(json.dumps({"message": str(e), "fields": e.fields}))
    assert str(passed) == str(e) and passed.fields == e.fields


def test_progress_in_a_log_is_a_line_a_minute(capsys):
    """Where stderr is no terminal (nohup, a scheduler), rich draws nothing until the end: a long
    training says where it is once a minute instead, with its pace and the time left."""
    from stackedheads.cli._app import LOG_EVERY_S, _LogProgress

    now = [100.0]
    log = _LogProgress(clock=lambda: now[0])
    update = log.factory("train sec8")
    capsys.readouterr()
    for step in range(2001, 2101):  # a resumed run: the pace counts from this process's first step
        now[0] += 2.0
        update(step, 24_000)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == int(99 * 2.0 // LOG_EVERY_S)
    assert lines[0].startswith("train sec8: 2,031/24,000 (8%), 2 s each, 12h12m left"), lines
    update(24_000, 24_000)  # the end is always said
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("train sec8: 24,000/24,000 (100%)") and last.endswith(" s each, done")
    near = log.factory("near the end")
    near(23_990, 24_000)
    now[0] += LOG_EVERY_S
    near(23_998, 24_000)  # 7.5 s each: 15 s left
    assert capsys.readouterr().err.splitlines()[-1].endswith(", under a minute left")
    unknown = log.factory("no total")  # a total of 0: a line a minute, never one per call
    for step in range(1, 41):  # 80 s: the first call starts the clock, a line at 60 s
        now[0] += 2.0
        unknown(step, 0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "done" not in lines[0] and "left" not in lines[0], lines
