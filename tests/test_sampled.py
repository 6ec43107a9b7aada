"""Sampled output layers (--loss sampled | nce): the loss and its gradient against their definitions,
the full softmax as the K = |V| limit, the row-wise Adam, training, exact eval and resume,
scoring without the softmax sum, and bad input."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import central_differences, tiny_nplm
from safetensors.torch import load_file

from nnlm.cli import main
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import UNNORMALIZED
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.sampled import (
    RowAdam,
    SampledLoss,
    inclusion_probabilities,
    initial_bias,
    log_partition_stats,
)
from nnlm.neural.run import train as tr
from nnlm.neural.run.checkpoint import load_neural
from nnlm.neural.run.config import RUN_DEFAULTS
from nnlm.neural.run.optim import Adam

REPO = Path(__file__).resolve().parents[1]
TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16, "threads": 1}
SAMPLED = {"loss": "sampled", "samples": 20}


def run_train(out: Path, corpus_dir: Path, resume: bool = False, **options):
    requested = ({} if resume else {"corpus": str(corpus_dir)} | TINY | SAMPLED) | options
    return tr.train(out, requested, resume=resume, progress=False, log=lambda s: None)


@pytest.fixture
def rand_dir(random_corpus, tmp_path) -> Path:
    return tmp_path / "rand"


def tiny_net(vocab: int = 13, hidden: int = 3, direct: bool = True) -> NPLM:
    net = tiny_nplm(hidden, direct, v=vocab, n=3, m=2)
    with torch.no_grad():
        net.b.normal_()  # nonzero biases, so every term of y matters
    return net.eval()


def skewed(vocab: int) -> torch.Tensor:
    q = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    return q / q.sum()


def dense_gradients(net: NPLM, loss) -> dict[str, torch.Tensor]:
    """The gathered rows' gradients (`loss.touched`) scattered back to full-size tensors; every other parameter's
    own gradient."""
    gathered = {name for name, _, _ in loss.touched}
    grads = {name: torch.zeros_like(p) if name in gathered else p.grad.clone() for name, p in net.named_parameters()}
    for name, rows, leaf in loss.touched:
        grads[name].index_add_(0, rows, leaf.grad)
    return grads


def check_sampled_loss(kind: str, net: NPLM, loss, ctx, tgt, alpha: float = 0.3, **differences) -> None:
    """`loss` (sampled or NCE, its sample set drawn with seed 7) of `net` on (ctx, tgt) equals its `definition` from
    the full logits, its gathered rows' gradients equal the definition's gradients, and both agree with central
    differences (`differences`: `central_differences`' entries and seed)."""
    def value() -> torch.Tensor:
        torch.manual_seed(7)  # the same sample set on every call
        return loss(net, ctx, tgt)

    net.zero_grad()
    got = value()
    got.backward()
    grads = dense_gradients(net, loss)
    torch.manual_seed(7)
    sample = loss.draw()
    net.zero_grad()
    want = definition(kind, net, ctx, tgt, sample, loss.log_p.double(), alpha)
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)
    for name, p in net.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-8, msg=name)
    central_differences(net, value, grads, **differences)


def definition(kind: str, net: NPLM, ctx, tgt, sample, log_p, alpha: float) -> torch.Tensor:
    """The loss written from the full logits y = net(ctx) [B, |V|], as the module docstring states it."""
    y = net(ctx)
    delta = y - log_p
    delta_t, delta_s = delta.gather(1, tgt[:, None])[:, 0], delta[:, sample]
    if kind == "nce":
        return (F.softplus(-delta_t) + F.softplus(delta_s).sum(1)).mean()
    others = delta_s.masked_fill(tgt[:, None] == sample[None, :], -math.inf)
    ce = torch.logsumexp(torch.cat([delta_t[:, None], others], 1), 1) - delta_t
    return ce.mean() + alpha * torch.logsumexp(delta_s, 1).square().mean()


@pytest.mark.parametrize("kind", ["sampled", "nce"])
@pytest.mark.parametrize("hidden,direct", [(3, True), (0, True), (3, False)])
def test_loss_and_gradient_match_the_definition_and_finite_differences(kind, hidden, direct):
    net = tiny_net(hidden=hidden, direct=direct)
    loss = SampledLoss(kind, skewed(13), 5, alpha=0.3)
    ctx, tgt = torch.randint(0, 13, (6, 2)), torch.randint(0, 13, (6,))
    check_sampled_loss(kind, net, loss, ctx, tgt, seed=None)  # a few entries of each parameter, as drawn before


def test_only_the_sampled_target_and_context_rows_are_touched():
    net = tiny_net(vocab=40)
    loss = SampledLoss("sampled", skewed(40), 4)
    ctx, tgt = torch.tensor([[1, 2], [2, 3]]), torch.tensor([5, 6])
    torch.manual_seed(1)
    loss(net, ctx, tgt).backward()
    torch.manual_seed(1)
    sample = loss.draw()
    rows = {name: set(r.tolist()) for name, r, _ in loss.touched}
    assert rows["C"] == {1, 2, 3}
    assert rows["W"] == rows["U"] == rows["b"] == {5, 6} | set(sample.tolist())


def test_with_k_covering_v_and_uniform_q_it_is_the_full_softmax():
    net = tiny_net()
    ctx, tgt = torch.randint(0, 13, (9, 2)), torch.randint(0, 13, (9,))
    uniform = torch.full((13,), 1 / 13, dtype=torch.float64)
    y = net(ctx)
    plain = SampledLoss("sampled", uniform, 13, alpha=0.0)
    torch.testing.assert_close(plain(net, ctx, tgt), F.cross_entropy(y, tgt), rtol=1e-12, atol=1e-12)
    normalized = SampledLoss("sampled", uniform, 13, alpha=0.5)  # Z^ is then the exact Z
    want = F.cross_entropy(y, tgt) + 0.5 * torch.logsumexp(y, 1).square().mean()
    torch.testing.assert_close(normalized(net, ctx, tgt), want, rtol=1e-12, atol=1e-12)


def test_inclusion_probabilities_sum_to_k_and_match_the_sampler():
    q = skewed(20)
    for k in (1, 5, 19, 20):
        p = inclusion_probabilities(q, k)
        assert math.isclose(float(p.sum()), k, rel_tol=1e-9) and float(p.max()) <= 1.0
        assert torch.all(p[:-1] >= p[1:])  # more likely under q, more likely in S
    torch.testing.assert_close(inclusion_probabilities(torch.full((10,), 0.1, dtype=torch.float64), 4),
                               torch.full((10,), 0.4, dtype=torch.float64))
    torch.manual_seed(0)
    loss = SampledLoss("nce", q, 5)
    freq = torch.zeros(20)
    for _ in range(4000):
        freq[loss.draw()] += 1
    assert float((freq / 4000 - inclusion_probabilities(q, 5).float()).abs().max()) < 0.05


def test_row_adam_is_adam_on_the_rows_it_touches_and_leaves_the_others():
    net, ref = tiny_net(), tiny_net()
    ctx, tgt = torch.randint(0, 13, (8, 2)), torch.randint(0, 13, (8,))
    loss = SampledLoss("sampled", torch.full((13,), 1 / 13, dtype=torch.float64), 13, alpha=0.0)
    mine, adam = RowAdam(net, loss, 0.01, 0.05), Adam(ref, 0.01, 0.05)
    used = torch.unique(ctx)
    for _ in range(3):
        net.zero_grad(set_to_none=True)
        loss(net, ctx, tgt).backward()
        mine.step(0, 8)
        ref.zero_grad(set_to_none=True)
        F.cross_entropy(ref(ctx), tgt).backward()
        adam.step(0, 8)
    for (name, a), (_, b) in zip(net.named_parameters(), ref.named_parameters(), strict=True):
        if name == "C":  # only the context words' features moved (dense Adam also decays the others)
            torch.testing.assert_close(a[used], b[used], rtol=1e-9, atol=1e-12)
            unused = torch.tensor([i for i in range(13) if i not in used.tolist()], dtype=torch.int64)
            torch.testing.assert_close(a[unused], tiny_net().C[unused])
        else:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("loss,asked,recipe", [("sampled", None, "sampled"), ("nce", None, "sampled"),
                                                ("full", None, "adaptive"), ("sampled", "modern", "modern")])
def test_the_default_recipe_follows_the_loss(loss, asked, recipe, random_corpus, rand_dir, tmp_path):
    options = {"loss": loss} | ({"samples": None} if loss == "full" else {}) | ({"recipe": asked} if asked else {})
    requested = {"corpus": str(rand_dir)} | TINY | options
    tr.prepare_run(tmp_path / "run", {k: v for k, v in requested.items() if k in RUN_DEFAULTS}, resume=False)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["recipe"] == recipe
    # a resume without --recipe keeps the run's recipe
    run, _ = tr.prepare_run(tmp_path / "run", {}, resume=True)
    assert run["recipe"] == recipe


@pytest.mark.parametrize("kind", ["sampled", "nce"])
def test_training_lowers_exact_perplexity_and_eval_is_the_exact_softmax(kind, random_corpus, rand_dir, tmp_path,
                                                                       capsys):
    out = tmp_path / kind
    state = run_train(out, rand_dir, epochs=4, loss=kind)
    lm = load_neural(out)
    assert json.loads((out / "run.json").read_text())["loss"] == kind
    start = NPLM(lm.config)  # b starts at the log unigram probabilities: the first evaluation is the unigram model's
    with torch.no_grad():
        start.b.copy_(initial_bias(random_corpus.train, len(random_corpus.vocab)))
    unigram = perplexity(NeuralLM(start, lm.vocab, lm.pad_token), random_corpus, "valid")
    valid = [h["valid_ppl"] for h in state["history"]]
    assert valid[-1] < 0.9 * unigram and valid[-1] < valid[0]
    # the validation during training and `nnlm eval` are the exact softmax of the saved weights
    ids, stream = random_corpus.valid, random_corpus.stream()
    pos = np.arange(len(ids)) + random_corpus.split_offset("valid")
    from nnlm.lm import contexts

    ctx = torch.as_tensor(contexts(stream, pos, 2, random_corpus.pad_id))
    with torch.no_grad():
        exact = torch.log_softmax(lm.net(ctx).double(), 1).gather(1, torch.as_tensor(ids, dtype=torch.int64)[:, None])
    exact_ppl = math.exp(-float(exact.mean()))
    bf16 = json.loads((out / "run.json").read_text())["bf16"]  # then training monitored in bf16 products
    assert math.isclose(exact_ppl, min(valid), rel_tol=5e-3 if bf16 else 1e-5)
    assert main(["eval", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert math.isclose(result["perplexity"]["valid"], exact_ppl, rel_tol=1e-6)
    mean, std = log_partition_stats(lm, random_corpus, "valid")
    assert result["valid_log_z"] == {"mean": mean, "std": std} and std > 0


def test_eval_takes_log_z_from_the_valid_pass_itself(neural_run, monkeypatch, capsys):
    import nnlm.neural.net.sampled

    run, _ = neural_run
    assert main(["eval", str(run), "--log-z", "--json"]) == 0
    once = json.loads(capsys.readouterr().out)

    def second_pass(*args, **kwargs):
        raise AssertionError("valid was scored a second time for log Z")

    monkeypatch.setattr(nnlm.neural.net.sampled, "log_partition_stats", second_pass)
    assert main(["eval", str(run), "--log-z", "--json", "--split", "test,valid"]) == 0
    assert json.loads(capsys.readouterr().out)["valid_log_z"] == once["valid_log_z"]


def test_unnormalized_scores_are_the_logits_and_differ_from_exact_by_log_z(neural_run, capsys):
    run, _ = neural_run
    lm = load_neural(run)
    rng = np.random.default_rng(0)
    ctx, tgt = rng.integers(0, len(lm.vocab), (50, 2)), rng.integers(0, len(lm.vocab), 50)
    exact = lm.log_prob(ctx, tgt)
    raw = NeuralLM(lm.net, lm.vocab, lm.pad_token, scoring=UNNORMALIZED).log_prob(ctx, tgt)
    with torch.no_grad():
        logits = lm.net(torch.as_tensor(ctx)).double().gather(1, torch.as_tensor(tgt)[:, None])[:, 0].numpy()
    np.testing.assert_allclose(raw, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exact + lm.log_partition(ctx), raw, rtol=1e-5, atol=1e-5)
    assert main(["score", str(run), "--split", "valid", "--unnormalized", "--json"]) == 0
    unnormalized = json.loads(capsys.readouterr().out)
    assert main(["score", str(run), "--split", "valid", "--json"]) == 0
    normalized = json.loads(capsys.readouterr().out)
    assert unnormalized["log10_prob"] != normalized["log10_prob"] and unnormalized["tokens"] == normalized["tokens"]
    assert main(["eval", str(run), "--log-z", "--json"]) == 0
    assert "valid_log_z" in json.loads(capsys.readouterr().out)


def weights(run: Path) -> dict[str, torch.Tensor]:
    state = json.loads((run / "state.json").read_text())
    return load_file(str(run / state["tensors"]))


def test_resume_of_a_sampled_run_after_kill_9_is_exact(rand_dir, tmp_path):
    epochs = 4
    whole = tmp_path / "whole"
    run_train(whole, rand_dir, epochs=epochs)
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "nnlm", "train", "--corpus", str(rand_dir), "--out", str(killed),
           "--epochs", str(epochs), "--checkpoint-minutes", "0.0005", "--no-progress", "--loss", "sampled",
           "--samples", "20", "--preset", "mlp7", "--hidden", "8", "--features", "4", "--batch-size", "16",
           "--threads", "1"]
    proc = subprocess.Popen(cmd, env=os.environ | {"PYTHONPATH": str(REPO / "src")}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    state_file = killed / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if state_file.exists() and json.loads(state_file.read_text())["step"] > 0:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert json.loads(state_file.read_text())["epoch"] < epochs
    run_train(killed, rand_dir, resume=True, epochs=epochs, loss="sampled", samples=20)
    a, b = weights(whole), weights(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history = [json.loads((r / "state.json").read_text())["history"] for r in (whole, killed)]
    assert [h["valid_ppl"] for h in history[0]] == [h["valid_ppl"] for h in history[1]]


def test_bad_values_are_one_line_and_exit_2(rand_dir, tmp_path, capsys):
    base = ["train", "--corpus", str(rand_dir), "--no-progress", "--threads", "1", "--preset", "mlp7"]
    for extra, message in [
        (["--loss", "sampled", "--samples", "0"], "argument --samples: must be an integer >= 1"),
        (["--loss", "nce", "--samples", "100000"], "exceeds the vocabulary size"),
        (["--loss", "magic"], "invalid choice"),
        (["--samples", "5"], "--samples applies to --loss sampled or nce"),
        (["--loss", "sampled", "--recipe", "paper"], "modern recipe"),
        (["--loss", "sampled", "--parallel", "vocab"], "--parallel vocab trains the full softmax only"),
    ]:
        out = tmp_path / "x"
        try:
            code = main(base + ["--out", str(out), *extra])
        except SystemExit as exc:  # argparse's own usage errors (an unknown --loss choice)
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2
        assert message in err and err.count("\n") == 1, err
        assert not (out / "run.json").exists()
    with pytest.raises(NnlmError, match="unknown --loss .magic.; choose from full, sampled, nce"):
        tr.train(tmp_path / "y", {"corpus": str(rand_dir), "loss": "magic"}, progress=False)
    out = tmp_path / "run"
    run_train(out, rand_dir, epochs=1)
    assert main(["train", "--out", str(out), "--resume", "--loss", "nce", "--no-progress"]) == 2
    assert "was started with loss = 'sampled'" in capsys.readouterr().err
    ngram = tmp_path / "ngram"
    assert main(["ngram", "--corpus", str(rand_dir), "--kind", "addone", "--save", str(ngram)]) == 0
    capsys.readouterr()
    assert main(["score", str(ngram), "--split", "valid", "--unnormalized"]) == 2
    assert "neural models only" in capsys.readouterr().err


def test_the_running_figure_of_a_sampled_run_is_not_called_a_perplexity(rand_dir, tmp_path):
    logs: dict[str, list[str]] = {"full": [], "sampled": []}
    for loss, lines in logs.items():
        options = {"corpus": str(rand_dir)} | TINY | (SAMPLED if loss == "sampled" else {}) | {"epochs": 1}
        tr.train(tmp_path / loss, options, resume=False, progress=False, log=lines.append)
    epoch_line = {loss: next(line for line in lines if line.startswith("epoch 1:")) for loss, lines in logs.items()}
    assert "train ppl" in epoch_line["full"] and "exp(objective)" not in epoch_line["full"]
    assert "train exp(objective)" in epoch_line["sampled"] and "train ppl" not in epoch_line["sampled"]


def test_the_compiled_row_adam_follows_the_torch_op_one_in_float32():
    nets = [tiny_net().float(), tiny_net().float()]
    ctx, tgt = torch.randint(0, 13, (8, 2)), torch.randint(0, 13, (8,))
    losses = [SampledLoss("sampled", skewed(13), 5) for _ in nets]
    optimizers = [RowAdam(net, loss, 0.01, 0.05, fused=fused)
                  for net, loss, fused in zip(nets, losses, (True, False), strict=True)]
    for step in range(4):
        for net, loss, optimizer in zip(nets, losses, optimizers, strict=True):
            torch.manual_seed(step)  # the same draws for both
            net.zero_grad(set_to_none=True)
            loss(net, ctx, tgt).backward()
            optimizer.step(0, 8)
    for (name, a), (_, b) in zip(nets[0].named_parameters(), nets[1].named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    for name in optimizers[0].m:
        torch.testing.assert_close(optimizers[0].v[name], optimizers[1].v[name], rtol=1e-5, atol=1e-9)
