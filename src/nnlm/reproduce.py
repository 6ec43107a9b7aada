"""`nnlm reproduce`: Table 1 of Bengio et al. (2003) on Brown, next to the paper's figures.

One call builds the n-gram rows, trains the requested MLPs (each in its own resumable run
directory), mixes every MLP with the interpolated trigram (0.5/0.5 as the paper, and EM weights),
and writes `OUT/README.md` with two plots. Finished rows are kept in `OUT/results.json`, so a
second call skips them and continues unfinished training runs.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nnlm.data.corpus import Corpus, load_corpus
from nnlm.errors import NnlmError
from nnlm.io import atomic_path, atomic_write_text
from nnlm.lm import LanguageModel, perplexity_from_log_probs, split_log_probs
from nnlm.neural import checkpoint as ck

FORMAT = "nnlm-reproduce/1"
SPLITS = ("train", "valid", "test")
PAPER_BEST_NGRAM_TEST = 312.0  # class-based back-off, c = 500 (Table 1)
DEFAULT_MODELS = ("mlp1", "mlp3")
ALL_MODELS = ("mlp1", "mlp3", "mlp5", "mlp7", "mlp9")
DEFAULT_BUDGET_MINUTES = 30.0
MAX_EPOCHS = 100  # early stopping ends a run long before this
EVAL_RESERVE_MINUTES = 1.5  # per MLP: scoring three splits with the exact softmax, and mixing


@dataclass(frozen=True)
class Row:
    id: str
    label: str
    n: int
    paper: tuple[float | None, float | None, float | None]  # train, valid, test
    h: int | None = None
    m: int | None = None
    direct: bool | None = None
    mix: str = ""  # "", "0.5" (the paper's mix) or "EM"


@dataclass(frozen=True)
class NgramRow(Row):
    kind: str = ""
    classes: int | None = None


NGRAM_ROWS: tuple[NgramRow, ...] = (
    NgramRow("interpolated", "deleted interpolation trigram", 3, (31, 352, 336), kind="interpolated"),
    NgramRow("kn3", "Kneser-Ney back-off", 3, (None, 334, 323), kind="kn"),
    NgramRow("kn4", "Kneser-Ney back-off", 4, (None, 332, 321), kind="kn"),
    NgramRow("kn5", "Kneser-Ney back-off", 5, (None, 332, 321), kind="kn"),
    *(NgramRow(f"class{c}-3", f"class-based back-off, c = {c}", 3, (None, v, t), kind="class", classes=c)
      for c, v, t in ((150, 348, 334), (200, 354, 340), (500, 326, 312), (1000, 335, 319), (2000, 343, 326))),
    NgramRow("class500-4", "class-based back-off, c = 500", 4, (None, 327, 312), kind="class", classes=500),
    NgramRow("class500-5", "class-based back-off, c = 500", 5, (None, 327, 312), kind="class", classes=500),
)

# Table 1's nets: (n, h, m, direct), paper (train, valid, test) alone, paper (valid, test) mixed 0.5.
MLP_TABLE: dict[str, tuple[tuple[int, int, int, bool], tuple[float, float, float], tuple[float, float]]] = {
    "mlp1": ((5, 50, 60, True), (182, 284, 268), (275, 257)),
    "mlp3": ((5, 0, 60, True), (201, 327, 310), (286, 272)),
    "mlp5": ((5, 50, 30, True), (209, 296, 279), (273, 259)),
    "mlp7": ((3, 50, 30, True), (210, 309, 293), (284, 270)),
    "mlp9": ((5, 100, 30, False), (175, 280, 276), (265, 252)),
}


def mlp_rows(name: str) -> tuple[Row, Row, Row]:
    """The net alone, its paper mix (0.5 with the interpolated trigram, MLP k+1), and an EM mix."""
    (n, h, m, direct), alone, mixed = MLP_TABLE[name]
    k = int(name[3:])
    base = dict(n=n, h=h, m=m, direct=direct)
    return (Row(name, f"MLP{k}", paper=alone, **base),
            Row(f"mlp{k + 1}", f"MLP{k + 1} (MLP{k} + trigram, 0.5)", paper=(None, *mixed), mix="0.5", **base),
            Row(f"mlp{k}-em", f"MLP{k} + trigram, EM weights", paper=(None, None, None), mix="EM", **base))


def parse_models(text: str | None, full: bool) -> list[str]:
    """'mlp1,mlp3' -> nets to train; an even name (a mix row) asks for the net it mixes."""
    if text is None:
        return list(ALL_MODELS if full else DEFAULT_MODELS)
    nets: list[str] = []
    for name in (t.strip().lower() for t in text.split(",") if t.strip()):
        if not (name.startswith("mlp") and name[3:].isdigit() and 1 <= int(name[3:]) <= 10):
            raise NnlmError(f"unknown model {name!r} in --models; choose from mlp1 ... mlp10")
        k = int(name[3:])
        net = f"mlp{k if k % 2 else k - 1}"
        if net not in nets:
            nets.append(net)
    if not nets:
        raise NnlmError("--models names no model")
    return nets


class Results:
    """OUT/results.json: one entry per finished row, rewritten atomically after each row."""

    def __init__(self, out: Path, corpus: Corpus) -> None:
        self.path = out / "results.json"
        self.out = out
        self.corpus_key = {"corpus": corpus.name, "vocab": corpus.vocab.fingerprint}
        if out.exists() and any(out.iterdir()):
            if not self.path.exists():
                raise NnlmError(f"{out} already holds files that are not an nnlm reproduction; "
                                "choose another --out")
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise NnlmError(f"{self.path} is unreadable ({exc}); remove it or choose another --out") from None
            if data.get("format") != FORMAT:
                raise NnlmError(f"{self.path} is not an nnlm reproduction; choose another --out")
            if data.get("corpus") != self.corpus_key:
                raise NnlmError(f"{out} holds a reproduction on another corpus or vocabulary; choose another --out")
            self.rows: dict[str, dict[str, Any]] = data.get("rows", {})
        else:
            out.mkdir(parents=True, exist_ok=True)
            self.rows = {}
            self.save()

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps({"format": FORMAT, "corpus": self.corpus_key, "rows": self.rows},
                                                indent=1))

    def put(self, row_id: str, entry: dict[str, Any]) -> None:
        self.rows[row_id] = entry
        self.save()


class Reproduction:
    """Runs the rows in order, against one wall-clock budget."""

    def __init__(self, corpus_source: str, out: Path, budget_minutes: float | None, nets: list[str],
                 command: str, log: Callable[[str], None] = print, progress: bool = True,
                 threads: int | None = None, device: str = "auto") -> None:
        self.corpus_source, self.command = corpus_source, command
        self.corpus = load_corpus(corpus_source)
        self.out, self.nets, self.log = out, nets, log
        self.budget = None if budget_minutes is None else 60.0 * budget_minutes
        self.progress, self.threads, self.device = progress, threads, device
        self.results = Results(out, self.corpus)
        self.start = time.monotonic()
        self.total_rows = len(NGRAM_ROWS) + 3 * len(nets)
        self.done_rows = 0
        self._scored: dict[tuple[str, str], np.ndarray] = {}

    # ---- bookkeeping ------------------------------------------------------------------------
    def left(self) -> float | None:
        return None if self.budget is None else self.budget - (time.monotonic() - self.start)

    def announce(self, row: Row) -> None:
        self.done_rows += 1
        left = self.left()
        self.log(f"[{self.done_rows}/{self.total_rows}] {row.label} (n={row.n})"
                 + ("" if left is None else f" - budget left {max(left, 0) / 60:.1f} min"))

    def scored(self, key: str, model: LanguageModel, split: str) -> np.ndarray:
        """log P of every token of a split, computed once per model and split."""
        if (key, split) not in self._scored:
            self._scored[key, split] = split_log_probs(model, self.corpus, split)
        return self._scored[key, split]

    def evaluate(self, key: str, model: LanguageModel, splits=SPLITS) -> dict[str, float]:
        return {s: perplexity_from_log_probs(self.scored(key, model, s)) for s in splits}

    # ---- n-gram rows ------------------------------------------------------------------------
    def ngram_rows(self) -> LanguageModel:
        """Build every n-gram row not done yet; returns the interpolated trigram (the mixing partner)."""
        from nnlm.ngram.build import build_ngram

        trigram = None
        for row in NGRAM_ROWS:
            self.announce(row)
            if row.id in self.results.rows and row.id != "interpolated":
                continue
            if row.classes is not None and row.classes > len(self.corpus.vocab):
                self.results.put(row.id, {"perplexity": {}, "parameters": 0, "seconds": 0.0,
                                          "note": f"skipped: c > |V| = {len(self.corpus.vocab)}"})
                continue
            t0 = time.perf_counter()
            model = build_ngram(row.kind, self.corpus, row.n, classes=row.classes)
            seconds = time.perf_counter() - t0
            if row.id == "interpolated":
                trigram = model
                if row.id in self.results.rows:
                    continue
            ppl = self.evaluate(row.id, model)
            self.results.put(row.id, {"perplexity": ppl, "parameters": model.parameter_count(),
                                      "seconds": seconds, "note": ""})
            self.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}  ({seconds:.1f} s)")
        assert trigram is not None
        return trigram

    # ---- neural rows ------------------------------------------------------------------------
    def minutes_for(self, remaining_nets: int) -> float | None:
        left = self.left()
        if left is None:
            return None
        share = left / 60.0 / remaining_nets
        return max(share - min(EVAL_RESERVE_MINUTES, 0.2 * share), 0.05)

    def neural_rows(self, trigram: LanguageModel) -> None:
        from nnlm.mixture import mix_scored
        from nnlm.neural.checkpoint import load_neural
        from nnlm.neural.train import train

        for i, net in enumerate(self.nets):
            alone, mixed, em = mlp_rows(net)
            self.announce(alone)
            run_dir = self.out / "runs" / net
            minutes = self.minutes_for(len(self.nets) - i)
            previous = self.results.rows.get(net)
            if previous is None or not previous.get("finished"):
                resume = (run_dir / ck.RUN).exists()
                requested: dict[str, Any] = {"corpus": self.corpus_source, "preset": net, "device": self.device,
                                             "epochs": MAX_EPOCHS, "threads": self.threads}
                if minutes is not None:  # the run's budget counts all its sessions: give it `minutes` more
                    before = ck.read_json(run_dir / ck.STATE, "training state").get("elapsed", 0.0) \
                        if (run_dir / ck.STATE).exists() else 0.0
                    requested["time_budget"] = before / 60.0 + minutes
                state = train(run_dir, requested, resume=resume, progress=self.progress,
                              log=lambda line: self.log("    " + line))
                model = load_neural(run_dir, device=self.device_name())
                ppl = self.evaluate(net, model)
                note = "" if state["finished"] else f"shortened: {state['stop_reason']}"
                self.results.put(net, {"perplexity": ppl, "parameters": model.parameter_count(),
                                       "seconds": state["elapsed"], "note": note, "finished": state["finished"],
                                       "epochs": round(state["examples"] / len(self.corpus.train), 2),
                                       "best": state["best"]})
                self.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}" + (f"  ({note})" if note else ""))
                self.results.rows.pop(mixed.id, None)
                self.results.rows.pop(em.id, None)
            else:
                model = load_neural(run_dir, device=self.device_name())
            for row, mode in ((mixed, "fixed"), (em, "em")):
                self.announce(row)
                if row.id in self.results.rows:
                    continue
                splits = ("valid", "test")
                scored = {s: [self.scored(net, model, s), self.scored("interpolated", trigram, s)] for s in splits}
                t0 = time.perf_counter()
                fitted = mix_scored([model, trigram], self.corpus, scored, mode, [0.5, 0.5] if mode == "fixed" else None)
                ppl = {s: perplexity_from_log_probs(lp) for s, lp in fitted.split_log_probs.items()}
                weight = float(fitted.model.weights[0, 0])
                self.results.put(row.id, {"perplexity": {"train": None, **ppl},
                                          "parameters": fitted.model.parameter_count(),
                                          "seconds": time.perf_counter() - t0,
                                          "note": self.results.rows[net]["note"],
                                          "weight": weight})
                self.log(f"    weight on the net {weight:.3f}: valid {ppl['valid']:.1f}  test {ppl['test']:.1f}")

    def device_name(self) -> str:
        from nnlm.neural.train import pick_device

        return str(pick_device(self.device))

    def run(self) -> None:
        trigram = self.ngram_rows()
        self.neural_rows(trigram)
        write_report(self.out, self.corpus, self.results.rows, self.nets, self.command)


# ---- the report -----------------------------------------------------------------------------

def _fmt(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def table_rows(rows: dict[str, dict[str, Any]], nets: list[str]) -> list[tuple[Row, dict[str, Any] | None]]:
    ordered: list[tuple[Row, dict[str, Any] | None]] = []
    for net in nets:
        for row in mlp_rows(net):
            ordered.append((row, rows.get(row.id)))
    for row in NGRAM_ROWS:
        ordered.append((row, rows.get(row.id)))
    return ordered


def write_report(out: Path, corpus: Corpus, rows: dict[str, dict[str, Any]], nets: list[str], command: str) -> None:
    ngram_tests = {r.id: rows[r.id]["perplexity"]["test"] for r in NGRAM_ROWS if rows.get(r.id, {}).get("perplexity")}
    best_id = min(ngram_tests, key=ngram_tests.get) if ngram_tests else ""
    best_ngram = ngram_tests.get(best_id)
    protocol = ", `bengio2003` protocol (docs/protocol.md)" if corpus.name == "brown" else ""
    lines = [
        f"# Table 1 of Bengio et al. (2003), reproduced on {corpus.name}",
        "",
        f"Command: `{command}`  ",
        f"Commit: `{_commit()}`  ",
        f"Corpus: {corpus.name}{protocol}: "
        f"{len(corpus.train):,} / {len(corpus.valid):,} / {len(corpus.test):,} tokens, |V| = {len(corpus.vocab):,} "
        "(the paper's Brown: 800,000 / 200,000 / 181,041, |V| = 16,383; another tokenization, so compare ratios).",
        "",
        "Perplexity = exp(-mean ln P) over every token of a split (markers and `<unk>` included). "
        "Mixes are with the deleted-interpolation trigram: 0.5/0.5 as the paper, or one weight fitted by EM on "
        "validation. Ratio = test perplexity / the best n-gram's test perplexity of the same table "
        f"(paper: class-based c = 500, {PAPER_BEST_NGRAM_TEST:.0f}; ours: {best_id}, {_fmt(best_ngram, 1)}).",
        "",
        "| model | n | h | m | direct | mix | paper train | paper valid | paper test | ours train | ours valid "
        "| ours test | ratio paper | ratio ours | parameters | time | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, res in table_rows(rows, nets):
        p = res["perplexity"] if res else {}
        ours_test = p.get("test")
        paper_ratio = row.paper[2] / PAPER_BEST_NGRAM_TEST if row.paper[2] else None
        our_ratio = ours_test / best_ngram if (ours_test and best_ngram) else None
        direct = "" if row.direct is None else ("yes" if row.direct else "no")
        lines.append(
            f"| {row.label} | {row.n} | {_fmt(row.h) if row.h is not None else ''} | {_fmt(row.m) if row.m else ''} "
            f"| {direct} | {row.mix} | {_fmt(row.paper[0])} | {_fmt(row.paper[1])} | {_fmt(row.paper[2])} "
            f"| {_fmt(p.get('train'), 1)} | {_fmt(p.get('valid'), 1)} | {_fmt(ours_test, 1)} "
            f"| {_fmt(paper_ratio, 3)} | {_fmt(our_ratio, 3)} | {_fmt(res['parameters']) if res else ''} "
            f"| {_duration(res['seconds']) if res else 'not run'} | {_cell(res.get('note', '')) if res else ''} |")
    lines += ["", "![learning curves](curves.png)", "", "![test perplexities](perplexities.png)", ""]
    shortened = [row.label for row, res in table_rows(rows, nets) if res and res.get("note", "").startswith("shortened")]
    if shortened:
        lines += ["Shortened rows (a time budget stopped training before early stopping did): "
                  + ", ".join(shortened) + ". Run again with a larger `--budget-minutes`, or `--full`, to continue "
                  "them.", ""]
    atomic_write_text(out / "README.md", "\n".join(lines) + "\n")
    _plot_curves(out, nets)
    _plot_bars(out, rows, nets)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10).stdout.strip()
        return sha or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_curves(out: Path, nets: list[str]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for net in nets:
        metrics = out / "runs" / net / "metrics.jsonl"
        if not metrics.exists():
            continue
        history = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        epochs = [h["epoch"] for h in history]
        line, = ax.plot(epochs, [h["valid_ppl"] for h in history], "o-", label=f"{net.upper()} valid")
        ax.plot(epochs, [h["train_ppl"] for h in history], "--", color=line.get_color(), alpha=0.6,
                label=f"{net.upper()} train (running)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Learning curves (Brown)")
    fig.tight_layout()
    with atomic_path(out / "curves.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _plot_bars(out: Path, rows: dict[str, dict[str, Any]], nets: list[str]) -> None:
    plt = _pyplot()
    shown = [(row, res) for row, res in table_rows(rows, nets) if res and res["perplexity"] and row.paper[2]]
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(shown)), 4.5))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, [row.paper[2] for row, _ in shown], 0.4, label="paper")
    ax.bar(x + 0.2, [res["perplexity"]["test"] for _, res in shown], 0.4, label="nnlm")
    ax.set_xticks(x, [row.id for row, _ in shown], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("test perplexity")
    ax.legend()
    ax.set_title("Test perplexity, paper vs nnlm (Brown)")
    fig.tight_layout()
    with atomic_path(out / "perplexities.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def reproduce(corpus_source: str, out: Path | str, budget_minutes: float | None, models: str | None,
              full: bool, command: str, log: Callable[[str], None] = print, progress: bool = True,
              threads: int | None = None, device: str = "auto") -> Path:
    """Build/train/mix every row, write OUT/README.md; returns its path."""
    if budget_minutes is not None and budget_minutes <= 0:
        raise NnlmError(f"--budget-minutes must be positive, got {budget_minutes}")
    nets = parse_models(models, full)
    job = Reproduction(corpus_source, Path(out), None if full else (budget_minutes or DEFAULT_BUDGET_MINUTES),
                       nets, command, log=log, progress=progress, threads=threads, device=device)
    job.run()
    return Path(out) / "README.md"
