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
    from stackedheads.emergence import check_circuit_run

    moved = Circuit.from_dict(_circuit({"run": f"/gone/elsewhere/{ckpt_run.name}", "seed": 0}))
    check_circuit_run(moved, tmp_path / "circuit.json", ckpt_run, 0)
    here = Circuit.from_dict(_circuit({"run": str(ckpt_run), "seed": 0}))
    check_circuit_run(here, tmp_path / "circuit.json", ckpt_run, 0)

