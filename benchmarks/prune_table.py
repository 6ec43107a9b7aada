"""Size against perplexity of relative-entropy pruning (`nnlm prune`) on Brown KN5, with KenLM's scores of
every pruned ARPA file checked against nnlm's.

For each threshold: the n-grams kept per order and in all, valid and test perplexity (nnlm.lm.perplexity)
and their ratio to the unpruned model's, the sizes of the ARPA file and the saved model's arrays.npz,
the time to prune (nnlm.ngram.prune.prune_model, the model already loaded), and the largest difference
between KenLM's log10 P and nnlm's over every valid and test token with a full context. From the
repository root:
    PYTHONPATH=src NLTK_DATA=../shared/nltk_data python benchmarks/prune_table.py [--model DIR]
(--model: a saved Brown KN5, e.g. from `nnlm ngram --corpus brown --kind kn --order 5 --save DIR`;
default: built here, ~15 s).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import cpu_name  # noqa: E402

from nnlm.data.corpus import load_corpus  # noqa: E402
from nnlm.lm import perplexity, split_log_probs  # noqa: E402
from nnlm.loading import load  # noqa: E402
from nnlm.ngram.arpa import write_arpa  # noqa: E402
from nnlm.ngram.build import build_ngram, save_ngram  # noqa: E402
from nnlm.ngram.prune import prune_model  # noqa: E402

THRESHOLDS = (1e-9, 3e-9, 1e-8, 3e-8, 1e-7, 3e-7, 1e-6, 1e-5)
AGREE = 1e-4  # KenLM's log10 P must equal nnlm's to this
SPLITS = ("valid", "test")


def kenlm_gap(arpa: Path, model, corpus) -> float:
    """Largest |KenLM log10 P - nnlm log10 P| over the valid and test tokens with a full context in their split."""
    import kenlm

    theirs_model = kenlm.Model(str(arpa))
    gap, skip = 0.0, model.order - 1
    for split in SPLITS:
        words = corpus.vocab.decode(corpus.split(split))
        theirs = np.array([s for s, _, _ in theirs_model.full_scores(" ".join(words), bos=False, eos=False)])
        ours = split_log_probs(model, corpus, split) / np.log(10.0)
        gap = max(gap, float(np.abs(theirs[skip:] - ours[skip:]).max()))
    return gap


def row(label: str, sizes: list[int], full: list[int], ppl: dict[str, float], base: dict[str, float],
        arpa: Path, saved: Path, seconds: float | None, gap: float) -> str:
    kept = 100.0 * sum(sizes) / sum(full)
    per_order = " / ".join(f"{s:,}" for s in sizes)
    took = "-" if seconds is None else f"{seconds:.1f}"
    return (f"| {label} | {per_order} | {kept:.1f}% | {ppl['valid']:.2f} | {ppl['test']:.2f} | "
            f"{ppl['test'] / base['test']:.4f} | {arpa.stat().st_size / 2**20:.1f} | "
            f"{(saved / 'arrays.npz').stat().st_size / 2**20:.1f} | {took} | {gap:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a saved Brown KN5 (default: built here)")
    parser.add_argument("--thresholds", type=float, nargs="+", default=list(THRESHOLDS))
    args = parser.parse_args()
    corpus = load_corpus("brown")
    print(f"CPU: {cpu_name()}; load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    with tempfile.TemporaryDirectory(prefix="prune-table-") as tmp:
        root = Path(tmp)
        if args.model:
            full = load(args.model)
        else:
            full = build_ngram("kn", corpus, 5)
            save_ngram(full, root / "full")
        saved = Path(args.model) if args.model else root / "full"
        write_arpa(full, root / "full.arpa")
        base = {s: perplexity(full, corpus, s) for s in SPLITS}
        sizes = full.tables.sizes()
        print("| threshold | n-grams kept (orders 1 / 2 / 3 / 4 / 5) | kept | valid ppl | test ppl | test ratio | "
              "ARPA MiB | npz MiB | prune s | KenLM gap |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        gaps = [kenlm_gap(root / "full.arpa", full, corpus)]
        print(row("none (KN5)", sizes, sizes, base, base, root / "full.arpa", saved, None, gaps[0]), flush=True)
        for threshold in args.thresholds:
            pruned = prune_model(full, threshold)
            arpa, out = root / f"{threshold:g}.arpa", root / f"{threshold:g}"
            write_arpa(pruned.model, arpa)
            save_ngram(pruned.model, out)
            ppl = {s: perplexity(pruned.model, corpus, s) for s in SPLITS}
            gaps.append(kenlm_gap(arpa, pruned.model, corpus))
            print(row(f"{threshold:g}", pruned.after, sizes, ppl, base, arpa, out, pruned.seconds, gaps[-1]),
                  flush=True)
            for path in (arpa, out / "arrays.npz"):
                os.remove(path)
    print(f"load after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"KenLM loaded every ARPA file; largest gap {max(gaps):.1e} ({'within' if max(gaps) <= AGREE else 'ABOVE'} "
          f"{AGREE:g})")
    if max(gaps) > AGREE:
        sys.exit(1)


if __name__ == "__main__":
    main()
