"""The "Beyond the paper" section's plot (OUT/beyond.png): every row's test ratio to KN5, nets and mixes in
their own colours and the LSTM reference apart, with a line at its ratio, so that which of nnlm's rows beat
the recurrent net a user copies today is read at a glance. From results.json alone, like the report."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nnlm.reproduce.beyond_report import KEY, PLOT, is_reference, section_ids
from nnlm.reproduce.plots import _pyplot, _save

COLOURS = {"net": "tab:blue", "mix": "tab:orange", "reference": "tab:red"}


def kind(entry: dict[str, Any]) -> str:
    return "reference" if is_reference(entry) else "mix" if "parts" in entry else "net"


def ratios(out: Path, data: dict[str, Any]) -> Path | None:
    """Draw OUT/beyond.png for the section's rows of the last call (None, nothing drawn: no section row or no
    KN5). A row not built (skipped) keeps its place, marked."""
    rows = data.get("rows", {})
    ids = section_ids(data)
    kn5 = ((rows.get("kn5") or {}).get("perplexity") or {}).get("test")
    if not ids or not kn5:
        return None
    plt = _pyplot()
    shown = [(i, rows[KEY + i], ((rows[KEY + i].get("perplexity") or {}).get("test") or 0.0) / kn5) for i in ids]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.3 * len(shown)))
    y = list(range(len(shown)))[::-1]  # the section's order, top down
    bars = ax.barh(y, [r for _, _, r in shown], color=[COLOURS[kind(e)] for _, e, _ in shown], height=0.7)
    for bar, (_, entry, ratio) in zip(bars, shown, strict=True):
        if entry.get("status") == "shortened":
            bar.set_hatch("//")
        middle = bar.get_y() + bar.get_height() / 2
        if ratio:
            ax.text(ratio + 0.005, middle, f"{ratio:.3f}", va="center", fontsize=7)
        else:  # at the axis' left edge (x in axes units): a row not built has no bar to label
            ax.text(0.01, middle, entry.get("status") or "not built", va="center", fontsize=7, color="firebrick",
                    transform=ax.get_yaxis_transform())
    built = [r for _, _, r in shown if r]
    reference = [r for _, e, r in shown if is_reference(e) and r]
    if reference:
        ax.axvline(reference[0], color=COLOURS["reference"], linestyle="--", linewidth=1)
    ax.axvline(1.0, color="black", linewidth=0.8)
    low = min(built, default=1.0)
    ax.set_xlim(max(low - 0.1, 0.0), max(max(built, default=1.0), 1.0) + 0.08)
    ax.set_yticks(y, [i for i, _, _ in shown], fontsize=7)
    from matplotlib.patches import Patch

    ax.legend([Patch(color=c) for c in COLOURS.values()],
              ["nnlm net", "mix", "LSTM reference (not nnlm)"], fontsize=7, loc="lower right")
    ax.set_xlabel("test perplexity / KN5's (lower is better; hatched: shortened for lack of budget)")
    ax.set_title("Beyond the paper: the section's rows against KN5 and the LSTM reference", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, out / PLOT)
    plt.close(fig)
    return out / PLOT
