"""The paper's SGD on a kept output layer (`nnlm.neural.net.kept_output`): the same update as the plain bf16
and fp32 paths up to rounding, the copy always the masters (rounded to bf16), refreshed when anything
else changes a master, and chosen for exactly the runs it fits."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.neural.net.feature_init import ClassPull, add_class_pull, tied_parameters
from nnlm.neural.net.kept_output import KeptLoss, KeptOutput, keeps_output, sgd_keep_bf16
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.run.batches import batch_loss, update
from nnlm.neural.run.optim import PaperSGD
from nnlm.neural.run.pipeline import full_loss
from nnlm.neural.run.recipes import RECIPES


def net_pair(direct: bool = True, hidden: int = 20, seed: int = 0, class_context: int = 0) -> tuple[NPLM, NPLM]:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=300, order=4, features=12, hidden=hidden, direct=direct, class_context=class_context)
    a = NPLM(cfg)
    if class_context:
        a.set_context_classes(torch.arange(300) % class_context, unknown=0)
    b = NPLM(cfg)
    b.load_state_dict(a.state_dict())
    return a, b


def kept_copy(net: NPLM, width: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """[W, U, b, 0 ...] of `net` in `dtype` (rounded to bf16), `width` columns."""
    parts = [w.detach() for w in (net.W, net.U) if w is not None] + [net.b.detach()[:, None]]
    copy = torch.cat(parts, 1)
    assert width % (32 if dtype == torch.bfloat16 else 8) == 0 and width > copy.shape[1]
    return torch.nn.functional.pad(copy, (0, width - copy.shape[1])).to(dtype)


def batches(steps: int, v: int = 300, batch: int = 48, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield torch.randint(0, v, (batch, 3), generator=g), torch.randint(0, v, (batch,), generator=g)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=40),
       st.floats(0.5, 1.0, width=32), st.floats(-1.0, 1.0, width=32))
def test_kernel_is_decay_then_step_in_fp32_and_the_copy_is_the_cast(values, shrink, step):
    p = torch.tensor(values, dtype=torch.float32)[None, :]
    g = torch.flip(p, [1]).to(torch.bfloat16)  # any bf16 gradient: the same values, reversed
    expected = (p * shrink) + (g.float() * step)
    w16 = torch.zeros_like(p, dtype=torch.bfloat16)
    got = p.clone()
    sgd_keep_bf16(got.numpy(), g.view(torch.int16).numpy().view(np.uint16),
                  w16.view(torch.int16).numpy().view(np.uint16), 0, np.float32(shrink), np.float32(step))
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    cast = got.to(torch.bfloat16)  # round to nearest-even, as every cast of the plain path rounds
    same = (w16.view(torch.int16) == cast.view(torch.int16)) | (torch.isnan(w16) & torch.isnan(cast))
    assert bool(same.all()), (got, w16, cast)


def test_rounding_ties_go_to_even_like_torch():
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x00008000, 0x80018000],
                        dtype=torch.int64).to(torch.int32)
    p = bits.view(torch.float32)[None, :].clone()
    w16 = torch.empty_like(p, dtype=torch.bfloat16)
    zero = torch.zeros_like(w16)
    sgd_keep_bf16(p.numpy(), zero.view(torch.int16).numpy().view(np.uint16),
                  w16.view(torch.int16).numpy().view(np.uint16), 0, np.float32(1.0), np.float32(0.0))
    assert torch.equal(w16.view(torch.int16), p.to(torch.bfloat16).view(torch.int16))


@pytest.mark.parametrize("direct, hidden, class_context", [(True, 20, 0), (False, 20, 0), (True, 0, 0), (True, 20, 5)])
def test_kept_training_follows_the_plain_bf16_path(direct, hidden, class_context):
    """The same first loss; after one step H, d to the bit (their gradients are the same computation), C
    to fp32 rounding (its touched rows added one by one) and W, U, b within bf16 rounding of their
    gradient (b's now comes out of the product, rounded like W's); after 15 steps every weight within
    1% of its move; the bf16 copy stays the masters rounded, zeros after."""
    a, b = net_pair(direct, hidden, class_context=class_context)
    start = {name: p.detach().clone() for name, p in a.named_parameters()}
    kept_loss = KeptLoss(a)
    opt_a = PaperSGD(a, 0.1, 1e-8, 1e-4, kept=kept_loss.kept)
    opt_b = PaperSGD(b, 0.1, 1e-8, 1e-4)
    for step, (ctx, tgt) in enumerate(batches(15)):
        la, lb = kept_loss(a, ctx, tgt), batch_loss(b, ctx, tgt, True)
        if step == 0:
            assert la.item() == lb.item()
        update(a, opt_a, la, step * 48, 48)
        update(b, opt_b, lb, step * 48, 48)
        pb = dict(b.named_parameters())
        for name, p in a.named_parameters():
            moved_a, moved_b = p.detach() - start[name], pb[name].detach() - start[name]
            if step == 0 and name in ("H", "d", "P"):
                assert torch.equal(moved_a, moved_b), name
            elif step == 0 and name == "C":  # its rows' gradients added one by one (sparse), not summed first
                torch.testing.assert_close(p, pb[name], rtol=1e-6, atol=1e-9)
            elif step == 0:  # one bf16 rounding of the gradient (b: 2^-8 of its step, W and U: 1 fp32 ulp)
                assert (moved_a - moved_b).abs().max() <= 2 ** -8 * moved_b.abs().max() + 1e-7, name
            else:
                assert (moved_a - moved_b).norm() <= 0.01 * moved_b.norm(), name
    assert all(p.grad is None for p in kept_loss.kept.masters)  # their gradient went to the kept buffer
    assert torch.equal(kept_loss.kept.weights(), kept_copy(a, kept_loss.kept.copy.shape[1]))


@pytest.mark.parametrize("direct, hidden", [(True, 20), (False, 20), (True, 0)])
def test_kept_fp32_training_follows_the_plain_fp32_path(direct, hidden):
    """fp32: the same losses and moves to fp32 rounding (b inside the product, -log softmax for
    log-softmax, C's rows added one by one); the copy is the masters themselves."""
    a, b = net_pair(direct, hidden)
    start = {name: p.detach().clone() for name, p in a.named_parameters()}
    kept_loss = KeptLoss(a, torch.float32)
    opt_a = PaperSGD(a, 0.1, 1e-8, 1e-4, kept=kept_loss.kept)
    opt_b = PaperSGD(b, 0.1, 1e-8, 1e-4)
    for step, (ctx, tgt) in enumerate(batches(15)):
        la, lb = kept_loss(a, ctx, tgt, False), batch_loss(b, ctx, tgt, False)
        assert abs(la.item() - lb.item()) <= 1e-5 * lb.item(), step
        update(a, opt_a, la, step * 48, 48)
        update(b, opt_b, lb, step * 48, 48)
    pb = dict(b.named_parameters())
    for name, p in a.named_parameters():
        moved_a, moved_b = p.detach() - start[name], pb[name].detach() - start[name]
        assert (moved_a - moved_b).norm() <= 1e-4 * moved_b.norm(), name
    assert torch.equal(kept_loss.kept.weights(), kept_copy(a, kept_loss.kept.copy.shape[1], torch.float32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_master_changed_elsewhere_is_in_the_next_product(dtype):
    a, b = net_pair()
    kept_loss = KeptLoss(a, dtype)
    ctx, tgt = next(batches(1))
    kept_loss(a, ctx, tgt)
    if dtype == torch.float32:  # the parameters are the copy's columns
        width = kept_loss.kept.copy.shape[1]
        assert a.W.data_ptr() == kept_loss.kept.copy.data_ptr() and a.W.stride() == (width, 1)
    with torch.no_grad():
        a.W.mul_(3.0)  # what a test or a tool might do
    a.load_state_dict(a.state_dict() | {"U": b.U.detach() * 0.5})  # and what a resumed checkpoint does
    a.b.data = b.b.detach().clone()  # and what replaces a parameter's data outright
    plain = batch_loss(a, ctx, tgt, dtype == torch.bfloat16).item()
    assert kept_loss(a, ctx, tgt).item() == pytest.approx(plain, rel=1e-6 if dtype == torch.float32 else 0)
    width = kept_loss.kept.copy.shape[1]
    assert torch.equal(kept_loss.kept.weights(), kept_copy(a, width, dtype))
    assert torch.equal(a.b, b.b) and torch.equal(a.U, b.U * 0.5)


def test_a_step_without_a_backward_pass_is_refused():
    a, _ = net_pair()
    kept = KeptOutput([a.W, a.U], a.b)
    with pytest.raises(RuntimeError, match="no gradient"):
        kept.step(1.0, -0.1)


def test_the_kept_path_is_chosen_for_paper_sgd_in_one_cpu_process_only():
    a, _ = net_pair()
    paper, modern = RECIPES["paper"], RECIPES["modern"]
    for bf16, dtype in [(True, torch.bfloat16), (False, torch.float32)]:
        loss, opt = full_loss(a, paper, 0.1, bf16=bf16, one_process=True)
        assert isinstance(loss, KeptLoss) and opt.kept is loss.kept and loss.kept.dtype == dtype
    for recipe, bf16, one in [(paper, True, False), (paper, False, False), (modern, True, True)]:
        loss, opt = full_loss(a, recipe, 0.1, bf16=bf16, one_process=one)
        assert not isinstance(loss, KeptLoss) and getattr(opt, "kept", None) is None, (recipe.name, bf16, one)
    torch.manual_seed(0)
    bias_only = NPLM(ModelConfig(vocab_size=30, order=3, features=4, hidden=0, direct=False))
    assert not keeps_output(bias_only, "paper-sgd", True)  # y = b: no product to keep


def test_a_run_whose_rows_are_pulled_to_classes_takes_the_kept_path_with_its_pull(tmp_path):
    """--init-features exchange pulls C's rows by a gradient hook and W's and U's inside the kept update."""
    from nnlm.data.synthetic import write_corpus
    from nnlm.neural.run.config import TrainRequest
    from nnlm.neural.run.pipeline import prepare, trainer_spec

    write_corpus(tmp_path / "gen", 3000, words=40, classes=5, seed=3)
    base = {"corpus": str(tmp_path / "gen"), "preset": "mlp7", "order": 3, "hidden": 8, "features": 4,
            "threads": 1, "recipe": "paper", "init_features": "exchange", "feature_classes": 5}
    for pull, pulled in [(None, True), (0.0, False)]:
        setup = prepare(tmp_path / f"run-{pull}", TrainRequest.of(base | {"class_pull": pull}), False,
                        torch.device("cpu"), trainer_spec("single"))
        assert isinstance(setup.loss_fn, KeptLoss), pull
        assert len(setup.loss_fn.kept.pulled) == (2 if pulled else 0), pull  # (W and U)


@pytest.mark.parametrize("dtype, weight_decay", [(torch.bfloat16, 1e-4), (torch.float32, 1e-4), (torch.float32, 10.0)])
def test_the_pull_folded_into_the_kept_update_is_the_hooks_pull(dtype, weight_decay):
    """W's and U's pull moved into the kept update gives the plain path's weights (hooks on C, U, W) within
    rounding, and differs from no pull by far more; weight decay 10 at lr 0.1 makes the shrink 0, where the
    pull is added after the update instead of folded before it."""
    a, b = net_pair()
    c, _ = net_pair()
    classes = np.arange(300) % 7
    start = {name: p.detach().clone() for name, p in a.named_parameters()}
    kept_a, kept_c = KeptLoss(a, dtype), KeptLoss(c, dtype)
    opts = [PaperSGD(a, 0.1, 0.0, weight_decay, kept=kept_a.kept), PaperSGD(b, 0.1, 0.0, weight_decay),
            PaperSGD(c, 0.1, 0.0, weight_decay, kept=kept_c.kept)]
    opts[0].pull_towards(ClassPull(classes, 0.02, torch.device("cpu")), tied_parameters(a))
    add_class_pull(b, classes, 0.02)  # (the plain path: hooks)
    opts[2].pull_towards(ClassPull(classes, 0.02, torch.device("cpu")), [c.C])  # (C pulled, W and U not)
    bf16 = dtype == torch.bfloat16
    for step, (ctx, tgt) in enumerate(batches(8 if weight_decay < 1 else 1)):  # (shrink 0: W, U start over a step)
        losses = [kept_a(a, ctx, tgt, bf16), batch_loss(b, ctx, tgt, bf16), kept_c(c, ctx, tgt, bf16)]
        for net, opt, loss in zip((a, b, c), opts, losses, strict=True):
            update(net, opt, loss, step * 48, 48)
    tolerance = 0.01 if bf16 else 1e-4
    for name in ("W", "U"):
        moved = [dict(n.named_parameters())[name].detach() - start[name] for n in (a, b, c)]
        assert (moved[0] - moved[1]).norm() <= tolerance * moved[1].norm(), name
        assert (moved[2] - moved[1]).norm() >= 10 * tolerance * moved[1].norm(), name  # (the pull mattered)
    moved_c = [n.C.detach() - start["C"] for n in (a, b)]
    assert (moved_c[0] - moved_c[1]).norm() <= tolerance * moved_c[1].norm()
    assert torch.equal(kept_a.kept.weights(), kept_copy(a, kept_a.kept.copy.shape[1], dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_copy_laid_out_for_hogwild_is_adopted_and_a_wrong_one_refused(dtype):
    """A worker's layer adopts the shared copy its parent made (share_kept_layout): the same memory, so
    an update through one layer is in the other's next product; a copy of another shape, another dtype,
    or (fp32) one the masters are not columns of, is refused."""
    from nnlm.neural.net.kept_output import share_kept_layout

    a, b = net_pair()
    shared = share_kept_layout(a, dtype)
    worker = KeptLoss(a, dtype)
    worker.kept.adopt(shared)
    assert worker.kept.weights().data_ptr() == shared.data_ptr()
    ctx, tgt = next(batches(1))
    update(a, PaperSGD(a, 0.1, 0.0, 1e-4, kept=worker.kept), worker(a, ctx, tgt, dtype == torch.bfloat16), 0, 48)
    assert torch.equal(shared, kept_copy(a, shared.shape[1], dtype))  # (the update wrote the shared copy)
    with pytest.raises(ValueError, match="copy for a"):
        KeptLoss(b, dtype).kept.adopt(shared[:-1])
    with pytest.raises(ValueError, match="copy for a"):
        KeptLoss(b, dtype).kept.adopt(shared.to(torch.float32 if dtype == torch.bfloat16 else torch.bfloat16))
    if dtype == torch.float32:
        with pytest.raises(ValueError, match="not the shared copy's columns"):
            KeptLoss(b, dtype).kept.adopt(shared.clone())


def test_a_kept_loss_refuses_a_net_whose_weights_it_does_not_keep():
    a, b = net_pair()
    ctx, tgt = next(batches(1))
    with pytest.raises(RuntimeError, match="not the ones kept"):
        KeptLoss(a)(b, ctx, tgt)
