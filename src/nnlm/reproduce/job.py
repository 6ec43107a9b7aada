"""One `nnlm reproduce` call: its options, its clock, its log, and what its rows share (scores, classes,
measured rates). The rows are built by `ngram_rows` and `net_rows`, which take a Job; the order of the
work is `nnlm.reproduce.run_table`'s; how much time each row gets is the planner's (`planner.plan`); the
report is written from results.json alone (`report`)."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nnlm.lm import LanguageModel, perplexity_from_log_probs, split_log_probs
from nnlm.reproduce.background_clusters import BackgroundClusters
from nnlm.reproduce.planner import Rates
from nnlm.reproduce.request import ReproduceRequest
from nnlm.reproduce.results import Results, requested_options
from nnlm.reproduce.table import Row
from nnlm.reproduce.tables import DEFAULT_TABLE, get_table
from nnlm.wordclasses.exchange import WordClasses

SPLITS = ("train", "valid", "test")


class Job:
    """The call's context, shared by the row runners."""

    def __init__(self, request: ReproduceRequest, log: Callable[[str], None] = print) -> None:
        from nnlm.data.provenance import corpus_options, load_recorded_corpus, settled

        self.request = request
        self.hogwild, self.loss, self.samples = request.hogwild, request.loss, request.samples
        self.table = get_table(request.table)
        nets = self.table.parse_nets(request.models, request.full)  # (before the corpus is read)
        # the vocabulary options of `nnlm train` / `nnlm ngram` (a text directory's default min-count 2),
        # the same for every row: the n-grams load this corpus, the nets' runs record the options
        self.corpus_options = corpus_options(request.corpus, request.min_count, request.max_vocab,
                                             heldout=request.heldout)
        self.corpus = load_recorded_corpus(self.corpus_options)
        self.corpus_options = settled(self.corpus_options, self.corpus)  # standard input: named by its content
        self.corpus_source, self.command = self.corpus_options["corpus"], request.command  # what each run records
        self.out, self.nets, self.log = request.out, nets, log
        budget_minutes = request.budget
        self.budget = None if budget_minutes is None else 60.0 * budget_minutes
        self.progress, self.threads, self.device = request.progress, request.threads, request.device
        self.options = requested_options(request.loss, request.samples, request.hogwild, len(self.corpus.vocab),
                                         request.device)
        call = {"command": request.command, "budget_minutes": budget_minutes, "nets": nets}
        if self.table.name != DEFAULT_TABLE:  # Table 1's results.json stays as it was
            call["table"] = self.table.name
        if request.corpus != "brown":  # which vocabulary the table used (the report says so)
            call["vocabulary"] = {"size": len(self.corpus.vocab), "min_count": self.corpus_options["min_count"],
                                  "max_vocab": request.max_vocab}
            if request.heldout is not None:
                call["vocabulary"]["heldout"] = request.heldout
        self.results = Results(request.out, self.corpus, call)
        self.start = time.monotonic()
        self.total_rows = len(self.table.rows(nets))
        self.done_rows = 0
        self.rates: dict[str, Rates] = {}  # net -> measured this call
        self._scored: dict[tuple[str, str], np.ndarray] = {}
        self.classes: dict[int, WordClasses] = {}  # c -> found (or cut) in this call
        self.background: BackgroundClusters | None = None  # the class rows' clusterings in a second process
        self.beside: str | None = None  # the net training in a process of its own meanwhile (`net_lane`)
        self.ngrams: dict[str, LanguageModel] = {}  # n-gram rows built in this call (mixing partners)
        self.shapes: dict[str, dict] = {}  # net -> the ModelConfig fields it trains with apart from its preset
        self.shape_notes: dict[str, str] = {}  # net -> why it trains in another shape than its preset's
        self.shape_choice: dict[str, dict] = {}  # net -> the shapes measured for it and the one chosen (shape_plan)

    def record_peak_memory(self) -> None:
        """The call's peak resident memory so far (this process, and its finished children: the background
        clusterings), in the results' call record for the report (issue 47: memory at a natural vocabulary)."""
        import resource

        mib = {who: round(resource.getrusage(which).ru_maxrss / 1024)  # Linux reports KiB
               for who, which in (("process", resource.RUSAGE_SELF), ("children", resource.RUSAGE_CHILDREN))}
        self.results.call["peak_memory_mib"] = mib
        self.results.save()

    def net_options(self, net: str) -> dict:
        """The results key of a net's rows: the call's options, and its shape when not the preset's."""
        shape = self.shapes.get(net) or {}
        return self.options | ({"shape": shape} if shape else {})

    def vocabulary_options(self) -> dict:
        """min_count / max_vocab / heldout for a net's run (its corpus is the one the n-grams load)."""
        return {k: self.corpus_options[k] for k in ("min_count", "max_vocab", "heldout")
                if self.corpus_options.get(k) is not None}

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

    def device_name(self) -> str:
        from nnlm.neural.run.run_config import pick_device

        return str(pick_device(self.device))

    def scored(self, key: str, model: LanguageModel, split: str) -> np.ndarray:
        """log P of every token of a split, computed once per model and split."""
        if (key, split) not in self._scored:
            self._scored[key, split] = split_log_probs(model, self.corpus, split)
        return self._scored[key, split]

    def keep_scores(self, key: str, split: str, log_probs: np.ndarray) -> None:
        """log P of a split under a model, computed elsewhere on the same path (a run's best validation)."""
        self._scored[key, split] = log_probs

    def kept_valid_scores(self, key: str, run_dir: Path) -> np.ndarray | None:
        """valid's log P under a trained net, kept by its run beside its best weights (nnlm.neural.run.checkpoint:
        these weights' scores, bit for bit), now kept here for `key` too; None if the run kept none for them."""
        from nnlm.neural.run.checkpoint import kept_valid_scores

        if (scores := kept_valid_scores(run_dir, len(self.corpus.valid))) is not None:
            self.keep_scores(key, "valid", scores)
        return scores

    def cached_scores(self, key: str, split: str) -> np.ndarray | None:
        """log P of a split under a model already scored in this call, else None (nothing is computed)."""
        return self._scored.get((key, split))

    def evaluate(self, key: str, model: LanguageModel, splits: tuple[str, ...] = SPLITS) -> dict[str, float]:
        return {s: perplexity_from_log_probs(self.scored(key, model, s)) for s in splits}
