"""Parallel training on 2 local CPU processes (gloo over loopback): the vocabulary-parallel
forward and backward equal the single-process model's, DDP and vocab training of a global batch
equal single-process training, Hogwild trains, and a dead rank or bad input gives one clear line."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from nnlm.errors import NnlmError
from nnlm.neural import distributed as dd
from nnlm.neural import train as tr
from nnlm.neural.model import NPLM, ModelConfig
from nnlm.neural.parallel import train_parallel
from nnlm.neural.vocab_parallel import VocabParallelNPLM, full_tensors, vocab_slices

TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 64, "threads": 1}
TIMEOUT = 60.0


@pytest.mark.parametrize("v,world", [(10, 3), (17_907, 2), (5, 5), (7, 2)])
def test_vocab_slices_cover_the_vocabulary_evenly(v, world):
    slices = vocab_slices(v, world)
    assert slices[0][0] == 0 and slices[-1][1] == v
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))
    sizes = [hi - lo for lo, hi in slices]
    assert max(sizes) - min(sizes) <= 1


def _vocab_forward_backward(config_dict: dict, direct_dropout: float) -> None:
    """In each rank: the sliced model's log-probs and gradients vs the whole model's, computed here."""
    rank, world = dist.get_rank(), dist.get_world_size()
    config = ModelConfig(**config_dict)
    torch.manual_seed(0)
    full = NPLM(config, dropout_x=direct_dropout, dropout_h=direct_dropout).double()
    gen = torch.Generator().manual_seed(1)
    contexts = torch.randint(0, config.vocab_size, (37, config.order - 1), generator=gen)
    targets = torch.randint(0, config.vocab_size, (37,), generator=gen)
    part = VocabParallelNPLM.from_full(dict(full.state_dict()), config, rank, world,
                                       direct_dropout, direct_dropout).double()

    torch.manual_seed(5)  # the same dropout masks in both models (and on every rank)
    reference = torch.log_softmax(full(contexts), dim=1).gather(1, targets[:, None])[:, 0]
    (-reference.mean()).backward()
    torch.manual_seed(5)
    mine = part.log_prob(contexts, targets)
    (-mine.mean()).backward()

    torch.testing.assert_close(mine, reference, rtol=1e-10, atol=1e-10)
    grads = full_tensors(part, {f"grad.{n}": p.grad for n, p in part.named_parameters()})
    for name, p in full.named_parameters():
        torch.testing.assert_close(grads[f"grad.{name}"], p.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("world,v,h,direct,dropout", [(2, 13, 5, True, 0.0), (3, 11, 0, True, 0.3),
                                                      (2, 9, 4, False, 0.5)])
def test_vocab_parallel_log_probs_and_gradients_equal_the_single_model(world, v, h, direct, dropout):
    config = ModelConfig(vocab_size=v, order=3, hidden=h, features=3, direct=direct)
    dd.launch_local(_vocab_forward_backward, world, args=(config.to_dict(), dropout), timeout=TIMEOUT)


def _train(out: Path, corpus_dir: Path, mode: str, workers: int = 2, resume: bool = False, **options):
    requested = ({} if resume else {"corpus": str(corpus_dir)} | TINY) | options
    return train_parallel(out, requested, mode, workers, resume=resume, progress=False, log=lambda s: None,
                          timeout=TIMEOUT)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model.safetensors"))


@pytest.mark.parametrize("mode", ["ddp", "vocab"])
def test_two_ranks_train_exactly_like_one_process(mode, random_corpus, tmp_path):
    """Same global batches, same updates: the weights after 2 epochs agree to float tolerance."""
    corpus_dir = tmp_path / "rand"
    options = {"recipe": "paper", "lr": 0.05, "epochs": 2}
    single = tr.train(tmp_path / "one", {"corpus": str(corpus_dir)} | TINY | options, progress=False, log=lambda s: None)
    parallel = _train(tmp_path / mode, corpus_dir, mode, **options)
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / mode)
    assert set(one) == set(two)
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5)
    assert parallel["step"] == single["step"] and parallel["epoch"] == 2
    assert parallel["history"][-1]["valid_ppl"] == pytest.approx(single["history"][-1]["valid_ppl"], rel=1e-4)
    assert parallel["parallel"] == {"mode": mode, "world_size": 2}


def test_vocab_parallel_with_adam_and_dropout_matches_one_process(random_corpus, tmp_path):
    """All ranks share the RNG state, so the dropout masks, and the updates, are the single process's."""
    corpus_dir = tmp_path / "rand"
    options = {"recipe": "modern", "epochs": 1, "bf16": False}
    tr.train(tmp_path / "one", {"corpus": str(corpus_dir)} | TINY | options, progress=False, log=lambda s: None)
    _train(tmp_path / "vp", corpus_dir, "vocab", **options)
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "vp")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5)


def test_resume_with_another_world_size_reshards(random_corpus, tmp_path):
    """A vocab run checkpointed on 2 processes continues on 1 (torchrun-free single rank) and on
    ddp: the checkpoint holds whole tensors, so it is re-sliced on load, and the result equals an
    uninterrupted single-process run."""
    corpus_dir = tmp_path / "rand"
    options = {"recipe": "paper", "lr": 0.05}
    tr.train(tmp_path / "one", {"corpus": str(corpus_dir)} | TINY | options | {"epochs": 2}, progress=False,
             log=lambda s: None)
    _train(tmp_path / "vp", corpus_dir, "vocab", **options, epochs=1)
    state = _train(tmp_path / "vp", corpus_dir, "ddp", workers=1, resume=True, epochs=2)
    assert state["epoch"] == 2 and state["parallel"] == {"mode": "ddp", "world_size": 1}
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "vp")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5)


def test_the_run_directory_is_an_ordinary_one(random_corpus, tmp_path):
    from nnlm.loading import load
    from nnlm.lm import perplexity

    _train(tmp_path / "vp", tmp_path / "rand", "vocab", recipe="paper", lr=0.05, epochs=1)
    model = load(tmp_path / "vp")
    state = tr._read_state(tmp_path / "vp")
    assert perplexity(model, random_corpus, "valid") == pytest.approx(state["best"]["valid_ppl"], rel=1e-9)


def test_hogwild_trains_close_to_one_process(random_corpus, tmp_path):
    corpus_dir = tmp_path / "rand"
    options = {"recipe": "paper", "lr": 0.05, "epochs": 3}
    single = tr.train(tmp_path / "one", {"corpus": str(corpus_dir)} | TINY | options, progress=False, log=lambda s: None)
    hog = _train(tmp_path / "hog", corpus_dir, "hogwild", **options)
    assert hog["epoch"] == 3 and hog["examples"] == single["examples"]
    uniform = len(random_corpus.vocab)
    single_ppl, hog_ppl = single["best"]["valid_ppl"], hog["best"]["valid_ppl"]
    assert hog_ppl < 0.7 * uniform
    assert hog_ppl == pytest.approx(single_ppl, rel=0.1)


def _die_on_rank_1() -> None:
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.all_reduce(torch.ones(1))


def test_a_dead_rank_stops_the_others_with_a_clear_error():
    started = time.monotonic()
    with pytest.raises(NnlmError, match=r"process 1 of 2 stopped \(signal SIGKILL\)"):
        dd.launch_local(_die_on_rank_1, 2, timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT


def test_bad_input_is_one_line(random_corpus, tmp_path):
    corpus_dir = tmp_path / "rand"
    with pytest.raises(NnlmError, match="--parallel must be one of"):
        _train(tmp_path / "x", corpus_dir, "mpi")
    with pytest.raises(NnlmError, match="--workers must be"):
        _train(tmp_path / "x", corpus_dir, "ddp", workers=0)
    with pytest.raises(NnlmError, match="unknown recipe"):  # raised in rank 0, reported by the launcher
        _train(tmp_path / "x", corpus_dir, "ddp", recipe="fancy")
    with pytest.raises(NnlmError, match="leaves rank 2 no words"):
        vocab_slices(2, 3)
