"""The README's and docs/results.md's tables of verdicts and counts are what the published
claims give (`stackedheads results-index` writes them; no number typed by hand), and the claims
lead with the robust verdict where the paper's words do not choose a reading."""

from __future__ import annotations

import json
from pathlib import Path

from stackedheads import claims
from stackedheads.claims import DEPENDS, FAIL, INCONCLUSIVE, PASS, published
from stackedheads.claims.readings import READINGS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def test_the_readme_and_results_page_tables_are_the_ones_the_claims_give():
    for page, e3 in ((ROOT / "README.md", False), (ROOT / "docs" / "results.md", True)):
        text = page.read_text(encoding="utf-8")
        assert published.START in text and published.END in text, page
        said = published.START + text.split(published.START, 1)[1].split(published.END, 1)[0] + published.END
        assert said == published.block(RESULTS, e3), f"{page} is stale: run `stackedheads results-index`"


def test_results_index_writes_the_blocks_beside_its_results_folder(tmp_path, cli):
    import shutil

    shutil.copytree(RESULTS / "sec8", tmp_path / "results" / "sec8")
    shutil.copytree(RESULTS / "sec9" / "gpt2", tmp_path / "results" / "sec9" / "gpt2")
    (tmp_path / "README.md").write_text(f"# x\n\n{published.START}\nold\n{published.END}\n\nafter\n")
    code, _, err = cli("results-index", "--results", tmp_path / "results")
    assert code == 0, err
    text = (tmp_path / "README.md").read_text()
    assert "old" not in text and text.endswith("\n\nafter\n")
    assert "| Sec. 8 | A2 " in text and "`tl-stack`: FAIL" in text, text


def test_sec8_tl_stack_counts_the_heads_whose_ablation_breaks_the_budget():
    """App. E: removing L4.0's, L3.0's or L1.0's path breaks the budget (0.240, 0.108, 0.052):
    they count, whatever share of their row's attention their rule catches."""
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "tl-stack")}
    for cid in ("A2", "A5"):
        assert all(h in got[cid].measured for h in ("L1.0", "L3.0", "L4.0")), got[cid].measured
    assert got["A2"].verdict == FAIL and got["A2"].measured.startswith("seed 0: 6 of 12 heads useful")
    assert got["A5"].verdict == PASS and "L7.0" not in got["A2"].measured


def test_a5_is_undecided_while_circuits_fail_their_combined_ablation():
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "tl-stack+lr-3e-4")}
    assert got["A5"].verdict == INCONCLUSIVE and got["A5"].seeds == {"0": INCONCLUSIVE, "1": PASS, "2": INCONCLUSIVE}
    assert "PASS on 1 of 3 seeds; INCONCLUSIVE on 2 of 3 seeds" in got["A5"].measured


def test_a_claim_leads_with_the_robust_verdict_where_the_papers_words_do_not_choose():
    assert [cid for cid, spec in READINGS.items() if not spec.fixed] == ["E3"]
    for folder in sorted(RESULTS.glob("sec9/*/claims.json")):
        for c in json.loads(folder.read_text()):
            if c["id"] == "E3" and c["readings"]:
                assert c["headline"] == c["verdict"] == c["robust_verdict"] and not c["primary_fixed"], folder
                assert sum(r["primary"] for r in c["readings"]) == 1
            elif c["readings"]:
                assert c["verdict"] == c["primary_verdict"], (folder, c["id"])


def test_claims_prints_the_seed_by_seed_table_for_several_seeds(cli):
    code, out, err = cli("claims", RESULTS / "sec8" / "tl-stack+lr-3e-4")
    assert code == 0, err
    table = out[out.index("seed by seed"):]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["0", "1", "2", "over 3 seeds"]
    assert rows[1].split("│")[2:7] and all(v.strip() in (PASS, FAIL, INCONCLUSIVE, DEPENDS) for v in rows[1].split("│")[2:7])
    code, out, _ = cli("claims", RESULTS / "sec8" / "tl-stack")
    assert "seed by seed" not in out  # one seed: the claims table says it all


def test_seed_rows_give_each_claims_own_verdict_per_seed():
    found = claims.folder_claims(RESULTS / "sec9" / "tl-stack")
    (table,) = claims.seed_rows(found)
    assert table["columns"] == ["seed", "E1", "E2", "E3", "E4"]
    by = {c.id: c for c in found}
    for row in table["rows"][:-1]:
        assert row[1:] == [by[cid].seeds[row[0]] for cid in table["columns"][1:]]
    assert table["rows"][-1] == ["over 4 seeds", *(by[cid].verdict for cid in table["columns"][1:])]


def test_an_unlearned_seed_is_counted_not_judged():
    """results/sec8/gpt2 seed 2 never left the plateau: counted as such in every circuit claim's
    text, its INCONCLUSIVE not judged against the seeds that learned."""
    got = {c.id: c for c in claims.folder_claims(RESULTS / "sec8" / "gpt2")}
    for cid in ("A2", "A3", "A4", "A5"):
        assert "not learned on 1 of 3 (seed 2: not judged)" in got[cid].measured, got[cid].measured
    assert "seed 2" not in claims.published.count_text(got["A1"])  # A1 judges the loss itself


def test_every_function_of_the_claims_is_at_most_60_lines():
    """One function a claim (sec8's a1..a5, sec9's e1..e4): none of the claims package's
    functions grows past 60 lines."""
    import ast

    long = []
    for path in sorted((ROOT / "src" / "stackedheads" / "claims").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long
