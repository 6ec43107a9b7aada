"""Measured speeds of a net on this machine, now: exact scoring and training, in tokens per second.

Both are measured with the thread count the work itself will use (`ThreadGovernor`): on a busy
2-core machine torch's 2 threads score 3x slower than one thread, and a rate measured at the wrong
count made the first budget reserve every minute for scoring. Untrained nets of the net's shape
are timed (the cost does not depend on the weights); torch's random state is left as it was.

Scoring is timed on the path the long passes will take (issue 32): a split scored in one pass builds
the direct connections' per-position tables when they pay and fit in memory (nnlm.neural.lm.direct_tables:
(n-1) |V|^2 floats, 6.5 GB for the AP net at |V| = 18k, 270 GB at 117k), else it takes the plain exact
product. A plain rate planned for a pass the tables score made the plan 2x too slow; a tables rate
where they cannot be built would be 8x too fast. So the path is decided as the pass itself decides it,
and on the tables path their build (once per pass) is timed too and spread over the split's tokens."""
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


def scoring_path(lm, tokens: int) -> str:
    """"tables" when a pass over `tokens` tokens builds the per-position tables (the test the pass
    itself makes, memory included), else "plain"."""
    return "tables" if lm.builds_tables(tokens) else "plain"


def time_plain(lm, ctx: np.ndarray, targets: np.ndarray) -> float:
    """Tokens per second of the plain exact product (a warm-up block first)."""
    lm.log_prob(ctx[:64], targets[:64])
    t0 = time.perf_counter()
    lm.log_prob(ctx, targets)
    return finite(len(targets) / (time.perf_counter() - t0))


def time_tables(lm, ctx: np.ndarray, targets: np.ndarray, tokens: int) -> float:
    """Tokens per second of a pass of `tokens` tokens on the tables path: their build (timed once, as the
    pass pays it once) plus the slice's scoring rate, over the pass's tokens."""
    t0 = time.perf_counter()
    with lm.long_pass(tokens):
        build = time.perf_counter() - t0
        lm.log_prob(ctx[:64], targets[:64])
        t1 = time.perf_counter()
        lm.log_prob(ctx, targets)
        per_token = (time.perf_counter() - t1) / len(targets)
    return finite(tokens / (build + tokens * per_token))


def new_net(config, corpus: Corpus, dropout_x: float = 0.0, dropout_h: float = 0.0):
    """A fresh net of `config` to time (a class-factored one with frequency classes of train: instant, and
    the cost of a step does not depend on which words share a class)."""
    from nnlm.neural.net.nets import build_net
    from nnlm.neural.net.output_clustering import frequency_classes

    net = build_net(config, dropout_x, dropout_h)
    if config.output_classes:
        net.set_classes(frequency_classes(corpus.train, len(corpus.vocab), config.output_classes))
    return net


def scoring_rate(net: str, corpus: Corpus, device: str, shape: dict | None = None) -> tuple[float, str]:
    """(tokens per second, path) of exact scoring of a pass over the validation split, on the path that
    pass will take, timed on a slice of it."""
    from nnlm.neural.net.nets import language_model
    from nnlm.neural.run.run_config import model_config

    config = model_config({"preset": net} | (shape or {}), len(corpus.vocab))
    with torch.random.fork_rng(devices=[]):
        lm = language_model(new_net(config, corpus), corpus.vocab, corpus.pad_token, device=device)
    valid = corpus.split("valid")
    n = min(len(valid), SCORE_TOKENS)
    if config.recurrent != "none":  # a recurrent net reads a split as streams: timed on the slice so read
        from nnlm.lm import stream_log_probs

        t0 = time.perf_counter()
        stream_log_probs(lm, valid[:n].astype(np.int64))
        return finite(n / (time.perf_counter() - t0)), "stream"
    start = corpus.split_offset("valid")
    ctx = contexts(corpus.stream(), np.arange(start, start + n), config.order - 1, corpus.pad_id)
    targets = valid[:n].astype(np.int64)
    path = scoring_path(lm, len(valid))
    rate = time_tables(lm, ctx, targets, len(valid)) if path == "tables" else time_plain(lm, ctx, targets)
    return rate, path


def training_rate(net: str, corpus: Corpus, device: str, loss: str, samples: int | None,
                  shape: dict | None = None) -> float:
    """Training examples per second: a few batches of the trainer's own step (its loss, optimizer, batch size)."""
    from nnlm.neural.run.batches import epoch_batches, padded_stream, update
    from nnlm.neural.run.config import DEFAULT_SAMPLES, RUN_DEFAULTS
    from nnlm.neural.run.pipeline import build_loss
    from nnlm.neural.run.recipes import RECIPES, default_recipe
    from nnlm.neural.run.run_config import bf16_is_fast, model_config

    dev = torch.device(device)
    loss = (shape or {}).get("loss", loss)  # a shape may train another loss (the class output: the full softmax)
    run = dict(RUN_DEFAULTS) | {"preset": net, "loss": loss, "recipe": default_recipe(loss, net),
                                    "samples": samples or min(DEFAULT_SAMPLES, len(corpus.vocab))} | (shape or {})
    recipe = RECIPES[run["recipe"]]
    bf16 = recipe.bf16 and bf16_is_fast(dev)
    with torch.random.fork_rng(devices=[]):
        model = new_net(model_config(run, len(corpus.vocab)), corpus, recipe.dropout_x, recipe.dropout_h).to(dev)
        loss_fn, optimizer = build_loss(run, model, corpus, dev, recipe.lr)
        k, batch = model.config.order - 1, run["batch_size"]
        if model.config.recurrent != "none":
            return recurrent_training_rate(model, loss_fn, optimizer, corpus, run["loss"], batch, bf16, dev)
        padded = padded_stream(corpus.train[: batch * (TRAIN_BATCHES + 2)], k, corpus.pad_id, dev)
        seen, t0 = 0, 0.0
        for i, (ctx, targets) in enumerate(epoch_batches(padded, k, batch, 0, 0)):
            if i == 2:
                t0, seen = time.perf_counter(), 0
            update(model, optimizer, loss_fn(model, ctx, targets, bf16), seen, len(targets))
            seen += len(targets)
        return finite(seen / (time.perf_counter() - t0)) if t0 else 1e-9


def measure(net: str, corpus: Corpus, device: str, threads: int | None, loss: str, samples: int | None,
            shape: dict | None = None) -> Rates:
    """Both rates at the thread count the governor picks now (or the user's --threads), for the net's
    preset with `shape`'s ModelConfig fields over it (the configuration that will train and score)."""
    govern(requested=threads, device=device)
    train = training_rate(net, corpus, device, loss, samples, shape)
    score, path = scoring_rate(net, corpus, device, shape)
    return Rates(train=train, score=score, path=path)


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
    return Rates(train=finite(examples / training), score=finite(len(pairs) * valid_tokens / validating), path="run")


def recurrent_training_rate(net, loss_fn, optimizer, corpus: Corpus, loss: str, batch: int, bf16: bool,
                            device: torch.device) -> float:
    """Training tokens per second of a recurrent net: a few windows of its trainer's streams (the same step)."""
    from nnlm.neural.run.recurrent_trainer import clipped_update, streams, window_loss

    k = net.config.order - 1
    rows = max(1, -(-batch // k))
    inputs, targets, resets = streams(corpus.train[: rows * k * (TRAIN_BATCHES + 2)], corpus.pad_id, rows, device)
    carry, seen, t0 = None, 0, 0.0
    for i in range(TRAIN_BATCHES + 2):
        if i == 2:
            t0, seen = time.perf_counter(), 0
        window = slice(i * k, (i + 1) * k)
        value, carry = window_loss(net, loss_fn, loss, inputs[:, window], targets[:, window], resets[:, window],
                                   carry, bf16)
        carry = carry.detach()
        clipped_update(net, optimizer, value, seen, rows * k)
        seen += rows * k
    return finite(seen / (time.perf_counter() - t0)) if t0 else 1e-9
