"""llm-circuit's counterfactual patching on the project's own twins, against App. E's discovery.

The method `stackedheads llm-circuit` applies to a language model (patch one head's output from
a prompt whose k-th link is changed, see which heads carry hop k) is run here on a trained twin,
whose useful heads App. E's discovery has already found (`circuit discover`, or a reproduce
folder's circuits/discovered/). For each seed it prints the heads each method names and their
agreement (Jaccard index of the two sets; `llm.circuit_twin.agreement`), and writes the whole
comparison as JSON.

    python studies/twin_patching.py runs/demo/circuits --out twin_patching.json

RUN is a reproduce folder's circuits stage (runs/ and discovered/ inside) or a training run
with --discovered DIR. The final checkpoint is measured, as discovery measured it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stackedheads.circuits.discover import DiscoverConfig
from stackedheads.llm.circuit_twin import agreement, twin_head_effects
from stackedheads.state.layout import CIRCUITS_RUN, discovered, training_run
from stackedheads.training import checkpoint_for, load_model, validation_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a reproduce folder's circuits stage, or a training run with --discovered")
    ap.add_argument("--discovered", type=Path, help="App. E's discovered circuits (seed*/summary.json)")
    ap.add_argument("--out", type=Path, help="write the comparison here as JSON")
    args = ap.parse_args()
    if args.discovered is None:
        run, found = training_run(args.run, CIRCUITS_RUN), discovered(args.run)
    else:
        run, found = args.run, args.discovered
    model, cfg, step = load_model(checkpoint_for(run, None))
    batch = validation_batch(cfg)[: DiscoverConfig().n_val]
    rows = {}
    for e, seed in enumerate(cfg.seeds):
        summary = json.loads((found / f"seed{seed}" / "summary.json").read_text())
        effects = twin_head_effects(model.member(e), batch, cfg.task.dims)
        rows[seed] = agreement(effects, summary["useful_heads"])
        r = rows[seed]
        print(f"seed {seed}: discovery {r['useful']}  patching {r['carriers']}  both {len(r['both'])}  "
              f"only patching {r['only_patching']}  only discovery {r['only_discovery']}  jaccard {r['jaccard']:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"run": str(run), "checkpoint": step, "seeds": rows}, indent=1))


if __name__ == "__main__":
    main()
