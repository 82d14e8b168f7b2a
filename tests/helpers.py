"""Helpers shared by the tests of several modules: a scriptable OpenAI-compatible server on
127.0.0.1 (never another address), a backend that always answers right, checks that an error
is one line and that no secret reached a file or the screen, and minimal run folders."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prompt_solver import solve

from stackedheads.llm.backends import Generation
from stackedheads.llm.bench import BenchConfig

SECRET = "sk-test-REDACTME-9f8e7d6c5b4a"
URL_PASSWORD = "urlpw-HIDDEN-31337"

# llm-bench against --base-url: two questions, at most two draws each, one retry.
BENCH = ["llm-bench", "--backend", "openai", "--model", "m", "--formulation", "equations", "--depth", "2",
         "--n", "2", "--max-draws", "2", "--max-retries", "1"]


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
    right answer, ``text_of(solution)``); ``n`` counts requests from 0. The answers come from
    this module's ``solve`` (a test may monkeypatch it)."""

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


FIXED_CFG = BenchConfig(formulations=("equations",), depths=(2,), n=3)


def reproduce_folder(tmp_path: Path) -> Path:
    """A reproduce folder with its config.json (the smoke preset, no LLM) and no stage yet."""
    from dataclasses import asdict

    from stackedheads.presets import REPRODUCE as PRESETS

    run = tmp_path / "rep"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"preset": asdict(PRESETS["smoke"]), "llm": None}))
    return run


def train_config(**over) -> dict:
    """The smoke preset's config.json, with ``over`` replaced."""
    from stackedheads import presets

    return {**presets.get("smoke").to_dict(), **over}
