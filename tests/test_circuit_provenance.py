"""A circuit names the run and seed it was discovered on: emergence refuses another run's."""

from __future__ import annotations

import json

import pytest
from conftest import copy_run
from helpers import one_error


def _circuit(info: dict) -> dict:
    heads = [{"layer": layer, "head": 0, "rules": "uniform", "paths": []} for layer in range(3)]
    heads[2] = {"layer": 2, "head": 0, "rules": {"first": "s-1", "second": "kept", "query": "uniform"}, "paths": [[1, 0]]}
    return {"depth": 2, "heads": heads, "info": info}


@pytest.mark.parametrize("info", ["other run", "other seed"])
def test_emergence_refuses_the_circuit_of_another_run(ckpt_run, tmp_path, cli, info):
    """A circuit of another run of the same shape passed the shape check: circuit.json names its run.
    The other run is one whose training went otherwise (its metrics differ): a plain copy of this
    run is this run (test_kinds)."""
    other = copy_run(ckpt_run, tmp_path / "other")
    metrics = other / "metrics.csv"
    metrics.write_text("\n".join(metrics.read_text().splitlines()[:-1]) + "\n")
    (tmp_path / "c" / "seed0").mkdir(parents=True)
    recorded = {"run": str(other), "seed": 0} if info == "other run" else {"run": str(ckpt_run), "seed": 5}
    (tmp_path / "c" / "seed0" / "circuit.json").write_text(json.dumps(_circuit(recorded)))
    code, _, err = cli("emergence", ckpt_run, "--out", tmp_path / "e", "--circuits", tmp_path / "c", "--seqs", 4)
    assert code == 2 and one_error(err), err
    assert ("was discovered on" in err and str(other) in err) if info == "other run" else "the circuit of seed 5" in err


def test_a_circuit_of_this_run_moved_elsewhere_is_accepted(ckpt_run, tmp_path):
    from stackedheads.circuits.ablate import Circuit
    from stackedheads.emergence.timeline import check_circuit_run

    moved = Circuit.from_dict(_circuit({"run": f"/gone/elsewhere/{ckpt_run.name}", "seed": 0}))
    check_circuit_run(moved, tmp_path / "circuit.json", ckpt_run, 0)
    here = Circuit.from_dict(_circuit({"run": str(ckpt_run), "seed": 0}))
    check_circuit_run(here, tmp_path / "circuit.json", ckpt_run, 0)



def test_circuits_name_their_run_by_its_absolute_path_whatever_the_current_folder(ckpt_run, tmp_path, cli, monkeypatch):
    """circuit.json recorded `info.run` as typed and emergence resolved it against the current
    folder: from B/, `emergence d --circuits ../A/c` took A's circuits for B's run, and
    `emergence ../A/d --circuits ../A/c` refused the right ones."""
    a, b = tmp_path / "A", tmp_path / "B"
    copy_run(ckpt_run, a / "d")
    copy_run(ckpt_run, b / "d")
    metrics = b / "d" / "metrics.csv"  # B's run trained otherwise
    metrics.write_text("\n".join(metrics.read_text().splitlines()[:-1]) + "\n")
    monkeypatch.chdir(a)
    code, _, err = cli("circuit", "discover", "d", "--out", "c", "--seeds", "0")
    assert code == 0, err
    info = json.loads((a / "c" / "seed0" / "circuit.json").read_text())["info"]
    assert info["run"] == str((a / "d").resolve())
    monkeypatch.chdir(b)
    code, _, err = cli("emergence", "d", "--out", "e1", "--circuits", "../A/c", "--seqs", 4)
    assert code == 2 and one_error(err) and "was discovered on" in err, err
    code, _, err = cli("emergence", "../A/d", "--out", "e2", "--circuits", "../A/c", "--seqs", 4)
    assert code == 0, err


def test_a_relative_run_recorded_before_is_compared_by_name_not_resolved_here(ckpt_run, tmp_path, monkeypatch):
    from stackedheads.circuits.ablate import Circuit
    from stackedheads.emergence.timeline import check_circuit_run
    from stackedheads.errors import UsageError

    other = copy_run(ckpt_run, tmp_path / "elsewhere")  # a folder named like the recorded path, here
    monkeypatch.chdir(tmp_path)
    old = Circuit.from_dict(_circuit({"run": "elsewhere", "seed": 0}))
    with pytest.raises(UsageError, match="was discovered on"):
        check_circuit_run(old, tmp_path / "circuit.json", ckpt_run, 0)  # not the run named "elsewhere"
    check_circuit_run(old, tmp_path / "circuit.json", other, 0)
