"""The run folder of an LLM benchmark: its log, its identity, resuming.

- ``config.json``: what identifies the run (backend, model, mode, seed, chains, few-shot,
  sampling) and every invocation's arguments. Never an API key.
- ``samples.jsonl``: one record per question, appended and flushed when the question finishes:
  the prompt, every raw draw and its parse, the final answer, correctness, latency. A run
  resumes by skipping the questions already there; runs with other formulations, depths or
  ``n`` add questions to the same folder.
- ``results.json``: the summary of every record (:func:`stackedheads.llm.scoring.summarize`).

Answers of one identity must never be mixed with another's: :func:`check_records` and
:func:`check_folder` refuse before anything is written; :func:`record_invocation` writes
``config.json`` only as the first answer is appended, so a run refused at its first draw (a
prompt longer than the model's context) leaves nothing that would block the corrected run.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from stackedheads.errors import UsageError, holds_secret, redact_written
from stackedheads.llm.backends import Backend
from stackedheads.state.write import RunFolder, atomic_write_json
from stackedheads.tasks.formulations import FORMULATIONS
from stackedheads.tasks.prompts import Question

__all__ = [
    "CONFIG", "KIND", "RESULTS", "SAMPLES", "check_folder", "check_records", "load_records", "record_invocation", "run_identity",
]

PROTOCOL_VERSION = 1
SAMPLES = "samples.jsonl"
CONFIG = "config.json"
RESULTS = "results.json"
KIND = "llm-bench run"  # what storage.folder_kinds calls a folder holding SAMPLES

# Fields of the run identity: a folder answered under one of these values must not be mixed
# with answers under another. n, formulations and depths only select questions.
IDENTITY_FIELDS = ("chains", "seed", "few_shot", "max_draws", "temperature", "max_tokens")
MAX_NORMALISED = 200  # the parse of a draw as stored: an answer is a word or a number
# What scoring reads from a record: one without these (a damaged line) is asked again.
_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str, "formulation": str, "depth": int, "chains": int, "answered": bool, "correct": bool,
    "acceptable": list, "n_draws": int, "latency_s": (int, float), "backend": str, "model": str, "mode": str,
}


def record_key(q: Question) -> str:
    """A question's key in ``samples.jsonl``: what resuming skips."""
    return f"{q.formulation}/D{q.depth}/N{q.chains}/{q.index}"


def stored(value: Any) -> Any:
    """``value`` (the run's own text, or lists and dicts of it) as it is stored: without an
    unmistakable registered secret (:func:`stackedheads.errors.redact_written`)."""
    if isinstance(value, str):
        return redact_written(value)
    if isinstance(value, list):
        return [stored(v) for v in value]
    if isinstance(value, dict):
        return {k: stored(v) for k, v in value.items()}
    return value


def scored(value: Any) -> Any:
    """A scored value (an answer word, or a list of them) as it is stored. One that holds a
    registered secret (an API key equal to an answer word) is stored as a hash of it, not as
    "***" (every such answer would read "***" and the log could not say which was given). Equal
    words keep equal hashes, so a stored final still equals the stored answer it matched."""
    if isinstance(value, list):
        return [scored(v) for v in value]
    if isinstance(value, str) and holds_secret(value):
        return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]
    return value


def run_identity(backend: Backend, cfg: Any) -> dict[str, Any]:
    """What a record and ``config.json`` must agree on for answers to be counted together
    (``cfg``: a :class:`~stackedheads.llm.bench.BenchConfig`)."""
    ident = {"protocol": PROTOCOL_VERSION, "backend": backend.name, "model": backend.model, "mode": backend.mode}
    ident.update({k: getattr(cfg, k) for k in IDENTITY_FIELDS})
    return ident


def _valid_record(rec: Any) -> bool:
    return (
        isinstance(rec, dict)
        and all(isinstance(rec.get(k), t) and not (t is int and isinstance(rec[k], bool)) for k, t in _RECORD_TYPES.items())
        and rec["formulation"] in FORMULATIONS
        and len(rec["acceptable"]) > 0
        and _possible(rec)
    )


def _possible(rec: dict[str, Any]) -> bool:
    """Values no run writes: a record is scored from what it stores, never trusted for it
    (llm-compare printed draws/q -1.50 for "n_draws": -5 and counted a stored "correct": true
    whose answer was wrong)."""
    draws = rec.get("draws")
    if rec["depth"] < 1 or rec["chains"] < 1 or rec["n_draws"] < 1 or not math.isfinite(rec["latency_s"]) or rec["latency_s"] < 0:
        return False
    if isinstance(draws, list) and len(draws) != rec["n_draws"]:
        return False
    if "final" in rec and "answer" in rec:  # records of every version store both
        final = rec["final"]
        if rec["answered"] != (final is not None) or rec["correct"] != (final is not None and final == rec["answer"]):
            return False
    return not (rec["correct"] and not rec["answered"])


def load_records(path: Path, strict: bool = False) -> dict[str, dict[str, Any]]:
    """Records of ``samples.jsonl`` by key; a line cut short by a kill, or a record missing
    what scoring needs or holding what no run writes, is ignored (its question is asked again).
    ``strict`` (a reader that asks nothing again: llm-compare): such a line is one error naming
    it, unless a later record answers its question again, or it is a last line cut short (a run
    in progress or killed)."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    with open(path, encoding="utf-8", errors="replace") as f:  # undecodable bytes fail as a bad record
        lines = f.read().split("\n")
    bad: list[tuple[int, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if _valid_record(rec):
            records[rec["key"]] = rec
        elif number < len(lines):  # the last piece has no newline: cut short by a kill
            bad.append((number, rec.get("key") if isinstance(rec, dict) else None))
    unanswered = [n for n, key in bad if key not in records]
    if strict and unanswered:
        raise UsageError(f"{path}: line {unanswered[0]} is not an answer record this program writes (damaged or edited; "
                         f"{len(unanswered)} such lines): delete it, then re-run llm-bench on the folder to ask its question again")
    return records


def repair_tail(path: Path) -> None:
    """Drop a partial last line (the process was killed mid-write) before appending."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(cut)


def check_folder(out: Path, identity: dict[str, Any]) -> list[dict[str, Any]]:
    """Refuse to mix answers of different runs in one folder; the invocations recorded so far."""
    folder = RunFolder(out, KIND, shares=("llm comparison",))
    saved = folder.recorded(CONFIG, "the run's identity")
    if saved is None:
        return []
    old = saved.get("identity", {})
    if not isinstance(old, dict):
        raise UsageError(f"{out / CONFIG} has the wrong shape (identity is not an object): use another 'out'", fields=("out",))
    # On this identity's fields: one an older config.json records and it no longer has is no difference.
    folder.require_same({k: old.get(k) for k in identity}, identity, "other settings")
    runs = saved.get("invocations", [])
    return runs if isinstance(runs, list) else []


def record_invocation(out: Path, identity: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """Write config.json: the run's identity and its invocations (``runs``, this one last)."""
    atomic_write_json(out / CONFIG, {"identity": identity, "invocations": runs})


def check_records(
    records: dict[str, dict[str, Any]], identity: dict[str, Any], samples: Path, vouched: bool,
    advice: str = "use another 'out'",
) -> None:
    """Every answer must come from this run's identity (a samples.jsonl without its
    config.json, or copied from elsewhere, must not credit one model with another's answers).
    Records from before these fields were stored are accepted only where config.json vouches."""
    for key, rec in records.items():
        for k, want in identity.items():
            if k not in rec and vouched:
                continue
            if rec.get(k, "(not recorded)") != want:
                raise UsageError(
                    f"{samples} holds answers of another run ({key}: {k} {str(rec.get(k, '(not recorded)'))[:60]!r} "
                    f"there, {want!r} expected); {advice}", fields=("out",),
                )
