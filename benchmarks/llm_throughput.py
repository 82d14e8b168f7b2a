"""LLM benchmark throughput (Sec. 4 protocol): questions per second against a local llama.cpp
OpenAI-compatible server at concurrency 1 vs 4, and in-process through llama-cpp-python.

Every configuration answers the same questions (one cell, few-shot prompts sharing their
prefix) with one greedy draw each, so the work is identical; a warm-up question loads the
model and fills the prompt cache first. The server is ``python -m llama_cpp.server`` on
127.0.0.1 (a free port), stopped at the end. The last line printed is JSON.

    .venv/bin/python benchmarks/llm_throughput.py [--model smollm2] [--n 24] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from stackedheads.llm import backends, bench, models
from stackedheads.llm.bench import BenchConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(path: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", "4096"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"llama.cpp server did not start:\n{log.read_text()[-2000:]}")


class _Kept:
    """A backend that outlives run_bench (which closes what it is given), so the in-process
    model keeps its prompt cache from the warm-up, as the server does."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.model, self.mode = inner.name, inner.model, inner.mode
        self.max_concurrency = inner.max_concurrency

    async def complete(self, request):
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        return None


def _timed(make_backend, cfg: BenchConfig, warm: BenchConfig) -> float:
    """Questions per second over ``cfg`` after a warm-up over ``warm`` (another folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        bench.run_bench(make_backend(), warm, Path(tmp) / "warm")
        t0 = time.perf_counter()
        bench.run_bench(make_backend(), cfg, Path(tmp) / "run")
        return cfg.n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, gemma3-270m or PATH.gguf")
    ap.add_argument("--mode", default=None, help="chat or completion (default: the model's)")
    ap.add_argument("--formulation", default="equations")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--n", type=int, default=24, help="questions per configuration")
    ap.add_argument("--few-shot", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of llama.cpp (server and in-process)")
    args = ap.parse_args()

    resolved = models.resolve(args.model)
    mode = args.mode or resolved.default_mode
    common = dict(formulations=(args.formulation,), depths=(args.depth,), few_shot=args.few_shot,
                  max_draws=1, temperature=0.0, max_tokens=8)
    cfg = BenchConfig(n=args.n, seed=0, **common)
    warm = BenchConfig(n=1, seed=1, **common)  # same few-shot prefix length, other questions
    os.environ.setdefault("OPENAI_API_KEY", "sk-local")  # a local server ignores it

    result: dict = {"model": resolved.name, "mode": mode, "formulation": args.formulation,
                    "depth": args.depth, "few_shot": args.few_shot, "n": args.n, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_server(resolved.path, args.threads, Path(tmp) / "server.log")
        try:
            for c in (1, 4):
                qps = _timed(lambda c=c: backends.make_backend("openai", resolved.name, mode=mode, base_url=url,
                                                               concurrency=c, timeout=300), cfg, warm)
                result[f"server_c{c}_qps"] = round(qps, 3)
                print(f"llama.cpp server, concurrency {c}: {qps:.2f} questions/s", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    inprocess = _Kept(backends.make_backend("llamacpp", args.model, mode=mode, n_threads=args.threads))
    qps = _timed(lambda: inprocess, cfg, warm)
    result["inprocess_qps"] = round(qps, 3)
    print(f"in-process llama-cpp-python: {qps:.2f} questions/s", flush=True)
    result["ratio_c4_over_c1"] = round(result["server_c4_qps"] / result["server_c1_qps"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
