"""The row-wise (lazy) Adam of the class-factored output layer (nnlm.neural.net.class_output.ClassRowLoss with
nnlm.neural.net.sampled.RowAdam): dense Adam on the rows a batch touched, nothing elsewhere; training with
it lowers the validation perplexity of a normalized model; a resumed run continues exactly."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.lm import perplexity
from nnlm.loading import load
from nnlm.neural.lm.class_lm import ClassNeuralLM
from nnlm.neural.net.class_output import ClassNPLM, ClassRowLoss, class_output_loss
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.sampled import RowAdam
from nnlm.neural.run import train as tr
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.checkpoint import load_tensors
from nnlm.neural.run.optim import Adam, PaperSGD
from nnlm.neural.run.pipeline import full_loss
from nnlm.neural.run.recipes import RECIPES

TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 32, "threads": 1, "output_layer": "classes",
        "min_count": 1}


def class_net(v: int, k: int, h: int, direct: bool, seed: int) -> tuple[ClassNPLM, np.ndarray]:
    """A small float32 class-factored net with a random class map (every class non-empty)."""
    rng = np.random.default_rng(seed)
    classes = np.concatenate([np.arange(k), rng.integers(0, k, v - k)])
    rng.shuffle(classes)
    torch.manual_seed(seed)
    net = ClassNPLM(ModelConfig(vocab_size=v, order=3, hidden=h, features=3, direct=direct, output_classes=k))
    net.set_classes(classes)
    return net, classes


@settings(max_examples=25, deadline=None)
@given(v=st.integers(4, 60), data=st.data())
def test_a_first_step_is_dense_adam_on_the_touched_rows_and_leaves_the_others_bit_for_bit(v, data):
    """The targets come from some of the classes only: the b, W, U rows of those classes and the C rows
    of the context words take dense Adam's first step (weight decay included); every other row is bit for
    bit unchanged, and the dense parameters (H, d, the class rows) equal dense Adam's."""
    k = data.draw(st.integers(2, min(v, 8)))
    h, direct = data.draw(st.sampled_from([(4, True), (0, True), (4, False)]))
    net, classes = class_net(v, k, h, direct, data.draw(st.integers(0, 999)))
    ref = ClassNPLM(net.config)
    ref.load_state_dict(net.state_dict())
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    chosen = data.draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=k, unique=True))
    candidates = np.flatnonzero(np.isin(classes, chosen))
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    n = data.draw(st.integers(1, 20))
    contexts = torch.as_tensor(rng.integers(0, v, (n, 2)))
    targets = torch.as_tensor(rng.choice(candidates, n))

    loss = ClassRowLoss()
    mine, adam = RowAdam(net, loss, 0.01, 0.05), Adam(ref, 0.01, 0.05)
    value = loss(net, contexts, targets)
    value.backward()
    mine.step(0, n)
    dense = class_output_loss(ref, contexts, targets)
    assert float(value.detach()) == float(dense.detach())  # the same loss, only its gradient's path differs
    dense.backward()
    adam.step(0, n)

    present = torch.unique(torch.as_tensor(classes)[targets])
    touched = {"C": torch.unique(contexts)} | dict.fromkeys(
        ("b", "W", "U"), torch.nonzero(torch.isin(net.class_of_row, present))[:, 0])  # the present classes' rows
    for name, p in net.named_parameters():
        q = dict(ref.named_parameters())[name]
        if name not in touched:
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)
            continue
        used = touched[name]
        torch.testing.assert_close(p[used], q[used], rtol=1e-5, atol=1e-7, msg=name)
        untouched = torch.ones(len(p), dtype=torch.bool)
        untouched[used] = False
        assert torch.equal(p[untouched], before[name][untouched]), name


def test_the_loss_and_its_touched_gradients_are_the_dense_ones():
    """ClassRowLoss's loss equals class_output_loss bit for bit, and the gradients it leaves for the touched
    rows are the dense gradient's rows (float64); the dense gradient is zero outside them."""
    net, classes = class_net(30, 5, 4, True, 3)
    net = net.double()
    ref = ClassNPLM(net.config).double()
    ref.load_state_dict(net.state_dict())
    contexts, targets = torch.randint(0, 30, (12, 2)), torch.as_tensor(np.flatnonzero(classes < 3)[:12])
    loss = ClassRowLoss()
    value, dense = loss(net, contexts, targets), batch_loss(ref, contexts, targets, False)
    assert torch.equal(value, dense)
    value.backward()
    dense.backward()
    assert {name for name, _, _ in loss.touched} == {"C", "b", "W", "U"}
    assert all(getattr(net, name).grad is None for name in ("C", "b", "W", "U"))
    for name, rows, holder in loss.touched:
        grad = getattr(ref, name).grad
        torch.testing.assert_close(holder.grad, grad[rows], rtol=1e-12, atol=1e-14)
        outside = torch.ones(len(grad), dtype=torch.bool)
        outside[rows] = False
        assert not grad[outside].any(), name
    for name in ("H", "d", "class_b", "class_W", "class_U"):
        torch.testing.assert_close(getattr(net, name).grad, getattr(ref, name).grad, rtol=1e-12, atol=1e-14)


def test_full_loss_picks_the_row_optimizer_for_a_class_net_with_adam_only():
    net, _ = class_net(20, 4, 4, True, 0)
    loss, optimizer = full_loss(net, RECIPES["adaptive"], 1e-3)
    assert isinstance(loss, ClassRowLoss) and isinstance(optimizer, RowAdam) and optimizer.loss is loss
    loss, optimizer = full_loss(net, RECIPES["paper"], 1e-3)
    assert loss is batch_loss and isinstance(optimizer, PaperSGD)


def test_training_with_it_lowers_validation_perplexity_and_stays_normalized(random_corpus, tmp_path):
    """Two epochs of `nnlm train --output-layer classes` (the adaptive recipe: row-wise Adam): each
    validation is below the last and far below the uniform |V|; the trained distribution sums to 1."""
    state = tr.train(tmp_path / "run", {"corpus": str(tmp_path / "rand"), "epochs": 2} | TINY, progress=False,
                     log=lambda s: None)
    ppl = [h["valid_ppl"] for h in state["history"]]
    v = len(random_corpus.vocab)
    assert len(ppl) == 2 and ppl[1] < ppl[0] < v and ppl[1] < 0.5 * v
    model = load(tmp_path / "run")
    assert isinstance(model, ClassNeuralLM)
    assert perplexity(model, random_corpus, "valid") == pytest.approx(ppl[1], rel=1e-9)
    contexts = np.random.default_rng(0).integers(0, v, (20, 2))
    np.testing.assert_allclose(model.distribution(contexts).sum(axis=1), 1.0, rtol=0, atol=1e-9)
    assert isinstance(model.vocab, Vocabulary)


def final_tensors(run) -> dict[str, torch.Tensor]:
    """The last checkpoint's tensors (weights, optimizer state, RNG) of a run directory."""
    state = json.loads((run / "state.json").read_text())
    return load_tensors(run / state["tensors"])[0]


def test_a_run_stopped_after_its_first_batch_resumes_exactly(random_corpus, tmp_path):
    """Stopped by a zero time budget after one batch, then resumed to 2 epochs: the checkpoint (weights, the
    row-wise Adam's moments and step count, RNG) is bit for bit the uninterrupted run's."""
    requested = {"corpus": str(tmp_path / "rand")} | TINY
    tr.train(tmp_path / "whole", requested | {"epochs": 2}, progress=False, log=lambda s: None)
    first = tr.train(tmp_path / "cut", requested | {"epochs": 2, "time_budget": 0.0}, progress=False,
                     log=lambda s: None)
    assert (first["epoch"], first["step"]) == (0, 1)
    cut = final_tensors(tmp_path / "cut")
    assert int(cut["optim.t"]) == 1 and bool(cut["optim.m.W"].any())
    tr.train(tmp_path / "cut", {"epochs": 2, "time_budget": None}, resume=True, progress=False, log=lambda s: None)
    whole, resumed = final_tensors(tmp_path / "whole"), final_tensors(tmp_path / "cut")
    assert whole.keys() == resumed.keys() and {"optim.m.C", "optim.v.U", "optim.t"} <= whole.keys()
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), name


def test_ddp_and_hogwild_continue_a_run_the_row_optimizer_started(random_corpus, tmp_path):
    """The row-wise Adam's checkpoint is Adam's (same tensor names): a single-process epoch, resumed by ddp
    (dense Adam: DistributedDataParallel sums dense gradients), then by Hogwild (row-wise Adam per worker)."""
    from nnlm.neural.parallel.ranks import train_parallel

    run, quiet = tmp_path / "run", (lambda s: None)
    tr.train(run, {"corpus": str(tmp_path / "rand"), "epochs": 1} | TINY, progress=False, log=quiet)
    state = train_parallel(run, {"epochs": 2}, "ddp", 2, resume=True, progress=False, log=quiet, timeout=60.0)
    assert state["epoch"] == 2
    state = train_parallel(run, {"epochs": 3}, "hogwild", 2, resume=True, progress=False, log=quiet)
    assert state["epoch"] == 3 and state["best"]["valid_ppl"] < 0.5 * len(random_corpus.vocab)
