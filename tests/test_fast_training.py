"""The fast training step: the fused output-layer softmax loss equals autograd of the plain
formulation, the model hands it the same operands as its forward pass, the torch.optim Adam does
the recipe's update and restores from its named tensors, and batches cover each epoch once."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_nplm

from nnlm.lm import contexts as lm_contexts
from nnlm.neural.net.softmax_loss import softmax_cross_entropy
from nnlm.neural.run.batches import epoch_batches, padded_stream
from nnlm.neural.run.optim import Adam

tiny = tiny_nplm


@pytest.mark.parametrize("h,direct", [(5, True), (0, True), (4, False)])
def test_fused_loss_in_float64_is_exactly_cross_entropy_and_its_gradients(h, direct):
    net = tiny(h, direct)
    torch.manual_seed(1)
    ctx, tgt = torch.randint(0, 13, (9, 3)), torch.randint(0, 13, (9,))
    params = list(net.parameters())
    plain = F.cross_entropy(net(ctx), tgt)
    expected = torch.autograd.grad(2.5 * plain, params)
    zs, ws = net.output_operands(ctx)
    fused = softmax_cross_entropy(zs, ws, net.b, tgt)
    got = torch.autograd.grad(2.5 * fused, params)
    assert fused.dtype == torch.float64
    torch.testing.assert_close(fused, plain, rtol=1e-13, atol=1e-13)
    for (name, _), g, e in zip(net.named_parameters(), got, expected, strict=True):
        assert g.dtype == torch.float64 and g.shape == e.shape, name
        torch.testing.assert_close(g, e, rtol=1e-11, atol=1e-13, msg=name)


def test_fused_loss_in_bf16_stays_within_bf16_rounding_with_fp32_gradients():
    net = tiny(h=6, v=200, m=8).float()
    torch.manual_seed(2)
    ctx, tgt = torch.randint(0, 200, (64, 3)), torch.randint(0, 200, (64,))
    params = list(net.parameters())
    plain = F.cross_entropy(net(ctx), tgt)
    expected = torch.autograd.grad(plain, params)
    zs, ws = net.output_operands(ctx)
    fused = softmax_cross_entropy(zs, ws, net.b, tgt, torch.bfloat16)
    got = torch.autograd.grad(fused, params)
    assert fused.dtype == torch.float32
    assert abs(fused.item() - plain.item()) < 0.02 * plain.item()
    for (name, p), g, e in zip(net.named_parameters(), got, expected, strict=True):
        assert g.dtype == torch.float32 and g.shape == p.shape, name  # fp32 gradients for the fp32 weights
        assert (g - e).norm() <= 0.05 * e.norm(), name


def test_output_operands_give_the_forward_logits_with_the_same_dropout():
    net = tiny(h=5, dropout=0.5)
    ctx = torch.randint(0, 13, (20, 3))
    net.train()
    torch.manual_seed(3)
    logits = net(ctx)
    torch.manual_seed(3)
    zs, ws = net.output_operands(ctx)
    rebuilt = net.b + sum(z @ w.t() for z, w in zip(zs, ws, strict=True))
    torch.testing.assert_close(rebuilt, logits, rtol=1e-12, atol=1e-12)


def adam_reference(params, grads_per_step, lr, wd, decayed, b1=0.9, b2=0.999, eps=1e-8):
    """The recipe's update written out: decoupled decay on `decayed`, bias-corrected moments."""
    p = {k: v.clone() for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(x) for k, x in p.items()}
    for t, grads in enumerate(grads_per_step, start=1):
        for k, g in grads.items():
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g ** 2
            shrink = (1 - lr * wd) if k in decayed else 1.0
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] * shrink - lr * m_hat / (v_hat.sqrt() + eps)
    return p


def test_adam_is_the_recipes_update_with_decay_on_weights_and_c_only():
    net = tiny(h=4)
    start = {k: v.detach().clone() for k, v in net.named_parameters()}
    opt = Adam(net, lr=0.01, weight_decay=0.3)
    torch.manual_seed(4)
    grads = [{k: torch.randn_like(v) for k, v in start.items()} for _ in range(3)]
    for g in grads:
        for name, p in net.named_parameters():
            p.grad = g[name].clone()
        opt.step(0, 1)
    expected = adam_reference(start, grads, 0.01, 0.3, decayed={"C", "W", "H", "U"})
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.detach(), expected[name], rtol=1e-10, atol=1e-12, msg=name)
    assert opt.t == 3


def test_adam_state_round_trips_through_named_tensors_and_continues_identically():
    torch.manual_seed(5)
    grads = [{k: torch.randn_like(v) for k, v in tiny().named_parameters()} for _ in range(4)]

    def run(steps, opt, net):
        for g in steps:
            for name, p in net.named_parameters():
                p.grad = g[name].clone()
            opt.step(0, 1)

    net_a = tiny()
    opt_a = Adam(net_a, lr=0.02, weight_decay=0.1)
    run(grads, opt_a, net_a)

    net_b = tiny()
    opt_b = Adam(net_b, lr=0.02, weight_decay=0.1)
    run(grads[:2], opt_b, net_b)
    saved = {k: v.clone() for k, v in opt_b.state_tensors().items()}
    weights = {k: v.clone() for k, v in net_b.state_dict().items()}
    assert set(saved) == {f"optim.{kind}.{k}" for kind in "mv" for k in weights} | {"optim.t"}
    net_c = tiny(seed=9)
    net_c.load_state_dict(weights)
    opt_c = Adam(net_c, lr=0.02, weight_decay=0.1)
    opt_c.load_state_tensors(saved)
    assert opt_c.t == 2
    run(grads[2:], opt_c, net_c)
    for (name, a), c in zip(net_a.named_parameters(), net_c.parameters(), strict=True):
        torch.testing.assert_close(c, a, rtol=0, atol=0, msg=name)


def test_adam_uses_moment_tensors_handed_to_it():
    """Hogwild workers hand their own (shared-memory) moments to the optimizer."""
    net = tiny()
    opt = Adam(net, lr=0.01)
    own_m = {k: torch.zeros_like(v) for k, v in net.named_parameters()}
    own_v = {k: torch.zeros_like(v) for k, v in net.named_parameters()}
    opt.m, opt.v = own_m, own_v
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    opt.step(0, 1)
    assert all(torch.allclose(own_m[k], torch.full_like(own_m[k], 0.1)) for k in own_m)
    assert all(opt.m[k] is own_m[k] for k in own_m)
    opt.t = 7
    assert opt.t == 7


def test_epoch_batches_visit_every_position_once_with_its_context():
    ids = np.arange(3, 40, dtype=np.int32)
    k, pad = 2, 1
    padded = padded_stream(ids, k, pad, torch.device("cpu"))
    batches = list(epoch_batches(padded, k, batch=8, seed=0, epoch=3))
    assert [len(t) for _, t in batches] == [8, 8, 8, 8, 5]
    ctx = torch.cat([c for c, _ in batches]).numpy()
    targets = torch.cat([t for _, t in batches]).numpy()
    assert sorted(targets) == list(ids)
    positions = targets - 3  # ids are their position + 3
    np.testing.assert_array_equal(ctx, lm_contexts(ids.astype(np.int64), positions, k, pad))
    later = list(epoch_batches(padded, k, batch=8, seed=0, epoch=3, first=3))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(batches[3:], later, strict=True))
