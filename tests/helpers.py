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


def screen_folder(root, falls: dict[int, list[int | None]], final: float | dict[int, float], steps=6400, per_epoch=8,
                   onto: int | dict[int, int] = 0):
    """A sec9-shaped training run without circuits: each seed's x1..x4 at 1.0 until the step in
    ``onto`` (every seed's, or per seed), then on the 0.75 plateau until its step in ``falls``
    (None: never), then 0.01; training loss 0.002 below validation over the run; ``final`` the
    final val MSE of every seed, or per seed."""
    import csv

    from stackedheads import presets
    from stackedheads.state.layout import EMERGENCE_RUN

    finals = final if isinstance(final, dict) else dict.fromkeys(falls, final)
    ontos = onto if isinstance(onto, dict) else dict.fromkeys(falls, onto)
    cfg = presets.get("sec9").override(seeds=tuple(falls), steps=steps, eval_every=80, final_window=100).to_dict()
    run = root / "emergence" / "runs" / EMERGENCE_RUN
    run.mkdir(parents=True)
    rows = []
    for seed, at in falls.items():
        for step in list(range(80, steps + 1, 80)):
            parts = [0.01 if a is not None and step >= a else 0.75 if step >= ontos[seed] else 1.0 for a in at]
            val = sum(parts) / 4
            rows.append({"step": step, "seed": seed, "train_loss": val - 0.002, "val_loss": val,
                         **{f"val_x{j + 1}": p for j, p in enumerate(parts)}, "wall_s": 1.0})
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (run / "summary.json").write_text(json.dumps({"config": cfg, "wall_s": 1.0, "seeds": {
        str(s): {"final_val_loss": finals[s], "final_partial": {f"val_x{j}": finals[s] for j in range(1, 5)}} for s in falls}}))
    return root


def publisher(results, **defaults):
    """``publish(run, **options)``: :func:`stackedheads.publishing.piece.publish_piece` with these
    defaults, returning the reference it wrote."""
    from stackedheads.publishing.piece import Piece, publish_piece

    base = dict(stage="emergence", commit="7e32fd7", results=results) | defaults

    def publish(run, **kw):
        dest, _ = publish_piece(Piece(**(base | {"run": run} | kw)))
        return json.loads((dest / "reference.json").read_text())

    return publish


# --- claims' data: a training summary, a discovered circuit and an emergence timeline as the
# stages write them (Sec. 8: transformers A-C at D = 3; Sec. 9: transformer D's paths K1..K4)


DEPTH = 3
PAIR_LINKS = [[0, 0, 2, 1], [0, 0, 4, 3], [0, 0, 6, 5]]  # the first head links every pair (8.2 i)


def claims_train(final=0.005, parts=(0.004, 0.005, 0.006), n_layers=12, chains=4, steps=None):
    steps_ = {} if steps is None else {"steps": steps}
    return {
        "config": {"n_layers": n_layers, "n_heads": 1, "task": {"chains": chains, "depth": DEPTH}, **steps_},
        "seeds": {"0": {"final_val_loss": final, "final_partial": {f"val_x{j}": p for j, p in enumerate(parts, start=1)}}},
    }


def pair_maps(paths, n_layers=12):
    """Every head's attention on the pair links as a discovery records it: 0.95 where the head
    keeps the link's path, 0.1 where it does not (tests that part the two give their own)."""
    return [[l, 0, [0.95 if [l, 0, 2 * k, 2 * k - 1] in [list(p) for p in paths] else 0.1 for k in range(1, DEPTH + 1)]]
            for l in range(n_layers)]


def found(paths=(*PAIR_LINKS, [5, 0, 0, 2], [7, 0, 0, 4], [9, 0, 0, 6]), combined=(0.02, 0.03, 0.04),
          unexplained=(), kind="absolute", threshold=0.05, groups=(), serves=None, pair_attention=None, losses=None):
    """A discovery summary; ``losses`` default: each path's removal, held out, breaks the budget at x1."""
    from stackedheads.circuits.paths import CircuitPath

    budgets = [threshold] * DEPTH
    if losses is None:
        losses = [{"ablation": "-" + CircuitPath(*p).key, "loss": 0.3, "partial": [0.5, 0.2, 0.2]} for p in paths]
    with_paths = sorted({(p[0], p[1]) for p in paths})
    useful = sorted(set(with_paths) | {(l, h) for l, h, _ in unexplained})
    return {
        "threshold": threshold, "threshold_kind": kind, "tolerance": 0.04, "budgets": budgets, "model_over_budget": [],
        "unablated": {"loss": 0.005, "partial": [0.004, 0.005, 0.006]},
        "combined": {"loss": sum(combined) / DEPTH, "partial": list(combined)},
        "over_budget": [f"x{j}" for j, (p, b) in enumerate(zip(combined, budgets), start=1) if p > b],
        "useful_heads": [list(u) for u in useful], "n_useful_heads": len(useful),
        "heads_with_paths": [list(h) for h in with_paths], "theory_min_heads": 3,
        "unexplained_heads": [list(u) for u in unexplained], "paths": [list(p) for p in paths],
        "redundant_groups": [list(g) for g in groups], "serves": serves or {}, "n_search": 64, "n_check": 64,
        "losses": losses, "pair_attention": pair_maps(paths) if pair_attention is None else pair_attention,
    }


K1, K1B, K2, K3, K4 = "L13.0 s0->s2", "L20.0 s0->s2", "L21.0 s0->s4", "L22.0 s0->s6", "L23.0 s0->s8"


def timeline(seen, serves, groups=(), depth=4, drops=(100, 200, 300, 400)):
    """A timeline.json as :func:`stackedheads.emergence.timeline.timeline` writes it, from the first
    checkpoint at which each path is at or above 0.5 (checkpoints every 80 steps)."""
    from stackedheads.emergence.timeline import position_emergence, position_order
    from stackedheads.emergence.ordering import order_of

    emerged = {k: (None if v is None else v - 40.0) for k, v in seen.items()}
    positions = position_emergence(emerged, seen, serves, [list(g) for g in groups], depth)
    for p in positions.values():
        p["epoch"] = None if p["step"] is None else p["step"] / 8
    first = min((v for v in seen.values() if v is not None), default=None)
    drops = {f"x{j}": s for j, s in enumerate(drops, start=1)}
    return {
        "steps": list(range(0, 6401, 80)), "epochs": [s / 8 for s in range(0, 6401, 80)],
        "emerged": emerged, "emerged_seen": seen, "serves": serves, "groups": [list(g) for g in groups],
        "positions": positions, "order": position_order(positions),
        "first_paths": sorted(k for k, v in seen.items() if v is not None and v == first),
        "plateau_steps": min((v for v in emerged.values() if v is not None), default=None),
        "loss_drops": drops, "loss_drop_order": order_of(list(drops.values())),
    }


PAPER_SERVES = {K1: [1, 2, 3, 4], K1B: [1, 2, 3, 4], K2: [2, 3, 4], K3: [3, 4], K4: [4]}
REDUNDANT = [(K1, K1B)]  # Sec. 9.2: layers 14 and 21 both retrieve B
PAPER_SEEN = {K1: 3600, K1B: 3680, K2: 3920, K3: 4400, K4: 5600}


# --- in-process language models that solve the prompt (no server) -------------------------------------


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
        return Generation(text=self.policy(sol, request.seed, len(self.requests)), latency_s=0.001, finish_reason="stop")

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


# --- what a refused command shows ---------------------------------------------------------------------


def refused(r, *words: str) -> None:
    """``r`` (a ``cli`` result) exited 2 with one error line, no traceback, holding ``words``."""
    assert r.code == 2, r
    assert one_error(r.err), r.err
    for w in words:
        assert w in r.err, r.err


def claims_json(cli, folder: Path):
    """``claims --json`` as (exit code, verdicts and measurements by id)."""
    r = cli("claims", folder, "--json")
    return r.code, ({c["id"]: (c["verdict"], c["measured"]) for c in json.loads(r.out)} if r.code == 0 else None)


# --- a model whose circuit is known by construction (circuit discovery's tests) ---------------

import torch  # noqa: E402

from stackedheads.circuits import rules as _rules  # noqa: E402
from stackedheads.circuits.ablate import Circuit, HeadSpec, pattern_hooks, replaced_patterns  # noqa: E402
from stackedheads.model.config import ModelConfig
from stackedheads.model.transformer import EnsembleTransformer  # noqa: E402
from stackedheads.tasks.vectors import VectorTaskConfig, batch_indices, make_batch  # noqa: E402

U = _rules.UNIFORM

# D = 2 by composition: x_1's second token first reads x_2's (s_2 -> s_4), then the query
# reads x_1's token (s_0 -> s_2) and gets x_1 and x_2 from it. Both paths are necessary.
KNOWN = Circuit(
    depth=2,
    heads=[
        HeadSpec(0, 0, {"first": U, "second": "s+2", "query": U}),
        HeadSpec(1, 0, {"first": U, "second": U, "query": "s+2"}),
        HeadSpec.whole(2, 0, U),
    ],
)


class Forced(EnsembleTransformer):
    """Attention is the known circuit's (its Q and K are never used); the rest is trained."""

    circuit = KNOWN

    def _forced(self, meta):
        return pattern_hooks(replaced_patterns(self.circuit, meta))

    def hooks(self, fwd_hooks=(), meta=None):  # every hooked run goes through here (the Ablator's too)
        return super().hooks([*self._forced(meta), *fwd_hooks], meta)

    def member(self, e):
        m = super().member(e)
        m.__class__ = type(self)
        return m


def train_forced(cls, drops=(), steps=400):
    """Train ``cls`` (a Forced model); each step one of ``drops`` (path removals, as the
    per-path ablation makes them), or none, is applied on top, so that each redundant head
    must do the job alone."""
    torch.manual_seed(0)
    task = VectorTaskConfig(chains=2, depth=2, n_train=2**14, n_val=256)
    cfg = ModelConfig(d_in=task.d_in, d_out=task.d_out, n_queries=2, n_layers=3, n_heads=1, d_model=32)
    model = cls(cfg, seeds=[0])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    cache: dict = {}
    options = [None, *drops]
    for step in range(steps):
        b = make_batch(task, batch_indices(task.n_train, 128, 0, step, cache))
        drop = options[step % len(options)]
        hooks = pattern_hooks(replaced_patterns(cls.circuit, b.meta, remove=drop)) if drop else []
        loss = ((model.run_with_hooks(b.inputs, b.meta, hooks)[0] - b.targets) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, task, make_batch(task, range(256), "val")


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
