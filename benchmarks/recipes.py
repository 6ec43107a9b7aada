"""Training recipes on several corpora: n-gram baselines, each recipe's valid/test perplexity and time,
and for generated corpora the ratio to the source's own perplexity (the limit) and what a learner that
knows the source's classes reaches from the same training text (`known_class_perplexity`): how far
the text itself allows a model to get.

    python benchmarks/recipes.py --work runs/recipes                     # every corpus, every recipe
    python benchmarks/recipes.py --work runs/recipes --corpora gen-2k --recipes default,plain

Corpora (written once into WORK/corpora; Brown needs NLTK_DATA):
  gen-2k      class trigram source (nnlm.data.synthetic), 2,000 words in 40 classes, 300k tokens
  gen-500     the same kind, 500 words in 20 classes, 150k tokens
  gen-2k-1m   the 2,000-word source with 1M tokens (a larger text)
  gen-500-1m  the 500-word source with 1M tokens (enough text to learn its classes from)
  brown-news  Brown's news category (texts ca01-ca44), one paragraph a line, split 80/10/10 by paragraph
  brown-learned  Brown's learned category (cj01-cj80)
  brown       the bengio2003 protocol; nets: MLP1 with the sampled loss (as `nnlm reproduce` trains them)
Nets: n = 3, m = 30, h = 50, direct connections, full softmax (the issue's net) on the small corpora.
Recipes: `default` (what `nnlm train` picks, `--init-features auto` included), `random` (the default with
random rows, the paper's initialisation: the default before auto), `newbob` (the default with the newbob
schedule), `modern` and `sampled` (the defaults before), `classes` (the default with `--init-features
exchange` and h = 200, without the class-pair features), `plain` (Adam at a constant 2e-3, no weight decay,
no dropout, random rows, early stopping after 3 epochs without any improvement: the script a user would
write). One thread, epochs capped at --epochs; each finished run
is kept in WORK/runs and reused, so an interrupted benchmark continues where it stopped.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from nnlm.data import load_corpus
from nnlm.data.provenance import default_min_count
from nnlm.data.synthetic import known_class_perplexity, read_source, write_corpus
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.lm import perplexity
from nnlm.neural.run import train as tr
from nnlm.neural.run.checkpoint import load_neural, read_state

SMALL_NET = {"order": 3, "features": 30, "hidden": 50, "direct": True}
CORPORA: dict[str, dict[str, Any]] = {
    "gen-2k": {"gen": {"tokens": 300_000, "words": 2000, "classes": 40, "seed": 0}, "net": SMALL_NET},
    "gen-500": {"gen": {"tokens": 150_000, "words": 500, "classes": 20, "seed": 1}, "net": SMALL_NET},
    "gen-2k-1m": {"gen": {"tokens": 1_000_000, "words": 2000, "classes": 40, "seed": 0}, "net": SMALL_NET},
    "gen-500-1m": {"gen": {"tokens": 1_000_000, "words": 500, "classes": 20, "seed": 1}, "net": SMALL_NET},
    "brown-news": {"brown": "ca", "net": SMALL_NET, "min_count": 2},
    "brown-learned": {"brown": "cj", "net": SMALL_NET, "min_count": 2},
    "brown": {"net": {"preset": "mlp1", "loss": "sampled"}},
}
# recipe label -> train options (recipe None: the default for the loss)
RECIPES: dict[str, dict[str, Any]] = {
    "default": {},
    "random": {"init_features": "random"},
    "modern": {"recipe": "modern"},
    "sampled": {"recipe": "sampled"},
    "newbob": {"lr_schedule": "newbob"},
    "plain": {"recipe": "adaptive", "lr": 2e-3, "lr_schedule": "constant", "weight_decay": 0.0, "dropout": 0.0,
              "min_improvement": 0.0, "init_features": "random"},
    # the default recipe on a net whose rows start from, and are pulled towards, the exchange classes of train
    # (K about sqrt(|V|)), with h = 200 (docs/recipes.md, "Word rows from the exchange classes")
    "classes": {"init_features": "exchange", "class_context": False, "hidden": 200},
}


def brown_category_dir(out: Path, prefix: str) -> Path:
    """Brown texts whose file id starts with `prefix`, one paragraph a line, split 80/10/10 by paragraph."""
    if (out / "test.txt").exists():
        return out
    import nltk
    from nltk.corpus.reader import CategorizedTaggedCorpusReader

    from nnlm.data.corpus import _brown_root

    root = _brown_root()
    if root.suffix == ".zip":
        root = nltk.data.find("corpora/brown.zip/brown/")
    reader = CategorizedTaggedCorpusReader(root, r"c[a-z]\d\d", cat_file="cats.txt", tagset="brown", encoding="ascii")
    files = [f for f in reader.fileids() if f.startswith(prefix)]
    paras = [" ".join(w for s in p for w in s) for f in files for p in reader.paras(f)]
    a, b = int(0.8 * len(paras)), int(0.9 * len(paras))
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in (("train", paras[:a]), ("valid", paras[a:b]), ("test", paras[b:])):
        atomic_write_text(out / f"{name}.txt", "\n".join(lines) + "\n")
    return out


def corpus_options(name: str, work: Path) -> dict[str, Any]:
    spec = CORPORA[name]
    if "gen" in spec:
        path = work / "corpora" / name
        if not (path / "source.json").exists():
            write_corpus(path, **spec["gen"])
        return {"corpus": str(path)}
    if "brown" in spec:
        return {"corpus": str(brown_category_dir(work / "corpora" / name, spec["brown"])),
                "min_count": spec["min_count"]}
    return {"corpus": "brown"}


def min_count(options: dict[str, Any]) -> int | None:
    """The corpus's --min-count as `nnlm train` resolves it (2 for a text directory unless given), so the
    n-gram rows and the header count the vocabulary the nets train on."""
    return options["min_count"] if options.get("min_count") is not None else default_min_count(options["corpus"])


def ngram_rows(options: dict[str, Any]) -> dict[str, dict[str, float]]:
    from nnlm.ngram.build import build_ngram

    corpus = load_corpus(options["corpus"], min_count=min_count(options))
    rows = {}
    for kind, order in (("kn", 3), ("kn", 4), ("kn", 5), ("interpolated", 3)):
        model = build_ngram(kind, corpus, order, progress=False)
        rows[f"{kind}{order}"] = {s: perplexity(model, corpus, s) for s in ("valid", "test")}
    return rows


def train_one(out: Path, options: dict[str, Any], epochs: int, threads: int,
              report_only: bool = False) -> dict[str, Any]:
    """Train (or continue, or reuse) a run; its best valid, test and training time. `report_only`: no training,
    the figures of the run as it stands (its best weights so far; an unfinished run is not cached)."""
    resume = (out / "run.json").exists()
    session = {"epochs": epochs, "threads": threads}
    result_file = out / "benchmark.json"
    if report_only:
        if not result_file.exists() and not (out / "model.safetensors").exists():
            raise NnlmError(f"{out} has no trained model yet (--report-only trains nothing)")
        state = read_state(out)
    else:
        state = tr.train(out, session if resume else options | session, resume=resume, progress=False,
                         log=lambda line: print("   ", line, flush=True))
    if result_file.exists():
        return json.loads(result_file.read_text())
    lm = load_neural(out)
    run = json.loads((out / "run.json").read_text())
    corpus = load_corpus(run["corpus"], min_count=run["min_count"])
    result = {"valid": perplexity(lm, corpus, "valid"), "test": perplexity(lm, corpus, "test"),
              "epochs": len(state["history"]), "best_epoch": state["best"]["epoch"],
              "minutes": state["elapsed"] / 60, "stop": state["stop_reason"],
              "recipe": {k: run.get(k) for k in ("recipe", "lr", "lr_schedule", "lr_factor", "weight_decay", "dropout",
                                                 "min_improvement", "init_features", "feature_classes", "class_pull",
                                                 "class_context", "feature_clustering")}
              | {"hidden": run["model"]["hidden"]}}
    if state["finished"] or not report_only:
        atomic_write_text(result_file, json.dumps(result) + "\n")
    else:
        result["epochs"] = f"{result['epochs']}, unfinished"
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("runs/recipes"))
    ap.add_argument("--corpora", default="gen-500,gen-2k,brown-news,brown-learned,gen-2k-1m,brown")
    ap.add_argument("--recipes", default="default,random,plain")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report-only", action="store_true", help="train nothing: the runs' figures as they stand")
    args = ap.parse_args()
    for name in args.corpora.split(","):
        if name not in CORPORA:
            raise SystemExit(f"recipes.py: unknown corpus {name!r}; choose from {', '.join(CORPORA)}")
        options = corpus_options(name, args.work)
        corpus = load_corpus(options["corpus"], min_count=min_count(options))
        source = read_source(options["corpus"]) if "gen" in CORPORA[name] else None
        print(f"\n## {name}: train/valid/test {len(corpus.train):,}/{len(corpus.valid):,}/{len(corpus.test):,} tokens, "
              f"|V| = {len(corpus.vocab):,}; net {CORPORA[name]['net']}", flush=True)
        cache = args.work / "ngrams" / f"{name}.json"
        if cache.exists():
            grams = json.loads(cache.read_text())
        else:
            grams = ngram_rows(options)
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(cache, json.dumps(grams) + "\n")
        best = min(grams, key=lambda k: grams[k]["valid"])
        limit = source["test_perplexity"] if source else None
        print("| model | valid | test | minutes | epochs (best) | test / KN5 | test / limit |")
        print("|---|---|---|---|---|---|---|")
        if source:
            print(f"| source (the limit) | {source['valid_perplexity']:.2f} | {limit:.2f} | | | "
                  f"{limit / grams['kn5']['test']:.3f} | 1 |")
            known = {split: known_class_perplexity(options["corpus"], split) for split in ("valid", "test")}
            print(f"| classes known, the rest counted from train (the data's limit) | {known['valid']:.2f} | "
                  f"{known['test']:.2f} | | | {known['test'] / grams['kn5']['test']:.3f} | "
                  f"{known['test'] / limit:.3f} |")
        for label in ("kn5", best):
            g = grams[label]
            ratio = f"{g['test'] / limit:.3f}" if limit else ""
            print(f"| {label}{' (best n-gram on valid)' if label == best else ''} | {g['valid']:.2f} | {g['test']:.2f} "
                  f"| | | {g['test'] / grams['kn5']['test']:.3f} | {ratio} |")
            if best == "kn5":
                break
        for label in args.recipes.split(","):
            if label not in RECIPES:
                raise SystemExit(f"recipes.py: unknown recipe {label!r}; choose from {', '.join(RECIPES)}")
            try:
                r = train_one(args.work / "runs" / f"{name}-{label}", options | CORPORA[name]["net"] | RECIPES[label],
                              args.epochs, args.threads, args.report_only)
            except NnlmError as exc:
                print(f"| {label} | failed: {exc} | | | | | |")
                continue
            ratio = f"{r['test'] / limit:.3f}" if limit else ""
            rec = r["recipe"]
            what = (f"{rec['recipe']}, lr {rec['lr']:g} {rec['lr_schedule']}, wd {rec['weight_decay']:g}, "
                    f"dropout {rec['dropout']:g}")
            if rec.get("init_features") == "exchange":
                refined = " refined by trigrams" if rec.get("feature_clustering") == "trigram" else ""
                what += (f", h {rec['hidden']}, rows from {rec['feature_classes']} exchange classes{refined}, "
                         f"pull {rec['class_pull']:g}{', class pairs' if rec.get('class_context') else ''}")
            print(f"| {label} ({what}) | {r['valid']:.2f} | {r['test']:.2f} | {r['minutes']:.1f} | "
                  f"{r['epochs']} ({r['best_epoch']}) | {r['test'] / grams['kn5']['test']:.3f} | {ratio} |", flush=True)
    print(f"\n(load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
