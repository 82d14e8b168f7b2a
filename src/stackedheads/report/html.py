"""``stackedheads report DIR``: a self-contained static HTML report of a ``reproduce`` folder.

The report is ``DIR/report/index.html`` plus ``DIR/report/img/`` (every figure, PNG shown and
SVG linked): no script, no CDN, nothing fetched, so it opens offline from a file and can be
copied elsewhere as one folder. Text that comes from prompts or from a model goes through
Jinja2's autoescaping.

Sections follow the paper: the claims table (:mod:`stackedheads.claims`), then Sections 3, 4
(Figure 2), 5 (the theory plot), 7 (Figure 4), 8 (Figure 5, Appendices C and E) and 9
(Figures 6-7, Appendix D), and the run's configurations, package versions and wall times.
"""

from __future__ import annotations

import platform
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import jinja2

from stackedheads import claims as claims_mod
from stackedheads.state import layout
from stackedheads.publishing import references
from stackedheads.circuits.paths import CircuitPath, path_kind
from stackedheads.claims import read_json as _json
from stackedheads.claims import read_jsonl as _jsonl
from stackedheads.claims import sec4, sec5, sec7, sec8, sec9
from stackedheads.claims.judging import budget_text, mapped_text
from stackedheads.errors import UsageError
from stackedheads.state.layout import CIRCUITS_RUN, EMERGENCE_RUN, STAGE_NAMES
from stackedheads.emergence.ordering import end_of_plateau
from stackedheads.claims.stage_files import read_discovery, read_timeline
from stackedheads.state.write import (
    RunFolder,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    intact,
    read_bytes,
    read_text,
)

PACKAGES = (
    "stackedheads", "torch", "numpy", "matplotlib", "safetensors", "typer", "rich", "jinja2",
    "llama_cpp_python", "openai", "ray",
)
SECTIONS = [
    ("sec3", "3 Retrieval problem"),
    ("sec4", sec4.SEC4),
    ("sec5", sec5.SEC5),
    ("sec7", sec7.SEC7),
    ("sec8", sec8.SEC8),
    ("sec9", sec9.SEC9),
]
SAMPLES_PER_FORMULATION = 2
SAMPLE_DRAWS = 10  # draws shown per sample (the benchmark's default max_draws)


@dataclass(frozen=True)
class Figure:
    png: str  # relative to the report folder
    svg: str | None
    caption: str


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


class _Figures:
    """Copies figures into ``report/img`` under names unique to their source path."""

    def __init__(self, run: Path, report: Path, used: set[str] | None = None) -> None:
        self.run, self.img = run, report / "img"
        self.img.mkdir(parents=True, exist_ok=True)
        # Stems taken so far, shared by every _Figures of one report: joined path parts alone
        # collide (references m/maps/x.png and m__maps/x.png are both m__maps__x).
        self.used = set() if used is None else used

    def add(self, png: Path, caption: str) -> Figure | None:
        if not intact(png):  # a 0-byte or cut-off figure (a full disk) is not shown as one
            return None
        stem = base = "__".join(png.relative_to(self.run).with_suffix("").parts)
        n = 1
        while stem in self.used:
            n += 1
            stem = f"{base}__{n}"
        self.used.add(stem)
        # Written atomically: a full disk leaves no 0-byte image behind.
        atomic_write_bytes(self.img / f"{stem}.png", read_bytes(png, "a figure"))
        svg = png.with_suffix(".svg")
        has_svg = intact(svg)
        if has_svg:
            atomic_write_bytes(self.img / f"{stem}.svg", read_bytes(svg, "a figure"))
        return Figure(f"img/{stem}.png", f"img/{stem}.svg" if has_svg else None, caption)

    def glob(self, folder: Path, pattern: str, caption) -> list[Figure]:
        found = [self.add(p, caption(p)) for p in sorted(folder.glob(pattern))]
        return [f for f in found if f]


def _seed_of(path: Path) -> str:
    return next((p[4:] for p in path.parts if p.startswith("seed")), "?")


def _capped(text: object, limit: int) -> str:
    """Text from a log as the report shows it: at most ``limit`` characters (a samples.jsonl
    written before answers were capped, or by another program, must not bloat the report)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"...[{len(text) - limit} more characters dropped]"


def _llm_samples(records: list[dict]) -> list[dict]:
    """A few answered questions per formulation: the question's last line and the draws.
    A record without what is shown here (a damaged line) is skipped."""
    from stackedheads.llm.backends import MAX_TEXT_CHARS

    shown: Counter[str] = Counter()
    out = []
    for r in records:
        prompt, draws = r.get("prompt"), r.get("draws")
        if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
            prompt = prompt[-1].get("content")
        if not (isinstance(prompt, str) and isinstance(draws, list) and all(isinstance(d, dict) for d in draws)
                and "answer" in r and "correct" in r):
            continue
        if shown[r["formulation"]] >= SAMPLES_PER_FORMULATION:
            continue
        shown[r["formulation"]] += 1
        out.append({
            "formulation": r["formulation"],
            "tail": _capped(prompt.strip().splitlines()[-1] if prompt.strip() else "", MAX_TEXT_CHARS),
            "draws": [_capped(d.get("text", ""), MAX_TEXT_CHARS) for d in draws[:SAMPLE_DRAWS]],
            "answer": _capped(r["answer"], 200),
            "correct": r["correct"],
        })
    return out


def _llm_section(folder: Path) -> dict | None:
    """Section 4: per model, its identity, its cells at the paper's depths and by D, a few
    sample answers; the D columns of the depth tables."""
    from stackedheads.llm.bench import load_records
    from stackedheads.llm.compare import depth_formulations, load_comparison
    from stackedheads.tasks.formulations import FORMULATIONS

    if not folder.is_dir():
        return None
    comparison = load_comparison(folder)
    if not comparison or not comparison.get("models"):
        return None
    # What the section reads of each model; without it the comparison is damaged (one line).
    claims_mod.expect(comparison, {"models": [{"model": str, "identity": dict, "per_formulation": dict, "per_depth": dict}]},
                      folder / "comparison.json", folder)
    models = []
    for m in comparison["models"]:
        per_f = m["per_formulation"]
        models.append({
            "model": m["model"],
            "identity": m["identity"],
            "rows": [per_f[f] for f in FORMULATIONS if f in per_f],
            "per_depth": m["per_depth"],
            "samples": _llm_samples(list(load_records(Path(m["folder"]) / "samples.jsonl").values())) if m.get("folder") else [],
        })
    depths = {
        f: ds for f in depth_formulations()
        if len(ds := sorted({int(d) for m in models for d in m["per_depth"].get(f, {})})) > 1
    }
    return {"models": models, "depths": depths, "identity": models[0]["identity"]}


def _stages(run: Path) -> tuple[list[dict], str]:
    from stackedheads.state.layout import stage_done

    rows, total = [], 0.0
    for name in STAGE_NAMES:
        stage = RunFolder(run / name)
        done = stage_done(stage, name, note=False)  # the one reader of done.json (claims and reproduce use it)
        if done is None:
            state = "not run" if not stage.path.exists() else "in progress" if stage.missing is None else (
                f"to run again ({stage.missing.relative_to(run)} is missing or damaged)")
            rows.append({"name": name, "wall": "-", "state": state})
            continue
        total += done["wall_s"]
        rows.append({"name": name, "wall": _duration(done["wall_s"]), "state": "done"})
    return rows, _duration(total)


def _duration(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    return f"{int(m)} min {s:.0f} s" if m else f"{s:.1f} s"


def _configs(run: Path) -> list[dict]:
    files = [
        ("reproduce: config.json", run / "config.json"),
        ("llm: config.json (benchmark invocations)", run / "llm" / "config.json"),
        *((f"llm: {p.parent.name}/config.json (benchmark invocations)", p) for p in sorted((run / "llm").glob("*/config.json"))),
        ("figure4: sweep.json", run / "figure4" / "sweep.json"),
        ("circuits: transformers A-C config.json", layout.training_run(run / "circuits", CIRCUITS_RUN) / "config.json"),
        ("emergence: transformer D config.json", layout.training_run(run / "emergence", EMERGENCE_RUN) / "config.json"),
    ]
    return [{"name": name, "text": read_text(p, name)} for name, p in files if p.exists()]


def check_folder(run: Path) -> dict:
    """The config.json of a folder ``reproduce`` wrote; any other folder is refused (before the
    caller locks it: a refusal leaves nothing behind)."""
    path = Path(run) / "config.json"
    config = _json(path) if Path(run).is_dir() else None
    if config is None:
        raise UsageError(f"{run} is not a reproduce folder (no config.json from `stackedheads reproduce`)")
    if not isinstance(config, dict) or not isinstance(config.get("preset"), dict):
        # There is a config.json: saying there is none sent users looking for a missing file.
        raise UsageError(f"{path} is not a reproduce config (no 'preset' object): not a folder `stackedheads reproduce` wrote, or damaged")
    return config


def write_report(run_dir: str | Path, reference_root: Path | None = None) -> Path:
    """Write ``run_dir/report/index.html`` (and its images); return the HTML's path. With
    ``reference_root`` (the repository's ``results/``), the report ends with the reference runs
    kept there, their claims re-judged from their files (:mod:`stackedheads.publishing.references`)."""
    run = Path(run_dir)
    config = check_folder(run)
    report = run / "report"
    if (report / "img").exists():
        shutil.rmtree(report / "img")  # no stale figures from an earlier report
    figs = _Figures(run, report)
    circ, emer = run / "circuits", run / "emergence"
    figures = {
        "theory": figs.add(run / "theory" / "theory.png", "Minimum layers vs D: the exact simulation of Assumptions 1-2 beside ceil(log3 2D) (Sec. 5, App. B)"),
        "figure2": figs.add(run / "llm" / "figure2.png", "Figure 2: left, accuracy per formulation, one bar per model (Wilson 95%; dashed: chance); right, equations accuracy vs D"),
        "figure2_depth": figs.add(run / "llm" / "figure2_depth.png", "Accuracy vs D for every formulation with a depth: where each model's ability ends (Wilson 95%; dashed: chance)"),
        "figure4": figs.add(run / "figure4" / "figure4.png", "Figure 4: final loss vs layers (IC and non-IC) and partial losses per chain position"),
        "circuits": figs.glob(layout.discovered(circ), "seed*/circuit.png", lambda p: f"Seed {_seed_of(p)}: the discovered circuit (useful paths)"),
        "maps": figs.glob(layout.maps(circ), "seed*/grid.png", lambda p: f"Seed {_seed_of(p)}: attention per layer on single sequences")
        + figs.glob(layout.maps(circ), "seed*/mean.png", lambda p: f"Seed {_seed_of(p)}: mean attention by token role"),
        "figure6": figs.glob(layout.timeline(emer), "seed*/losses.png", lambda p: f"Seed {_seed_of(p)}: train/validation loss and partial losses; dashed: a path emerges"),
        "figure7": figs.glob(layout.discovered(emer), "seed*/circuit.png", lambda p: f"Seed {_seed_of(p)}: the circuit of transformer D")
        + figs.glob(layout.timeline(emer), "seed*/emergence_summary.png", lambda p: f"Seed {_seed_of(p)}: first step with mean attention above 0.5"),
        "appendix_d": figs.glob(layout.timeline(emer), "seed*/path*.png", lambda p: f"Seed {_seed_of(p)}: {p.stem.split('_', 1)[1]}"),
    }
    claims = claims_mod.collect(run)
    counts = Counter({v: 0 for v in (*claims_mod.VERDICTS, claims_mod.DEPENDS)})
    counts.update(c.verdict for c in claims)
    circuit_tables = _circuit_tables(layout.discovered(circ))
    emergence_tables = _circuit_tables(layout.discovered(emer))
    timelines = _timeline_tables(layout.timeline(emer))
    stages, total = _stages(run)
    refs = references.load_all(reference_root)
    ref_figs = _Figures(reference_root, report, figs.used) if refs else None
    for ref in refs:
        # Every figure a reference kept, nested ones too (a published stage folder keeps its
        # circuit, timeline and maps under emergence/ or circuits/), captioned by their path.
        ref["figures"] = ref_figs.glob(
            ref["folder"], "**/*.png", lambda p, f=ref["folder"]: " / ".join(p.relative_to(f).with_suffix("").parts).replace("_", " ")
        )
        ref["wall"] = _duration(ref["wall_s"]) if ref.get("wall_s") else "unknown"
    llm = _llm_section(run / "llm")
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("stackedheads.report", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False,
    )
    html = env.get_template("report.html.j2").render(
        preset=config["preset"]["name"],
        run_dir=str(run),
        generated=time.strftime("%Y-%m-%d %H:%M"),
        versions=package_versions(),
        total_wall=total,
        sections=[{"anchor": a, "title": t} for a, t in SECTIONS],
        sections_by_id=dict(SECTIONS),
        claims=claims,
        counts=counts,
        seed_tables=claims_mod.seed_rows(claims),
        prompts=[qs[0] for form in _prompt_forms(run) if (qs := _jsonl(run / "prompts" / f"{form}.jsonl"))],
        llm=llm,
        theory=_jsonl(run / "theory" / "theory.jsonl"),
        figures=figures,
        circuit_tables=circuit_tables,
        emergence_tables=emergence_tables,
        timelines=timelines,
        stages=stages,
        configs=_configs(run),
        references=refs,
        chains=_figure4_chains(config),
    )
    path = report / "index.html"
    atomic_write_text(path, html)
    atomic_write_json(report / "claims.json", [c.to_dict() for c in claims])
    return path


def _figure4_chains(config: dict) -> int | None:
    """N of the run's Figure 4 sweep (the paper's is 4), from the reproduce config."""
    try:
        return int(config["preset"]["figure4"]["base"]["task"]["chains"])
    except (KeyError, TypeError, ValueError):
        return None


def _circuit_tables(discovered: Path) -> list[dict]:
    """Per seed: the ablation losses (App. E steps 5-6, held-out sequences), with each chain
    position's budget, the redundant groups and the unexplained rows; the shortcut paths and
    the diagnosis of every row no retrieval rule explains (:mod:`stackedheads.circuits.diagnose`)."""
    out = []
    for p in sorted(discovered.glob("seed*/summary.json")):
        found = read_discovery(p, discovered.parent)
        out.append({
            "seed": p.parent.name[4:], "rows": found["losses"], "budgets": found["budgets"],
            "budget_text": budget_text(found), "groups": found.get("redundant_groups", []),
            "unexplained": found.get("unexplained_heads", []), "over": found.get("over_budget", []),
            "n_check": found.get("n_check"), "diagnosis": [_diagnosis_row(d) for d in found.get("diagnosis", [])],
            "shortcuts": [f"{CircuitPath(*p).key} ({path_kind(p[3])})" for p in found.get("paths", []) if path_kind(p[3]) != "retrieval"]
            + [mapped_text(found, *row) for row in found.get("mapped_rows", [])],
        })
    return out


def _diagnosis_row(d: dict) -> dict:
    """One diagnosed row (summary.json's ``diagnosis``) as the report's table shows it."""
    pct = "{:.0%}".format
    cells = [*((f"own {k}", v) for k, v in d["own"].items()), *((f"other chains' {k}", v) for k, v in d["other"].items())]
    circuit = d["rule"] + (f" (covers {pct(d['rule_covered'])})" if d["rule_covered"] is not None and d["rule"] != d["best"] else "")
    return {
        "row": f"L{d['layer']}.{d['head']} {d['role']}", "circuit": circuit, "best": d["best"], "kind": d["kind"],
        "covers": pct(d["covered"]), "next": ", ".join(f"{n} {pct(m)}" for n, m in d["alternatives"].items()),
        "by_role": ", ".join(f"{k} {v:.2f}" for k, v in sorted(cells, key=lambda kv: -kv[1])),
        "by_position": ", ".join(f"{k} {v:.2f}" for k, v in d["positions"].items()),
        "by_cell": ", ".join(f"{k} {v:.2f}" for k, v in d.get("cells", {}).items()),
    }


def _timeline_tables(folder: Path) -> list[dict]:
    """Per seed, Section 9.2's checkable moments from ``timeline.json``, in steps and the
    paper's epochs: the plateau before the first path, when each x_j emerges (its new paths
    cross 0.5 attention), each path's crossing, and when each partial loss drops (Fig. 6 right)."""

    def when(step, per):
        return "never" if step is None else f"{step:.0f} ({step * per:.0f})"

    out = []
    for p in sorted(folder.glob("seed*/timeline.json")):
        t = read_timeline(p, folder.parent)
        per = t["epochs"][-1] / t["steps"][-1] if t["steps"] and t["steps"][-1] else 0.0
        out.append({
            "seed": p.parent.name[4:],
            "steps_per_epoch": (1 / per) if per else None,
            "plateau": "no path serving a position crossed 0.5 attention" if (end := end_of_plateau(t)[0]) is None else when(end, per),
            "order": t["order"], "loss_drop_order": t["loss_drop_order"],
            "positions": [
                {"x": x, "new_paths": ", ".join(q["new_paths"]) or "none", "status": q["status"],
                 "seen": when(q["seen"], per), "step": when(q["step"], per),
                 "drop": when(t["loss_drops"].get(x), per)}
                for x, q in t["positions"].items()
            ],
            "paths": [
                {"key": k, "serves": ", ".join(f"x{j}" for j in t["serves"].get(k, [])) or "nothing measurable",
                 "step": when(t["emerged"][k], per), "seen": when(t["emerged_seen"].get(k), per)}
                for k in t["emerged"]
            ],
            "groups": t.get("groups", []),
        })
    return out


def _prompt_forms(run: Path) -> list[str]:
    from stackedheads.tasks.formulations import FORMULATIONS

    return [f for f in FORMULATIONS if (run / "prompts" / f"{f}.jsonl").exists()]
