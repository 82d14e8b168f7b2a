"""Beyond the paper: stacked heads inside a language model (LC1-LC3), from ``llm-circuit`` folders.

The paper infers from Sec. 4's benchmark that "large language models have learned a complex
mechanism formed by multiple stacked attention heads" (Sec. 2) and shows such a mechanism only
in small transformers trained on the problem (Sec. 8, Fig. 5: one hop per head, each hop's head
in a later layer). These claims test the sentence inside a language model, on the questions it
answers correctly (:mod:`stackedheads.llm.circuit`):

* LC1 (D = 1): the single hop is carried by attention heads: at least one head whose output,
  patched from the counterfactual alone, moves :data:`~stackedheads.llm.circuit.HEAD_MIN` of the
  link's effect, in at least :data:`PRESENT` of the questions;
* LC2 (D = 2): a chain of heads in distinct layers, one hop after the other: in at least
  :data:`PRESENT` of the questions both hops have a carrying head and hop 2's strongest head
  sits in a later layer than hop 1's, and path patching says at least :data:`MEDIATED` (median)
  of hop 1's heads' effect goes through hop 2's heads;
* LC3 (D = 3): the same with a third hop.

Each is INCONCLUSIVE where the model does not answer above chance (Wilson 95% lower bound at or
below chance: a correct answer may be a guess) or fewer than :data:`MIN_ANALYSED` questions were
analysed with every hop measured; FAIL where those hold and the hops are present or ordered in
fewer than :data:`ABSENT` of the questions, or the median mediation is below :data:`UNMEDIATED`;
INCONCLUSIVE in between.
"""

from __future__ import annotations

import json
from pathlib import Path

from stackedheads.claims._core import FAIL, INCONCLUSIVE, NOT_RUN, PASS, Claim
from stackedheads.errors import UsageError

SECTION = "Beyond the paper: stacked heads inside a language model"
MIN_ANALYSED = 5  # questions answered correctly with every hop measured
PRESENT = 0.7  # share of those questions showing the hop structure, for a PASS
ABSENT = 0.5  # below this share: FAIL
MEDIATED = 0.5  # median share of hop k-1's effect through hop k's heads, for a PASS
UNMEDIATED = 0.25  # below it: FAIL

_PAPER = (
    "Sec. 2: 'large language models have learned a complex mechanism formed by multiple stacked "
    "attention heads', inferred from Sec. 4's accuracy; the paper shows the mechanism only in small "
    "trained transformers (Sec. 8, Fig. 5: one hop per head, hop k's head in a later layer than hop k-1's)."
)
_IDS = {1: "LC1", 2: "LC2", 3: "LC3"}
_WHAT = {
    1: "at D = 1 the hop is carried by attention heads",
    2: "at D = 2 a chain of heads in distinct layers carries the two hops, hop 1's effect mediated by hop 2's heads",
    3: "at D = 3 a chain of heads in distinct layers carries the three hops, each mediated by the next",
}


def _accuracy(s: dict) -> str:
    lo, hi = s["ci95"]
    return f"accuracy {s['correct']}/{s['n']} = {s['accuracy']:.2f} (Wilson 95% [{lo:.2f}, {hi:.2f}], chance {s['chance']:.2f})"


def _hops(s: dict) -> str:
    parts = []
    for h in s["hops"]:
        heads = ", ".join(f"L{c['layer']}H{c['head']} ({c['questions']}q, {c['mean_act']:.2f})" for c in h["heads"][:3]) or "none"
        move = next(iter(h["moves"]), "-")
        parts.append(f"hop {h['k']}: carried in {h['present']}/{h['measured']} (layers {h['layers']}), heads {heads}, "
                     f"commonest move {move}, all of its heads together {h['group_effect']}")
    return "; ".join(parts)


def judge(s: dict | None, depth: int) -> Claim:
    """The claim of one depth from its summary (:func:`stackedheads.llm.circuit.summarise`)."""
    cid, paper = _IDS[depth], f"{_PAPER} Hypothesis here: {_WHAT[depth]}."
    if s is None:
        return Claim(SECTION, cid, paper, f"no llm-circuit folder at D = {depth}", NOT_RUN)
    model = s["config"]["model"]
    rule = (f"thresholds: >= {MIN_ANALYSED} questions analysed with every hop measured, accuracy's lower bound above chance; "
            f"PASS >= {PRESENT:.0%} of them {'with a carrying head' if depth == 1 else 'stacked'}"
            + (f" and median mediation >= {MEDIATED}" if depth > 1 else "")
            + f"; FAIL < {ABSENT:.0%}" + (f" or median mediation < {UNMEDIATED}" if depth > 1 else "")
            + f"; a head carries a hop when patching it alone moves >= {s['thresholds']['head_min']} of the link's effect")
    head = f"{model}: {_accuracy(s)}; {s['analysed']} analysed, {s['all_hops_measured']} with every hop measured"
    m = s["all_hops_measured"]
    if s["n"] == 0:
        return Claim(SECTION, cid, paper, f"{model}: no question answered yet at D = {depth}", INCONCLUSIVE)
    if s["ci95"][0] <= s["chance"]:
        return Claim(SECTION, cid, paper, f"{head}; the model does not answer above chance, so a correct answer may "
                     f"be a guess and its circuit says nothing; found: {_hops(s)}; {rule}", INCONCLUSIVE)
    if m < MIN_ANALYSED:
        return Claim(SECTION, cid, paper, f"{head}: fewer than {MIN_ANALYSED} (raise --n); found: {_hops(s)}; {rule}", INCONCLUSIVE)
    if depth == 1:
        share = s["hops"][0]["present"] / m
        found = f"a carrying head in {s['hops'][0]['present']}/{m} = {share:.0%}"
        verdict = PASS if share >= PRESENT else FAIL if share < ABSENT else INCONCLUSIVE
    else:
        share = s["stacked"] / m
        meds = [s["mediation"][str(k)]["median"] for k in range(2, depth + 1)]
        med = None if any(v is None for v in meds) else min(meds)
        per_hop = ", ".join(
            f"hop {k}: {s['mediation'][str(k)]['median']} over {s['mediation'][str(k)]['questions']} questions"
            if s["mediation"][str(k)]["questions"] else f"hop {k}: not measured"
            for k in range(2, depth + 1)
        )
        found = (f"stacked (every hop carried, strongest heads in increasing layers) in {s['stacked']}/{m} = {share:.0%}; "
                 f"median share of hop k-1's effect mediated by hop k's heads: {per_hop}")
        if share < ABSENT or (med is not None and med < UNMEDIATED):
            verdict = FAIL
        elif share >= PRESENT and med is not None and med >= MEDIATED:
            verdict = PASS
        else:
            verdict = INCONCLUSIVE
    return Claim(SECTION, cid, paper, f"{head}; {found}; {_hops(s)}; {rule}", verdict)


def summaries(folder: str | Path) -> dict[int, dict]:
    """The summary of each depth under ``folder`` (one ``llm-circuit`` folder or a folder of
    them, e.g. ``d1``, ``d2``, ``d3``), recomputed from each one's ``results.jsonl``."""
    from stackedheads.llm.circuit import SPEC_FILE, load_rows, summarise

    folder = Path(folder)
    found = [folder] if (folder / SPEC_FILE).exists() else sorted(p for p in folder.iterdir() if (p / SPEC_FILE).exists())
    out: dict[int, dict] = {}
    for f in found:
        try:
            spec = json.loads((f / SPEC_FILE).read_text())
            cfg = spec["config"]
            depth = cfg["depth"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            raise UsageError(f"{f / SPEC_FILE} is not an llm-circuit spec") from None
        if depth in out:
            raise UsageError(f"{folder} holds two llm-circuit folders at D = {depth}: judge one at a time")
        out[depth] = summarise(load_rows(f), cfg)
    return out


def is_circuit_folder(folder: str | Path) -> bool:
    from stackedheads.llm.circuit import SPEC_FILE

    folder = Path(folder)
    return (folder / SPEC_FILE).exists() or (folder.is_dir() and any((p / SPEC_FILE).exists() for p in folder.iterdir()))


def folder_claims(folder: str | Path) -> list[Claim]:
    """LC1-LC3 judged from the ``results.jsonl`` files under ``folder`` (NOT RUN for a depth
    without a folder)."""
    found = summaries(folder)
    return [judge(found.get(d), d) for d in (1, 2, 3)]
