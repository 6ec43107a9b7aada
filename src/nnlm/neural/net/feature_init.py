"""Word rows initialized from, and held near, word classes (`--init-features exchange`).

On a small corpus the net must find which words behave alike from few occurrences of each, and
meanwhile memorizes word-specific contexts in the rows of the rarer words (docs/recipes.md: on
gen-500 the default fits train to 1.13x the source and valid to 1.6x). The exchange clustering of
the training text (nnlm.wordclasses.exchange, the class-based n-gram's too) finds such groups from bigram
counts in seconds. With it:

- every word's feature row C_w starts from its class's vector (one U(-INIT_SCALE, INIT_SCALE)
  vector per class, drawn from a generator seeded by the run's seed alone, so the global torch
  stream and every other initial weight are unchanged), and its output rows U_w and W_w from one
  row of its class (the class's first word's random row);
- the penalty (pull / 2) sum_w ||R_w - mean of R over w's class||^2 over R = C, U, W is added to
  each batch's mean loss, as its gradient pull (R_w - class mean) (the mean's own dependence on R_w
  cancels in the sum), so a word leaves its class's rows only as far as its own evidence carries it:
  shrinkage towards the class, the soft version of the class n-gram's P(c | h) P(w | c). b_w stays
  free (it carries P(w | c)).

With `--class-context` the net also gets one learned feature vector for the pair of classes of the last
two context words (`ModelConfig.class_context`): the class trigram's history, which a tanh layer over sums of
word features learns poorly from little text (docs/recipes.md, "Class-pair features, classes refined by
trigrams").

`--init-features auto` (the default) chooses: where the run could tie its rows (the full softmax's NPLM with
n >= 3, in one process), the exchange class trigram and the word Kneser-Ney trigram are counted from train
(seconds) and compared on validation; if the classes explain the text better by the margin AUTO_MARGIN, the
run takes tied rows with the class-pair features, K the best of a few counts near sqrt(|V|) by the class
trigram's validation perplexity, and the classes refined by trigrams (`--feature-clustering trigram`,
nnlm.wordclasses.trigram) where their class trigram is the better on validation; otherwise random rows.
Real text (Brown, its news and learned categories) stays random; text drawn from a class source takes the
classes (docs/recipes.md).

A resumed run recomputes the classes (the clustering is a function of the training text and K) and
puts the penalty back; its rows come from the checkpoint.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from nnlm.neural.run.config import FEATURE_CLUSTERINGS, INIT_FEATURES
from nnlm.progress import show_progress

__all__ = ["AUTO_MARGIN", "FEATURE_CLUSTERINGS", "INIT_FEATURES", "INIT_SCALE", "ClassPull", "add_class_pull",
           "chosen_clustering", "class_evidence", "classes_pay", "feature_classes", "tie_rows_to_classes"]

INIT_SCALE = 0.5  # the class vectors' range (the paper's random C: +-0.1); 0.5 beat 0.1 on gen-500 / gen-2k
TIED = ("C", "U", "W")  # the per-word rows that start from and are pulled towards their class's
# --init-features auto takes the classes when the class trigram's valid perplexity is below this share of the word
# KN trigram's. Measured (docs/recipes.md): generated class text 0.32-0.44, Brown's news texts 1.13, Brown 1.06.
AUTO_MARGIN = 0.9


# where the classes pay, auto also tries these multiples of the default K (about sqrt(|V|)) and keeps the K whose
# class trigram is best on validation: the exchange clustering's local optima make that perplexity uneven in K
# (gen-2k: K 40 137.4, 44 129.8, 46 133.5, 48 134.7; docs/recipes.md)
AUTO_CLASS_SCALES = (0.8, 0.85, 0.9, 0.95, 1.05, 1.1, 1.2, 1.3)


def class_evidence(corpus, n_classes: int, limit: int, progress: bool = False) -> dict[str, float]:
    """How well exchange classes explain the text: the validation perplexities of the class trigram (KN over
    the classes, P(w | c) counted) and of the word KN trigram, both counted from train (built by
    nnlm.loading.build_count_model and compared as LanguageModels: no n-gram internals here). Where the classes
    pay at K = `n_classes`: the class count among the AUTO_CLASS_SCALES multiples (at most `limit`) whose
    class trigram is best on validation, and that class trigram on the same classes refined by trigrams
    (`refined_class_trigram_valid`; `feature_clustering` says which the run takes). `progress`: a line
    on stderr for each model fitted (on a large text each clustering takes minutes)."""
    from nnlm.lm import perplexity
    from nnlm.loading import build_count_model
    from nnlm.wordclasses.exchange import WordClasses

    with show_progress(None, "--init-features auto: trigrams fitted", unit="model", enabled=progress,
                       scaled=False) as line:
        def fitted(what: str, valid: float) -> float:
            line.note(f"{what}: valid perplexity {valid:.1f}")
            line.update(1)
            return valid

        def class_trigram(k: int, classes: np.ndarray, what: str) -> float:
            model = build_count_model("class", corpus, 3, classes=k, clusters=WordClasses(classes, k), progress=False)
            return fitted(what, perplexity(model, corpus, "valid"))

        def exchange_trigram(k: int) -> float:
            return class_trigram(k, feature_classes(corpus.train, len(corpus.vocab), k), f"class trigram, K = {k}")

        word_trigram = build_count_model("kn", corpus, 3)
        words = fitted("word KN trigram", perplexity(word_trigram, corpus, "valid"))
        tried = {n_classes: exchange_trigram(n_classes)}
        if tried[n_classes] >= AUTO_MARGIN * words:
            return {"classes": n_classes, "class_trigram_valid": tried[n_classes], "kn_trigram_valid": words,
                    "classes_tried": 1}
        for k in sorted({min(limit, max(2, round(scale * n_classes))) for scale in AUTO_CLASS_SCALES} - set(tried)):
            tried[k] = exchange_trigram(k)
        best = min(tried, key=tried.get)
        evidence = {"classes": best, "class_trigram_valid": tried[best], "kn_trigram_valid": words,
                    "classes_tried": len(tried)}
        from nnlm.wordclasses.trigram import MAX_CLASSES  # (here: where the classes pay)

        if best <= MAX_CLASSES:  # (the refinement's dense K^3 table)
            refined = feature_classes(corpus.train, len(corpus.vocab), best, "trigram")  # (from best's remembered ones)
            evidence["refined_class_trigram_valid"] = class_trigram(best, refined, f"refined class trigram, K = {best}")
        return evidence


def chosen_clustering(evidence: dict[str, float]) -> str:
    """The clustering auto takes: the trigram-refined classes where their class trigram is the better on
    validation (text whose classes act through pairs), else the exchange classes."""
    refined = evidence.get("refined_class_trigram_valid")
    return "trigram" if refined is not None and refined < evidence["class_trigram_valid"] else "exchange"


def classes_pay(evidence: dict[str, float]) -> bool:
    """Whether `--init-features auto` takes the classes (module docstring)."""
    return evidence["class_trigram_valid"] < AUTO_MARGIN * evidence["kn_trigram_valid"]


_CLUSTERED: dict[tuple[str, int, int, str], np.ndarray] = {}  # feature_classes' results in this process
_CLUSTERED_MAX = 16


def feature_classes(train: np.ndarray, vocab_size: int, n_classes: int, clustering: str = "exchange") -> np.ndarray:
    """classes[w] in 0 .. K-1: the exchange clustering of the training text; `clustering` "trigram": those
    classes refined by the class trigram's likelihood (nnlm.wordclasses.trigram).

    Both are deterministic, and a new run asks for the same classes twice in one process (auto's evidence,
    then the run's setup: ~8 s of clustering on gen-2k), so the results are remembered by the text's digest."""
    key = (hashlib.blake2b(np.ascontiguousarray(train).view(np.uint8)).hexdigest(), vocab_size, n_classes, clustering)
    if key not in _CLUSTERED:
        if clustering == "trigram":
            from nnlm.wordclasses.trigram import refine_by_trigrams

            classes = refine_by_trigrams(train, feature_classes(train, vocab_size, n_classes), n_classes)[0]
        else:
            from nnlm.neural.net.output_clustering import output_classes

            classes = output_classes("exchange", train, vocab_size, n_classes)
        if len(_CLUSTERED) >= _CLUSTERED_MAX:
            _CLUSTERED.pop(next(iter(_CLUSTERED)))
        _CLUSTERED[key] = classes
    return _CLUSTERED[key].copy()


def tied_parameters(net: torch.nn.Module) -> list[torch.nn.Parameter]:
    """C, U, W (those the net has; a net with tied output weights has U = C, counted once)."""
    found = [p for p in (getattr(net, name, None) for name in TIED) if p is not None]
    return [p for i, p in enumerate(found) if all(p is not q for q in found[:i])]


def tie_rows_to_classes(net: torch.nn.Module, classes: np.ndarray, seed: int, scale: float = INIT_SCALE) -> None:
    """C_w := its class's random vector; U_w, W_w := the row of the class's first word (lowest id)."""
    cls = torch.as_tensor(classes, dtype=torch.long, device=net.C.device)
    n_classes = int(cls.max()) + 1
    generator = torch.Generator().manual_seed(seed)
    vectors = (torch.rand(n_classes, net.C.shape[1], generator=generator, dtype=torch.float64) * 2 - 1) * scale
    first = torch.full((n_classes,), len(cls), dtype=torch.long, device=cls.device)
    first.scatter_reduce_(0, cls, torch.arange(len(cls), device=cls.device), reduce="amin")
    with torch.no_grad():
        net.C.copy_(vectors.to(net.C)[cls])
        for p in tied_parameters(net)[1:]:
            p.copy_(p[first[cls]].clone())


class ClassPull:
    """The gradient of the penalty (pull / 2) x the within-class sum of squares of a [|V|, D] matrix of
    per-word rows R: pull (R_w - mean of R over w's class) for every row (the mean's own dependence on
    R_w left out, as the module docstring says)."""

    def __init__(self, classes: np.ndarray, pull: float, device: torch.device) -> None:
        self.cls = torch.as_tensor(classes, dtype=torch.long, device=device)
        self.n_classes = int(self.cls.max()) + 1
        self.sizes = torch.bincount(self.cls, minlength=self.n_classes)[:, None]
        self.pull = pull

    def class_means(self, rows: torch.Tensor) -> torch.Tensor:
        """[|V|, D]: each row's class's mean row."""
        means = torch.zeros(self.n_classes, rows.shape[1], dtype=rows.dtype, device=rows.device)
        means.index_add_(0, self.cls, rows).div_(self.sizes.to(rows))
        return torch.index_select(means, 0, self.cls)

    def gradient(self, rows: torch.Tensor) -> torch.Tensor:
        """pull (rows - their class means), in one fresh [|V|, D] tensor."""
        return self.class_means(rows).sub_(rows).mul_(-self.pull)  # (= pull (rows - means), to the bit)

    def fold_into_update(self, rows: torch.Tensor, shrink: float, step: float) -> torch.Tensor | None:
        """Ahead of the update rows <- shrink rows + step grad, make it rows <- shrink rows + step (grad + the
        pull's gradient at today's rows): move the rows by (step / shrink) x that gradient now, as
        rows (1 + c) - c means with c = pull step / shrink (a third of the passes of adding the gradient; the
        same up to rounding). Where shrink is not positive nothing is moved and the gradient is returned, to
        add (times step) after the update; else None."""
        if shrink <= 0:
            return self.gradient(rows)
        c = self.pull * step / shrink
        means = self.class_means(rows)
        rows.mul_(1.0 + c).sub_(means, alpha=c)
        return None


def add_class_pull(net: torch.nn.Module, classes: np.ndarray, pull: float) -> None:
    """Add the `ClassPull` to the gradient of every row R_w of C, U, W by gradient hooks, on top of the
    batch's mean loss (the kept output layer's runs take it in their update instead: `PaperSGD.pull_towards`)."""
    if pull <= 0:
        return
    class_pull = ClassPull(classes, pull, net.C.device)

    def hook_for(param: torch.nn.Parameter):
        def hook(grad: torch.Tensor) -> torch.Tensor:
            return grad + class_pull.gradient(param.detach())
        return hook

    for param in tied_parameters(net):
        param.register_hook(hook_for(param))
