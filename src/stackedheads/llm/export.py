"""Export questions for lm-evaluation-harness and inspect_ai (Sec. 4, App. A).

``export_questions(questions, DIR)`` writes:

- ``DIR/data/{formulation}_d{D}.jsonl``: the questions of each (formulation, D) cell, one JSON
  object per line (``id``, ``prompt``, ``answer``, ``acceptable``, ``formulation``, ``depth``,
  ``chains``, ``seed``, ``index``, ``chance``);
- ``DIR/data/{formulation}_d{D}.fewshot.jsonl``: solved examples of the same cell from another
  seed stream (the ones ``llm-bench --few-shot`` uses), never equal to a test question;
- ``DIR/lm_eval/{formulation}_d{D}.yaml``: one lm-evaluation-harness ``generate_until`` task per
  cell, all tagged ``stackedheads``: ``lm_eval --include_path DIR/lm_eval --tasks stackedheads``;
- ``DIR/inspect_task.py``: an inspect_ai task (self-contained) with the resample-until-acceptable
  solver of App. A: ``inspect eval DIR/inspect_task.py --model ...``; it parses answers with
  the source of :mod:`stackedheads.llm.scoring`'s ``normalise`` and ``parse_answer``.

lm-evaluation-harness scores the first answer only (its generate_until tasks have no
"resample until acceptable" loop): exact match after taking the first line, stripping
whitespace, case and punctuation. The inspect_ai task follows the full protocol.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Sequence
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.llm import scoring
from stackedheads.tasks.prompts import Question, generate

__all__ = ["export_questions", "INSPECT_TASK"]


def _cell_name(q: Question) -> str:
    return f"{q.formulation}_d{q.depth}"


def _row(q: Question) -> dict:
    return {
        "id": f"{q.formulation}/D{q.depth}/N{q.chains}/seed{q.seed}/{q.index}",
        "prompt": q.prompt,
        "answer": q.answer,
        "acceptable": list(q.acceptable),
        "formulation": q.formulation,
        "depth": q.depth,
        "chains": q.chains,
        "seed": q.seed,
        "index": q.index,
        "chance": q.chance,
    }


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _lm_eval_yaml(task: str, test: Path, fewshot: Path, max_tokens: int) -> str:
    q = json.dumps  # JSON strings are valid YAML double-quoted scalars
    return "\n".join([
        "# lm-evaluation-harness task written by `stackedheads prompts --export` (Sec. 4, App. A).",
        "# Data paths are absolute: export again after moving the folder.",
        f"task: {task}",
        "tag: stackedheads",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {q(str(test))}",
        f"    train: {q(str(fewshot))}",
        "test_split: test",
        "fewshot_split: train",
        "fewshot_config:",
        "  sampler: first_n",
        "output_type: generate_until",
        f"doc_to_text: {q('Question: {{prompt}}' + chr(10) + 'Answer:')}",
        f"doc_to_target: {q('{{answer}}')}",
        f"target_delimiter: {q(' ')}",
        f"fewshot_delimiter: {q(chr(10) * 2)}",
        "generation_kwargs:",
        f"  until: [{q(chr(10) * 2)}, {q(chr(10) + 'Question:')}]",
        "  do_sample: false",
        f"  max_gen_toks: {max_tokens}",
        "filter_list:",
        "  - name: first-line",
        "    filter:",
        "      - function: regex",
        f"        regex_pattern: {q('([^' + chr(92) + 'n]+)')}",
        "        group_select: 0",
        f"        fallback: {q('')}",
        "      - function: remove_whitespace",
        "      - function: take_first",
        "metric_list:",
        "  - metric: exact_match",
        "    aggregation: mean",
        "    higher_is_better: true",
        "    ignore_case: true",
        "    ignore_punctuation: true",
        "metadata:",
        "  version: 1.0",
        "",
    ])


def export_questions(
    questions: Sequence[Question], out: Path, few_shot_pool: int = 5, max_tokens: int = 16
) -> list[Path]:
    """Write the datasets and the two task files; return the paths written."""
    if not questions:
        raise UsageError("nothing to export")
    if few_shot_pool < 0:
        raise UsageError(f"few_shot_pool must be >= 0, got {few_shot_pool}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder")
    data, lm = out / "data", out / "lm_eval"
    data.mkdir(parents=True, exist_ok=True)
    lm.mkdir(parents=True, exist_ok=True)
    by_cell: dict[str, list[Question]] = {}
    for q in questions:
        by_cell.setdefault(_cell_name(q), []).append(q)
    written: list[Path] = []
    for name, qs in by_cell.items():
        test, fewshot = data / f"{name}.jsonl", data / f"{name}.fewshot.jsonl"
        taken = {q.prompt for q in qs}
        # The stream llm-bench --few-shot draws from, minus any prompt that is also a test one.
        pool: list[Question] = []
        index = 0
        while len(pool) < few_shot_pool:
            q0 = qs[0]
            e = generate(q0.formulation, q0.depth, q0.chains, -1 - q0.seed, index)
            index += 1
            if e.prompt not in taken:
                pool.append(e)
        _write_jsonl(test, [_row(q) for q in qs])
        _write_jsonl(fewshot, [_row(e) for e in pool])
        task = "stackedheads_" + name.replace("-", "_")
        yaml = lm / f"{name}.yaml"
        yaml.write_text(_lm_eval_yaml(task, test.resolve(), fewshot.resolve(), max_tokens))
        written += [test, fewshot, yaml]
    task_file = out / "inspect_task.py"
    task_file.write_text(INSPECT_TASK)
    written.append(task_file)
    return written


def _parsing_source() -> str:
    """:func:`~stackedheads.llm.scoring.normalise` and :func:`~.scoring.parse_answer` with
    their constants, as source: the exported task parses answers with the very code the
    benchmark runs."""
    return "\n".join([
        f"_LABEL = re.compile({scoring._LABEL.pattern!r}, {re.RegexFlag(scoring._LABEL.flags)!r})",
        f"_WRAP = {ascii(scoring._WRAP)}",
        f"_FINAL_PUNCT = {ascii(scoring._FINAL_PUNCT)}",
        "", "",
        inspect.getsource(scoring.normalise),
        "",
        inspect.getsource(scoring.parse_answer),
    ])


# The task file: the docstring and imports, the data folder, the parsing of
# stackedheads.llm.scoring, then the solver and scorer of App. A (inspect_ai's API).
_TASK_HEAD = '''"""inspect_ai task: the retrieval questions of Musat (ICLR 2025), Sec. 4 / App. A.

Written by `stackedheads prompts --export`; reads ./data/*.jsonl beside this file.

    inspect eval inspect_task.py --model openai-api/llamacpp/smollm2 -T few_shot=3 -T max_draws=10

Solver (App. A): k solved examples of the same formulation as chat turns, then the question;
if the answer is not acceptable, sample again (temperature 1 by default), at most max_draws
draws. Scorer: the first acceptable answer equals the target after normalisation (first
line, an "Answer:" label, surrounding whitespace, quotes, final punctuation, case).
Unanswered questions count as wrong and are marked in the score metadata.
"""

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver

DATA = Path(__file__).parent / "data"
'''

_TASK_TAIL = '''def _read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _sample(row, shots):
    turns = []
    for e in shots:
        turns += [ChatMessageUser(content=e["prompt"]), ChatMessageAssistant(content=e["answer"])]
    turns.append(ChatMessageUser(content=row["prompt"]))
    meta = {k: row[k] for k in ("formulation", "depth", "chains", "seed", "index", "acceptable", "chance")}
    return Sample(id=row["id"], input=turns, target=row["answer"], metadata=meta)


@solver
def resample_until_acceptable(max_draws: int = 10):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        acceptable = state.metadata["acceptable"]
        base = list(state.messages)
        draws, final = [], None
        for draw in range(max_draws):
            state.messages = list(base)
            key = f"{state.sample_id}/{draw}".encode()
            seed = int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF
            state = await generate(state, seed=seed)
            text = state.output.completion
            final = parse_answer(text, acceptable)
            draws.append({"text": text, "parsed": final})
            if final is not None:
                break
        state.metadata["draws"] = draws
        state.metadata["final"] = final
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def first_acceptable_answer():
    async def score(state: TaskState, target: Target) -> Score:
        final = state.metadata.get("final")
        return Score(
            value=CORRECT if final == target.text else INCORRECT,
            answer=final or "",
            metadata={"unanswered": final is None, "draws": len(state.metadata.get("draws", []))},
        )

    return score


@task
def stackedheads(formulation: str = "all", few_shot: int = 0, max_draws: int = 10):
    """All exported cells (or those of one formulation), with k-shot chat examples."""
    samples = []
    for path in sorted(DATA.glob("*.jsonl")):
        if path.name.endswith(".fewshot.jsonl"):
            continue
        rows = _read(path)
        if formulation != "all" and rows and rows[0]["formulation"] != formulation:
            continue
        shots = _read(path.with_name(path.stem + ".fewshot.jsonl"))[:few_shot]
        if len(shots) < few_shot:
            raise ValueError(f"{path.name}: only {len(shots)} few-shot examples exported")
        samples += [_sample(r, shots) for r in rows]
    return Task(
        dataset=MemoryDataset(samples, name="stackedheads"),
        solver=resample_until_acceptable(max_draws),
        scorer=first_acceptable_answer(),
    )
'''

INSPECT_TASK = "\n".join([_TASK_HEAD, _parsing_source(), "", _TASK_TAIL])
