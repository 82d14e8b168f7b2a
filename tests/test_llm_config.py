"""llm-bench's and reproduce's language-model options: each bounded or refused in one line, before
a model is loaded or a file is written."""

from __future__ import annotations

import json

import pytest
from helpers import SolverModel, one_error

from stackedheads.errors import UsageError
from stackedheads.execution.process import MAX_THREADS_PER_CORE, available_cores

MOST = MAX_THREADS_PER_CORE * available_cores()
KEY = "sk-proj-Zx9TYPEDwhereAnameBELONGS77"


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


def test_max_tokens_is_bounded(tmp_path, cli):
    from stackedheads.llm.bench import MAX_TOKENS

    code, _, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "--n", "1",
                       "--max-tokens", 100_000_000, "--base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "b")
    assert code == 2 and one_error(err) and f"--max-tokens must be between 1 and {MAX_TOKENS}" in err, err
    assert not (tmp_path / "b").exists()


def _smollm2_here() -> bool:
    from stackedheads.llm.models import find_smollm2

    return find_smollm2() is not None


@pytest.mark.slow
@pytest.mark.parametrize("n_ctx, says", [
    (512, "does not fit the model's context of 512 tokens:"),
    (64, "does not fit the model's context of 256 tokens (--n-ctx 64 rounded up by llama.cpp):"),
])
def test_a_prompt_longer_than_the_context_is_one_line_and_leaves_nothing(tmp_path, cli, n_ctx, says):
    """`-f relatives --few-shot 30` on SmolLM2 was a ValueError traceback; then it left a
    config.json that refused the corrected `--few-shot 3` as "few_shot: 30 there, 3 asked";
    `--n-ctx 64` said "exceed context window of 256 ... now 64"."""
    if not _smollm2_here():
        pytest.skip("SmolLM2 is not here")
    out = tmp_path / "b"
    args = ["llm-bench", "--backend", "llamacpp", "--model", "smollm2", "-f", "relatives", "--n", "1", "--max-draws", "1",
            "--n-ctx", n_ctx, "--threads", "1", "--out", out]
    code, _, err = cli(*args, "--few-shot", "30")
    assert code == 2 and one_error(err), err
    assert says in err and "--few-shot" in err and "--n-ctx" in err, err
    assert not out.exists()
    if n_ctx == 512:
        code, _, err = cli(*args, "--few-shot", "0")
        assert code == 0, err
        assert json.loads((out / "config.json").read_text())["identity"]["few_shot"] == 0


class SmallContext(SolverModel):
    """A model whose context holds a question and at most five solved examples."""

    async def complete(self, request):
        if len(request.messages) > 2 * 5 + 1:
            raise UsageError("a prompt does not fit the model's context: give fewer examples ('few_shot')", fields=("few_shot",))
        return await super().complete(request)


def test_a_run_refused_at_its_first_draw_writes_nothing(tmp_path):
    """A refused llm-bench left a config.json that blocked the corrected run."""
    from stackedheads.llm import bench

    out = tmp_path / "b"
    with pytest.raises(UsageError, match="does not fit"):
        bench.run_bench(SmallContext(), bench.BenchConfig(formulations=("relatives",), n=2, few_shot=30), out)
    assert not out.exists()
    bench.run_bench(SmallContext(), bench.BenchConfig(formulations=("relatives",), n=2, few_shot=3), out)
    assert json.loads((out / "config.json").read_text())["identity"]["few_shot"] == 3


@pytest.mark.parametrize("n_ctx", [0, -5, 100_000_000])
def test_a_context_length_out_of_bounds_is_refused_before_loading(tmp_path, cli, n_ctx):
    """`--n-ctx 100000000` printed two lines of llama.cpp and "not a usable GGUF model"."""
    out = tmp_path / "b"
    code, _, err = cli("llm-bench", "--backend", "llamacpp", "--model", tmp_path / "none.gguf", "-f", "equations", "--n", "1",
                       "--n-ctx", n_ctx, "--out", out)
    assert code == 2 and one_error(err), err
    assert "--n-ctx must be a whole number of tokens between 1 and 1,048,576" in err and "GGUF" not in err
    assert not out.exists()


def test_a_context_longer_than_the_model_was_trained_on_is_refused(tmp_path, cli):
    from stackedheads.llm.models import find_smollm2, trained_context

    if not _smollm2_here():
        pytest.skip("SmolLM2 is not here")
    trained = trained_context(find_smollm2())
    assert trained == 8192  # SmolLM2-135M-Instruct's header
    out = tmp_path / "b"
    code, _, err = cli("llm-bench", "--backend", "llamacpp", "--model", "smollm2", "-f", "equations", "--n", "1",
                       "--n-ctx", trained + 1, "--threads", "1", "--out", out)
    assert code == 2 and one_error(err), err
    assert "--n-ctx 8,193 is more than smollm2 was trained on: give at most 8,192 tokens" in err
    assert not out.exists()


def test_a_file_that_is_no_gguf_has_no_trained_context(tmp_path):
    from stackedheads.llm.models import trained_context

    nested = b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\x01" + b"\x00" * 7 + b"\x01" + b"\x00" * 7 + b"k"
    nested += (b"\x09\x00\x00\x00" + b"\x09\x00\x00\x00" + b"\x01" + b"\x00" * 7) * 20_000  # arrays in arrays
    garbage = (b"", b"GGUF", b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, b"not a model at all", b"GGUF" + b"\x00garbage" * 100, nested)
    for data in garbage:
        (tmp_path / "m.gguf").write_bytes(data)
        assert trained_context(tmp_path / "m.gguf") is None
    assert trained_context(tmp_path / "missing.gguf") is None


def test_prompts_seed_follows_the_seed_rule(cli):
    code, _, err = cli("prompts", "-f", "equations", "--seed", -1)
    assert code == 2 and one_error(err) and "--seed must be a whole number from 0 to 2**63-1" in err, err
    code, _, err = cli("llm-bench", "--backend", "openai", "--model", "m", "-f", "equations", "--seed", -1,
                       "--out", "unused")
    assert code == 2 and one_error(err) and "--seed must be a whole number from 0 to 2**63-1" in err, err

