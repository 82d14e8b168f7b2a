"""Helpers shared by the tests of several modules: local HTTP servers on 127.0.0.1 (never
another address), one of them a scriptable OpenAI-compatible server, a port nobody listens on,
a backend that always answers right, checks that an error is one line and that no secret
reached a file or the screen, and minimal run folders."""

from __future__ import annotations

import contextlib
import json
import socket
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


# Bounds on waits for a client that is expected to act: they only turn a client that never
# does (a bug) into a failure, so they are far above anything a loaded machine takes.
CLIENT_BOUND_S = 120


class LocalServer:
    """An HTTP server on 127.0.0.1 at a port the system picks (parallel test workers never
    share one), answering POSTs in threads while the ``with`` block lasts. It records every
    request's JSON body and headers; :meth:`wait_for_requests` waits on that record. A
    subclass answers in :meth:`respond`."""

    def __init__(self):
        self.requests: list[dict] = []
        self.headers: list = []  # http.client.HTTPMessage
        self.cond = threading.Condition()
        self.closing = threading.Event()  # set when the block ends: held replies go on then
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.cond:
                    n = len(outer.requests)
                    outer.requests.append(body)
                    outer.headers.append(self.headers)  # names case-insensitive
                    outer.cond.notify_all()
                try:
                    outer.respond(self, n, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (the timeout tests)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def count(self) -> int:
        return len(self.requests)

    def respond(self, handler: BaseHTTPRequestHandler, n: int, body: dict) -> None:
        raise NotImplementedError

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, headers: dict, payload: bytes) -> None:
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def wait_for_requests(self, n: int) -> None:
        """Until the server has read ``n`` requests (a client that timed out has sent them,
        but the server may not have accepted them yet)."""
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.requests) >= n, timeout=CLIENT_BOUND_S), \
                f"{len(self.requests)} requests, not {n}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class Server(LocalServer):
    """A scriptable OpenAI-compatible server. ``reply(n, body, headers) -> (status, headers,
    bytes) | None`` per request (None: the right answer, ``text_of(solution)``); ``n`` counts
    requests from 0. The answers come from this module's ``solve`` (a test may monkeypatch it).

    Requests that must overlap or time out wait on events, never on the clock: with
    ``together=k`` each reply waits until k requests are in flight at once (a barrier); with
    ``hold=True`` none is answered before the server closes."""

    def __init__(self, reply=None, text_of=None, together: int | None = None, hold: bool = False):
        super().__init__()
        self.reply = reply or (lambda n, body, headers: None)
        self.text_of = text_of or (lambda sol: sol.answer)
        self.barrier = threading.Barrier(together, timeout=CLIENT_BOUND_S) if together else None
        self.hold = hold
        self.inflight = self.max_inflight = 0

    @property
    def auth(self) -> list[str]:
        return [h.get("Authorization", "") for h in self.headers]

    def respond(self, handler, n, body):
        with self.cond:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            step = self.reply(n, body, dict(self.headers[n]))
            if self.barrier is not None:
                self.barrier.wait()
            if self.hold:
                self.closing.wait()
            if step is None:
                step = (200, {"Content-Type": "application/json"}, json.dumps(_answer_payload(body, self.text_of)).encode())
            self.send(handler, *step)
        finally:
            with self.cond:
                self.inflight -= 1


def fail_first(*steps: tuple[int, dict]):
    """A reply that answers the first requests with these (status, headers), then rightly."""

    def reply(n, body, headers):
        if n >= len(steps):
            return None
        status, headers = steps[n]
        payload = json.dumps({"error": {"message": "try later", "type": "x"}}).encode()
        return status, {**headers, "Content-Type": "application/json"}, payload

    return reply


@contextlib.contextmanager
def refused_port():
    """A port on 127.0.0.1 where nobody listens: bound and never listened on, so a connection
    is refused at once, and no other test or worker can take it meanwhile (a closed server's
    port could be handed out again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


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


# --- deterministic in-process language models and one request through a backend -----------------


def question_text(request) -> str:
    """The question a request asks: the last user turn, or the last 'Question:' block."""
    if request.messages is not None:
        return request.messages[-1][1]
    body = request.prompt.rsplit("Question: ", 1)[1]
    assert body.endswith("\nAnswer:")
    return body[: -len("\nAnswer:")]


class SolverModel:
    """Answers by solving the prompt; ``policy(solution, seed, calls)`` picks the text."""

    name = "fake"
    max_concurrency = 1

    def __init__(self, policy=None, mode: str = "chat", model: str = "solver", fail_after: int | None = None):
        self.model, self.mode = model, mode
        self.policy = policy or (lambda sol, seed, calls: sol.answer)
        self.requests: list = []
        self.fail_after = fail_after
        self.closed = False

    async def complete(self, request) -> Generation:
        if self.fail_after is not None and len(self.requests) >= self.fail_after:
            raise RuntimeError("simulated crash")
        self.requests.append(request)
        sol = solve(question_text(request))
        text = self.policy(sol, request.seed, len(self.requests))
        return Generation(text=text, latency_s=0.001, finish_reason="stop")

    async def aclose(self) -> None:
        self.closed = True


class DepthModel(SolverModel):
    """A solver that can follow only ``limit`` facts: beyond, a wrong acceptable answer (an
    ability that ends at a known depth)."""

    def __init__(self, limit: int, model: str):
        super().__init__(
            policy=lambda sol, seed, calls: sol.answer if sol.steps <= limit else sorted(sol.candidates - {sol.answer})[0],
            model=model,
        )


def bench_depth_model(model: DepthModel, out: Path, n: int = 6) -> None:
    """llm-bench of ``model`` into ``out``: every formulation at its depth, then equations at D = 1-4."""
    from stackedheads.llm import bench

    for cfg in (BenchConfig(n=n, max_draws=2), BenchConfig(formulations=("equations",), depths=(1, 2, 3, 4), n=n, max_draws=2)):
        bench.run_bench(model, cfg, out)


def complete_once(backend, request) -> Generation:
    """One request through ``backend``, closing it after."""
    import asyncio

    async def go():
        try:
            return await backend.complete(request)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def one_request(backend, question=None) -> Generation:
    """The first draw of ``question`` (default: an equations question of D = 2) through ``backend``."""
    from stackedheads.llm import bench
    from stackedheads.tasks.prompts import generate

    question = question or generate("equations", 2, seed=0, index=0)
    return complete_once(backend, bench.build_request(question, [], backend.mode, BenchConfig(n=1), 0))
