"""``stackedheads claims DIR`` shows the claims DIR's files can judge, and names the others (NOT
RUN) in one line; ``--json`` keeps every claim."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stackedheads.cli.run import _id_ranges

ROOT = Path(__file__).resolve().parents[1]


def test_claims_of_a_sec9_reference_show_e1_to_e4_and_name_the_rest(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    r = cli("claims", ROOT / "results" / "sec9" / "gpt2")
    assert r.code == 0, r.err
    ids = re.findall(r"^│ [^│]*│ ([A-Z]\d) ", r.out, re.M)
    assert ids == ["E1", "E2", "E3", "E4"]
    assert "NOT RUN" not in "".join(s for s in r.out.splitlines() if s.startswith("│"))
    named = [s for s in r.out.splitlines() if s.startswith("NOT RUN")]
    assert named == ["NOT RUN (nothing in this folder measures them): L1-L2, T1-T3, C0-C3, A1-A5"]
    every = json.loads(cli("claims", ROOT / "results" / "sec9" / "gpt2", "--json").out)
    assert {c["id"] for c in every if c["verdict"] == "NOT RUN"} == {
        "L1", "L2", "T1", "T2", "T3", "C0", "C1", "C2", "C3", "A1", "A2", "A3", "A4", "A5"}


def test_id_ranges():
    assert _id_ranges(["L1", "L2", "T1", "T2", "T3", "A1", "A3", "A4", "E4"]) == "L1-L2, T1-T3, A1, A3-A4, E4"
    assert _id_ranges(["C0", "C1", "D2", "X"]) == "C0-C1, D2, X"
    assert _id_ranges([]) == ""
