"""What Sections 8 and 9 share: whether a model has learned enough for its circuit to mean
anything, App. E's validation under the loss budget, per-seed verdicts, and reading a stage."""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import FAIL, INCONCLUSIVE, PASS, combine, read_json

# A circuit of a model that has not learned proves nothing: circuit and emergence claims need
# every chain position's final partial loss at most this fraction of the 1 - 1/N plateau (0.15
# for the paper's N = 4; its models reach < 0.01, Sec. 8.2, and 0.031, Sec. 9.2).
LEARNED_FRACTION = 0.2


def learned(train: dict, seed: str) -> tuple[bool, str]:
    chains = train["config"]["task"]["chains"]
    limit = LEARNED_FRACTION * (1 - 1 / chains)
    parts = train["seeds"][seed]["final_partial"]
    bad = [k.removeprefix("val_") for k, v in parts.items() if not v <= limit]
    if not bad:
        return True, ""
    shown = ", ".join(f"{k.removeprefix('val_')} {v:.3f}" for k, v in parts.items())
    return False, (
        f"seed {seed}: the model has not learned the task ({shown}; every position must be <= {limit:.3g}, "
        f"{LEARNED_FRACTION:.0%} of the 1 - 1/N = {1 - 1 / chains:.3g} plateau): train longer"
    )


def budget_text(found: dict) -> str:
    if found.get("threshold_kind") == "absolute":
        over = found.get("model_over_budget") or []
        return f"budget: absolute {found['threshold']:.3g} per position (App. E: below 0.05)" + (
            f"; {', '.join(over)} above it unablated get their own loss + {found.get('tolerance', 0):.3g}" if over else "")
    return (f"budget: each position's unablated loss + {found.get('tolerance', 0):.3g} (a CPU twin's relative "
            f"budget; App. E uses an absolute 0.05)")


def validation(found: dict) -> tuple[str, str]:
    """App. E step 5 on the held-out sequences: the combined ablation, every row replaced
    (unexplained rows uniform), must keep every position within its budget."""
    un, comb, budgets = found["unablated"], found["combined"], found["budgets"]
    parts = ", ".join(f"x{j} {p:.3f}/{b:.3f}" for j, (p, b) in enumerate(zip(comb["partial"], budgets, strict=True), start=1))
    text = f"unablated {un['loss']:.4f}, combined ablation {comb['loss']:.4f} (per position loss/budget: {parts}; {budget_text(found)})"
    over, unexplained = found["over_budget"], found["unexplained_heads"]
    if found.get("model_over_budget"):
        return INCONCLUSIVE, text + f"; the model's own loss is above the threshold for {', '.join(found['model_over_budget'])}"
    if not over:
        return PASS, text + (f"; {len(unexplained)} unexplained rows made uniform" if unexplained else "")
    if unexplained:
        return INCONCLUSIVE, text + (
            f"; partial circuit: {', '.join(over)} over budget with {len(unexplained)} unexplained rows made uniform "
            f"({', '.join(f'L{l}.{h} {r}' for l, h, r in unexplained)})"
        )
    return FAIL, text + f"; {', '.join(over)} over budget"


def first_head_pairs(found: dict, depth: int) -> tuple[float | None, str]:
    """Sec. 8.2 (i): the fraction of pairs k = 1..D whose link s_2k -> s_2k-1 the lowest head
    with useful paths carries."""
    heads = found.get("heads_with_paths") or []
    if not heads:
        return None, "no head carries a useful path"
    low = min(tuple(h) for h in heads)
    carried = {(src, dst) for l, h, src, dst in found["paths"] if (l, h) == low}
    linked = [k for k in range(1, depth + 1) if (2 * k, 2 * k - 1) in carried]
    return len(linked) / depth, f"L{low[0]}.{low[1]} links {len(linked)} of {depth} pairs ({len(linked) / depth:.0%})"


def kept_below(found: dict) -> list[tuple[int, int]]:
    """Heads with rows no rule explains below the lowest head with useful paths: they count as
    useful (A2), so the first useful head is one whose job is unknown."""
    heads = found.get("heads_with_paths") or []
    kept = sorted({(l, h) for l, h, _ in found.get("unexplained_heads", [])})
    if not heads:
        return kept
    low = min(tuple(h) for h in heads)
    return [k for k in kept if k < low]


def per_seed(seeds, each) -> tuple[str, str]:
    """``each(seed) -> (verdict, text)`` over seeds, combined."""
    results = [(s, *each(s)) for s in seeds]
    return combine(v for _, v, _ in results), "; ".join(f"seed {s}: {t}" for s, _, t in results)


def gated(stage: dict, each):
    """``each`` only where the seed's model has learned the task, else INCONCLUSIVE (also when
    the training summary that says so is missing)."""
    train = stage["train"]

    def run(s):
        if train is None:
            return INCONCLUSIVE, no_summary(stage)
        ok, why = learned(train, s)
        return each(s) if ok else (INCONCLUSIVE, why.split(": ", 1)[1])

    return run



def stage_from_files(stage_dir: Path, run_name: str) -> dict | None:
    """A circuits/emergence stage's training summary and discovered circuits, from its files.

    Circuits whose run summary is gone (a reference whose run folder was lost) keep ``train``
    None and name the file in ``missing``: the claims that need it say so instead of NOT RUN."""
    train = read_json(stage_dir / "runs" / run_name / "summary.json")
    found = {
        p.parent.name[4:]: read_json(p) for p in sorted((stage_dir / "discovered").glob("seed*/summary.json"))
    }
    if not found:
        return None
    if not train:
        return {"train": None, "missing": f"{stage_dir.name}/runs/{run_name}/summary.json", "circuits": found}
    return {"train": train, "circuits": {s: f for s, f in found.items() if s in train["seeds"]}}


def no_summary(stage: dict) -> str:
    return f"{stage['missing']} is missing (the training run's final losses this claim needs)"
