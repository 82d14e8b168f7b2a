"""Issues 43 and 44: thread counts, key-variable names, interrupting and bounding the
language-model backends, and one validation of training configs for the CLI, the API and disk."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import LocalServer, Server, one_error  # noqa: E402

from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.perf import MAX_THREADS_PER_CORE, available_cores  # noqa: E402

MOST = MAX_THREADS_PER_CORE * available_cores()
KEY = "sk-proj-Zx9TYPEDwhereAnameBELONGS77"


# --- 43.4: one rule for thread counts ---------------------------------------------------------


@pytest.mark.parametrize("threads", [0, MOST + 1, 1025, 5000, 100000])
def test_llm_bench_thread_count_is_bounded_before_loading(tmp_path, cli, threads):
    """--threads 100000 crashed llama.cpp (SIGSEGV), 5000 hung: refused like train's, before a
    model is loaded (the model named does not even exist) or a file is written."""
    out = tmp_path / "b"
    code, _, err = cli("llm-bench", "--backend", "llamacpp", "--model", tmp_path / "none.gguf", "-f", "equations",
                       "--n", "1", "--threads", threads, "--out", out)
    assert code == 2 and one_error(err), err
    assert f"--threads must be a whole number between 1 and {MOST}" in err and f"got {threads}" in err
    assert not out.exists()


def test_reproduce_llm_threads_follow_the_same_rule(tmp_path, cli):
    out = tmp_path / "r"
    code, _, err = cli("reproduce", "--preset", "smoke", "--out", out, "--llm-threads", 100000)
    assert code == 2 and one_error(err), err
    assert f"--llm-threads must be a whole number between 1 and {MOST}" in err
    assert not out.exists()


def test_train_threads_message_states_the_rule_it_applies(tmp_path, cli):
    """44.17: "threads must lie in [1, 1024]" while 9-1024 were refused on a 2-core machine."""
    for threads in (0, MOST + 1):
        code, _, err = cli("train", "--preset", "smoke", "--out", tmp_path / "t", "--threads", threads)
        assert code == 2 and one_error(err), err
        assert "1024" not in err and f"{MAX_THREADS_PER_CORE} per core" in err, err
    assert not (tmp_path / "t" / "config.json").exists()


def test_api_thread_count_is_bounded_by_the_machine_that_trains(tmp_path):
    import stackedheads as sh

    cfg = sh.presets.get("smoke").override(threads=MOST + 1)  # a config is machine-independent
    with pytest.raises(UsageError, match=f"between 1 and {MOST}"):
        sh.train(cfg, tmp_path / "t")
    assert not (tmp_path / "t" / "config.json").exists()


def test_unknown_executor_is_named_before_its_options(tmp_path, cli):
    """43.10: `reproduce --executor bogus --threads 1` talked about Ray."""
    code, _, err = cli("reproduce", "--preset", "smoke", "--out", tmp_path / "r", "--executor", "bogus", "--threads", 1)
    assert code == 2 and one_error(err), err
    assert "unknown executor 'bogus'" in err and "Ray" not in err


# --- 44.2, 43.20: a key where a variable name belongs -----------------------------------------


@pytest.mark.parametrize("value", [KEY, "", "A=B", "1ABC", "MY KEY"])
def test_llm_bench_refuses_what_is_no_variable_name_without_repeating_it(tmp_path, cli, value):
    out = tmp_path / "b"
    code, stdout, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "--n", "1",
                            "--api-key-env", value, "--out", out)
    assert code == 2 and one_error(err), err
    assert "--api-key-env must be the name of an environment variable" in err
    if value:
        assert value not in stdout + err
    assert not out.exists()


def test_reproduce_refuses_a_key_as_the_variable_name(tmp_path, cli):
    """The key reached config.json, summary.json, llm/done.json, llm/config.json and the report."""
    out = tmp_path / "r"
    code, stdout, err = cli("reproduce", "--preset", "smoke", "--out", out, "--llm-backend", "openai",
                            "--llm-model", "m", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-api-key-env", KEY)
    assert code == 2 and one_error(err), err
    assert "--llm-api-key-env must be the name of an environment variable" in err
    assert KEY not in stdout + err
    assert not out.exists()


def test_api_refuses_a_key_as_the_variable_name():
    from stackedheads.llm.backends import OpenAIBackend, make_backend
    from stackedheads.reproduce import LLMChoice

    for build in (lambda: make_backend("openai", "m", api_key_env=KEY),
                  lambda: OpenAIBackend("m", "http://127.0.0.1:9/v1", api_key_env=KEY),
                  lambda: LLMChoice("openai", "m", api_key_env=KEY)):
        with pytest.raises(UsageError) as e:
            build()
        assert KEY not in str(e.value) and e.value.fields == ("api_key_env",)


# --- 44.4: Ctrl-C and --max-tokens; 44.5: a prompt longer than the context -------------------

# llama_cpp.Llama replaced by a model that never samples its end-of-text token (2) by itself,
# calling the per-token hook llama.cpp calls as it does (an exception there is printed and
# ignored): only an interruption that reaches the generation stops it.
_ENDLESS = textwrap.dedent("""
    import sys
    import llama_cpp
    import numpy as np

    class Endless:
        def __init__(self, **kwargs):
            pass

        def token_eos(self):
            return 2

        def create_chat_completion(self, messages, logits_processor=None, **kwargs):
            print("generating", flush=True)
            while True:
                scores = np.array([1.0, 0.5, 0.0], dtype=np.float32)
                if logits_processor is not None:
                    try:
                        scores = logits_processor(np.array([], dtype=np.intc), scores)
                    except Exception as e:  # as llama.cpp's C callback does
                        print(f"Exception ignored: {e!r}", file=sys.stderr)
                if int(np.argmax(scores)) == self.token_eos():
                    return {"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}

    llama_cpp.Llama = Endless
    from stackedheads.cli import main
    main(sys.argv[1:])
""")


def test_ctrl_c_stops_the_in_process_model_mid_answer(tmp_path):
    """SIGINT 8 s into `llm-bench --backend llamacpp --n 12` answered all 12 before
    "interrupted": asyncio's Ctrl-C is a cancellation, which a model generating in the event
    loop's thread never let through. Timeout: a broken interruption hangs for ever, and the
    bound turns that hang into a failure."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENDLESS, "llm-bench", "--backend", "llamacpp", "--model", str(gguf),
         "-f", "equations", "--n", "12", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A test run started in the background inherits SIGINT ignored (POSIX shells do that to
        # background jobs): the signal was lost and the test waited out its bound.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline() == "generating\n"  # the first answer is being generated
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err and "Exception ignored" not in err
    samples = out / "samples.jsonl"
    assert not samples.exists() or samples.read_text() == ""


def test_max_tokens_is_bounded(tmp_path, cli):
    from stackedheads.llm.bench import MAX_TOKENS

    code, _, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "--n", "1",
                       "--max-tokens", 100_000_000, "--base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "b")
    assert code == 2 and one_error(err) and f"--max-tokens must be between 1 and {MAX_TOKENS}" in err, err
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_one_line(tmp_path, cli):
    """`-f relatives --few-shot 30` on SmolLM2 was a ValueError traceback."""
    from stackedheads.llm.models import list_models

    if not any(m.name == "smollm2" and m.available for m in list_models()):
        pytest.skip("SmolLM2 is not here")
    code, _, err = cli("llm-bench", "--backend", "llamacpp", "--model", "smollm2", "-f", "relatives", "--n", "1",
                       "--few-shot", "30", "--n-ctx", "512", "--threads", "1", "--out", tmp_path / "b")
    assert code == 2 and one_error(err), err
    assert "does not fit the model's context" in err and "--few-shot" in err and "--n-ctx" in err


# --- 43.6: the timeout bounds the whole request -------------------------------------------------


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
    from test_llm import _one_request

    from stackedheads.llm.backends import BackendError, OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with DripServer() as srv:
        backend = OpenAIBackend("m", srv.url, timeout=1.0, max_retries=0)
        # Only the bound under test ends the request: the client's per-read timeout (also 1 s)
        # could win were the drip stalled for a second on a loaded machine.
        backend._client = backend._client.with_options(timeout=600)
        with pytest.raises(BackendError, match=r"giving up after 1 attempts: Timeout: no whole reply within 1 s"):
            _one_request(backend)
    assert srv.count == 1


# --- 43.13: a fragment in the base URL ------------------------------------------------------------


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


# --- 43.14, 43.15, 44.8: one validation for the CLI, the API and disk ---------------------------


def test_prompts_seed_follows_the_seed_rule(cli):
    code, _, err = cli("prompts", "-f", "equations", "--seed", -1)
    assert code == 2 and one_error(err) and "--seed must be a whole number from 0 to 2**63-1" in err, err
    code, _, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "--seed", -1,
                       "--out", "unused")
    assert code == 2 and one_error(err) and "--seed must be a whole number from 0 to 2**63-1" in err, err


@pytest.mark.parametrize("field, value, says", [
    ("steps", "10", "'steps' must be a whole number, got '10'"),
    ("steps", True, "'steps' must be a whole number, got True"),
    ("steps", math.nan, "'steps' must be a whole number, got nan"),
    ("steps", 10.5, "'steps' must be a whole number, got 10.5"),
    ("pe_base", math.inf, "'pe_base' must be a finite number, got inf"),
    ("lr", "0.1", "'lr' must be a finite number, got '0.1'"),
    ("chains", 2.0, "'chains' must be a whole number, got 2.0"),
    ("seeds", (-1,), "seeds must be a non-empty list of integers from 0 to 2**63-1"),
])
def test_api_refuses_what_the_cli_refuses_naming_the_field(field, value, says):
    from stackedheads import presets

    with pytest.raises(UsageError) as e:
        presets.get("smoke").override(**{field: value})
    assert says in str(e.value)


def test_api_train_without_a_config_is_one_usage_error(tmp_path):
    import stackedheads as sh

    with pytest.raises(UsageError, match="'cfg' must be a TrainConfig, got NoneType"):
        sh.train(None, tmp_path / "t")


def test_config_json_with_a_wrong_typed_field_is_one_line(tmp_path, cli):
    """44.17: "chains": null in a config.json; read by `train` resuming the folder."""
    from helpers import train_config

    run = tmp_path / "t"
    run.mkdir()
    cfg = train_config()
    cfg["task"]["chains"] = None
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("train", "--preset", "smoke", "--out", run)
    assert code == 2 and one_error(err), err
    assert "'chains' must be a whole number, got None" in err or "--chains must be a whole number, got None" in err


# --- 43.7: metrics.csv with a wrong header --------------------------------------------------------


def test_metrics_with_a_wrong_header_is_one_line(tmp_path):
    from stackedheads.training.metrics import read_metrics, truncate_metrics

    path = tmp_path / "metrics.csv"
    path.write_text("stop,seed,train_loss\n1,0,0.5\n")
    with pytest.raises(UsageError, match="is not that of metrics.csv"):
        truncate_metrics(path, 1, ["step", "seed", "train_loss", "val_loss", "val_x1", "wall_s"])
    with pytest.raises(UsageError, match="is not that of metrics.csv"):
        read_metrics(tmp_path)
    assert path.read_text() == "stop,seed,train_loss\n1,0,0.5\n"  # nothing lost




# --- 43.8, 44.11: sizes that cannot fit are refused before anything is allocated or written ---

GB = 2**30


@pytest.fixture
def machine_of_24_gb(monkeypatch):
    """The memory of the machine the issue was found on, whatever runs the test."""
    from stackedheads.training import config

    monkeypatch.setattr(config, "machine_memory", lambda device: {"host": 24 * GB, "device": 24 * GB})


@pytest.mark.parametrize("option, value", [
    ("--d-model", 1_000_000_000), ("--n-train", 1_000_000_000_000), ("--layers", 100_000), ("--n-val", 1_000_000_000),
])
def test_train_refuses_what_cannot_fit_naming_the_option(tmp_path, cli, machine_of_24_gb, option, value):
    out = tmp_path / "t"
    code, _, err = cli("train", "--out", out, option, value)  # the default preset, quick
    assert code == 2 and one_error(err), err
    assert f"{option} {value:,}: training would need at least" in err and "more than this machine's 24 GB" in err
    assert not (out / "config.json").exists()  # the corrected run is not blocked (44.11)


def test_sweep_depth_refuses_a_grid_that_cannot_fit_before_recording_it(tmp_path, cli, machine_of_24_gb):
    out = tmp_path / "d"
    code, _, err = cli("sweep", "depth", "--layers", "1,100000", "--out", out)  # as 1-100000, without 10^5 jobs
    assert code == 2 and one_error(err), err
    assert "--layers" in err and "training would need at least" in err
    assert not out.exists() or not any(out.iterdir())


def test_what_fits_is_not_refused():
    from stackedheads import presets
    from stackedheads.training.config import check_fits

    for name in ("smoke", "quick", "paper", "sec8", "sec9"):
        check_fits(presets.get(name), {"host": 24 * GB, "device": 24 * GB})


# --- 43.12: a projected time at the start of a long task -----------------------------------------


def test_a_long_task_says_its_projected_time_once_and_a_short_one_nothing():
    from stackedheads.cli._app import PROJECT_AFTER_S, _Projection

    said, now = [], [0.0]
    p = _Projection("train t", clock=lambda: now[0], say=said.append)
    p(1, 100_000_000)
    now[0] = PROJECT_AFTER_S + 1  # 8 ms a step over the first seconds
    p(1 + int((PROJECT_AFTER_S + 1) / 0.008), 100_000_000)
    now[0] += 100
    p(100_000, 100_000_000)
    assert len(said) == 1 and "100,000,000 steps" in said[0] and "222h" in said[0] and "days" in said[0], said
    said.clear()
    q = _Projection("train s", clock=lambda: now[0], say=said.append)
    q(1, 1000)
    now[0] += PROJECT_AFTER_S + 1
    q(500, 1000)
    assert said == []


# --- 43.10, 43.19, 44.6: one reader of a stage's done.json; messages that name the real problem ----


def _snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}  # a lock file stays by design


@pytest.mark.parametrize("done", ["[]", '{"wall_s": NaN}', '{"wall_s": -3}', '{"wall_s": "1 h"}'])
def test_claims_and_report_read_done_json_alike(tmp_path, cli, done):
    """43.19: claims accepted a done.json of [] that report refused; 44.6: "wall_s": NaN
    crashed report's _duration."""
    from helpers import reproduce_folder

    run = reproduce_folder(tmp_path)
    (run / "theory").mkdir()
    (run / "theory" / "done.json").write_text(done)
    before = _snapshot(run)
    for command in ("claims", "report"):
        code, _, err = cli(command, run)
        assert code == 2 and one_error(err), (command, err)
        assert str(run / "theory" / "done.json") in err, (command, err)
    assert _snapshot(run) == before


def test_report_on_a_wrong_typed_config_says_what_is_wrong(tmp_path, cli):
    """43.10: it said there was no config.json."""
    run = tmp_path / "rep"
    run.mkdir()
    (run / "config.json").write_text('{"preset": "smoke", "llm": null}')
    code, _, err = cli("report", run)
    assert code == 2 and one_error(err), err
    assert "no config.json" not in err and f"{run / 'config.json'} is not a reproduce config" in err


# --- 44.10: a read-only verb never writes, and a bad seed is named where it is ----------------------


def test_claims_on_a_sweep_with_a_negative_seed_names_sweep_json_and_writes_nothing(tmp_path, cli):
    from stackedheads import presets

    spec = presets.figure4("smoke").to_dict()
    spec["seeds"] = [-1]
    (tmp_path / "sweep.json").write_text(json.dumps(spec))
    before = _snapshot(tmp_path)
    code, _, err = cli("claims", tmp_path)
    assert code == 2 and one_error(err), err
    assert str(tmp_path / "sweep.json") in err and "seeds" in err
    assert "rebuilt" not in err and "retrain" not in err
    assert _snapshot(tmp_path) == before


# --- 43.17, 44.17: config.json fields missing or of the wrong type ------------------------------------


def test_emergence_refuses_a_config_without_n_layers(ckpt_run, tmp_path, cli):
    from conftest import copy_run

    run = copy_run(ckpt_run, tmp_path / "run")
    cfg = json.loads((run / "config.json").read_text())
    del cfg["model"]["n_layers"]
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("emergence", run, "--out", tmp_path / "e", "--seqs", 4)
    assert code == 2 and one_error(err), err
    assert f"{run / 'config.json'}: a training config without model.n_layers" in err
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("part, field, value, says", [
    ("task", "chains", None, "'chains' must be a whole number, got None"),
    ("optim", "lr", "NaN", "'lr' must be a finite number, got 'NaN'"),
])
def test_a_config_json_field_of_the_wrong_type_names_the_file(tmp_path, cli, part, field, value, says):
    from helpers import train_config

    run = tmp_path / "t"
    run.mkdir()
    cfg = train_config()
    cfg[part][field] = value
    (run / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("train", "--preset", "smoke", "--out", run)
    assert code == 2 and one_error(err), err
    assert str(run / "config.json") in err and (says in err or says.replace(f"'{field}'", f"--{field}") in err), err


# --- 44.7: circuits discovered on another run ----------------------------------------------------------


def _circuit(info: dict) -> dict:
    heads = [{"layer": layer, "head": 0, "rules": "uniform", "paths": []} for layer in range(3)]
    heads[2] = {"layer": 2, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}
    return {"depth": 2, "heads": heads, "info": info}


@pytest.mark.parametrize("info", ["other run", "other seed"])
def test_emergence_refuses_the_circuit_of_another_run(ckpt_run, tmp_path, cli, info):
    """A circuit of another run of the same shape passed the shape check: circuit.json names its run."""
    from conftest import copy_run

    other = copy_run(ckpt_run, tmp_path / "other")
    (tmp_path / "c" / "seed0").mkdir(parents=True)
    recorded = {"run": str(other), "seed": 0} if info == "other run" else {"run": str(ckpt_run), "seed": 5}
    (tmp_path / "c" / "seed0" / "circuit.json").write_text(json.dumps(_circuit(recorded)))
    code, _, err = cli("emergence", ckpt_run, "--out", tmp_path / "e", "--circuits", tmp_path / "c", "--seqs", 4)
    assert code == 2 and one_error(err), err
    assert ("was discovered on" in err and str(other) in err) if info == "other run" else "the circuit of seed 5" in err


def test_a_circuit_of_this_run_moved_elsewhere_is_accepted(ckpt_run, tmp_path):
    from stackedheads.circuits.ablate import Circuit
    from stackedheads.emergence import check_circuit_run

    moved = Circuit.from_dict(_circuit({"run": f"/gone/elsewhere/{ckpt_run.name}", "seed": 0}))
    check_circuit_run(moved, tmp_path / "circuit.json", ckpt_run, 0)
    here = Circuit.from_dict(_circuit({"run": str(ckpt_run), "seed": 0}))
    check_circuit_run(here, tmp_path / "circuit.json", ckpt_run, 0)


# --- 44.6: tracebacks --------------------------------------------------------------------------------


def test_a_metrics_csv_that_is_not_utf8_is_one_line(tmp_path):
    """Every verb (train resuming, claims, report, reproduce, seeds) reads metrics.csv through these two."""
    from stackedheads.training.metrics import read_metrics, truncate_metrics

    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step,seed\n\xff\xfe\x00garbage\n")
    for read in (lambda: read_metrics(tmp_path), lambda: truncate_metrics(path, 1, ["step", "seed"])):
        with pytest.raises(UsageError, match="is damaged \\(not UTF-8 text\\)"):
            read()


def test_train_resuming_over_a_non_utf8_metrics_csv_is_one_line(tmp_path, cli):
    from stackedheads import presets
    from stackedheads.training import train

    run = tmp_path / "t"
    train(presets.get("smoke").override(steps=20, ckpt_every=10), run, stop_after=15)  # a checkpoint at 10
    (run / "metrics.csv").write_bytes(b"step,seed\n\xff\xfe\n")
    code, _, err = cli("train", "--preset", "smoke", "--steps", 20, "--ckpt-every", 10, "--out", run)
    # One line refusing it, or (the resume's own rule for metrics it cannot use) a warning and
    # a rebuild: never a traceback.
    assert "Traceback" not in err and (code == 0 or (code == 2 and one_error(err))), err


def test_a_ray_address_that_is_no_address_is_one_line(tmp_path, cli):
    code, _, err = cli("sweep", "figure4", "--preset", "smoke", "--executor", "ray", "--ray-address", "not an address",
                       "--out", tmp_path / "s")
    assert code == 2 and one_error(err), err
    assert "--ray-address 'not an address' is not host:port" in err
    assert not (tmp_path / "s").exists()


# --- 44.13, 44.14: llm-compare reads what it is given, and writes no markup from a model's name -------


def _bench_run(folder: Path, model: str = "solver") -> Path:
    from test_llm import SolverModel

    from stackedheads.llm import bench

    bench.run_bench(SolverModel(model=model), bench.BenchConfig(formulations=("equations",), depths=(2,), n=4, max_draws=2), folder)
    return folder


def _edit_record(folder: Path, index: int, change) -> None:
    path = folder / "samples.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[index])
    change(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage", ["garbage", "n_draws", "correct"])
def test_llm_compare_refuses_what_no_run_writes(tmp_path, cli, damage):
    run = _bench_run(tmp_path / "run")
    if damage == "garbage":  # a line in the middle, not a last line cut short
        path = run / "samples.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    elif damage == "n_draws":  # printed draws/q -1.50
        _edit_record(run, 1, lambda r: r.update(n_draws=-5))
    else:  # a stored "correct" that the stored answers contradict was counted
        _edit_record(run, 1, lambda r: r.update(correct=True, final="wrong", answered=True))
    code, _, err = cli("llm-compare", run, "--out", tmp_path / "cmp")
    assert code == 2 and one_error(err), err
    assert "samples.jsonl: line" in err and "is not an answer record" in err


def test_llm_bench_asks_again_a_question_whose_record_is_impossible(tmp_path):
    from test_llm import SolverModel

    from stackedheads.llm import bench

    run = _bench_run(tmp_path / "run")
    _edit_record(run, 1, lambda r: r.update(n_draws=-5))
    model = SolverModel()
    bench.run_bench(model, bench.BenchConfig(formulations=("equations",), depths=(2,), n=4, max_draws=2), run)
    assert len(model.requests) == 1
    from stackedheads.llm.compare import load_run

    assert load_run(run)["per_formulation"]["equations"]["mean_draws"] >= 1  # the later record answers it


def test_comparison_md_escapes_a_model_name(tmp_path, cli):
    name = '<img src=x onerror="alert(1)">|x'
    a = _bench_run(tmp_path / "a", model=name)
    b = _bench_run(tmp_path / "b", model="plain")
    code, stdout, err = cli("llm-compare", a, b, "--out", tmp_path / "cmp")
    assert code == 0, err
    text = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "<img" not in text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;\\|x" in text
    assert "<img" not in stdout


# --- 44.13, 44.10: impossible losses in a sweep's summaries; claims never rewrites ---------------------


@pytest.fixture(scope="module")
def smoke_sweep(tmp_path_factory):
    from stackedheads import presets, sweep

    out = tmp_path_factory.mktemp("sweep") / "sw"
    sweep.run_figure4(presets.figure4("smoke"), out)
    return out


@pytest.mark.parametrize("loss", [-5.0, "NaN"])
def test_claims_refuse_an_impossible_loss_and_rewrite_nothing(smoke_sweep, tmp_path, cli, loss):
    import shutil

    folder = tmp_path / "sw"
    shutil.copytree(smoke_sweep, folder)
    summary = next(iter(sorted(folder.glob("runs/*/summary.json"))))
    data = json.loads(summary.read_text())
    for s in data["seeds"].values():
        s["final_val_loss"] = loss
    summary.write_text(json.dumps(data).replace('"NaN"', "NaN"))
    before = _snapshot(folder)
    code, _, err = cli("claims", folder)
    assert code == 2 and one_error(err), err
    assert str(summary) in err and "final losses >= 0" in err and "rebuilt" not in err
    assert _snapshot(folder) == before


# --- 43.22: a key equal to an answer word --------------------------------------------------------------


def test_a_key_equal_to_an_answer_word_is_stored_as_a_hash_not_as_stars(tmp_path, monkeypatch, cli):
    """samples.jsonl stored that answer as ***: which answer was given was lost."""
    from stackedheads import errors
    from stackedheads.llm.compare import load_run
    from stackedheads.tasks.prompts import generate_many

    monkeypatch.setattr(errors, "_SECRETS", set())
    questions = generate_many("lives-with", n=12, seed=0)
    key = next(q.answer for q in questions if len(q.answer) >= errors.MIN_SECRET_CHARS)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "bench"
    with Server() as srv:
        code, _, err = cli("llm-bench", "--backend", "openai", "--model", "m", "--base-url", srv.url,
                           "--formulation", "lives-with", "--n", "12", "--max-draws", "1", "--out", out)
    assert code == 0, err
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    hit = [r for r in records if r["answer"].startswith("sha256:")]
    assert hit and all(r["final"] == r["answer"] and r["correct"] for r in hit)
    assert all(r["answer"] != "***" and r["final"] != "***" for r in records)
    assert all(key not in json.dumps(r) for r in records)
    assert load_run(out)["per_formulation"]["lives-with"]["correct"] == 12  # re-read, not trusted
