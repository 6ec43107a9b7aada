"""The report's two plots: the nets' learning curves, and test ratios against the paper's.

Rows that were skipped stay in both, marked, so a missing bar is never mistaken for a row that
does not exist: the paper's bar is drawn and ours says "skipped" (or "not run"). The rows past the paper
(the EM mixes, often the best of a table) have only our bar, the paper's place marked "not in the paper"."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.io import atomic_path
from nnlm.neural.run import checkpoint as ck
from nnlm.reproduce.table import PAPER_BEST_NGRAM_TEST, Row


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)


def curves(out: Path, rows: dict[str, dict[str, Any]], nets: list[str], corpus_name: str) -> None:
    """Validation (and, for the full softmax, running train) perplexity per epoch of each trained net;
    a frame with the reasons when no net has a curve."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    missing = []
    for net in nets:
        run = (rows.get(net) or {}).get("run")
        metrics = out / run / "metrics.jsonl" if run else None
        if metrics is None or not metrics.exists():
            missing.append(f"{net.upper()}: {(rows.get(net) or {}).get('note') or 'not run'}")
            continue
        history = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        epochs = [h["epoch"] for h in history]
        line, = ax.plot(epochs, [h["valid_ppl"] for h in history], "o-", label=f"{net.upper()} valid")
        if ck.read_json(out / run / ck.RUN, "run options").get("loss", "full") == "full":
            ax.plot(epochs, [h["train_ppl"] for h in history], "--", color=line.get_color(), alpha=0.6,
                    label=f"{net.upper()} train (running)")  # a sampled loss's running value is not a perplexity
    if missing:
        import textwrap

        text = "\n".join(textwrap.fill(m, 90) for m in missing)
        ax.text(0.02, 0.98, "no curve:\n" + text, transform=ax.transAxes, va="top", fontsize=7, color="dimgray")
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity")
    if ax.get_lines():
        from nnlm.neural.run.checkpoint import log_scale_plain_labels

        log_scale_plain_labels(ax)
        ax.legend(fontsize=8, loc="upper right")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"Learning curves ({corpus_name})")
    fig.tight_layout()
    _save(fig, out / "curves.png")
    plt.close(fig)


def bar_rows(rows: dict[str, dict[str, Any]], ordered: list[Row], best: float | None,
             paper_best: float) -> list[tuple[Row, float | None, float | None, str]]:
    """The bars' rows: (row, the paper's test ratio or None, ours or None, its status or "not run"), for the
    rows the paper reports and the EM mixes it does not."""
    shown = []
    for row in ordered:
        if not row.paper[2] and row.mix != "EM":
            continue
        res = rows.get(row.id) or {}
        test = (res.get("perplexity") or {}).get("test")
        ours = test / best if (test and best) else None
        mark = res.get("status", "") if ours is not None else ("not run" if not res else res.get("status", "not run"))
        shown.append((row, row.paper[2] / paper_best if row.paper[2] else None, ours, mark))
    return shown


def bars(out: Path, rows: dict[str, dict[str, Any]], ordered: list[Row], best_id: str, best: float | None,
         paper_best: float = PAPER_BEST_NGRAM_TEST) -> None:
    """Test perplexity / the best n-gram's, paper vs ours, for every row of the table (the paper's rows and
    the EM mixes it has no figure for); the axis spans just the ratios, so a few percent show."""
    plt = _pyplot()
    shown = bar_rows(rows, ordered, best, paper_best)
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(shown)), 4.5))
    x = np.arange(len(shown))
    paper = ax.bar(x - 0.2, [p or 0.0 for _, p, _, _ in shown], 0.4, label=f"paper (best n-gram {paper_best:.0f})")
    ax.bar_label(paper, [f"{p:.2f}" if p else "" for _, p, _, _ in shown], fontsize=6, rotation=90, padding=2)
    ours = ax.bar(x + 0.2, [o or 0.0 for _, _, o, _ in shown], 0.4,
                  label=f"nnlm (best n-gram {best_id or 'none'}, {best or 0:.1f})")
    ax.bar_label(ours, [f"{o:.2f}" if o else "" for _, _, o, _ in shown], fontsize=6, rotation=90, padding=2)
    for bar, (_, _, o, mark) in zip(ours, shown, strict=True):
        if o is not None and mark == "shortened":
            bar.set_hatch("//")  # built, but the budget cut its training or clustering short
    ratios = [v for _, p, o, _ in shown for v in (p, o) if v]
    low = min(min(ratios, default=1.0), 1.0) - 0.05
    high = max(ratios, default=1.0)
    ax.set_ylim(low, high + 0.15 * (high - low) + 0.02)  # room for the value labels
    for i, (_, p, o, mark) in enumerate(shown):
        if p is None:
            ax.text(i - 0.2, low + 0.01, "not in the paper", rotation=90, ha="center", va="bottom", fontsize=7,
                    color="dimgray")
        if o is None:
            ax.text(i + 0.2, low + 0.01, mark, rotation=90, ha="center", va="bottom", fontsize=7, color="firebrick")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [row.id for row, _, _, _ in shown], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("test perplexity / best n-gram's")
    if any(mark == "shortened" for *_, mark in shown):
        from matplotlib.patches import Patch

        handles, labels = ax.get_legend_handles_labels()
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//"))
        labels.append("shortened for lack of budget")
        ax.legend(handles, labels, fontsize=8)
    else:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Test perplexity relative to the best n-gram of each table (lower is better)")
    fig.tight_layout()
    _save(fig, out / "perplexities.png")
    plt.close(fig)
