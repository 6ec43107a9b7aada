"""RowAdam's exact rule (--row-decay exact, nnlm.neural.net.sampled.RowAdam): the row-wise step equals the dense
step of the same rule -- dense AdamW (weight decay and moments on every row, every step) with the Adam step of
the rows a batch did not touch dropped -- for the sampled loss and the class-factored output layer, compiled
or with torch ops; with every row touched at every step it is dense AdamW; its state saves and resumes bit
for bit, in process and through `nnlm train --resume`; and the option is refused where it does not apply."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import tiny_nplm
from safetensors.torch import load_file

from nnlm.cli import main
from nnlm.neural.net.class_output import ClassNPLM, ClassRowLoss
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.sampled import ROWS, RowAdam, SampledLoss
from nnlm.neural.run import train as tr
from nnlm.neural.run.optim import Adam

V, LR, DECAY, BETAS, EPS = 13, 0.01, 0.3, (0.9, 0.999), 1e-8


def sampled_net(seed: int = 0):
    return tiny_nplm(3, True, v=V, n=3, m=2, seed=seed)


def class_net(seed: int = 0) -> ClassNPLM:
    torch.manual_seed(seed)
    net = ClassNPLM(ModelConfig(vocab_size=V, order=3, hidden=3, features=2, direct=True, output_classes=4)).double()
    net.set_classes(np.arange(V) % 4)
    return net


def make(kind: str, samples: int = 4, seed: int = 0):
    """A small float64 net and its row-touching loss."""
    if kind == "classes":
        return class_net(seed), ClassRowLoss()
    q = 1.0 / torch.arange(1, V + 1, dtype=torch.float64)
    return sampled_net(seed), SampledLoss("sampled", q / q.sum(), samples)


def batch(step: int, words: int = V) -> tuple[torch.Tensor, torch.Tensor]:
    """A few examples over the first `words` ids (some rows are left untouched at each step)."""
    rng = np.random.default_rng(step)
    return torch.as_tensor(rng.integers(0, words, (3, 2))), torch.as_tensor(rng.integers(0, words, 3))


def gradients(net, loss, contexts, targets, seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The batch's gradient as full-size tensors (rows scattered back), and the rows it touched per parameter."""
    torch.manual_seed(seed)  # the same sample drawn for every net
    net.zero_grad(set_to_none=True)
    loss(net, contexts, targets).backward()
    grads = {name: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
             for name, p in net.named_parameters()}
    touched = {}
    for name, rows, holder in loss.touched:
        grads[name] = torch.zeros_like(grads[name]).index_add_(0, rows, holder.grad)
        touched[name] = rows
    return grads, touched


def dense_rule_step(net, grads, touched, moments, t: int, lr: float) -> None:
    """The exact rule written densely: AdamW on every parameter, its Adam step masked to the touched rows
    of C, W, U, b."""
    b1, b2 = BETAS
    decayed = {id(p) for p in net.decayed_parameters()}
    with torch.no_grad():
        for name, p in net.named_parameters():
            m, v = moments[name]
            g = grads[name]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            if id(p) in decayed:
                p.mul_(1 - lr * DECAY)
            step = m / (1 - b1 ** t) / ((v / (1 - b2 ** t)).sqrt() + EPS)
            if name in ROWS:
                mask = torch.zeros(len(p), dtype=p.dtype)
                mask[touched.get(name, torch.zeros(0, dtype=torch.int64))] = 1.0
                step = step * mask.view((-1,) + (1,) * (p.dim() - 1))
            p.sub_(lr * step)


@pytest.mark.parametrize("kind", ["sampled", "classes"])
@pytest.mark.parametrize("fused", [True, False])
def test_the_row_wise_step_equals_the_dense_step_of_the_same_rule(kind, fused):
    net, loss = make(kind)
    ref, ref_loss = make(kind)
    optimizer = RowAdam(net, loss, LR, DECAY, fused=fused, exact_decay=True)
    moments = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in ref.named_parameters()}
    untouched_somewhere = False
    for t in range(1, 9):
        lr = LR if t <= 4 else LR * 0.5  # a new rate mid-way: the decay owed is a product of different factors
        optimizer.lr = lr
        contexts, targets = batch(t, words=V if t % 3 == 0 else 6)
        torch.manual_seed(t)
        net.zero_grad(set_to_none=True)
        loss(net, contexts, targets).backward()
        optimizer.step(0, len(targets))
        grads, touched = gradients(ref, ref_loss, contexts, targets, seed=t)
        untouched_somewhere |= any(len(rows) < len(getattr(ref, name)) for name, rows in touched.items())
        dense_rule_step(ref, grads, touched, moments, t, lr)
    assert untouched_somewhere  # (the test would prove nothing if every row were touched at every step)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    optimizer.flush()
    assert any(not torch.equal(before[name], p) for name, p in net.named_parameters())  # rows owed their decay
    for name, p in net.named_parameters():
        q = dict(ref.named_parameters())[name]
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-9, msg=name)
        torch.testing.assert_close(optimizer.m[name], moments[name][0], rtol=1e-6, atol=1e-12, msg=name)
        torch.testing.assert_close(optimizer.v[name], moments[name][1], rtol=1e-6, atol=1e-15, msg=name)


def test_with_every_row_touched_at_every_step_it_is_dense_adamw():
    net, ref = sampled_net(), sampled_net()
    loss = SampledLoss("sampled", torch.full((V,), 1.0 / V, dtype=torch.float64), V, alpha=0.0)
    ref_loss = SampledLoss("sampled", torch.full((V,), 1.0 / V, dtype=torch.float64), V, alpha=0.0)
    mine, adam = RowAdam(net, loss, LR, DECAY, exact_decay=True), Adam(ref, LR, DECAY)
    contexts = torch.arange(2 * V).view(V, 2) % V  # every word in the contexts, every word a target
    targets = torch.arange(V)
    for t in range(1, 5):
        for model, objective, optimizer in ((net, loss, mine), (ref, ref_loss, adam)):
            torch.manual_seed(t)
            model.zero_grad(set_to_none=True)
            objective(model, contexts, targets).backward()
            if optimizer is adam:  # (dense Adam reads .grad: the gathered rows' gradients scattered back)
                for name, rows, leaf in objective.touched:
                    getattr(model, name).grad = torch.zeros_like(getattr(model, name)).index_add_(0, rows, leaf.grad)
            optimizer.step(0, V)
    mine.flush()
    for (name, a), (_, b) in zip(net.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9, msg=name)


@pytest.mark.parametrize("kind", ["sampled", "classes"])
def test_a_resumed_optimizer_continues_bit_for_bit(kind):
    def train(net, loss, optimizer, steps):
        for t in steps:
            contexts, targets = batch(t, words=7)
            torch.manual_seed(t)
            net.zero_grad(set_to_none=True)
            loss(net, contexts, targets).backward()
            optimizer.step(0, len(targets))

    whole, whole_loss = make(kind)
    whole_opt = RowAdam(whole, whole_loss, LR, DECAY, exact_decay=True)
    train(whole, whole_loss, whole_opt, range(1, 9))
    first, first_loss = make(kind)
    first_opt = RowAdam(first, first_loss, LR, DECAY, exact_decay=True)
    train(first, first_loss, first_opt, range(1, 5))
    saved = {k: x.clone() for k, x in first_opt.state_tensors().items()}
    weights = {k: x.clone() for k, x in first.state_dict().items()}
    assert {"optim.log_decay", "optim.row_step.C", "optim.row_log.W"} <= set(saved)
    again, again_loss = make(kind, seed=1)  # other initial weights: everything must come from the saved state
    again.load_state_dict(weights)
    again_opt = RowAdam(again, again_loss, LR, DECAY, exact_decay=True)
    again_opt.load_state_tensors(saved)
    train(again, again_loss, again_opt, range(5, 9))
    for opt in (whole_opt, again_opt):
        opt.flush()
    for (name, a), (_, b) in zip(whole.named_parameters(), again.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    theirs = again_opt.state_tensors()
    assert all(torch.equal(x, theirs[k]) for k, x in whole_opt.state_tensors().items())
    lazy = RowAdam(*make(kind), LR, DECAY)  # a checkpoint of the other rule is refused, not misread
    with pytest.raises(Exception, match="row bookkeeping"):
        lazy.load_state_tensors(saved)


@pytest.mark.parametrize("layer", [{"loss": "sampled", "samples": 20}, {"output_layer": "classes", "min_count": 1}])
def test_nnlm_train_resumed_at_an_epoch_equals_the_run_left_alone(layer, random_corpus, tmp_path):
    options = {"corpus": str(tmp_path / "rand"), "preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16,
               "threads": 1, "row_decay": "exact"} | layer
    quiet = {"progress": False, "log": lambda s: None}
    tr.train(tmp_path / "whole", options | {"epochs": 2}, **quiet)
    tr.train(tmp_path / "cut", options | {"epochs": 1}, **quiet)
    tr.train(tmp_path / "cut", {"epochs": 2}, resume=True, **quiet)
    tensors = []
    for run in ("whole", "cut"):
        state = json.loads((tmp_path / run / "state.json").read_text())
        tensors.append(load_file(str(tmp_path / run / state["tensors"])))
        assert json.loads((tmp_path / run / "run.json").read_text())["row_decay"] == "exact"
    assert tensors[0].keys() == tensors[1].keys() and "optim.log_decay" in tensors[0]
    assert all(torch.equal(tensors[0][k], tensors[1][k]) for k in tensors[0])


def test_the_option_is_refused_where_it_does_not_apply(random_corpus, tmp_path, capsys):
    base = ["train", "--corpus", str(tmp_path / "rand"), "--no-progress", "--threads", "1", "--preset", "mlp7",
            "--hidden", "4", "--features", "3"]
    for extra, message in [
        (["--row-decay", "exact"], "--row-decay applies to the runs that update only the rows"),
        (["--row-decay", "touched", "--recipe", "paper"], "--row-decay applies to the runs"),
        (["--row-decay", "exact", "--loss", "sampled", "--parallel", "hogwild", "--workers", "1"],
         "--row-decay exact keeps each row's bookkeeping in one process"),
    ]:
        out = tmp_path / "x"
        assert main(base + ["--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not (out / "run.json").exists()


def test_a_run_json_from_before_the_option_trains_with_the_lazy_rule(random_corpus, tmp_path):
    out: Path = tmp_path / "old"
    tr.train(out, {"corpus": str(tmp_path / "rand"), "preset": "mlp7", "hidden": 4, "features": 3, "threads": 1,
                   "loss": "sampled", "samples": 10, "time_budget": 0.0}, progress=False, log=lambda s: None)
    run = json.loads((out / "run.json").read_text())
    assert run["row_decay"] is None
    del run["row_decay"]
    (out / "run.json").write_text(json.dumps(run))
    state = tr.train(out, {"epochs": 1}, resume=True, progress=False, log=lambda s: None)
    assert state["epoch"] == 1
    assert not any(k.startswith("optim.row_") for k in load_file(str(out / state["tensors"])))
