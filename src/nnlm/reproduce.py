"""`nnlm reproduce`: Table 1 of Bengio et al. (2003) on Brown, next to the paper's figures.

One call builds the n-gram rows, trains the requested MLPs (each in its own resumable run
directory), mixes every MLP with the interpolated trigram (0.5/0.5 as the paper, and EM weights per
context-frequency bucket), and writes `OUT/README.md` with two plots. Finished rows are kept in `OUT/results.json`, so a
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
from nnlm.lm import LanguageModel, contexts, perplexity_from_log_probs, split_log_probs
from nnlm.neural import checkpoint as ck
from nnlm.ngram.clusters import (
    WordClasses,
    exchange_clusters,
    load_word_classes,
    save_word_classes,
)

FORMAT = "nnlm-reproduce/1"
SPLITS = ("train", "valid", "test")
PAPER_BEST_NGRAM_TEST = 312.0  # class-based back-off, c = 500 (Table 1)
DEFAULT_MODELS = ("mlp1", "mlp3")
ALL_MODELS = ("mlp1", "mlp3", "mlp5", "mlp7", "mlp9")
DEFAULT_BUDGET_MINUTES = 30.0
MAX_EPOCHS = 100  # early stopping ends a run long before this
NGRAM_SHARE = 0.35  # of a budget: the most the n-gram rows may take (4-5 min on an idle 2-core machine)
MIN_TRAIN_MINUTES = 0.02  # a net given less than this is skipped
TIMING_TOKENS = 2048  # validation tokens scored to time a net's final scoring
SCORING_SAFETY = 1.2  # scoring time reserved, relative to the measured estimate


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

# Cheap rows and the ones others need first: the mixing partner, Kneser-Ney, then the class-based
# rows with the paper's best c = 500 (one clustering for its three orders), then the other c by cost.
NGRAM_BUILD_ORDER = ("interpolated", "kn3", "kn4", "kn5", "class500-3", "class500-4", "class500-5",
                     "class150-3", "class200-3", "class1000-3", "class2000-3")

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
            Row(f"mlp{k}-em", f"MLP{k} + trigram, EM weights by context frequency", paper=(None, None, None), mix="EM",
                **base))


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
        self.commit = _commit()  # read once, at the start: the code that builds this call's rows
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
        self.rows[row_id] = {**entry, "commit": self.commit}
        self.save()


class Reproduction:
    """Runs the rows in order, against one wall-clock budget.

    Budget: the n-gram rows come first and are timed; they may take at most NGRAM_SHARE of the
    budget (a clustering still running then is cut short, later rows are skipped), and whatever is
    left goes to the nets, shared equally among those still to train, each net's share minus the
    time its final scoring is measured to need. Rows cut or skipped for lack of budget are marked
    in results.json and the report, and a later call redoes them (continuing cut clusterings and
    training runs where they stopped)."""

    def __init__(self, corpus_source: str, out: Path, budget_minutes: float | None, nets: list[str],
                 command: str, log: Callable[[str], None] = print, progress: bool = True,
                 threads: int | None = None, device: str = "auto", loss: str = "sampled",
                 samples: int | None = None, hogwild: int | None = None) -> None:
        from nnlm.neural.sampled import DEFAULT_SAMPLES, check_loss

        if hogwild is not None and hogwild < 1:
            raise NnlmError(f"--hogwild must be at least 1 worker, got {hogwild}")
        self.hogwild = hogwild  # None: the plain, seeded trainer; N: N asynchronous workers

        check_loss(loss, samples)  # samples None: the trainer's default, min(DEFAULT_SAMPLES, |V|)
        self.loss, self.samples = loss, samples
        self.samples_text = "" if loss == "full" else str(samples or f"min({DEFAULT_SAMPLES}, |V|)")
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
        self._classes: dict[int, WordClasses] = {}
        self._speed: dict[str, float] = {}  # net -> seconds per scored token

    # ---- bookkeeping ------------------------------------------------------------------------
    def left(self) -> float | None:
        """Seconds left in the budget (None: no budget)."""
        return None if self.budget is None else self.budget - (time.monotonic() - self.start)

    def budget_text(self) -> str:
        left = self.left()
        return "" if left is None else f"budget left {max(left, 0) / 60:.1f} min"

    def announce(self, row: Row, extra: str = "") -> None:
        self.done_rows += 1
        tail = ", ".join(t for t in (self.budget_text(), extra) if t)
        self.log(f"[{self.done_rows}/{self.total_rows}] {row.label} (n={row.n})" + (f" - {tail}" if tail else ""))

    def row_log(self, row_id: str) -> Callable[[str], None]:
        """Log lines of a row's work, each saying which row it is and the budget left."""
        return lambda line: self.log(f"    {line}  [{row_id}{'; ' + self.budget_text() if self.budget else ''}]")

    def scored(self, key: str, model: LanguageModel, split: str) -> np.ndarray:
        """log P of every token of a split, computed once per model and split."""
        if (key, split) not in self._scored:
            self._scored[key, split] = split_log_probs(model, self.corpus, split)
        return self._scored[key, split]

    def evaluate(self, key: str, model: LanguageModel, splits=SPLITS) -> dict[str, float]:
        return {s: perplexity_from_log_probs(self.scored(key, model, s)) for s in splits}

    def pending(self, row_id: str) -> bool:
        """Not done yet, or done only in part for lack of budget (then a new call redoes it)."""
        entry = self.results.rows.get(row_id)
        return entry is None or bool(entry.get("cut"))

    # ---- n-gram rows ------------------------------------------------------------------------
    def word_classes(self, c: int, deadline: float | None) -> WordClasses:
        """Exchange-algorithm classes for c (they do not depend on the order): found once per call,
        kept in OUT/clusters/c{c}.npz (with the seconds they took); a clustering a budget cut short
        is continued."""
        if c in self._classes:  # complete, or cut by this call's deadline, which is past for every row
            return self._classes[c]
        path = self.out / "clusters" / f"c{c}.npz"
        found, saved_seconds = load_word_classes(path) or (None, 0.0)
        if found is not None and len(found.classes) != len(self.corpus.vocab):
            found = None
        if found is not None and found.complete:
            self._classes[c] = found
            return found
        t0 = time.perf_counter()
        found = exchange_clusters(self.corpus.train, len(self.corpus.vocab), c, progress=self.progress,
                                  deadline=deadline, resume_from=found)
        save_word_classes(path, found, saved_seconds + time.perf_counter() - t0)
        self._classes[c] = found
        return found

    def ngram_rows(self) -> LanguageModel:
        """Build every n-gram row not done yet; returns the interpolated trigram (the mixing partner)."""
        from nnlm.ngram.build import build_ngram

        deadline = None if self.budget is None else self.start + NGRAM_SHARE * self.budget
        by_id = {row.id: row for row in NGRAM_ROWS}
        trigram = None
        for row in (by_id[i] for i in NGRAM_BUILD_ORDER):
            self.announce(row)
            if row.id != "interpolated" and not self.pending(row.id):
                continue
            if row.classes is not None and row.classes > len(self.corpus.vocab):
                self.results.put(row.id, {"perplexity": {}, "parameters": 0, "seconds": 0.0,
                                          "note": f"skipped: c > |V| = {len(self.corpus.vocab)}"})
                continue
            if row.id != "interpolated" and deadline is not None and time.monotonic() >= deadline:
                note = (f"skipped for lack of budget: the n-gram rows may take {NGRAM_SHARE:.0%} of it "
                        f"({NGRAM_SHARE * self.budget / 60:.1f} min)")
                self.results.put(row.id, {"perplexity": {}, "parameters": 0, "seconds": 0.0, "note": note, "cut": True})
                self.log(f"    {note}")
                continue
            t0 = time.perf_counter()
            note, options = "", {}
            if row.classes is not None:
                classes = self.word_classes(row.classes, deadline)
                options = {"clusters": classes}
                if not classes.complete:
                    note = (f"shortened: the budget stopped the clustering after {classes.passes} passes; "
                            "a new call continues it")
                elif row.n != 3:
                    note = f"the classes of class{row.classes}-3, reused"
            model = build_ngram(row.kind, self.corpus, row.n, classes=row.classes, progress=self.progress, **options)
            if row.id == "interpolated":
                trigram = model
                if not self.pending(row.id):
                    continue
            ppl = self.evaluate(row.id, model)
            seconds = time.perf_counter() - t0
            self.results.put(row.id, {"perplexity": ppl, "parameters": model.parameter_count(),
                                      "seconds": seconds, "note": note, "cut": note.startswith("shortened")})
            self.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}  ({seconds:.1f} s)"
                     + (f"  ({note})" if note else ""))
        assert trigram is not None
        return trigram

    # ---- neural rows ------------------------------------------------------------------------
    def seconds_per_token(self, net: str) -> float:
        """What scoring one token with `net`'s exact softmax takes here, measured once on a slice of
        the validation split with an untrained net of its shape (the cost does not depend on the weights)."""
        if net not in self._speed:
            import torch

            from nnlm.neural.model import NPLM, NeuralLM
            from nnlm.neural.train import model_config

            config = model_config({"preset": net}, len(self.corpus.vocab))
            if self.threads is not None:
                torch.set_num_threads(self.threads)
            with torch.random.fork_rng(devices=[]):
                lm = NeuralLM(NPLM(config), self.corpus.vocab, self.corpus.pad_token, device=self.device_name())
            valid = self.corpus.split("valid")
            n = min(len(valid), TIMING_TOKENS)
            start = self.corpus.split_offset("valid")
            ctx = contexts(self.corpus.stream(), np.arange(start, start + n), config.order - 1, self.corpus.pad_id)
            t0 = time.perf_counter()
            lm.log_prob(ctx, valid[:n].astype(np.int64))
            self._speed[net] = (time.perf_counter() - t0) / n
        return self._speed[net]

    def minutes_for(self, net: str, remaining_nets: int) -> float | None:
        """Training minutes for `net`: an equal share of what is left, minus the scoring that follows
        training (the validation that ends a run cut by its budget, then valid and test; the train
        split waits for the end of the call). None without a budget, 0 if nothing is left for it."""
        left = self.left()
        if left is None:
            return None
        tokens = 2 * len(self.corpus.valid) + len(self.corpus.test)
        share = left / remaining_nets - SCORING_SAFETY * self.seconds_per_token(net) * tokens
        return max(share, 0.0) / 60.0

    def neural_rows(self, trigram: LanguageModel) -> None:
        for i, net in enumerate(self.nets):
            alone, mixed, em = mlp_rows(net)
            model = None
            if not self.results.rows.get(net, {}).get("finished"):
                minutes = self.minutes_for(net, len(self.nets) - i)
                self.announce(alone, "" if minutes is None else f"{minutes:.1f} min of training")
                model = self.train_net(net, minutes)
                self.results.rows.pop(mixed.id, None)
                self.results.rows.pop(em.id, None)
            else:
                self.announce(alone, "done already")
            for row, mode in ((mixed, "fixed"), (em, "em-buckets")):
                self.announce(row)
                if row.id in self.results.rows:
                    continue
                if model is None and self.results.rows[net]["perplexity"]:  # trained by an earlier call
                    model = self.trained(net)
                self.mix_row(row, mode, net, model, trigram)

    def train_split_rows(self) -> None:
        """The nets' train perplexity, left for last under a budget (the train split is four times
        validation's size): scored while the budget allows, else left blank, and the report says so."""
        for net in self.nets:
            entry = self.results.rows.get(net, {})
            if not entry.get("train_pending"):
                continue
            need = SCORING_SAFETY * self.seconds_per_token(net) * len(self.corpus.train)
            left = self.left()
            if left is not None and left < need:
                self.log(f"{net}: train perplexity not scored: it needs ~{need / 60:.1f} min, "
                         f"{max(left, 0) / 60:.1f} min left")
                continue
            self.log(f"{net}: train perplexity" + (f" - {self.budget_text()}" if self.budget else ""))
            entry["perplexity"]["train"] = perplexity_from_log_probs(self.scored(net, self.trained(net), "train"))
            entry.pop("train_pending")
            self.results.put(net, entry)

    def train_net(self, net: str, minutes: float | None) -> LanguageModel | None:
        """Train (or continue) `net` for `minutes` more and score it; None if it has no budget and no model."""
        from nnlm.neural.parallel import train_parallel

        run_dir = self.out / "runs" / net
        if minutes is not None and minutes < MIN_TRAIN_MINUTES:
            if (run_dir / ck.WEIGHTS).exists() and net in self.results.rows:
                self.log("    no budget left to continue it: keeping what it had")
                return self.trained(net)
            self.results.put(net, {"perplexity": {}, "parameters": 0, "seconds": 0.0, "finished": False,
                                   "note": "skipped for lack of budget: nothing left for this net", "cut": True})
            self.log("    skipped for lack of budget")
            return None
        requested: dict[str, Any] = {"corpus": self.corpus_source, "preset": net, "device": self.device,
                                     "epochs": MAX_EPOCHS, "threads": self.threads, "loss": self.loss}
        if self.samples is not None:
            requested["samples"] = self.samples
        if minutes is not None:  # the run's budget counts all its sessions: give it `minutes` more
            before = ck.read_json(run_dir / ck.STATE, "training state").get("elapsed", 0.0) \
                if (run_dir / ck.STATE).exists() else 0.0
            requested["time_budget"] = round(before / 60.0 + minutes, 2)
        state = train_parallel(run_dir, requested, "hogwild" if self.hogwild else "none", self.hogwild,
                               resume=(run_dir / ck.RUN).exists(), progress=self.progress, log=self.row_log(net))
        model = self.trained(net)
        later = self.budget is not None  # the train split is scored at the end, if the budget allows
        ppl = {"train": None} | self.evaluate(net, model, ("valid", "test") if later else SPLITS)
        note = "" if state["finished"] else f"shortened: {state['stop_reason']}"
        self.results.put(net, {"perplexity": ppl, "parameters": model.parameter_count(),
                               "seconds": state["elapsed"], "note": note, "finished": state["finished"],
                               "cut": not state["finished"], "train_pending": later,
                               "epochs": round(state["examples"] / len(self.corpus.train), 2), "best": state["best"]})
        self.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}" + (f"  ({note})" if note else ""))
        return model

    def trained(self, net: str) -> LanguageModel:
        from nnlm.neural.checkpoint import load_neural

        return load_neural(self.out / "runs" / net, device=self.device_name())

    def mix_row(self, row: Row, mode: str, net: str, model: LanguageModel | None, trigram: LanguageModel) -> None:
        from nnlm.mixture import mix_scored

        if model is None:  # the net was skipped
            self.results.put(row.id, {"perplexity": {}, "parameters": 0, "seconds": 0.0,
                                      "note": self.results.rows[net]["note"], "cut": True})
            return
        splits = ("valid", "test")
        scored = {s: [self.scored(net, model, s), self.scored("interpolated", trigram, s)] for s in splits}
        t0 = time.perf_counter()
        fitted = mix_scored([model, trigram], self.corpus, scored, mode, [0.5, 0.5] if mode == "fixed" else None)
        ppl = {s: perplexity_from_log_probs(lp) for s, lp in fitted.split_log_probs.items()}
        weight = float(fitted.model.weights[:, 0].mean())  # on the net; mean over the context-frequency buckets
        self.results.put(row.id, {"perplexity": {"train": None, **ppl}, "parameters": fitted.model.parameter_count(),
                                  "seconds": time.perf_counter() - t0, "note": self.results.rows[net]["note"],
                                  "weight": weight})
        self.log(f"    weight on the net {weight:.3f}: valid {ppl['valid']:.1f}  test {ppl['test']:.1f}")

    def device_name(self) -> str:
        from nnlm.neural.train import pick_device

        return str(pick_device(self.device))

    def training_text(self) -> str:
        layer = ("the exact softmax" if self.loss == "full" else
                 f"the {'importance-sampled softmax' if self.loss == 'sampled' else 'NCE'} output layer "
                 f"(`--loss {self.loss}`, K = {self.samples_text} samples per batch; scored with the exact softmax)")
        from nnlm.neural.train import RECIPES, default_recipe

        recipe = RECIPES[default_recipe(self.loss)]
        return (f"Nets: `nnlm train`'s {recipe.describe()}, trained with {layer}"
                + (f", by {self.hogwild} asynchronous Hogwild workers (`--hogwild {self.hogwild}`: faster on as many "
                   "cores, but no two runs give the same weights)" if self.hogwild else "")
                + "; `nnlm reproduce --loss full` trains them with the full softmax as the paper did.")

    def run(self) -> None:
        trigram = self.ngram_rows()
        self.neural_rows(trigram)
        self.train_split_rows()
        write_report(self.out, self.corpus, self.results.rows, self.nets, self.command,
                     None if self.budget is None else self.budget / 60.0, self.training_text(),
                     commit=self.results.commit)
        left = self.left()
        self.log(f"done in {(time.monotonic() - self.start) / 60:.1f} min"
                 + ("" if left is None else f" of a {self.budget / 60:.1f}-minute budget"))


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


def best_ngram(rows: dict[str, dict[str, Any]]) -> tuple[str, float | None]:
    """The n-gram row of lowest test perplexity: what our ratios divide by."""
    tests = {r.id: rows[r.id]["perplexity"]["test"] for r in NGRAM_ROWS if rows.get(r.id, {}).get("perplexity")}
    best_id = min(tests, key=tests.get) if tests else ""
    return best_id, tests.get(best_id)


def budget_lines(rows: dict[str, dict[str, Any]], nets: list[str], budget_minutes: float | None) -> list[str]:
    """Which rows the budget shortened or skipped, said before the table."""
    def names(prefix: str) -> str:
        return ", ".join(f"{row.label} (n = {row.n})" for row, res in table_rows(rows, nets)
                         if res and res.get("cut") and res.get("note", "").startswith(prefix))

    lines = ["Budget: " + (f"{budget_minutes:g} minutes for the whole call." if budget_minutes is not None
                           else "none (`--full`): every net trains until early stopping.")]
    shortened, skipped = names("shortened"), names("skipped")
    if shortened:
        lines.append(f"**Shortened for lack of budget**: {shortened}.")
    if skipped:
        lines.append(f"**Skipped for lack of budget**: {skipped}.")
    unscored = ", ".join(row.label for row, res in table_rows(rows, nets) if res and res.get("train_pending"))
    if unscored:
        lines.append("**Train perplexity not scored for lack of budget** (the train split is scored last): "
                     f"{unscored}.")
    if shortened or skipped or unscored:
        lines.append("The note column says why. The same command with a larger `--budget-minutes` (or `--full`) "
                     "continues them: finished rows are kept, cut clusterings and training runs resume.")
    else:
        lines.append("No row was shortened or skipped for lack of budget.")
    return [" ".join(lines), ""]


def write_report(out: Path, corpus: Corpus, rows: dict[str, dict[str, Any]], nets: list[str], command: str,
                 budget_minutes: float | None = None, training: str = "", *, commit: str) -> None:
    best_id, best = best_ngram(rows)
    protocol = ", `bengio2003` protocol (docs/protocol.md)" if corpus.name == "brown" else ""
    lines = [
        f"# Table 1 of Bengio et al. (2003), reproduced on {corpus.name}",
        "",
        f"Command: `{command}`  ",
        commit_line(rows, nets, commit),
        f"Corpus: {corpus.name}{protocol}: "
        f"{len(corpus.train):,} / {len(corpus.valid):,} / {len(corpus.test):,} tokens, |V| = {len(corpus.vocab):,} "
        "(the paper's Brown: 800,000 / 200,000 / 181,041, |V| = 16,383; another tokenization, so compare ratios).",
        "",
        "Perplexity = exp(-mean ln P) over every token of a split (markers and `<unk>` included). "
        "Mixes are with the deleted-interpolation trigram: 0.5/0.5 as the paper, or weights fitted by EM on "
        "validation, one pair per context-frequency bucket of the trigram (the paper's third way to mix). "
        "Ratio = test perplexity / the best n-gram's test perplexity of the same table "
        f"(paper: class-based c = 500, {PAPER_BEST_NGRAM_TEST:.0f}; ours: {best_id}, {_fmt(best, 1)}).",
        *([training, ""] if training else [""]),
        *budget_lines(rows, nets, budget_minutes),
        "| model | n | h | m | direct | mix | paper train | paper valid | paper test | ours train | ours valid "
        "| ours test | ratio paper | ratio ours | parameters | time | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, res in table_rows(rows, nets):
        p = res["perplexity"] if res else {}
        ours_test = p.get("test")
        paper_ratio = row.paper[2] / PAPER_BEST_NGRAM_TEST if row.paper[2] else None
        our_ratio = ours_test / best if (ours_test and best) else None
        direct = "" if row.direct is None else ("yes" if row.direct else "no")
        lines.append(
            f"| {row.label} | {row.n} | {_fmt(row.h) if row.h is not None else ''} | {_fmt(row.m) if row.m else ''} "
            f"| {direct} | {row.mix} | {_fmt(row.paper[0])} | {_fmt(row.paper[1])} | {_fmt(row.paper[2])} "
            f"| {_fmt(p.get('train'), 1)} | {_fmt(p.get('valid'), 1)} | {_fmt(ours_test, 1)} "
            f"| {_fmt(paper_ratio, 3)} | {_fmt(our_ratio, 3)} | {_fmt(res['parameters']) if res else ''} "
            f"| {_duration(res['seconds']) if res else 'not run'} | {_cell(res.get('note', '')) if res else ''} |")
    lines += ["", "![learning curves](curves.png)", "", "![test perplexities](perplexities.png)", ""]
    atomic_write_text(out / "README.md", "\n".join(lines) + "\n")
    _plot_curves(out, nets)
    _plot_bars(out, rows, nets)


def commit_line(rows: dict[str, dict[str, Any]], nets: list[str], current: str) -> str:
    """The commit(s) whose code built the rows: a resumed reproduction may span several."""
    built: dict[str, list[str]] = {}
    for row, res in table_rows(rows, nets):
        if res:
            built.setdefault(res.get("commit", "unrecorded"), []).append(row.id)
    if set(built) <= {"unrecorded"}:  # results.json from before rows were stamped
        return f"Commit: `{current}`  "
    if len(built) == 1:
        return f"Commit: `{next(iter(built))}`  "
    parts = [f"`{sha}` ({', '.join(ids)})" for sha, ids in built.items()]
    return "Commits (rows built by calls at different commits; row ids as in results.json): " + "; ".join(parts) + "  "


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
        run = ck.read_json(out / "runs" / net / ck.RUN, "run options")
        if run.get("loss", "full") == "full":  # a sampled loss's running "train ppl" is not a perplexity
            ax.plot(epochs, [h["train_ppl"] for h in history], "--", color=line.get_color(), alpha=0.6,
                    label=f"{net.upper()} train (running)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    ax.set_title("Learning curves (Brown)")
    fig.tight_layout()
    with atomic_path(out / "curves.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _plot_bars(out: Path, rows: dict[str, dict[str, Any]], nets: list[str]) -> None:
    """Test perplexity / the best n-gram's, paper vs ours: the tokenizations differ, the ratios compare;
    the axis spans just the ratios, so a few percent show."""
    plt = _pyplot()
    best_id, best = best_ngram(rows)
    shown = [(row, row.paper[2] / PAPER_BEST_NGRAM_TEST, res["perplexity"]["test"] / best)
             for row, res in table_rows(rows, nets) if res and res["perplexity"] and row.paper[2] and best]
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(shown)), 4.5))
    x = np.arange(len(shown))
    for offset, values, label in ((-0.2, [p for _, p, _ in shown], f"paper (best n-gram {PAPER_BEST_NGRAM_TEST:.0f})"),
                                  (0.2, [o for _, _, o in shown], f"nnlm (best n-gram {best_id}, {_fmt(best, 1)})")):
        bars = ax.bar(x + offset, values, 0.4, label=label)
        ax.bar_label(bars, [f"{v:.2f}" for v in values], fontsize=6, rotation=90, padding=2)
    if shown:
        ratios = [v for _, p, o in shown for v in (p, o)]
        low = min(min(ratios), 1.0) - 0.05
        ax.set_ylim(low, max(ratios) + 0.15 * (max(ratios) - low) + 0.02)  # room for the value labels
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [row.id for row, _, _ in shown], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("test perplexity / best n-gram's")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Test perplexity relative to the best n-gram of each table (lower is better)")
    fig.tight_layout()
    with atomic_path(out / "perplexities.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def reproduce(corpus_source: str, out: Path | str, budget_minutes: float | None, models: str | None,
              full: bool, command: str, log: Callable[[str], None] = print, progress: bool = True,
              threads: int | None = None, device: str = "auto", loss: str = "sampled",
              samples: int | None = None, hogwild: int | None = None) -> Path:
    """Build/train/mix every row, write OUT/README.md; returns its path."""
    if budget_minutes is not None and budget_minutes <= 0:
        raise NnlmError(f"--budget-minutes must be positive, got {budget_minutes}")
    nets = parse_models(models, full)
    job = Reproduction(corpus_source, Path(out), None if full else (budget_minutes or DEFAULT_BUDGET_MINUTES),
                       nets, command, log=log, progress=progress, threads=threads, device=device, loss=loss,
                       samples=samples, hogwild=hogwild)
    job.run()
    return Path(out) / "README.md"
