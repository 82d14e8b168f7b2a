"""Done markers vouch only for whole files (a damaged figure or table is rebuilt), and the
report copies images atomically, never under colliding names, leaving out a damaged one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import reproduce_folder

from stackedheads.state import write


# --- 43.5, 44.9, 44.12: damaged figures and tables, the report's images ----------------------------


def _figure_folder(folder: Path) -> Path:
    """A folder with a real PNG and SVG (matplotlib) and a CSV, marked done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stackedheads.report.plots import save_figure

    folder.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, folder, "figure4")
    (folder / "summary.csv").write_text("a,b\n1,2\n3,4\n")
    return folder


@pytest.mark.parametrize("name, damage", [("figure4.png", b""), ("figure4.png", b"\x89PNG\r\n\x1a\nhalf"),
                                          ("figure4.svg", b""), ("figure4.svg", b"<svg><path"),
                                          ("summary.csv", b"\xff\xfe\x00garbage"), ("summary.csv", b"a,b\n1\n2,3,4\n"),
                                          ("summary.csv", b"")])
def test_a_done_marker_does_not_vouch_for_a_damaged_figure_or_table(tmp_path, name, damage):
    stage = write.RunFolder(_figure_folder(tmp_path / "stage"))
    stage.mark_done({"wall_s": 1.0})
    assert stage.done("a stage") == {"wall_s": 1.0}
    (stage.path / name).write_bytes(damage)
    assert stage.done("a stage") is None and stage.missing == stage.path / name


def test_the_report_copies_images_atomically(tmp_path):
    """A full disk (here a file size limit) mid-copy leaves no cut-off image in report/img."""
    run = reproduce_folder(tmp_path)
    _figure_folder(run / "theory")
    os.replace(run / "theory" / "figure4.png", run / "theory" / "theory.png")
    os.replace(run / "theory" / "figure4.svg", run / "theory" / "theory.svg")
    limit = (run / "theory" / "theory.png").stat().st_size // 2
    code = f"""
import resource, signal
from stackedheads.report.html import write_report
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    write_report({str(run)!r})
except OSError as e:
    print("failed:", e.strerror)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert "failed:" in r.stdout, (r.stdout, r.stderr)
    images = list((run / "report" / "img").iterdir())
    assert all(_whole(p) for p in images), [(p.name, p.stat().st_size) for p in images]


def _whole(path: Path) -> bool:
    """A PNG with its signature and end chunk, or an SVG that closes."""
    data = path.read_bytes()
    return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82") if path.suffix == ".png" else data.rstrip().endswith(b"</svg>")


def test_report_image_names_of_references_never_collide(tmp_path):
    from stackedheads.report.html import write_report

    src = _figure_folder(tmp_path / "fig")
    root = tmp_path / "results"
    for name, rel in (("m", "maps/seed0/mean"), ("m__maps", "seed0/mean")):
        folder = root / name / Path(rel).parent
        folder.mkdir(parents=True)
        shutil.copyfile(src / "figure4.png", folder / "mean.png")
        (root / name / "reference.json").write_text(json.dumps({
            "name": name, "title": name, "command": "c", "commit": "0" * 40, "machine": "m", "wall_s": 1,
            "date": "2025-01-01", "notes": "", "files": [f"{rel}.png"]}))
    run = reproduce_folder(tmp_path)
    html = write_report(run, root).read_text()
    images = sorted(p.name for p in (run / "report" / "img").glob("*.png"))
    assert len(images) == 2 and all(f"img/{name}" in html for name in images)


def test_the_report_leaves_out_a_damaged_figure(tmp_path):
    from stackedheads.report.html import write_report

    run = reproduce_folder(tmp_path)
    (run / "figure4").mkdir()
    (run / "figure4" / "figure4.png").write_bytes(b"")
    write_report(run)
    assert not list((run / "report" / "img").glob("figure4*"))
