"""`nnlm eval`: a trained run's perplexities on its own corpus, as one result object."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnlm.errors import NnlmError
from nnlm.neural.net.presets import run_name

SPLITS = ("train", "valid", "test")


def parse_splits(text: str) -> list[str]:
    """'valid,test' -> ['valid', 'test'], in the order given, each once."""
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    wrong = [n for n in names if n not in SPLITS]
    if wrong or not names:
        raise NnlmError(f"--split takes a comma-separated list of train, valid, test; got {text!r}")
    return names


@dataclass
class RunEvaluation:
    run: str
    name: str                    # the preset, or the shape when the run has its own n/h/m/direct
    preset: str
    corpus: str
    vocab: int
    model: dict[str, Any]        # the ModelConfig
    parameters: int
    perplexity: dict[str, float]
    tokens: int
    seconds: float
    valid_log_z: tuple[float, float] | None  # mean, std (self-normalization)


def evaluate_run(run_dir: str | Path, splits: list[str], device: str = "cpu", log_z: bool = False,
                 precision: str = "fp32") -> RunEvaluation:
    """Perplexity of the run's model on `splits` of the corpus it was trained on; log Z on valid when
    asked, or always for a run trained with a sampled loss (how near self-normalized it is).
    `precision="bf16"`: the output layer as one bf16 product with fp32 accumulation and log-sum-exp,
    still normalized over all of V (what training's per-epoch validation uses), several times faster
    on CPUs with bf16 units; fp32 is the reference every reported figure uses."""
    from nnlm.data.provenance import load_recorded_corpus
    from nnlm.lm import perplexity
    from nnlm.neural.lm.scoring import Scoring
    from nnlm.neural.run.checkpoint import load_neural, read_run

    lm = load_neural(run_dir, device=device, scoring=Scoring(precision=precision))
    run, _, config = read_run(Path(run_dir))
    corpus = load_recorded_corpus(run)
    recurrent = config.recurrent != "none"
    if recurrent and log_z:
        raise NnlmError("--log-z reads a feed-forward net's unnormalized scores; a recurrent net is scored "
                        "normalized only")
    want_log_z = not recurrent and (log_z or run.get("loss", "full") != "full")
    started = time.perf_counter()
    ppl, stats = {}, None
    for split in splits:
        if want_log_z and split == "valid" and lm.scoring.exact:  # (bf16: log Z in fp32, by the pass below)
            ppl[split], stats = perplexity_and_log_z(lm, corpus, split)
        else:
            ppl[split] = perplexity(lm, corpus, split)
    seconds = time.perf_counter() - started
    if want_log_z and stats is None:
        from nnlm.neural.net.sampled import log_partition_stats

        stats = log_partition_stats(lm, corpus, "valid")
    return RunEvaluation(str(run_dir), run_name(run["preset"], config), run["preset"], corpus.name,
                         len(corpus.vocab), config.to_dict(), config.parameter_count(), ppl,
                         sum(len(corpus.split(s)) for s in splits), seconds, stats)


def perplexity_and_log_z(lm, corpus, split: str) -> tuple[float, tuple[float, float] | None]:
    """Perplexity of `split` and the mean and standard deviation of its log Z, from one pass: the log Z
    that `lm.log_prob_and_log_z` computed on the way (None if the pass computed none: a second pass then)."""
    from nnlm.lm import perplexity_from_log_probs, split_log_probs

    log_zs = []

    def log_prob(contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        log_p, log_z = lm.log_prob_and_log_z(contexts, targets)
        log_zs.append(log_z)
        return log_p

    ppl = perplexity_from_log_probs(split_log_probs(lm, corpus, split, log_prob=log_prob))
    if not log_zs or any(z is None for z in log_zs):
        return ppl, None
    values = np.concatenate(log_zs)
    return ppl, (float(values.mean()), float(values.std()))
