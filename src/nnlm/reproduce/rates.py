"""Measured speeds of a net on this machine, now: exact scoring and training, in tokens per second.

Both are measured with the thread count the work itself will use (`ThreadGovernor`): on a busy
2-core machine torch's 2 threads score 3x slower than one thread, and a rate measured at the wrong
count made the first budget reserve every minute for scoring. Untrained nets of the net's shape
are timed (the cost does not depend on the weights); torch's random state is left as it was."""
from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from nnlm.data.corpus import Corpus
from nnlm.lm import contexts
from nnlm.reproduce.planner import Rates, finite
from nnlm.threads import govern

SCORE_TOKENS = 2048  # validation tokens scored to time the exact softmax
TRAIN_BATCHES = 12  # training batches timed (after 2 warm-up batches)
RECORDED_TO = 0.1  # seconds: the resolution of the times in a run's per-epoch records


def scoring_rate(net: str, corpus: Corpus, device: str) -> float:
    """Tokens per second of exact scoring, on a slice of the validation split."""
    from nnlm.neural.model import NPLM, NeuralLM
    from nnlm.neural.train import model_config

    config = model_config({"preset": net}, len(corpus.vocab))
    with torch.random.fork_rng(devices=[]):
        lm = NeuralLM(NPLM(config), corpus.vocab, corpus.pad_token, device=device)
    valid = corpus.split("valid")
    n = min(len(valid), SCORE_TOKENS)
    start = corpus.split_offset("valid")
    ctx = contexts(corpus.stream(), np.arange(start, start + n), config.order - 1, corpus.pad_id)
    lm.log_prob(ctx[:64], valid[:64].astype(np.int64))  # warm-up
    t0 = time.perf_counter()
    lm.log_prob(ctx, valid[:n].astype(np.int64))
    return finite(n / (time.perf_counter() - t0))


def training_rate(net: str, corpus: Corpus, device: str, loss: str, samples: int | None) -> float:
    """Training examples per second: a few batches of the trainer's own step (its loss, optimizer, batch size)."""
    from nnlm.neural import train as tr
    from nnlm.neural.model import NPLM
    from nnlm.neural.sampled import DEFAULT_SAMPLES

    dev = torch.device(device)
    run = dict(tr.RUN_DEFAULTS) | {"preset": net, "loss": loss, "recipe": tr.default_recipe(loss, net),
                                    "samples": samples or min(DEFAULT_SAMPLES, len(corpus.vocab))}
    recipe = tr.RECIPES[run["recipe"]]
    bf16 = recipe.bf16 and tr.bf16_is_fast(dev)
    with torch.random.fork_rng(devices=[]):
        model = NPLM(tr.model_config(run, len(corpus.vocab)), dropout_x=recipe.dropout_x,
                     dropout_h=recipe.dropout_h).to(dev)
        optimizer = tr.build_optimizer(model, recipe, recipe.lr)
        loss_fn, optimizer = tr.build_loss(run, model, corpus, dev, optimizer, recipe.lr)
        k, batch = model.config.order - 1, run["batch_size"]
        padded = tr.padded_stream(corpus.train[: batch * (TRAIN_BATCHES + 2)], k, corpus.pad_id, dev)
        seen, t0 = 0, 0.0
        for i, (ctx, targets) in enumerate(tr.epoch_batches(padded, k, batch, 0, 0)):
            if i == 2:
                t0, seen = time.perf_counter(), 0
            tr.update(model, optimizer, loss_fn(model, ctx, targets, bf16), seen, len(targets))
            seen += len(targets)
        return finite(seen / (time.perf_counter() - t0)) if t0 else 1e-9


def measure(net: str, corpus: Corpus, device: str, threads: int | None, loss: str, samples: int | None) -> Rates:
    """Both rates at the thread count the governor picks now (or the user's --threads)."""
    govern(requested=threads, device=device)
    return Rates(train=training_rate(net, corpus, device, loss, samples), score=scoring_rate(net, corpus, device))


def from_history(history: list[dict], valid_tokens: int, last: int = 3) -> Rates | None:
    """A run's own speeds, from the per-epoch records of its last `last` epochs: training examples per
    second between validations, and validation tokens per second. These are what the run really did
    (Hogwild workers, the per-position scoring tables, the load of the hour), where `measure` times one
    process on a slice; None before the first validation. A run starts at 0 examples and 0 seconds."""
    rows = [{"examples": 0, "elapsed_seconds": 0.0}] + [
        h for h in history if h.get("valid_seconds") is not None and h.get("elapsed_seconds") is not None]
    if len(rows) < 2:
        return None
    pairs = list(itertools.pairwise(rows))[-last:]
    examples = sum(b["examples"] - a["examples"] for a, b in pairs)
    if examples <= 0:
        return None
    tick = RECORDED_TO / 2 * len(pairs)  # the records keep tenths of a second: a quicker epoch reads as 0
    training = max(sum(b["elapsed_seconds"] - a["elapsed_seconds"] - b["valid_seconds"] for a, b in pairs), tick)
    validating = max(sum(b["valid_seconds"] for _, b in pairs), tick)
    return Rates(train=finite(examples / training), score=finite(len(pairs) * valid_tokens / validating))
