"""The LSTM reference (nnlm.reproduce.lstm_reference): its split scoring predicts every token once, in order, as
a one-row pass does, with distributions that sum to 1; training within a budget lowers validation perplexity and
is bounded by it."""
from __future__ import annotations

import numpy as np
import torch

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary
from nnlm.reproduce import lstm_reference as ref

V = 40


def small_corpus(tokens: int = 6000) -> Corpus:
    vocab = Vocabulary(tuple(["<unk>", "<p>"] + [f"w{i}" for i in range(2, V)]))
    rng = np.random.default_rng(0)
    ids = np.empty(tokens, dtype=np.int64)  # a second-order pattern a net can learn: w(i) = f(w(i-1)) mostly
    ids[0] = 2
    for i in range(1, tokens):
        ids[i] = (ids[i - 1] * 7 + 3) % (V - 2) + 2 if rng.random() < 0.8 else rng.integers(1, V)
    n = tokens // 5
    return Corpus("small", vocab, ids[:3 * n], ids[3 * n:4 * n], ids[4 * n:], pad_token="<p>")


def test_every_token_scored_once_in_order_and_normalised():
    torch.manual_seed(0)
    model = ref.TiedLstm(V, ref.LstmRecipe(size=16, layers=2))
    ids = np.random.default_rng(1).integers(0, V, 257)
    got = ref.split_log_probs(model, ids, start=1)
    assert got.shape == (257,) and np.all(got < 0)
    model.eval()
    length = -(-len(ids) // ref.EVAL_ROWS)
    with torch.no_grad():  # row r alone, from a zero state after the start token
        for r in range(ref.EVAL_ROWS):
            part = ids[r * length:(r + 1) * length]
            inputs = torch.tensor(np.concatenate([[1], part[:-1]])).view(-1, 1)
            log_probs, _ = model(inputs, None)
            assert torch.allclose(log_probs.exp().sum(-1), torch.ones(len(part), 1, dtype=log_probs.dtype), atol=1e-5)
            want = log_probs[:, 0].gather(1, torch.tensor(part).view(-1, 1)).view(-1).numpy()
            np.testing.assert_allclose(got[r * length:(r + 1) * length], want, rtol=0, atol=1e-5)


def test_training_within_a_budget_learns():
    corpus = small_corpus()
    recipe = ref.LstmRecipe(size=32, layers=1, dropout=0.0, batch=8, bptt=20, lr=5.0)
    untrained = ref.train_lstm_reference(corpus, 0.0, recipe, threads=1)
    assert untrained.epochs == 0 and untrained.valid > V * 0.8  # about uniform
    seen = []
    first = ref.train_lstm_reference(corpus, 2.0, recipe, threads=1, progress=lambda *a: seen.append(a))
    assert first.epochs > 1 and seen and first.valid < untrained.valid / 2 and first.test < untrained.test / 2
    assert first.parameters == V * 32 + V + 4 * 32 * (32 + 32 + 2)  # tied: the embedding counted once


def test_a_cut_run_continues_where_it_stopped_and_ends_at_its_epochs():
    """A budget that cuts the run leaves a checkpoint; continuing it counts on its epochs, tokens and seconds, and
    training ends at the recipe's epochs (finished), not at the budget."""
    from dataclasses import replace

    corpus = small_corpus()
    recipe = ref.LstmRecipe(size=16, layers=1, dropout=0.0, batch=8, bptt=20, lr=5.0, epochs=10_000)
    saved = []
    cut = ref.train_lstm_reference(corpus, 0.3, recipe, threads=1, save=saved.append)
    assert saved and not cut.finished and cut.epochs > 0
    last = saved[-1]
    assert last.progress.trained == cut.train_tokens and last.best_weights is not None
    more = int(cut.epochs) + 2
    whole = ref.train_lstm_reference(corpus, 60.0, replace(recipe, epochs=more), threads=1, resume=last)
    assert whole.finished and whole.epochs == more and whole.train_tokens > cut.train_tokens
    assert whole.seconds >= cut.seconds and whole.valid <= cut.valid + 1e-9  # the best weights are kept across calls
