"""Reliability (issue 15): secrets never shown or written, malformed server replies, resumed
answers that must match the run, output folders locked against a second process, damaged
state files, filesystem errors, path components read from files, and size caps.

Servers here are real HTTP servers on 127.0.0.1 (never another address); the CLI runs
in-process through ``stackedheads.cli.main`` so that stdout, stderr and the exit code are
exactly what a user sees.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prompt_solver import solve  # noqa: E402

from stackedheads import storage  # noqa: E402
from stackedheads.errors import UsageError, public_url, redact, register_secret  # noqa: E402
from stackedheads.llm import backends, bench  # noqa: E402
from stackedheads.llm.backends import BackendError, Generation, OpenAIBackend, Request  # noqa: E402
from stackedheads.llm.bench import BenchConfig  # noqa: E402

SECRET = "sk-test-REDACTME-9f8e7d6c5b4a"
URL_PASSWORD = "urlpw-HIDDEN-31337"


# --- a scriptable OpenAI-compatible server on 127.0.0.1 ----------------------------------------------


def _answer_payload(body: dict, text_of) -> dict:
    if "messages" in body:
        text = text_of(solve(body["messages"][-1]["content"]))
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    prompt = body["prompt"].rsplit("Question: ", 1)[1][: -len("\nAnswer:")]
    return {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "text": " " + text_of(solve(prompt)), "finish_reason": "stop", "logprobs": None}]}


class Server:
    """``reply(n, body, headers) -> (status, headers, bytes) | None`` per request (None: the
    right answer, ``text_of(solution)``); ``n`` counts requests from 0."""

    def __init__(self, reply=None, text_of=None):
        self.reply = reply or (lambda n, body, headers: None)
        self.text_of = text_of or (lambda sol: sol.answer)
        self.count = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    n = outer.count
                    outer.count += 1
                step = outer.reply(n, body, dict(self.headers))
                if step is None:
                    step = (200, {"Content-Type": "application/json"}, json.dumps(_answer_payload(body, outer.text_of)).encode())
                status, headers, payload = step
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def echo_headers(status: int):
    """An error reply whose body echoes the request headers (as some proxies do)."""

    def reply(n, body, headers):
        payload = json.dumps({"error": {"message": f"bad request; you sent {headers}", "type": "x"}}).encode()
        return status, {"Content-Type": "application/json"}, payload

    return reply


def one_error(stderr: str) -> bool:
    """Exactly one error line and no traceback (progress bars may share stderr)."""
    return "Traceback" not in stderr and sum(line.startswith("stackedheads: error") for line in stderr.splitlines()) == 1


def assert_nowhere(secrets: list[str], folder: Path, *texts: str) -> None:
    """No secret in any file under ``folder`` nor in any text shown."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    for s in secrets:
        for p in files:
            assert s.encode() not in p.read_bytes(), p
        for t in texts:
            assert s not in t


BENCH = ["llm-bench", "--backend", "openai", "--model", "m", "--formulation", "equations", "--depth", "2",
         "--n", "2", "--max-draws", "2", "--max-retries", "1"]


# --- 1. secrets --------------------------------------------------------------------------------------


def test_redact_key_headers_and_url_credentials():
    register_secret("sk-unit-ABCDEFG")
    text = redact("{'Authorization': 'Bearer sk-unit-ABCDEFG', 'api-key': 'zzz1234'} http://u:p4ss@h/v1")
    assert "sk-unit-ABCDEFG" not in text and "zzz1234" not in text and "p4ss" not in text
    assert public_url("http://me:pw-XYZ12345@127.0.0.1:8/v1") == "http://127.0.0.1:8/v1"
    assert "pw-XYZ12345" not in redact("the password pw-XYZ12345 echoed")
    assert redact("answer: 42, author: bob") == "answer: 42, author: bob"  # ordinary text kept
    register_secret("EMPTY")  # a local server's placeholder key is no secret: text stays intact
    assert redact("EMPTY cells") == "EMPTY cells"


def test_error_echoing_headers_never_shows_the_key(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    with Server(echo_headers(400)) as srv:
        code, stdout, stderr = cli(*BENCH, "--base-url", srv.url, "--out", str(out))
    assert code == 1
    assert "HTTP 400" in stderr and one_error(stderr)
    assert "Bearer ***" in stderr  # the echo is there, its value is not
    assert_nowhere([SECRET], tmp_path, stdout, stderr)


def test_answers_echoing_headers_and_url_credentials_never_written(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    seen = []

    def reply(n, body, headers):
        seen.append(headers.get("Authorization", ""))
        return None

    with Server(reply, text_of=lambda sol: f"{sol.answer}\nAuthorization: Bearer {SECRET} api-key={SECRET}") as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli(*BENCH, "--base-url", url, "--out", str(out))
    assert code == 0, stderr
    assert seen  # the server was asked...
    results = json.loads((out / "results.json").read_text())
    assert results["cells"][0]["accuracy"] == 1.0  # ...answered through the echo...
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)  # ...and nothing leaked
    config = json.loads((out / "config.json").read_text())
    assert config["invocations"][0]["backend"]["base_url"] == f"http://127.0.0.1:{srv.port}/v1"


@pytest.mark.slow
def test_reproduce_server_error_is_one_line_and_secret_free(tmp_path, monkeypatch, cli):
    """A server that is down (or echoes headers) during `reproduce`: one line, no traceback."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "rep"
    args = ["reproduce", "--preset", "smoke", "--out", str(out), "--llm-backend", "openai", "--llm-model", "m",
            "--skip", "figure4", "--skip", "circuits", "--skip", "emergence"]
    with Server(echo_headers(401)) as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli(*args, "--llm-base-url", url)
    assert code == 1 and "Traceback" not in stderr
    assert one_error(stderr) and "HTTP 401" in stderr
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)
    port = srv.port
    code, stdout, stderr = cli(*args, "--llm-base-url", f"http://127.0.0.1:{port}/v1")  # nobody listens now
    assert code == 1 and "Traceback" not in stderr and one_error(stderr)
    assert "giving up" in stderr


@pytest.mark.slow
def test_reproduce_never_writes_url_credentials(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "rep"
    with Server(text_of=lambda sol: f"{sol.answer}\n{{'authorization': 'Bearer {SECRET}'}}") as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--llm-backend", "openai", "--llm-model", "m",
             "--llm-base-url", url, "--skip", "figure4", "--skip", "circuits", "--skip", "emergence")
    assert code == 0, stderr
    written = [p.name for p in out.rglob("*") if p.is_file()]
    assert {"samples.jsonl", "config.json", "done.json", "summary.json", "index.html"} <= set(written)
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)


def test_unexpected_error_traceback_is_redacted(monkeypatch, cli):
    register_secret(SECRET)

    def boom(*a, **k):
        raise RuntimeError(f"a bug that mentions Bearer {SECRET}")

    monkeypatch.setattr("stackedheads.theory.theory_table", boom)
    code, stdout, stderr = cli("theory", "--max-depth", "3")
    assert code == 1 and "Traceback" in stderr and "RuntimeError" in stderr  # a bug keeps its traceback
    assert SECRET not in stderr


def test_state_files_never_hold_a_registered_secret(tmp_path):
    register_secret(SECRET)
    storage.atomic_write_json(tmp_path / "x.json", {"note": f"key {SECRET}"})
    assert SECRET not in (tmp_path / "x.json").read_text()


# --- 7, 13. malformed replies, Retry-After, sizes -------------------------------------------------


MALFORMED = {
    "invalid json": (200, {"Content-Type": "application/json"}, b'{"choices": [ nope'),
    "no choices": (200, {"Content-Type": "application/json"},
                   json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}).encode()),
    "json array": (200, {"Content-Type": "application/json"}, b"[1, 2, 3]"),
    "html": (200, {"Content-Type": "text/html"}, b"<html><body>502 from the proxy</body></html>"),
}


def _one(backend: OpenAIBackend) -> Generation:
    import asyncio

    req = Request(None, "Question: x\nAnswer:", 1.0, 8, 0)
    backend.mode = "completion"

    async def go():
        try:
            return await backend.complete(req)
        finally:
            await backend.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_reply_retried_then_one_error(kind, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    with Server(lambda n, body, headers: MALFORMED[kind]) as srv:
        with pytest.raises(BackendError, match="giving up after 3 attempts: malformed reply"):
            _one(OpenAIBackend("m", srv.url, max_retries=2, backoff_base=0.001))
    assert srv.count == 3


def test_malformed_reply_once_is_retried_and_succeeds(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    script = lambda n, body, headers: MALFORMED["html"] if n == 0 else None  # noqa: E731
    monkeypatch.setattr(sys.modules[__name__], "solve", lambda prompt: None)  # "x" is no real question
    with Server(script, text_of=lambda sol: "7") as srv:
        gen = _one(OpenAIBackend("m", srv.url, max_retries=2, backoff_base=0.001))
    assert gen.text == " 7" and gen.retries == 1


def test_malformed_replies_in_the_cli_keep_answered_questions(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    out = tmp_path / "run"
    args = [*BENCH[:9], "--n", "4", "--max-draws", "1", "--temperature", "0", "--max-retries", "1", "--out", str(out)]
    with Server(lambda n, body, headers: MALFORMED["json array"] if n >= 2 else None) as srv:
        code, stdout, stderr = cli(*args, "--base-url", srv.url)
    assert code == 1 and "Traceback" not in stderr and one_error(stderr)
    assert "malformed reply" in stderr and "kept" in stderr
    assert len(bench.load_records(out / "samples.jsonl")) == 2  # the two answered questions stay
    with Server() as srv:  # a healthy server: the run resumes and asks only the rest
        code, stdout, stderr = cli(*args, "--base-url", srv.url)
    assert code == 0, stderr
    assert srv.count == 2 and len(bench.load_records(out / "samples.jsonl")) == 4


def test_retry_after_is_capped_and_said(monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setattr(backends._base, "MAX_RETRY_AFTER_S", 0.01)  # the test must not wait 120 s
    monkeypatch.setattr(sys.modules[__name__], "solve", lambda prompt: None)
    script = lambda n, body, headers: (429, {"Retry-After": "100000", "Content-Type": "application/json"}, b"{}") if n == 0 else None  # noqa: E731
    with Server(script, text_of=lambda sol: "ok") as srv:
        gen = _one(OpenAIBackend("m", srv.url, max_retries=2, backoff_base=0.001))
    assert gen.retries == 1
    err = capsys.readouterr().err
    assert "asked to wait 100000 s" in err and "instead" in err


def test_huge_answers_are_capped_and_stored_once(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    huge = "x" * 1_000_000
    cfg = BenchConfig(formulations=("equations",), depths=(2,), n=2, max_draws=2)
    with Server(text_of=lambda sol: huge) as srv:  # ignores max_tokens: 1 MB per draw
        bench.run_bench(OpenAIBackend("m", srv.url), cfg, tmp_path)
    size = (tmp_path / "samples.jsonl").stat().st_size
    assert size < 4 * (backends.MAX_TEXT_CHARS + 3000)  # 4 draws, each stored once and capped
    rec = next(iter(bench.load_records(tmp_path / "samples.jsonl").values()))
    assert rec["draws"][0]["text"] == "x" * backends.MAX_TEXT_CHARS + "...[998000 more characters dropped]"
    assert (tmp_path / "results.json").stat().st_size < 20_000


# --- 5. resumed answers must match the run -------------------------------------------------------------


class Fixed:
    """A backend that always answers correctly (solving the prompt)."""

    name = "fake"
    max_concurrency = 1

    def __init__(self, model="a", mode="chat"):
        self.model, self.mode, self.calls = model, mode, 0

    async def complete(self, request):
        self.calls += 1
        text = request.messages[-1][1] if request.messages else request.prompt.rsplit("Question: ", 1)[1][: -len("\nAnswer:")]
        return Generation(solve(text).answer, 0.0, "stop")

    async def aclose(self):
        pass


CFG = BenchConfig(formulations=("equations",), depths=(2,), n=3)


def test_samples_without_config_from_another_model_are_refused(tmp_path):
    bench.run_bench(Fixed("a"), CFG, tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match="answers of another run.*model"):
        bench.run_bench(Fixed("b"), CFG, tmp_path)
    assert not (tmp_path / "config.json").exists()  # nothing recorded by the refused run
    other = BenchConfig(formulations=("equations",), depths=(2,), n=3, few_shot=1)
    with pytest.raises(UsageError, match="few_shot"):
        bench.run_bench(Fixed("a"), other, tmp_path)
    with pytest.raises(UsageError, match="mode"):
        bench.run_bench(Fixed("a", mode="completion"), CFG, tmp_path)
    same = Fixed("a")
    bench.run_bench(same, CFG, tmp_path)  # the same run resumes: nothing asked again
    assert same.calls == 0


def test_old_records_without_identity_need_config(tmp_path):
    bench.run_bench(Fixed("a"), CFG, tmp_path)
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    stripped = []
    for line in lines:  # records as an older version wrote them
        rec = json.loads(line)
        for k in ("protocol", "few_shot", "temperature", "max_draws", "max_tokens"):
            rec.pop(k)
        stripped.append(json.dumps(rec))
    (tmp_path / "samples.jsonl").write_text("\n".join(stripped) + "\n")
    again = Fixed("a")
    bench.run_bench(again, CFG, tmp_path)  # config.json vouches for them
    assert again.calls == 0
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match="not recorded"):
        bench.run_bench(Fixed("a"), CFG, tmp_path)


# --- 11. damaged records and state files --------------------------------------------------------------


def test_sample_record_missing_a_key_is_asked_again(tmp_path):
    bench.run_bench(Fixed("a"), CFG, tmp_path)
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    del rec["correct"]
    lines[0] = json.dumps(rec)
    (tmp_path / "samples.jsonl").write_text("\n".join(lines) + "\n")
    again = Fixed("a")
    res = bench.run_bench(again, CFG, tmp_path)
    assert again.calls == 1 and res["cells"][0]["n"] == 3


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"identity": 3}'])
def test_damaged_bench_config_is_one_line(tmp_path, content, capsys, monkeypatch):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(UsageError, match="config.json"):
        bench.run_bench(Fixed("a"), CFG, tmp_path)


def _circuit(**over):
    heads = [{"layer": 0, "head": 0, "rules": "uniform", "paths": []},
             {"layer": 1, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}]
    d = {"depth": 2, "heads": heads, "info": {}}
    d.update(over)
    return d


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["heads"][1]["rules"].update(first="s+99"), "unknown rule"),
        (lambda d: d["heads"][0].update(rules="sometimes"), "unknown kind"),
        (lambda d: d["heads"][1].update(paths=[[9, 0]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[-2, 0]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[1, -3]]), "out of range"),
        (lambda d: d["heads"][1].update(paths=[[1]]), "a path must be"),
        (lambda d: d["heads"][0].update(layer=-1), "layer and head"),
        (lambda d: d.update(depth="2"), "depth"),
        (lambda d: d.update(heads={}), "heads"),
        (lambda d: d["heads"][1].update(rules=["s-1"]), "rules must be"),
    ],
)
def test_circuit_schema_validated_on_load(tmp_path, mutate, message):
    from stackedheads.circuits.ablate import Circuit

    good = tmp_path / "good.json"
    good.write_text(json.dumps(_circuit()))
    assert Circuit.load(good).paths() == [(1, 0, 1, 0)]
    d = _circuit()
    mutate(d)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(UsageError, match=message):
        Circuit.load(bad)


def test_circuit_sink_path_is_valid(tmp_path):
    from stackedheads.circuits.ablate import SINK, Circuit

    d = _circuit()
    d["heads"][1]["paths"] = [[1, SINK]]
    (tmp_path / "c.json").write_text(json.dumps(d))
    assert Circuit.load(tmp_path / "c.json").paths() == [(1, 0, 1, SINK)]


def test_damaged_reproduce_state_is_one_line(tmp_path, cli):
    out = tmp_path / "rep"
    args = ["reproduce", "--preset", "smoke", "--out", str(out), "--skip", "llm", "--skip", "figure4",
            "--skip", "circuits", "--skip", "emergence", "--skip", "prompts"]
    code, _, stderr = cli(*args)
    assert code == 0, stderr
    (out / "theory" / "done.json").write_text('{"rows": 6, "fi')  # cut off by a full disk
    code, _, stderr = cli(*args)
    assert code == 2 and "done.json is damaged" in stderr and "delete it" in stderr
    assert one_error(stderr)
    (out / "theory" / "done.json").write_text("{}")  # valid JSON, wrong shape
    code, _, stderr = cli(*args)
    assert code == 2 and "done.json is damaged" in stderr and one_error(stderr)
    (out / "theory" / "done.json").unlink()
    (out / "config.json").write_text("[]")
    code, _, stderr = cli(*args)
    assert code == 2 and "config.json has the wrong shape" in stderr


# --- 4. atomic writes -----------------------------------------------------------------------------


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    storage.atomic_write_json(path, {"v": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage.os, "fsync", full)
    with pytest.raises(OSError):
        storage.atomic_write_json(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left behind


# --- 10. filesystem errors ------------------------------------------------------------------------


def test_out_is_a_file(tmp_path, cli):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, stderr = cli("prompts", "-f", "equations", "--out", str(f / "q.jsonl"))
    assert code == 2 and "Traceback" not in stderr and str(f) in stderr
    code, _, stderr = cli("theory", "--max-depth", "3", "--out", str(f))
    assert code == 2 and "Traceback" not in stderr and one_error(stderr)


def test_spec_is_a_folder(tmp_path, cli):
    code, _, stderr = cli("circuit", "validate", str(tmp_path), "--spec", str(tmp_path))
    assert code == 2 and "is a folder" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("err, code", [(errno.EROFS, 2), (errno.EACCES, 2), (errno.ENOSPC, 1), (errno.EIO, 1)])
def test_write_failures_are_one_line(tmp_path, monkeypatch, err, code, cli):
    """A read-only folder, no permission (we may run as root: simulated), a full disk, an I/O error."""

    def fail(path, data):
        raise OSError(err, __import__("os").strerror(err), str(path))

    monkeypatch.setattr(storage, "atomic_write_bytes", fail)
    got, _, stderr = cli("prompts", "-f", "equations", "--out", str(tmp_path / "q.jsonl"))
    assert got == code and "Traceback" not in stderr and one_error(stderr)
    assert "q.jsonl" in stderr


# --- 2. locks ----------------------------------------------------------------------------------------


@pytest.fixture
def held(tmp_path):
    """Hold the lock of a folder from a second process until the test ends."""
    procs = []

    def hold(folder: Path):
        code = textwrap.dedent(f"""
            import sys, time
            from stackedheads.storage import FolderLock
            with FolderLock({str(folder)!r}):
                print("held", flush=True)
                sys.stdin.read()
        """)
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "held"
        procs.append(p)
        return p

    yield hold
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


def test_lock_held_by_another_process(tmp_path, held):
    p = held(tmp_path / "x")
    with pytest.raises(UsageError, match=f"in use by pid {p.pid}"):
        with storage.FolderLock(tmp_path / "x"):
            pass
    with storage.FolderLock(tmp_path / "y", reentrant=True):  # a job runner around train()
        with storage.FolderLock(tmp_path / "y"):
            pass
        assert (tmp_path / "y" / ".lock").exists()
    with storage.FolderLock(tmp_path / "z"):  # by default even this process is refused
        with pytest.raises(UsageError, match="in use by pid"):
            with storage.FolderLock(tmp_path / "z"):
                pass
    with storage.FolderLock(tmp_path / "z"):  # and every lock was released
        pass


def test_llm_bench_folder_locked(tmp_path, held):
    held(tmp_path)
    with pytest.raises(UsageError, match="in use by pid"):
        bench.run_bench(Fixed("a"), CFG, tmp_path)
    assert not (tmp_path / "samples.jsonl").exists()


def test_reproduce_folder_locked(tmp_path, held, cli):
    held(tmp_path / "rep")
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--skip", "llm")
    assert code == 2 and "in use by pid" in stderr
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [".lock"]


def test_sweep_folder_locked(tmp_path, held):
    from stackedheads import sweep

    held(tmp_path / "sw")
    with pytest.raises(UsageError, match="in use by pid"):
        sweep.run_figure4(presets.figure4("smoke"), tmp_path / "sw")
    assert not (tmp_path / "sw" / "sweep.json").exists()


def test_discover_and_emergence_folders_locked(tmp_path, held):
    from stackedheads.circuits.discover import discover_run
    from stackedheads.emergence import emergence_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(_train_config()))
    held(tmp_path / "c")
    with pytest.raises(UsageError, match="in use by pid"):
        discover_run(run, tmp_path / "c")
    held(tmp_path / "e")
    with pytest.raises(UsageError, match="in use by pid"):
        emergence_run(run, tmp_path / "e", n_seqs=4)


# --- 8, 9, 12. options and values read from files ----------------------------------------------------


def _train_config(**over) -> dict:
    from stackedheads import presets

    return {**presets.get("smoke").to_dict(), **over}


def test_emergence_seeds_from_config_never_become_paths(tmp_path):
    from stackedheads.emergence import emergence_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(_train_config(seeds=["../../escape"])))
    with pytest.raises(UsageError, match="seeds must be a non-empty list of integers"):
        emergence_run(run, tmp_path / "out", n_seqs=4)
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escape").exists()
    with pytest.raises(UsageError):
        storage.safe_component("../x", "a name")
    assert storage.safe_component("seed3", "a name") == "seed3"


@pytest.mark.parametrize("seqs", ["0", "-120"])
def test_emergence_seqs_validated_before_writing(tmp_path, seqs, cli):
    out = tmp_path / "out"
    code, _, stderr = cli("emergence", str(tmp_path), "--out", str(out), "--seqs", seqs)
    assert code == 2 and "--seqs" in stderr and not out.exists()


def test_tolerance_nan_refused(tmp_path, cli):
    out = tmp_path / "out"
    for bad in ("nan", "inf", "-1"):
        code, _, stderr = cli("circuit", "discover", str(tmp_path), "--out", str(out), "--tolerance", bad)
        assert code == 2 and "tolerance" in stderr and not out.exists()


def test_reproduce_llm_concurrency_validated_before_writing(tmp_path, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), "--llm-backend", "openai",
                               "--llm-model", "m", "--llm-concurrency", "0")
    assert code == 2 and "--llm-concurrency" in stderr and not out.exists()


# --- 13, 14. limits ------------------------------------------------------------------------------------


def test_theory_and_prompts_limits(cli):
    code, _, stderr = cli("theory", "--max-depth", "100000")
    assert code == 2 and "between 1 and 200" in stderr
    code, _, stderr = cli("prompts", "-f", "equations", "--n", "10000000")
    assert code == 2 and "between 1 and 100000" in stderr


def test_unreachable_ray_address_fails_fast(capsys):
    pytest.importorskip("ray")
    from stackedheads.executors import RayExecutor

    with Server() as srv:
        port = srv.port
    with pytest.raises(UsageError, match="cannot reach the Ray cluster at 127.0.0.1"):  # nobody listens now
        RayExecutor(f"127.0.0.1:{port}")


def test_garbage_gguf_is_one_line(tmp_path, cli):
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 100)
    code, _, stderr = cli("llm-bench", "--backend", "llamacpp", "--model", str(bad), "--n", "1",
                               "--formulation", "equations", "--out", str(tmp_path / "o"))
    assert code == 2 and "not a usable GGUF model" in stderr and "Traceback" not in stderr


def test_sweep_spec_layers_never_become_paths(tmp_path):
    from stackedheads.claims import sec7

    spec = presets.figure4("smoke").to_dict()
    spec["layers"] = ["../../escape"]
    (tmp_path / "sweep.json").write_text(json.dumps(spec))
    with pytest.raises(UsageError, match="expected an integer"):
        sec7.folder_claims(tmp_path)


def test_sweep_job_in_a_locked_run_folder_logs_no_attempt(tmp_path, held):
    from stackedheads import presets
    from stackedheads.executors import Job, run_dir, run_job

    job = Job("ic-D2-L1", "ic", presets.get("smoke"))
    held(run_dir(tmp_path, job))
    with pytest.raises(UsageError, match="in use by pid"):
        run_job(job, tmp_path)
    assert not (run_dir(tmp_path, job) / "attempts.jsonl").exists()


# --- found in the audit of issue 15 --------------------------------------------------------------------
# Each test below failed before its fix.

import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from stackedheads import presets  # noqa: E402


@pytest.fixture(scope="module")
def ckpt_run(tmp_path_factory):
    """A tiny finished run with every checkpoint (3 layers, 1 head, D=2)."""

    from stackedheads.training import train

    run = tmp_path_factory.mktemp("ckpt") / "run"
    train(presets.SEC9_SMOKE.override(steps=20, ckpt_every=10), run)
    return run


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


# 1. secrets: every file under the test's folder, not only --out, and everything printed.


def test_secret_never_in_any_file_of_the_test_folder(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.chdir(tmp_path)  # anything written relative to the working folder is grepped too
    with Server(echo_headers(500)) as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli(*BENCH, "--base-url", url, "--out", "run")
    assert code == 1 and one_error(stderr) and "HTTP 500" in stderr
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)


# SIGINT: one line and exit 130, never a traceback (typer turns Ctrl-C into a silent exit 130).


@pytest.mark.slow
def test_sigint_during_train_is_one_line(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "stackedheads", "train", "--preset", "smoke", "--steps", "1000000", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        # A test run started in the background inherits SIGINT ignored (POSIX shells do that to
        # background jobs); the user's terminal never does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        metrics = out / "metrics.csv"
        if metrics.exists() and metrics.read_text().count("\n") >= 3:  # training is under way
            break
        time.sleep(0.2)
    stderr = ""
    try:
        for _ in range(3):  # Python drops a Ctrl-C that lands in a weakref callback: press it again
            p.send_signal(signal.SIGINT)
            try:
                _, stderr = p.communicate(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130 and "Traceback" not in stderr
    assert "stackedheads: interrupted" in stderr and "resume" in stderr


def test_interrupt_during_reproduce_is_one_line(tmp_path, monkeypatch, cli):
    from stackedheads import reproduce

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setitem(reproduce.STAGES, "prompts", interrupted)
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--skip", "llm",
                               "--skip", "figure4", "--skip", "circuits", "--skip", "emergence")
    assert code == 130 and "Traceback" not in stderr and "stackedheads: interrupted" in stderr


# 8. options that fail later must fail before anything is written


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", [["train", "--preset", "smoke"], ["sweep", "figure4", "--preset", "smoke"],
                                     ["sweep", "depth", "--preset", "smoke"]])
def test_device_cuda_without_cuda_writes_nothing(tmp_path, command, cli):
    out = tmp_path / "out"
    code, _, stderr = cli(*command, "--device", "cuda", "--out", str(out))
    assert code == 2 and "no CUDA device" in stderr and one_error(stderr)
    assert not out.exists()  # so the corrected re-run (--device cpu) is not refused


@pytest.mark.parametrize(
    "llm, message",
    [
        (["--llm-backend", "bogus", "--llm-model", "m"], "unknown --llm-backend"),
        (["--llm-backend", "openai", "--llm-model", "m", "--llm-mode", "bogus", "--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-mode"),
        (["--llm-backend", "llamacpp", "--llm-model", "nosuchmodel"], "unknown model"),
        (["--llm-backend", "llamacpp", "--llm-model", "smollm2", "--llm-base-url", "http://127.0.0.1:9/v1"], "--llm-base-url"),
        (["--llm-backend", "openai", "--llm-model", "m", "--llm-api-key-env", "STACKEDHEADS_NO_SUCH_VAR"], "no API key"),
    ],
)
def test_reproduce_llm_choice_validated_before_writing(tmp_path, llm, message, cli):
    out = tmp_path / "rep"
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(out), *llm)
    assert code == 2 and message in stderr and one_error(stderr)
    assert not out.exists()


# 10. filesystem errors while training: one line, exit 2 (user) or 1 (environment)


def test_full_disk_while_checkpointing_is_one_line(tmp_path, monkeypatch, cli):
    from safetensors import SafetensorError

    from stackedheads.training import checkpoints

    def full(tensors, filename, metadata=None):
        raise SafetensorError(f'Error while serializing: I/O error: No space left on device (os error 28) at path "{filename}"')

    monkeypatch.setattr(checkpoints, "save_file", full)
    code, _, stderr = cli("train", "--preset", "smoke", "--out", str(tmp_path / "run"))
    assert code == 1 and one_error(stderr) and "No space left on device" in stderr
    assert not list((tmp_path / "run" / "checkpoints").glob("*.tmp"))


@pytest.mark.parametrize("err, code", [(errno.EROFS, 2), (errno.ENOSPC, 1)])
def test_train_state_write_failures_are_one_line(tmp_path, monkeypatch, err, code, cli):
    def fail(path, data):
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr(storage, "atomic_write_bytes", fail)
    got, _, stderr = cli("train", "--preset", "smoke", "--out", str(tmp_path / "run"))
    assert got == code and one_error(stderr) and "config.json" in stderr


# 6, 11. a checkpoint's header (its step and config) is covered by the checksum too


def _mangle_header(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))


def test_damaged_checkpoint_header_is_detected(ckpt_run, tmp_path, cli):
    from stackedheads.training import checkpoint_path, load_model

    run = _copy_run(ckpt_run, tmp_path / "run")
    path = checkpoint_path(run, 20)
    # A config that still parses but describes another model (2 heads of 4 instead of 1 of 8
    # would read the same weights as another architecture), then one that no longer parses.
    _mangle_header(path, b'\\"d_head\\": 8', b'\\"d_head\\": 4')
    with pytest.raises(UsageError, match="checksum"):
        load_model(path)
    _mangle_header(path, b'\\"d_head\\": 4', b'\\"d_head\\": x')
    code, _, stderr = cli("attention", str(run), "--out", str(tmp_path / "maps"))
    assert code == 2 and one_error(stderr) and "step_000020" in stderr


def test_checkpoint_without_header_checksum_with_bad_config_is_one_line(ckpt_run, tmp_path):
    from safetensors.torch import load_file, save_file

    from stackedheads.training import checkpoint_path, load_model

    run = _copy_run(ckpt_run, tmp_path / "run")
    path = checkpoint_path(run, 20)
    tensors = load_file(str(path))
    save_file(tensors, str(path), metadata={"step": "20", "config": '{"task": {"depth": 2'})  # an older file
    with pytest.raises(UsageError, match="damaged"):
        load_model(path)


# 4, 11. a finished run's summary of the wrong shape is rebuilt, in train and in a sweep


def test_summary_of_the_wrong_shape_is_rebuilt(ckpt_run, tmp_path, cli):
    run = _copy_run(ckpt_run, tmp_path / "run")
    good = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text("{}")
    code, _, stderr = cli("train", "--preset", "sec9-smoke", "--steps", "20", "--ckpt-every", "10", "--out", str(run))
    assert code == 0, stderr
    assert json.loads((run / "summary.json").read_text())["seeds"] == good["seeds"]


def test_sweep_rebuilds_a_damaged_run_summary(ckpt_run, tmp_path):
    from stackedheads import sweep
    from stackedheads.executors import Job, run_dir
    from stackedheads.training import TrainConfig

    cfg = TrainConfig.from_dict(json.loads((ckpt_run / "config.json").read_text()))
    job = Job("ic-D2-L3", "ic", cfg)
    folder = _copy_run(ckpt_run, run_dir(tmp_path, job))
    (folder / "summary.json").write_text("")  # what a full disk used to leave
    rows = sweep.job_rows([job], tmp_path)
    assert rows and rows[0]["layers"] == 3
    assert json.loads((folder / "summary.json").read_text())["seeds"]


# 11. claims and report on damaged stage files: one line


def _reproduce_folder(tmp_path: Path) -> Path:
    from dataclasses import asdict

    from stackedheads.presets import REPRODUCE as PRESETS

    run = tmp_path / "rep"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"preset": asdict(PRESETS["smoke"]), "llm": None}))
    return run


@pytest.mark.parametrize("damage", ["summary", "theory"])
def test_claims_and_report_on_damaged_stage_files_are_one_line(tmp_path, damage, cli):
    run = _reproduce_folder(tmp_path)
    if damage == "summary":  # valid JSON of the wrong shape
        train_dir = run / "circuits" / "runs" / "transformers-A-C"
        train_dir.mkdir(parents=True)
        (train_dir / "summary.json").write_text('{"seeds": 3}')
        found = run / "circuits" / "discovered" / "seed0"
        found.mkdir(parents=True)
        (found / "summary.json").write_text('{"n_useful_heads": 2}')
    else:  # a cut-off line
        (run / "theory").mkdir()
        (run / "theory" / "theory.jsonl").write_text('{"depth": 1, "min_layers": 1}\n{"depth": 2, "min_la')
    for command in (["claims", str(run)], ["report", str(run)]):
        code, _, stderr = cli(*command)
        assert code == 2 and one_error(stderr), stderr
        assert ("circuits" if damage == "summary" else "theory.jsonl") in stderr


# 13. the report shows capped text, and a damaged record does not stop it


def test_report_caps_huge_answers_and_skips_damaged_records(tmp_path, cli):
    run = _reproduce_folder(tmp_path)
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


def test_report_command_locks_the_reproduce_folder(tmp_path, held, cli):
    run = _reproduce_folder(tmp_path)
    p = held(run)
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and f"in use by pid {p.pid}" in stderr
    assert not (run / "report").exists()


# 11. a circuit that does not describe the run is refused before it measures anything


@pytest.mark.parametrize("change", ["depth", "layer"])
def test_emergence_refuses_a_circuit_of_another_model(ckpt_run, tmp_path, change, cli):
    heads = [{"layer": layer, "head": 0, "rules": "uniform", "paths": []} for layer in range(3)]
    heads[2] = {"layer": 2, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}
    circuit = {"depth": 2, "heads": heads, "info": {}}
    if change == "depth":  # a circuit of a D=5 run: its indices lie outside this run's sequences
        circuit["depth"], heads[2]["paths"] = 5, [[9, 0]]
    else:  # a layer this model does not have
        heads[2]["layer"] = 7
    (tmp_path / "c" / "seed0").mkdir(parents=True)
    (tmp_path / "c" / "seed0" / "circuit.json").write_text(json.dumps(circuit))
    code, _, stderr = cli("emergence", str(ckpt_run), "--out", str(tmp_path / "e"), "--circuits", str(tmp_path / "c"),
                               "--seqs", "4")
    assert code == 2 and one_error(stderr) and "circuit.json" in stderr


@pytest.mark.parametrize("content", ["{not json", '{"models": [{"model": "a"}]}', '{"models": 3}'])
def test_damaged_llm_comparison_is_one_line(tmp_path, content, cli):
    run = _reproduce_folder(tmp_path)
    (run / "llm").mkdir()
    (run / "llm" / "comparison.json").write_text(content)
    for command in (["claims", str(run)], ["report", str(run)]):
        code, _, stderr = cli(*command)
        assert code == 2 and one_error(stderr) and "comparison.json" in stderr, stderr


@pytest.mark.parametrize("content", ["{}", "[]", '{"wall_s": "soon"}'])
def test_report_on_a_done_marker_of_the_wrong_shape_is_one_line(tmp_path, content, cli):
    run = _reproduce_folder(tmp_path)
    (run / "theory").mkdir()
    (run / "theory" / "done.json").write_text(content)
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and "done.json" in stderr, stderr


def test_report_on_a_circuit_summary_of_the_wrong_shape_is_one_line(tmp_path, cli):
    run = _reproduce_folder(tmp_path)
    found = run / "circuits" / "discovered" / "seed0"
    found.mkdir(parents=True)
    (found / "summary.json").write_text('{"budgets": [0.1]}')  # no losses
    code, _, stderr = cli("report", str(run))
    assert code == 2 and one_error(stderr) and "circuits" in stderr, stderr


def test_few_shot_is_bounded(tmp_path, cli):
    """--few-shot 100000000 built a prompt of gigabytes for minutes before asking anything."""
    code, _, stderr = cli(*BENCH, "--few-shot", "100000000", "--base-url", "http://127.0.0.1:9/v1",
                               "--out", str(tmp_path / "o"))
    assert code == 2 and one_error(stderr) and "--few-shot" in stderr and not (tmp_path / "o").exists()
