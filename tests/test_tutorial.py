"""docs/tutorial.ipynb: committed without outputs, its run time stated, and executed top
to bottom in a fresh kernel, failing on any cell's error; what it shows is checked in what it wrote."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def test_the_committed_notebook_has_no_outputs():
    code = [c for c in cells() if c["cell_type"] == "code"]
    assert code, "the notebook has no code cell"
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_the_first_cell_states_the_measured_run_time_and_its_conditions():
    first = "".join(cells()[0]["source"])
    assert cells()[0]["cell_type"] == "markdown"
    assert re.search(r"\*\*Run time: \d+ min \d+ s\*\* on a 2-core", first), first


def test_the_notebook_uses_the_library_not_the_shell():
    for c in cells():
        if c["cell_type"] == "code":
            text = "".join(c["source"])
            assert not re.search(r"^\s*[!%]|subprocess|os\.system", text, re.M), text


def test_the_dev_extra_holds_the_notebook_runner():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dev = re.search(r"^dev = \[(.*?)\]$", pyproject, re.M | re.S).group(1)
    assert '"nbclient' in dev and '"ipykernel' in dev


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom(tmp_path):
    if importlib.util.find_spec("transformer_lens") is None or importlib.util.find_spec("nbclient") is None:
        pytest.skip("the `interop` and `dev` extras run the notebook (`make test` installs both)")
    import nbformat
    from nbclient import NotebookClient

    from stackedheads.circuits.ablate import Circuit
    from stackedheads.sweeps.figure4 import cross_threshold, crossing_steps
    from stackedheads.training import list_checkpoints, read_metrics

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # allow_errors False: the first cell that raises ends the run with CellExecutionError.
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 5  # partial losses, attention maps, circuit, ablation, emergence

    run = tmp_path / "runs" / "tutorial" / "run"
    rows = read_metrics(run)
    drops = crossing_steps(rows, 0, ["val_x1", "val_x2"], cross_threshold(2))
    assert None not in drops.values() and drops["val_x1"] < drops["val_x2"], drops  # x1, then x2
    assert len(list_checkpoints(run)) >= 20  # the emergence timeline's points
    circuit = Circuit.load(tmp_path / "runs" / "tutorial" / "circuits" / "seed0" / "circuit.json")
    assert circuit.paths()
    text = "".join(o.get("text", "") for o in outputs)
    before, after = re.search(r"ablated: x1\.\.xD (\[.*?\]) -> (\[.*?\])", text).groups()
    assert max(json.loads(after)) > max(json.loads(before)) + 0.05  # the first useful head matters
    assert re.search(r"largest difference from our patterns: (\d\.\d+e-0[5-9]|0\.0)\n", text), text
