"""Reference results: the small files of a finished run, kept in the repository's ``results/``.

A reference folder ``results/<name>/`` (or ``results/<group>/<name>/``) holds a run's configs,
metrics, summaries, circuits and figures and a ``reference.json`` that says how it was made.
This module finds and reads them: :func:`load_all` for the report, each folder's claims
re-judged from its files. Writing one is :mod:`stackedheads.publishing.publish`; the index of
them, results/README.md, :mod:`stackedheads.publishing.index`.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from stackedheads.errors import UsageError
from stackedheads.state.schemas import ReferenceFile, check, check_claims
from stackedheads.state.write import read_state_json

REFERENCE_FILE = "reference.json"


def missing_files(folder: Path, files: list[str]) -> list[str]:
    """Those of ``files`` (listed by a reference) that ``folder`` lacks, or that would lie outside it."""
    return [f for f in files if PurePosixPath(f).is_absolute() or ".." in PurePosixPath(f).parts
            or not (folder / f).is_file()]


REPOSITORY_RESULTS = Path(__file__).resolve().parents[3] / "results"  # beside src/ in a checkout


def results_dir() -> Path | None:
    """The repository's ``results/`` (None when the package runs from elsewhere or it is absent)."""
    return REPOSITORY_RESULTS if REPOSITORY_RESULTS.is_dir() else None


def load(folder: Path) -> dict:
    """One reference for the report: how it was made, its claims re-judged from its files (those
    of the stages it ran), its figures and its tables."""
    from stackedheads import claims as claims_mod

    ref = read_reference(folder)
    files = ref["files"]
    missing = missing_files(folder, files)
    if missing:
        # Judged without it, the claims would silently change (a NOT RUN instead of a verdict).
        raise UsageError(f"{folder}: {REFERENCE_FILE} lists {missing[0]}, which is not a file in it "
                         f"({len(missing)} of {len(files)} listed files missing; a file git ignores is not in a clone)")
    from stackedheads import recipe_screen

    tables = []
    try:
        found = claims_mod.folder_claims(folder)
    except UsageError:  # files the claims cannot judge: their verdicts as published
        found = [claims_mod.Claim.from_dict(c) for c in check_claims(read_state_json(folder / "claims.json", "published claims", list),
                                                                       folder / "claims.json", "publish the reference again")] if (folder / "claims.json").exists() else []
    try:  # Sections 8-9 seed by seed: the claims combine the seeds (any FAIL fails)
        tables.extend(recipe_screen.seed_tables(recipe_screen.folder_seeds(folder, folder.name)))
    except UsageError as e:  # a table the files cannot give: said in its place, the claims kept
        tables.append({"title": "Seed by seed (stackedheads seeds)", "columns": ["unavailable"], "rows": [[str(e)]]})
    if (folder / "phase.json").exists() and (folder / "results.jsonl").exists():
        from stackedheads.claims import beyond
        from stackedheads.sweeps.depth import read_results

        phase = read_state_json(folder / "phase.json", "a depth phase diagram", list)
        tables.append({"title": "Layers needed per D: trained (every seed) vs theory",
                       **beyond.layers_rows(phase, beyond.d2_per_depth(read_results(folder)))})
    # A reference covers the stages it ran: the others' NOT RUN rows would only be noise.
    found = [c for c in found if c.verdict != claims_mod.NOT_RUN]
    return {**ref, "claims": found, "tables": tables, "folder": folder}


def read_reference(folder: Path) -> dict:
    """A reference folder's reference.json, its values checked (:class:`stackedheads.state.schemas.ReferenceFile`)."""
    path = Path(folder) / REFERENCE_FILE
    return check(ReferenceFile, read_state_json(path, "a reference's record"), path, "publish the reference again")


def reference_folders(root: Path | None) -> list[Path]:
    """Every reference folder under ``root`` (``results/``), by path: those at its top and those of
    a group one level down (``results/sec9/<recipe>/``: a folder with no reference.json of its own)."""
    if root is None or not root.is_dir():
        return []
    found = []
    for p in sorted(root.iterdir()):
        if (p / REFERENCE_FILE).exists():
            found.append(p)
        elif p.is_dir() and not p.is_symlink():
            found += [q for q in sorted(p.iterdir()) if (q / REFERENCE_FILE).exists()]
    return found


def load_all(root: Path | None) -> list[dict]:
    """Every reference folder under ``root`` (:func:`reference_folders`), loaded (:func:`load`).
    One that cannot be loaded (a file it lists is gone, its record is damaged) is named as
    damaged, with why, in its place: one damaged reference never keeps the others, nor the
    report they go in, from being shown."""
    return [_loaded_or_damaged(p, root) for p in reference_folders(root)]


def _loaded_or_damaged(folder: Path, root: Path) -> dict:
    try:
        return load(folder)
    except UsageError as e:
        name = folder.relative_to(root).as_posix()
        return {"name": name, "title": f"{name} (damaged: not judged)", "command": "-", "commit": "-", "machine": "-",
                "wall_s": None, "date": "-", "notes": str(e), "files": [], "claims": [], "tables": [], "folder": folder,
                "damaged": str(e)}
