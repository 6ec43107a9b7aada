"""Train one net with a variant of a recipe, to compare recipes (how the `sampled` recipe was chosen).

    python benchmarks/recipe_variants.py runs/v-lr2 --base modern --loss sampled lr=0.002 dropout_x=0.05 dropout_h=0.05

Registers a Recipe named after the run directory (`base` with the given fields changed), then trains
with `nnlm.neural.run.train.train` as `nnlm train` would (1 thread, early stopping with --patience). The
per-epoch validation is in RUN/metrics.jsonl; `nnlm score RUN --split test` gives the test perplexity.
A variant recipe exists only in this process: resume the run with this script, not `nnlm train`.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from nnlm.errors import NnlmError
from nnlm.neural.run import train as tr
from nnlm.neural.run.recipes import RECIPES, Recipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("fields", nargs="*", help="recipe fields, e.g. lr=0.002 weight_decay=0.2 dropout_x=0.05")
    ap.add_argument("--base", default="modern", choices=sorted(RECIPES))
    ap.add_argument("--preset", default="mlp1")
    ap.add_argument("--loss", default="sampled")
    ap.add_argument("--corpus", default="brown")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--patience", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_intermixed_args()
    types = {f.name: f.type for f in dataclasses.fields(Recipe)}
    changes = {}
    for item in args.fields:
        key, _, value = item.partition("=")
        if key not in types or key == "name":
            ap.error(f"unknown recipe field {key!r}; choose from {', '.join(k for k in types if k != 'name')}")
        changes[key] = value if types[key] in ("str", str) else (value == "1" if types[key] in ("bool", bool)
                                                                else float(value))
    name = f"variant-{args.out.name}"
    RECIPES[name] = dataclasses.replace(RECIPES[args.base], name=name, **changes)
    requested = {"corpus": args.corpus, "preset": args.preset, "loss": args.loss, "recipe": name, "seed": args.seed,
                 "patience": args.patience, "epochs": args.epochs, "threads": args.threads}
    resume = (args.out / "run.json").exists()
    try:
        tr.train(args.out, requested if not resume else {"epochs": args.epochs, "threads": args.threads},
                 resume=resume, progress=False)
    except NnlmError as exc:
        raise SystemExit(f"recipe_variants.py: {exc}") from None


if __name__ == "__main__":
    main()
