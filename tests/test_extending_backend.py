"""An LLM backend added from outside the package, the way docs/extending.md says: registered,
run through ``stackedheads llm-bench``, then unregistered so the other tests see the built-ins."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from prompt_solver import solve  # noqa: E402

from stackedheads.llm.backends import (  # noqa: E402
    BACKENDS,
    BackendOptions,
    BackendSpec,
    Generation,
    Request,
)


@dataclass(frozen=True)
class SolverOptions(BackendOptions):
    concurrency: int = 1  # named like the openai option, so --concurrency sets it


class SolverBackend:
    """Answers every question right, by solving the prompt text (tests/prompt_solver.py)."""

    name = "solver"
    built: list[SolverOptions] = []  # the options of every backend built, for the test

    def __init__(self, model: str, options: SolverOptions) -> None:
        self.model, self.mode = model, options.mode or "chat"
        self.max_concurrency = options.concurrency
        SolverBackend.built.append(options)

    async def complete(self, request: Request) -> Generation:
        start = time.perf_counter()
        if request.messages is not None:
            question = request.messages[-1][1]
        else:  # completion mode: the last "Question: ...\nAnswer:" block
            question = (request.prompt or "").rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")
        return Generation(solve(question).answer, time.perf_counter() - start, "stop")

    async def aclose(self) -> None:
        return None


def test_add_a_backend_from_outside(tmp_path, cli):
    assert "solver" not in BACKENDS
    BACKENDS.register("solver", BackendSpec("answers by solving the prompt", SolverOptions, SolverBackend))
    try:
        out = tmp_path / "bench"
        args = ["llm-bench", "--backend", "solver", "--model", "oracle", "--out", str(out),
                "--formulation", "equations,lives-with", "--n", "3", "--few-shot", "1"]
        r = cli(*args, "--concurrency", "2", "--mode", "completion")
        assert r.code == 0, r.err
        assert SolverBackend.built == [SolverOptions(mode="completion", concurrency=2)]
        results = json.loads((out / "results.json").read_text())
        assert {(c["formulation"], c["n"], c["accuracy"], c["unanswered"]) for c in results["cells"]} == {
            ("equations", 3, 1.0, 0), ("lives-with", 3, 1.0, 0)}
        assert results["identity"]["backend"] == "solver" and results["identity"]["model"] == "oracle"
        config = json.loads((out / "config.json").read_text())
        assert config["invocations"][0]["backend"] == {"backend": "solver", "model": "oracle", "mode": "completion", "concurrency": 2}

        # An option the backend does not declare: one line naming the flag, nothing written.
        r = cli(*args, "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "no"))
        assert r.code == 2 and r.err == "stackedheads: error: --base-url does not apply to backend solver\n"
        assert not (tmp_path / "no").exists() and len(SolverBackend.built) == 1
    finally:
        BACKENDS.unregister("solver")
    assert "solver" not in BACKENDS
