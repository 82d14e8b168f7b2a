"""The paper's claims, section by section, judged from the files a run left on disk.

Each :class:`Claim` pairs a sentence of the paper with what the run measured and a verdict:

* ``PASS``: positive evidence for the paper's sentence;
* ``FAIL``: evidence against it;
* ``INCONCLUSIVE``: the run cannot decide; ``measured`` says what is missing (never a PASS);
* ``NOT RUN``: the stage that would measure it has no results.

One module per section of the paper: :mod:`.sec4` (language models, L1-L2), :mod:`.sec5`
(theory, T1-T3), :mod:`.sec7` (Figure 4, C0-C3), :mod:`.sec8` (circuits, A1-A5), :mod:`.sec9`
(emergence, E1-E4), and :mod:`.beyond` (the depth phase diagram, D1-D2). Every claim of a
section lives in its module, beside the paper's sentence and its thresholds. The report,
``stackedheads claims DIR`` and the command line all call :func:`collect`, so they agree.

How to add a claim or a section
-------------------------------
A claim of an existing section: add it to that module's evaluate function (state the threshold
and the paper's number in ``measured``; PASS only on positive evidence). A new section: one new
module in this package that registers a :class:`Section`::

    # src/stackedheads/claims/sec10.py
    from pathlib import Path
    from stackedheads.claims._core import PASS, SECTIONS, Claim, Section, read_json

    def evaluate(run: Path) -> list[Claim]:
        found = read_json(run / "mystage" / "results.json")
        ...
        return [Claim("10 Discussion", "X1", "the paper's sentence", "what we measured", PASS)]

    SECTIONS.register("sec10", Section("10 Discussion", 10, "mystage", evaluate))

The registry imports every module of this package on first use; code outside the package
registers its sections the same way (``docs/extending.md``).
"""

from __future__ import annotations

from pathlib import Path

from stackedheads.claims._core import (
    DEPENDS,
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    PASS,
    SECTIONS,
    VERDICTS,
    Claim,
    Section,
    claims_table,
    combine,
    seed_rows,
    seeds_table,
    expect,
    read_json,
    read_jsonl,
)
from stackedheads.claims.readings import readings_table
from stackedheads.errors import UsageError
from stackedheads.state.layout import STAGE_NAMES

__all__ = [
    "DEPENDS", "FAIL", "INCONCLUSIVE", "NOT_RUN", "PASS", "SECTIONS", "VERDICTS", "Claim", "Section",
    "claims_table", "collect", "combine", "expect", "folder_claims", "read_json", "read_jsonl", "readings_table", "sections",
    "seed_rows", "seeds_table",
]


def sections() -> list[Section]:
    """The registered sections in the paper's order."""
    return sorted((s for _, s in SECTIONS.items()), key=lambda s: s.order)


def collect(run: str | Path) -> list[Claim]:
    """Every claim re-evaluated from the files of the ``reproduce`` folder ``run``; a file of
    the wrong shape is one line naming it (each section checks what it reads, where it reads it)."""
    from stackedheads.state.layout import STAGE_NAMES
    from stackedheads.state.layout import stage_done
    from stackedheads.state.write import RunFolder

    run = Path(run)
    for name in STAGE_NAMES:  # read as report and reproduce read them: a done.json they refuse is refused here
        stage_done(RunFolder(run / name), name, note=False)
    return [c for s in sections() for c in s.evaluate(run)]


def folder_claims(folder: str | Path) -> list[Claim]:
    """``stackedheads claims DIR``: the claims of a reproduce folder, a ``sweep figure4`` folder,
    a ``sweep depth`` folder or an ``llm-compare`` folder. A folder with only some of
    ``reproduce``'s stage folders (``circuits/runs/transformers-A-C``, ``circuits/discovered``,
    ...; see :mod:`stackedheads.state.layout`) is judged as a reproduce folder."""
    from stackedheads.sweeps import depth
    from stackedheads.sweeps import figure4

    folder = Path(folder)
    if (folder / figure4.SPEC_FILE).exists():
        from stackedheads.claims import sec7

        return sec7.folder_claims(folder)
    if (folder / depth.SPEC_FILE).exists():
        from stackedheads.claims import beyond

        return beyond.claims_from_folder(folder)
    for comparison in (folder / "comparison.json", folder / "comparison" / "comparison.json"):
        if comparison.exists():  # an `llm-compare` output (or a folder holding one)
            from stackedheads.claims import sec4

            return sec4.llm_claims(read_json(comparison, sec4.LLM_RESULTS))
    from stackedheads.claims import llm_circuit

    if llm_circuit.is_circuit_folder(folder):  # an `llm-circuit` folder, or a folder of them (d1, d2, ...)
        return llm_circuit.folder_claims(folder)
    config = read_json(folder / "config.json") if (folder / "config.json").exists() else None
    if isinstance(config, dict) and "preset" in config:
        return collect(folder)
    if any((folder / stage / "runs").is_dir() for stage in STAGE_NAMES):
        # Stage folders laid out by hand (a run cut short of a preset, trained with `train`, its
        # circuits from `circuit discover`): judged like a reproduce folder, the rest NOT RUN.
        return collect(folder)
    raise UsageError(
        f"{folder} is neither a reproduce folder (or one holding a stage folder such as circuits/runs/) "
        "nor a `sweep figure4`, `sweep depth` or `llm-compare` folder"
    )
