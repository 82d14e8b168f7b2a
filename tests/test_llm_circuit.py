"""llm-circuit: heads that carry each hop inside a language model, on tiny torch models (no download)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from prompt_solver import solve  # noqa: E402

from stackedheads.claims import FAIL, INCONCLUSIVE, NOT_RUN, PASS, folder_claims  # noqa: E402
from stackedheads.claims.llm_circuit import judge  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402
from stackedheads.llm import circuit as C  # noqa: E402
from stackedheads.llm.torchlm import Encoded, TorchLM, load_gguf  # noqa: E402
from stackedheads.tasks import prompts  # noqa: E402


def _render(turns):
    return "".join(f"<{r}>{c}\n" for r, c in turns) + "<assistant>"


def _encode(text):
    """A character tokenizer: one token per character, its span that character."""
    return Encoded(text, tuple(min(ord(ch), 127) for ch in text), tuple((i, i + 1) for i in range(len(text))))


def tiny_lm(layers=3, heads=4, seed=0, dead=()):
    """A random Qwen2 with a character tokenizer; heads in ``dead`` ((layer, head)) write nothing."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=512,
                      attn_implementation="eager")
    model = Qwen2ForCausalLM(cfg)
    dh = 32 // heads
    with torch.no_grad():
        for layer, head in dead:
            model.model.layers[layer].self_attn.o_proj.weight[:, head * dh:(head + 1) * dh] = 0
    return TorchLM(model, "tiny", _render, _encode, lambda a: ord(a[0]))


def _cfg(**kw):
    base = dict(model="tiny", depth=2, n=3, only_correct=False, min_drop=1e-6)
    base.update(kw)
    return C.CircuitConfig(**base)


# --- counterfactuals and roles ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_counterfactual_changes_one_link_and_the_answer(depth):
    for index in range(5):
        q = prompts.generate("equations", depth, 4, 0, index)
        for k in range(1, depth + 1):
            cands = C.counterfactual(q, k, random.Random(index))
            assert len(cands) == 3  # the other chains
            for text, answer in cands:
                old, new = q.prompt.split("\n"), text.split("\n")
                changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
                assert len(old) == len(new) and len(changed) == 1
                assert solve(text).answer == answer != q.answer  # the independent solver agrees


def test_token_roles_name_the_chain_entities():
    q = prompts.generate("equations", 2, 4, 0, 0)
    enc = _encode(_render([("user", q.prompt)]))
    roles = C.token_roles(enc, q, enc.text.rfind(q.prompt))
    qc = q.metadata["query_chain"]
    by_role = {}
    for (a, b), r in zip(enc.spans, roles):
        by_role.setdefault(r, "")
        by_role[r] += enc.text[a:b]
    assert by_role["L1:x0"] == qc[0] and by_role["L1:x1"] == qc[1]
    assert by_role["L2:x1"] == qc[1] and by_role["L2:x2"] == qc[2]
    assert by_role["Q:x0"] == qc[0]
    assert by_role["end"] == "\n<assistant>"
    assert roles[0] == "pre"


# --- the analysis -----------------------------------------------------------------------------------


def test_run_writes_one_line_per_question_and_resumes(tmp_path, monkeypatch):
    lm = tiny_lm()
    out = tmp_path / "run"
    summary = C.run_circuit(_cfg(), out, lm=lm)
    rows = C.load_rows(out)
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert summary["n"] == 3 and summary["layers"] == 3 and summary["heads"] == 4
    for r in rows:
        hop_ks = [h["k"] for h in r["hops"]]
        assert hop_ks == [1, 2]
        for h in r["hops"]:
            if h["measured"]:
                assert len(h["s"]) == 3 and len(h["s"][0]) == 4
                assert all(0 <= c["layer"] < 3 and 0 <= c["head"] < 4 for c in h["candidates"])
                assert all("act" in c and c["dest"] < r["tokens"] for c in h["candidates"])
    assert (out / "hops.png").exists() and (out / "path.svg").exists()
    # an interrupted run: a torn last line and a missing question are redone, the rest kept
    text = (out / C.RESULTS).read_text().splitlines()
    (out / C.RESULTS).write_text("\n".join(text[:2]) + "\n" + text[2][: len(text[2]) // 2])
    calls = []
    real = C.analyse_question
    monkeypatch.setattr(C, "analyse_question", lambda lm, q, cfg, previous=None: calls.append(q.index) or real(lm, q, cfg, previous))
    C.run_circuit(_cfg(), out, lm=lm)
    assert calls == [2]
    again = C.load_rows(out)
    assert [r["index"] for r in again] == [0, 1, 2] and again[2] == rows[2]  # deterministic
    # a record from an analysis whose path patching used other head sets: only that part is redone
    old = dict(again[0])
    del old["path_sets"]
    with open(out / C.RESULTS, "a") as f:
        f.write(json.dumps(old) + "\n")
    calls.clear()
    seen = []
    monkeypatch.setattr(C, "analyse_question", lambda lm, q, cfg, previous=None: seen.append(previous) or real(lm, q, cfg, previous))
    C.run_circuit(_cfg(), out, lm=lm)
    assert len(seen) == 1 and seen[0]["index"] == 0
    redone = C.load_rows(out)
    assert redone[0] == again[0]  # same hops, same paths: the record is whole again
    with pytest.raises(UsageError, match="another llm-circuit run"):
        C.run_circuit(_cfg(seed=1), out, lm=lm)


def test_dead_heads_carry_nothing():
    """The known answer: a head whose output is zeroed has no effect at any position, so it is
    never a carrier; the live heads' effects are those of the model without it."""
    dead = [(0, 0), (0, 1), (1, 2), (1, 3), (2, 0), (2, 1), (2, 2)]
    lm = tiny_lm(dead=dead)
    measured = []
    for index in range(6):  # questions where changing a link moves the untrained model's margin
        rec = C.analyse_question(lm, prompts.generate("equations", 2, 4, 0, index), _cfg())
        measured += [h for h in rec["hops"] if h["measured"]]
    assert measured, "the tiny model should react to some link"
    for h in measured:
        for layer, head in dead:
            assert h["s"][layer][head] == 0.0
        for c in h["candidates"]:
            if c["carries"]:
                assert (c["layer"], c["head"]) not in dead


def test_summary_counts_only_correct_questions():
    rows = [
        {"index": 0, "correct": False, "hops": [{"k": 1, "measured": True, "cf_follows": True, "s": [[1.0]], "t": [[1.0]],
                                                  "candidates": [{"layer": 0, "head": 0, "act": 0.9, "t": 1.0, "carries": True,
                                                                  "src_role": "L1:x1", "dest_role": "end"}]}]},
        {"index": 1, "correct": True, "hops": [{"k": 1, "measured": True, "cf_follows": True, "s": [[0.5]], "t": [[0.5]],
                                                 "candidates": [{"layer": 0, "head": 0, "act": 0.5, "t": 0.5, "carries": True,
                                                                 "src_role": "L1:x1", "dest_role": "end"}]}]},
        {"index": 2, "correct": False},
    ]
    s = C.summarise(rows, {"model": "m", "depth": 1, "n": 3, "chains": 4, "formulation": "equations"})
    assert (s["n"], s["correct"], s["analysed"]) == (3, 1, 1)
    assert s["hops"][0]["mean_t"] == [[0.5]]
    assert s["hops"][0]["heads"][0]["moves"] == {"L1:x1 -> end": 1}


def test_a_head_confirmed_for_two_hops_counts_for_one():
    def cand(layer, t, act):
        return {"layer": layer, "head": 0, "t": t, "act": act, "carries": True, "src_role": "x", "dest_role": "end"}

    hops = [{"k": 1, "measured": True, "candidates": [cand(20, 0.17, 0.8), cand(22, 0.11, 0.4)]},
            {"k": 2, "measured": True, "candidates": [cand(22, 0.27, 0.3)]}]
    own = C.own_carriers(hops)
    assert [c["layer"] for c in own[1]] == [20] and [c["layer"] for c in own[2]] == [22]
    assert C.hop_layers(hops) == {1: 20, 2: 22}
    hops[1]["candidates"] = []  # hop 2 without a head of its own
    assert C.hop_layers(hops) == {1: 20, 2: None}


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    ({"formulation": "functions", "depth": 2}, "no single chain"),
    ({"depth": 0}, "out of range"),
    ({"chains": 1}, "at least 2"),
    ({"n": 0}, "'n'"),
])
def test_bad_config_is_one_line(kw, match):
    with pytest.raises(UsageError, match=match):
        _cfg(**kw)


def test_prompt_beyond_the_context_is_refused(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager")
    lm = TorchLM(Qwen2ForCausalLM(cfg), "short", _render, _encode, lambda a: ord(a[0]))
    with pytest.raises(UsageError, match="exceeds the model's context of 64"):
        C.run_circuit(_cfg(depth=3), tmp_path / "r", lm=lm)
    assert not (tmp_path / "r" / C.RESULTS).exists()


def test_unsupported_architecture_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=64))
    with pytest.raises(UsageError, match="architecture 'gpt2' is not supported"):
        TorchLM(model, "gpt2-tiny", _render, _encode, ord)


def _gguf(path: Path, arch: str) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_of_another_architecture_is_one_line(tmp_path, cli):
    path = _gguf(tmp_path / "bert.gguf", "bert")
    with pytest.raises(UsageError, match="GGUF architecture 'bert' is not supported"):
        load_gguf(str(path))
    code, out, err = cli("llm-circuit", "--model", path, "--out", tmp_path / "o")
    assert code == 2 and "not supported" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_gguf_without_tensors_is_one_line(tmp_path):
    path = _gguf(tmp_path / "empty.gguf", "llama")
    with pytest.raises(UsageError, match="cannot load empty.gguf"):
        load_gguf(str(path))


def test_cli_bad_input_exits_2(cli, tmp_path):
    for args, words in [
        (["--model", "nowhere.gguf"], "not found"),
        (["--model", "x.bin"], "unknown model"),
        (["--model", "tiny.gguf", "--formulation", "relatives"], "no single chain"),
        (["--model", "tiny.gguf", "--depth", "500"], "out of range"),
    ]:
        code, out, err = cli("llm-circuit", *args, "--out", tmp_path / "o")
        assert code == 2 and words in err and "Traceback" not in err, (args, err)


# --- claims ------------------------------------------------------------------------------------------


def _summary(depth, correct=9, n=10, stacked=8, measured=8, mediated=0.7, present=8):
    lo = 0.6 if correct / n > 0.5 else 0.1
    hops = [{"k": k, "heads": [{"layer": 3 * k, "head": 1, "questions": present, "mean_act": 0.3}], "present": present,
             "measured": measured, "layers": [3 * k] * present, "moves": {"L1:x1 -> end": present}, "group_effect": 0.5}
            for k in range(1, depth + 1)]
    return {"config": {"model": "m"}, "n": n, "correct": correct, "accuracy": correct / n, "ci95": [lo, 0.99], "chance": 0.25,
            "analysed": measured, "all_hops_measured": measured, "stacked": stacked, "hops": hops,
            "mediation": {str(k): {"questions": measured, "median": mediated} for k in range(2, depth + 1)},
            "thresholds": {"head_min": C.HEAD_MIN}}


def test_claim_rules():
    assert judge(None, 2).verdict == NOT_RUN
    assert judge(_summary(2), 2).verdict == PASS
    assert judge(_summary(2, stacked=3), 2).verdict == FAIL  # 3/8 < 50%
    assert judge(_summary(2, mediated=0.1), 2).verdict == FAIL
    assert judge(_summary(2, stacked=5), 2).verdict == INCONCLUSIVE  # 62%: between
    assert judge(_summary(2, mediated=0.4), 2).verdict == INCONCLUSIVE
    low = judge(_summary(3, correct=3), 3)
    assert low.verdict == INCONCLUSIVE and "above chance" in low.measured
    few = judge(_summary(2, measured=4, stacked=4), 2)
    assert few.verdict == INCONCLUSIVE and "fewer than 5" in few.measured
    assert judge(_summary(1, present=8), 1).verdict == PASS
    assert judge(_summary(1, present=2), 1).verdict == FAIL


def test_claims_judge_a_folder_of_depths(tmp_path):
    lm = tiny_lm()
    C.run_circuit(_cfg(depth=1), tmp_path / "m" / "d1", lm=lm)
    C.run_circuit(_cfg(depth=2), tmp_path / "m" / "d2", lm=lm)
    found = {c.id: c for c in folder_claims(tmp_path / "m")}
    assert set(found) == {"LC1", "LC2", "LC3"}
    assert found["LC3"].verdict == NOT_RUN
    # the untrained model answers nothing right: nothing to judge
    assert found["LC2"].verdict == INCONCLUSIVE and "above chance" in found["LC2"].measured
    one = folder_claims(tmp_path / "m" / "d2")
    assert [c.verdict for c in one] == [NOT_RUN, INCONCLUSIVE, NOT_RUN]


# --- the check against App. E's discovery, on a twin whose circuit is known ------------------------


def test_twin_counterfactual_changes_one_pair_only():
    from stackedheads.llm.circuit_twin import counterfactual_batch
    from stackedheads.tasks.vectors import VectorTaskConfig, make_batch

    task = VectorTaskConfig(chains=2, depth=2, n_train=64, n_val=16)
    batch = make_batch(task, range(8), "val")
    for k in (1, 2):
        cf = counterfactual_batch(batch, k, task.dims)
        changed = (cf.inputs != batch.inputs).any(-1)  # (B, T)
        assert changed.sum(1).tolist() == [1] * 8
        pos = changed.float().argmax(1)
        rows = torch.arange(8)
        assert (batch.meta.pair[rows, pos] == k).all()
        assert (batch.meta.chain[rows, pos] == batch.meta.query_chain[:, 0]).all()
        # the new symbol is the other chain's x_k
        other = 1 - batch.meta.query_chain[:, 0]
        assert torch.equal(cf.inputs[rows, pos, :task.dims], batch.symbols[rows, other, k])


@pytest.mark.slow
def test_twin_check_finds_the_heads_app_e_finds_useful():
    """The forced twin's circuit is known (tests/helpers.py: layer 0 links the pairs, layer 1
    retrieves, layer 2 attends uniformly); App. E's discovery finds layers 0 and 1 useful, and so
    must the counterfactual patching of llm-circuit."""
    from helpers import Forced, train_forced

    from stackedheads.circuits.discover import DiscoverConfig, discover
    from stackedheads.llm.circuit_twin import agreement, twin_head_effects

    model, task, val = train_forced(Forced)
    effects = twin_head_effects(model, val, task.dims)
    useful = discover(model, val, task, DiscoverConfig(tolerance=0.02)).summary()["useful_heads"]
    found = agreement(effects, useful)
    assert found["useful"] == [[0, 0], [1, 0]]
    assert found["both"] == [[0, 0], [1, 0]] and found["only_patching"] == [] and found["jaccard"] == 1.0
