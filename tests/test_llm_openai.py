"""The openai backend's requests: the timeout bounds a whole request, and the API key (and any
credential in the base URL) never reaches the screen or a file, nor rewrites what a run writes."""

from __future__ import annotations

import json

import pytest
from helpers import LocalServer, Server, one_error, one_request


class DripServer(LocalServer):
    """Answers 200 with a Content-Length, then one body byte every ``every`` s: each read
    arrives well within any per-read timeout, so only a bound on the whole request stops it.
    The drip ends when the server closes."""

    def __init__(self, every: float = 0.2, body: bytes = b"{" + b" " * 60 + b"}"):
        super().__init__()
        self.every, self.body = every, body

    def respond(self, handler, n, body):
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(self.body)))
        handler.end_headers()
        for i in range(len(self.body)):
            handler.wfile.write(self.body[i:i + 1])
            handler.wfile.flush()
            if self.closing.wait(self.every):  # the server's pace, not the test's wait
                return


def test_timeout_bounds_the_whole_request_not_each_read(monkeypatch):
    """A server dripping a byte every 0.5 s held one `--timeout 3` request for 50.6 s. Timeout:
    the bound on a request is the thing tested (the reply takes 12 s to drip, the bound is 1 s)."""
    from stackedheads.llm.backends import BackendError, OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with DripServer() as srv:
        backend = OpenAIBackend("m", srv.url, timeout=1.0, max_retries=0)
        # Only the bound under test ends the request: the client's per-read timeout (also 1 s)
        # could win were the drip stalled for a second on a loaded machine.
        backend._client = backend._client.with_options(timeout=600)
        with pytest.raises(BackendError, match=r"giving up after 1 attempts: Timeout: no whole reply within 1 s"):
            one_request(backend)
    assert srv.count == 1


def test_a_fragment_in_the_base_url_is_redacted_like_the_query(tmp_path, monkeypatch, cli):
    secret = "tokenINfragment-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0000")
    out = tmp_path / "b"
    with Server() as srv:
        code, stdout, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "-d", "1",
                                "--n", "1", "--max-draws", "1", "--base-url", f"{srv.url}#{secret}", "--out", out)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["invocations"][0]["backend"]["base_url"].endswith("/v1#***")
    for p in out.rglob("*"):
        assert secret.encode() not in p.read_bytes(), p
    assert secret not in stdout + err


def test_a_url_password_equal_to_an_answer_word_costs_no_answer(tmp_path, monkeypatch, cli):
    """A secret equal to an answer word (here a password in the base URL) made every answer *** before it was scored; then samples.jsonl stored that
    answer as ***, losing which answer was given. Answers are scored as given and stored as a hash."""
    from stackedheads import errors
    from stackedheads.llm.compare import load_run
    from stackedheads.tasks.prompts import generate_many

    monkeypatch.setattr(errors, "_SECRETS", set())
    questions = generate_many("lives-with", n=12, seed=0)
    word = next(q.answer for q in questions if len(q.answer) >= errors.MIN_SECRET_CHARS)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0000")
    out = tmp_path / "bench"
    with Server() as srv:
        url = srv.url.replace("http://", f"http://user:{word}@")
        code, stdout, err = cli("llm-bench", "--backend", "openai", "--model", "m", "--base-url", url,
                                "--formulation", "lives-with", "--n", "12", "--max-draws", "1", "--out", out)
    assert code == 0, err
    assert word not in stdout + err
    for p in out.rglob("*"):
        if p.name != "samples.jsonl":
            assert word.encode() not in p.read_bytes(), p
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    hit = [r for r in records if r["answer"].startswith("sha256:")]
    assert hit and all(r["final"] == r["answer"] and r["correct"] for r in hit)
    assert all(r["answer"] != "***" and r["final"] != "***" for r in records)
    # The word stays where the run wrote it (its prompts): hiding it there would rewrite them.
    assert all(word not in json.dumps({k: v for k, v in r.items() if k != "prompt"}) for r in records)
    assert any(word in json.dumps(r["prompt"]) for r in hit)
    assert load_run(out)["per_formulation"]["lives-with"]["correct"] == 12  # re-read, not trusted
    # A short secret is none: redacting it would corrupt ordinary words.
    errors.register_secret("Paris")
    assert errors.redact_secrets("Paris") == "Paris"


# --- the API key itself ------------------------------------------------------------------------------

BENCH_ONE = ["llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "-d", "1", "--n", "1", "--max-draws", "1"]


@pytest.mark.parametrize("key, says", [
    ("sk-abcdef0123456789\n", "holds a space, tab, newline"),
    ("sk-abcdef\t0123456789", "holds a space, tab, newline"),
    ("sk-abc def-0123456789", "holds a space, tab, newline"),
    ("sk-ключ-0123456789", "holds a character outside ASCII"),
])
def test_a_key_no_request_can_carry_is_one_line_before_any_request(tmp_path, monkeypatch, cli, key, says):
    """A newline or tab ended in "Connection error" after 6 attempts, a non-ASCII key in an
    ascii codec message."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "b"
    with Server() as srv:
        code, stdout, err = cli(*BENCH_ONE, "--base-url", srv.url, "--out", out)
        code_r, stdout_r, err_r = cli("reproduce", "--preset", "smoke", "--out", tmp_path / "r", "--llm-backend", "openai",
                                      "--llm-model", "m", "--llm-base-url", srv.url)
    assert code == 2 and one_error(err) and f"the API key in $OPENAI_API_KEY {says}" in err, err
    assert code_r == 2 and one_error(err_r) and says in err_r, err_r
    assert srv.count == 0
    assert key.strip() not in stdout + err + stdout_r + err_r
    assert not out.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("key", ["sk-local-secret", "accuracy", "formulation", "12345678", "max_draws"])
def test_a_key_a_local_server_uses_is_sent_hidden_from_replies_and_rewrites_nothing(tmp_path, monkeypatch, cli, key):
    """A key of letters and dashes without a digit ("sk-local-secret", how a vLLM or llama.cpp
    server may be keyed) was refused before any request. Any key a request can carry is sent; a
    server's reply that echoes it is stored without it; the run's own words stay as they are,
    even where the key is one of them (results.json's "accuracy")."""
    from stackedheads import errors

    monkeypatch.setattr(errors, "_SECRETS", set())
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "b"

    def echo(n, body, headers):  # answers, saying the key it was sent as a word of its own
        sent = {k.lower(): v for k, v in headers.items()}["authorization"].removeprefix("Bearer ")
        text = f"{sent} said: x"
        return 200, {"Content-Type": "application/json"}, json.dumps(
            {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()

    with Server(echo) as srv:
        code, stdout, err = cli(*BENCH_ONE, "--base-url", srv.url, "--out", out)
    assert code == 0, err
    assert srv.auth == [f"Bearer {key}"]
    record = json.loads((out / "samples.jsonl").read_text())
    assert record["draws"][0]["text"].startswith("*** said")  # the echo, hidden as a whole token
    results = json.loads((out / "results.json").read_text())
    assert "accuracy" in results["cells"][0] and "***" not in (out / "results.json").read_text()
    if key == "sk-local-secret":  # no word of the run: nowhere at all
        for p in out.rglob("*"):
            assert key.encode() not in p.read_bytes(), p
        assert key not in stdout + err


def test_a_key_as_a_whole_token_is_hidden_but_not_inside_another_word():
    from stackedheads import errors

    errors.register_secret("sk-local-secret")
    assert errors.redact("Bearer sk-local-secret, and 'sk-local-secret'.") == "Bearer ***, and '***'."
    assert errors.redact("sk-local-secrets x-sk-local-secret") == "sk-local-secrets x-sk-local-secret"
    assert errors.redact_written("accuracy sk-local-secret") == "accuracy sk-local-secret"  # kept out at its sources


def test_a_key_given_as_the_model_is_refused_before_anything_is_written(tmp_path, monkeypatch, cli):
    """`--model sk-FAKEkey9876543210zz` with that key in $OPENAI_API_KEY put the key in
    samples.jsonl, figure2.svg, the printed table and a folder's name."""
    key = "sk-FAKEkey9876543210zz"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    for model in (key, f"org/{key}"):
        out = tmp_path / "o"
        with Server() as srv:
            code, stdout, err = cli("llm-bench", "--backend", "openai", "--model", model, "--base-url", srv.url,
                                    "-f", "equations", "--n", "2", "--out", out)
        assert code == 2 and one_error(err) and "--model holds the API key in $OPENAI_API_KEY" in err, err
        assert key not in stdout + err and srv.count == 0 and not out.exists()


@pytest.mark.parametrize("key", ["EMPTY", "token-abc123", "Zq" * 16])
def test_a_key_that_is_no_word_of_the_run_is_hidden_and_rewrites_nothing(tmp_path, monkeypatch, cli, key):
    """A placeholder under 8 characters is sent and never redacted; a key that mixes letters and
    digits, or of 32 characters, is redacted wherever it appears; the run's own text is intact."""
    from stackedheads import errors

    monkeypatch.setattr(errors, "_SECRETS", set())
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "b"
    with Server() as srv:
        code, stdout, err = cli(*BENCH_ONE, "--base-url", srv.url, "--out", out)
    assert code == 0, err
    assert srv.auth == [f"Bearer {key}"]
    results = json.loads((out / "results.json").read_text())
    assert "accuracy" in results["cells"][0] and "***" not in (out / "results.json").read_text()
    assert (key in errors._SECRETS) == (len(key) >= errors.MIN_SECRET_CHARS)


@pytest.mark.parametrize("option, value, says", [
    ("--concurrency", 100_000, "--concurrency must be at most 256"),
    ("--concurrency", 0, "--concurrency must be >= 1, got 0"),
    ("--max-retries", 1_000_000, "--max-retries must be at most 20"),
    ("--max-retries", -1, "--max-retries must be >= 0, got -1"),
])
def test_concurrency_and_retries_are_bounded(tmp_path, monkeypatch, cli, option, value, says):
    """`--concurrency 100000` and `--max-retries 1000000` are refused: both are bounded."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0000")
    out = tmp_path / "b"
    code, _, err = cli(*BENCH_ONE, "--base-url", "http://127.0.0.1:9/v1", option, value, "--out", out)
    assert code == 2 and one_error(err) and says in err and f"got {value}" in err, err
    assert not out.exists()
    llm_option = option.replace("--", "--llm-")
    if llm_option == "--llm-concurrency":  # reproduce takes --llm-concurrency, not --llm-max-retries
        code, _, err = cli("reproduce", "--preset", "smoke", "--out", tmp_path / "r", "--llm-backend", "openai",
                           "--llm-model", "m", "--llm-base-url", "http://127.0.0.1:9/v1", llm_option, value)
        assert code == 2 and one_error(err) and says.replace(option, llm_option) in err, err
        assert not (tmp_path / "r").exists()


def test_the_api_applies_the_same_bounds():
    from stackedheads.errors import UsageError
    from stackedheads.llm.backends import OpenAIBackend, make_backend

    for build in (lambda: OpenAIBackend("m", "http://127.0.0.1:9/v1", concurrency=100_000),
                  lambda: OpenAIBackend("m", "http://127.0.0.1:9/v1", max_retries=1_000_000),
                  lambda: make_backend("openai", "m", base_url="http://127.0.0.1:9/v1", concurrency=True)):
        with pytest.raises(UsageError):
            build()


def test_a_model_name_that_is_not_utf8_is_one_line_before_any_request(tmp_path, monkeypatch, cli):
    """A non-UTF-8 --model was retried 6 times and blamed on the server."""
    import os

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0000")
    with Server() as srv:
        code, _, err = cli("llm-bench", "--backend", "openai", "--model", os.fsdecode(b"m\xff"), "--base-url", srv.url,
                           "-f", "equations", "--n", "1", "--out", tmp_path / "o")
    assert code == 2 and one_error(err) and "--model holds bytes that are not UTF-8" in err, err
    assert srv.count == 0 and not (tmp_path / "o").exists()
