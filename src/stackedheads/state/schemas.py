"""One declared schema per state file this program reads back, with the ranges its values can
take: a training run's ``config.json`` and ``summary.json``, a discovery's ``summary.json`` and
``circuit.json``, an emergence ``timeline.json``, a reference's ``reference.json`` and published
``claims.json``. Every reader checks what it read with :func:`check`, so a value no run can
produce (a negative loss, a minimum of 0 heads, a seed below 0) is one line naming the file and
the field, never a verdict judged from it.

A schema names the fields its readers use and lets any others through (files written by later
versions keep their extra fields); a field's type is strict (JSON true is no number, "3" no
integer) and a number is finite. The shapes the claims read (:mod:`stackedheads.claims.stage_files`) say
which fields must be there; these say which values they may hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError
from pydantic import AfterValidator

from stackedheads.errors import UsageError
from stackedheads.validation import MAX_SEED


def _finite(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("must be a finite number")
    return value


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds bytes that are not UTF-8 text") from None
    return value


Number = Annotated[StrictInt | StrictFloat, AfterValidator(_finite)]
Loss = Annotated[StrictInt | StrictFloat, AfterValidator(_finite), Field(ge=0)]  # an MSE: never below 0
Count = Annotated[StrictInt, Field(ge=1)]  # heads, layers, chains, sequences: at least one
Index = Annotated[StrictInt, Field(ge=0)]  # a layer, a head, a step, an epoch
Seconds = Annotated[StrictInt | StrictFloat, AfterValidator(_finite), Field(ge=0)]
Seed = Annotated[StrictInt, Field(ge=0, le=MAX_SEED)]
Text = Annotated[StrictStr, AfterValidator(_utf8)]
Step = Annotated[StrictInt | StrictFloat, AfterValidator(_finite), Field(ge=0)]  # a step or an epoch, where measured


class _Schema(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


# --- a training run ------------------------------------------------------------------------------

class TaskSettings(_Schema):
    chains: Count
    depth: Count


class ModelSettings(_Schema):
    n_layers: Count | None = None
    n_heads: Count | None = None


class RunConfig(_Schema):
    """A training run's config.json (also what its summary.json repeats under "config")."""

    task: TaskSettings
    model: ModelSettings | None = None
    seeds: Annotated[list[Seed], Field(min_length=1)] | None = None
    steps: Count | None = None


class SeedSummary(_Schema):
    final_val_loss: Loss
    final_partial: dict[str, Loss]
    steps_averaged: Count | None = None


class TrainSummary(_Schema):
    """A training run's summary.json: per seed, the final validation losses."""

    config: RunConfig
    seeds: dict[str, SeedSummary]
    wall_s: Seconds | None = None


# --- a discovery ----------------------------------------------------------------------------------

class Losses(_Schema):
    loss: Loss
    partial: list[Loss]


class AblationLosses(Losses):
    ablation: str


class DiscoverySummary(_Schema):
    """A discovery's summary.json (circuits.discover.Discovery.summary)."""

    unablated: Losses
    combined: Losses
    budgets: list[Loss]
    n_useful_heads: Index
    theory_min_heads: Count
    threshold: Loss | None = None
    tolerance: Loss | None = None
    losses: list[AblationLosses] | None = None
    n_search: Count | None = None
    n_check: Count | None = None


class HeadRecord(_Schema):
    layer: Index
    head: Index


class CircuitInfo(_Schema):
    run: str | None = None
    seed: Seed | None = None
    checkpoint: Index | None = None


class CircuitFile(_Schema):
    """A circuit.json: the heads of a circuit and where discovery found it."""

    depth: Count
    heads: list[HeadRecord]
    info: CircuitInfo = CircuitInfo()


# --- an emergence timeline -------------------------------------------------------------------------

class Position(_Schema):
    step: Step | None
    seen: Step | None = None
    epoch: Step | None = None


class Timeline(_Schema):
    """An emergence timeline.json (emergence.Timeline)."""

    steps: list[Index]
    epochs: list[Step]
    plateau_steps: Step | None
    emerged: dict[str, Step | None]
    emerged_seen: dict[str, Step | None] | None = None
    loss_drops: dict[str, Step | None]
    positions: dict[str, Position]


# --- a reference ----------------------------------------------------------------------------------

class ReferenceFile(_Schema):
    """A reference's reference.json (:class:`stackedheads.publishing.publish.Reference`)."""

    name: Text
    title: Annotated[Text, Field(min_length=1)]
    command: Annotated[Text, Field(min_length=1)]
    commit: Text
    machine: Text
    wall_s: Seconds | None
    date: Text
    notes: Text = ""
    files: list[Text]


class Reading(_Schema):
    reading: Text
    primary: bool
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE", "NOT RUN", "DEPENDS ON READING"]
    measured: Text
    seeds: dict[str, Text]


class ClaimRecord(_Schema):
    """One claim of a published claims.json (claims.Claim.to_dict)."""

    section: Text
    id: Text
    paper: Text
    measured: Text
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE", "NOT RUN", "DEPENDS ON READING"]
    readings: list[Reading] = []
    seeds: dict[str, Text] = {}


class ClaimsFile(_Schema):
    claims: list[ClaimRecord]


def _value(error: dict) -> str:
    shown = repr(error.get("input"))
    return shown if len(shown) <= 40 else shown[:37] + "..."


def check(schema: type[_Schema], data: Any, path: str | Path, fix: str = "delete it to rebuild it") -> Any:
    """``data``, read from ``path``, if it holds values ``schema`` allows; else one line naming
    the file, the first field that is wrong, its value, and ``fix`` (what to do)."""
    try:
        schema.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and ("[" in p or p in ("int", "float", "str"))))
        where = ".".join(str(p) for p in loc) or "the file"
        message = first["msg"].removeprefix("Value error, ")
        raise UsageError(f"{path} holds a value no run writes ({where}: {message}, got {_value(first)}): {fix}") from None
    return data


def check_claims(data: Any, path: str | Path, fix: str = "delete it to rebuild it") -> Any:
    """A published claims.json (a list of claims), checked as :class:`ClaimsFile`."""
    check(ClaimsFile, {"claims": data}, path, fix)
    return data
