"""Named recipes: changes to a training preset's optimiser, data, model or dtype (``train --recipe``).

Each name says what it changes (``lr-constant``, ``n-train-2048``, ``init-tl``). Names compose with
"+" where they agree (two that set one field to two values are refused): ``tl-stack+lr-3e-4`` is TransformerLens's stack at lr 3e-4. The names
the recipe screen used before are accepted with a one-line note; ``paper-curriculum`` is the recipe
the screen names (:data:`PAPER_CURRICULUM`). This module imports no torch, so the command line's
help can list the recipes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from stackedheads.errors import UsageError
from stackedheads.registry import Registry


@dataclass(frozen=True)
class Recipe:
    """A named change to a preset's recipe: ``changes`` are :meth:`TrainConfig.override`'s
    fields, ``why`` what it changes and the reading of the paper it stands for, ``choices`` how
    many of the choices Sec. 7.1 leaves open it makes (0: the presets' own; the screen wants more
    seeds of two or more)."""

    changes: dict
    why: str
    choices: int = 1


RECIPES: Registry[Recipe] = Registry("recipe")
RECIPES.register("gpt2", Recipe({}, "GPT-2's recipe as nanoGPT reads it (Sec. 7.1: 'the recipe of Radford et al. (2019)'): "
                                    "the presets' own", 0))
RECIPES.register("lr-constant", Recipe(
    {"warmup_steps": 0, "schedule": "constant"},
    "no warm-up and a constant lr (clipping kept): Sec. 7.1 names Adam, lr 1e-3 and decay 0.1 only"))
RECIPES.register("lr-warmup-constant", Recipe({"schedule": "constant"}, "warm-up, then a constant lr (clipping kept)"))
for _n in (2048, 16_384, 65_536):
    RECIPES.register(f"n-train-{_n}", Recipe(
        {"n_train": _n},
        f"{_n:,} training sequences: Sec. 9.1's '6400 steps (800 epochs), a batch size of 256' is 2,048 an epoch"))
RECIPES.register("init-input-torch", Recipe(
    {"in_init": "torch"}, "the input projection at PyTorch's nn.Linear default instead of N(0, 0.02)"))
RECIPES.register("init-resid-sublayers", Recipe(
    {"resid_scale": "sublayers"}, "residual projections at 0.02/sqrt(residual sublayers): 1/sqrt(L) without MLPs"))
RECIPES.register("pos-pair", Recipe({"pe": "pair"}, "one positional code per input pair (App. B, Def. 3)"))
RECIPES.register("pos-learned", Recipe({"pos_embed": "learned"}, "a learned position table added, as GPT-2 has"))
RECIPES.register("dtype-float32", Recipe({"dtype": "float32"}, "float32 instead of bfloat16 autocast"))
# Sec. 9.1's head size 16 beside d_model 512 and one head is a HookedTransformerConfig's free d_head
# (GPT-2's is d_model / n_heads): TransformerLens is the stack the paper's numbers fit.
RECIPES.register("init-tl", Recipe(
    {"weight_init": "transformer-lens"},
    "TransformerLens's init: every weight matrix N(0, 0.8/sqrt(d_model)), no residual scaling"))
# HookedTransformerTrainConfig's optimiser: AdamW on model.parameters(), warmup_steps 0, no scheduler,
# no max_grad_norm.
RECIPES.register("tl-stack", Recipe(
    {"weight_init": "transformer-lens", "warmup_steps": 0, "schedule": "constant", "grad_clip": 0.0, "decay_exempt": ()},
    "TransformerLens's init and train loop: AdamW, weight decay on every parameter, no warm-up, no schedule, "
    "no clipping", 2))
RECIPES.register("decay-all", Recipe({"decay_exempt": ()}, "weight decay on every parameter, norms and biases included"))
for _lr in ("3e-4", "1e-4"):
    RECIPES.register(f"lr-{_lr}", Recipe({"lr": float(_lr)}, f"lr {_lr} instead of Sec. 7.1's 1e-3"))

# The recipe the screen names: of the screened recipes whose seeds are all in, the one nearest Sec. 9.2's
# curriculum by `stackedheads seeds`' distance (tests check it against results/sec9).
PAPER_CURRICULUM = "tl-stack+lr-3e-4"

# The recipe screen's recipes, in the order its table lists them (docs/training.md, "The recipe screen").
# Round one: each choice Sec. 7.1 leaves open, then the movers combined. Round two: TransformerLens's stack
# with the input layer at PyTorch's default, and the learning rate under it and under the presets (four
# seeds each).
SCREEN_ROUNDS = (("lr-constant", "lr-warmup-constant", "n-train-2048", "n-train-16384", "n-train-65536",
                  "init-input-torch", "init-resid-sublayers", "pos-pair", "pos-learned", "dtype-float32", "init-tl",
                  "tl-stack", "init-input-torch+lr-constant", "init-input-torch+lr-warmup-constant",
                  "lr-constant+n-train-16384"),
                 ("tl-stack+init-input-torch", "tl-stack+lr-3e-4", "lr-3e-4"))
SCREEN = tuple(name for names in SCREEN_ROUNDS for name in names)

# Names the screen used before: a run's recorded command may hold them.
OLD_NAMES = {"constant-clip": "lr-constant", "warmup-constant": "lr-warmup-constant", "train-2048": "n-train-2048",
             "train-16384": "n-train-16384", "train-65536": "n-train-65536", "torch-in-init": "init-input-torch",
             "resid-sublayers": "init-resid-sublayers", "pe-pair": "pos-pair", "learned-pos": "pos-learned",
             "float32": "dtype-float32", "tl-init": "init-tl", "transformer-lens": "tl-stack",
             "torch-in-init-constant": "init-input-torch+lr-constant",
             "torch-in-init-warmup-constant": "init-input-torch+lr-warmup-constant",
             "constant-clip-train-16384": "lr-constant+n-train-16384"}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def canonical(name: str, note: Callable[[str], None] | None = _stderr) -> str:
    """``name`` in today's names: each "+" part checked, an old name or ``paper-curriculum``
    replaced (with one line to ``note`` saying so); one line naming the recipes for an unknown part."""
    parts = []
    for part in str(name).split("+"):
        if part == "paper-curriculum":
            new = PAPER_CURRICULUM
            if note:
                note(f"paper-curriculum is {new} (the recipe screen's nearest to Sec. 9's curriculum)")
        elif part in OLD_NAMES:
            new = OLD_NAMES[part]
            if note:
                note(f"{part} is now {new}")
        else:
            if part not in RECIPES:
                raise UsageError(f"unknown recipe {part!r}; choose one of {', '.join(RECIPES)}, paper-curriculum, "
                                 "or several joined by '+'")
            new = part
        parts.append(new)
    return "+".join(parts)


def recipe(name: str, note: Callable[[str], None] | None = _stderr) -> Recipe:
    """The recipe ``name`` names: one registered recipe, or several joined by "+" whose changes
    apply together; a recipe named twice, or two that set one field to two values, is refused."""
    names = canonical(name, note).split("+")
    found = [RECIPES.get(p) for p in names]
    if len(found) == 1:
        return found[0]
    # Recipes compose only where they agree: one named twice, or two that set one field to two
    # values (lr-3e-4+lr-1e-4), would train at whichever came last, without a word.
    changes: dict = {}
    set_by: dict = {}
    for part, r in zip(names, found):
        if names.count(part) > 1:
            raise UsageError(f"recipe {name!r} names {part} twice: give each recipe once", fields=("recipe",))
        for key, value in r.changes.items():
            if key in changes and changes[key] != value:
                raise UsageError(f"recipe {name!r}: {set_by[key]} sets {key} to {changes[key]!r} and {part} to {value!r}; "
                                 "give one of them", fields=("recipe",))
            changes[key], set_by[key] = value, part
    return Recipe(changes, "; then ".join(r.why for r in found), sum(r.choices for r in found))


def help_text() -> str:
    """``train --recipe``'s help: every registered recipe, composition and the alias."""
    return (f"A named change to the preset's recipe: {', '.join(RECIPES)} (gpt2: the presets' own); "
            f"several join with '+' where they agree (tl-stack+lr-3e-4); paper-curriculum is {PAPER_CURRICULUM}, "
            "the recipe screen's nearest to Sec. 9's curriculum. Options given beside it override it.")
