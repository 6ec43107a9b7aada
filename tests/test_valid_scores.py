"""The best epoch's validation scores kept beside its weights (nnlm.neural.run.checkpoint): they are the loaded
model's scores bit for bit, whatever the thread count, and are never used for other weights."""
import json

import numpy as np
import pytest
import torch

from nnlm.lm import perplexity_from_log_probs, split_log_probs
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.checkpoint import load_neural
from nnlm.neural.run.train import train


@pytest.fixture
def sampled_run(random_corpus, tmp_path):
    """A small net with direct connections and a hidden layer (MLP1's kind), 3 epochs of the sampled loss."""
    run = tmp_path / "run"
    train(run, {"corpus": str(tmp_path / "rand"), "preset": "mlp1", "hidden": 8, "features": 6, "batch_size": 32,
                "loss": "sampled", "samples": 20, "threads": 1, "epochs": 3}, progress=False, log=lambda s: None)
    return run, random_corpus


def test_the_kept_scores_are_the_best_models_scores_bit_for_bit(sampled_run):
    run, corpus = sampled_run
    kept = ck.kept_valid_scores(run, len(corpus.valid))
    assert kept is not None and kept.dtype == np.float64 and len(kept) == len(corpus.valid)
    model = load_neural(run)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):  # the job may score at another thread count than the epoch validated at
            torch.set_num_threads(threads)
            assert np.array_equal(kept, split_log_probs(model, corpus, "valid"))
    finally:
        torch.set_num_threads(before)
    state = json.loads((run / ck.STATE).read_text())
    assert perplexity_from_log_probs(kept) == state["best"]["valid_ppl"]


def test_scores_of_other_weights_or_another_split_are_not_used(sampled_run):
    run, corpus = sampled_run
    assert ck.kept_valid_scores(run, len(corpus.valid) + 1) is None  # another split
    tensors, meta = ck.load_tensors(run / ck.WEIGHTS)
    tensors["b"] = tensors["b"] + 1.0
    ck.save_tensors(run / ck.WEIGHTS, tensors, meta)  # weights written since (another version, another run)
    assert ck.kept_valid_scores(run, len(corpus.valid)) is None
    (run / ck.VALID_SCORES).write_bytes(b"damaged")
    assert ck.kept_valid_scores(run, len(corpus.valid)) is None
    (run / ck.VALID_SCORES).unlink()
    assert ck.kept_valid_scores(run, len(corpus.valid)) is None


def test_the_job_reads_the_kept_scores_instead_of_scoring_valid_again(random_corpus, tmp_path, monkeypatch):
    from nnlm.reproduce import ReproduceRequest, job, reproduce

    scored: list[str] = []
    real = job.split_log_probs

    def counting(model, corpus, split, *args, **kwargs):
        scored.append(f"{type(model).__name__}:{split}")
        return real(model, corpus, split, *args, **kwargs)

    monkeypatch.setattr(job, "split_log_probs", counting)
    out = tmp_path / "report"
    reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.3, "mlp7", False, "nnlm reproduce (test)",
                               progress=False, threads=1), log=lambda s: None)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert "NeuralLM:valid" not in scored and "NeuralLM:test" in scored
    model = load_neural(out / rows["mlp7"]["run"])
    assert rows["mlp7"]["perplexity"]["valid"] == perplexity_from_log_probs(split_log_probs(model, random_corpus,
                                                                                             "valid"))
