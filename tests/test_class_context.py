"""`--class-context`: the class-pair row of the last two context words joins x; the net sums to 1, saves its
class map with its weights, resumes exactly, scores words outside V, and bad combinations or a damaged class
map are refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nnlm.data import load_corpus
from nnlm.data.synthetic import write_corpus
from nnlm.errors import NnlmError
from nnlm.neural.net.feature_init import feature_classes
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.run import train as tr
from nnlm.neural.run.checkpoint import load_neural, load_tensors, save_tensors

NET = {"preset": "mlp7", "order": 3, "hidden": 8, "features": 4, "batch_size": 32, "threads": 1}
PAIRS = {"init_features": "exchange", "feature_classes": 5, "class_context": True}


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cc") / "gen"
    write_corpus(path, 3000, words=40, classes=5, seed=3)
    return path


@pytest.fixture(scope="module")
def trained(gen_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ccrun") / "run"
    tr.train(out, {"corpus": str(gen_dir)} | NET | PAIRS | {"epochs": 2}, progress=False, log=lambda s: None)
    return out


def test_x_ends_with_the_row_of_the_last_two_words_class_pair():
    torch.manual_seed(0)
    net = NPLM(ModelConfig(vocab_size=6, order=4, hidden=3, features=2, class_context=3))
    net.set_context_classes(np.array([0, 1, 2, 0, 1, 2]), unknown=4)
    contexts = torch.tensor([[0, 1, 2], [5, 4, 3], [1, 2, 6]])  # 6: a word outside V (the unknown's class, 1)
    table = torch.cat([net.C.detach(), torch.zeros(1, 2)])
    x = net.embed(contexts, table)
    assert x.shape == (3, 3 * 2 + 3) == (3, net.config.input_size)
    for row, (c1, c2) in enumerate([(1, 2), (1, 0), (2, 1)]):
        torch.testing.assert_close(x[row, -3:], net.P[c1 * 3 + c2].detach())
        torch.testing.assert_close(x[row, :-3], table[contexts[row]].flatten())
    assert net.config.parameter_count() == sum(p.numel() for p in net.parameters())


def test_a_run_stores_its_pairs_sums_to_one_and_scores_unknown_words(trained, gen_dir):
    run = json.loads((trained / "run.json").read_text())
    assert run["class_context"] is True and run["model"]["class_context"] == 5
    weights = load_file(str(trained / "model.safetensors"))
    assert weights["P"].shape == (25, 5) and weights["context_class"].shape == (41,)
    model = load_neural(trained)
    corpus = load_corpus(gen_dir, min_count=1)
    unk = model.vocab.unk_id
    assert int(model.net.context_class[-1]) == int(model.net.context_class[unk])
    rng = np.random.default_rng(0)
    contexts = rng.integers(0, len(model.vocab), size=(50, 2))
    dist = model.distribution(contexts)
    np.testing.assert_allclose(dist.sum(1), 1.0, atol=1e-9)
    targets = rng.integers(0, len(model.vocab), size=50)
    np.testing.assert_allclose(model.log_prob(contexts, targets), np.log(dist[np.arange(50), targets]), atol=1e-5)
    state = model.begin_state(1, contexts[0])  # the stateful API agrees (it scores through log_prob)
    step, _ = model.advance(state, [targets[0]])
    np.testing.assert_allclose(step, model.log_prob(contexts[:1], targets[:1]), atol=1e-6)
    words = corpus.vocab.decode(corpus.valid[:30])
    scores = model.log_prob_text(words[:10] + ["never-seen", "words-here"] + words[10:])
    assert scores.shape == (32,) and np.isfinite(scores).all()


@pytest.mark.parametrize("clustering", ["exchange", "trigram"])
def test_it_resumes_to_the_same_weights(clustering, gen_dir, tmp_path):
    requested = {"corpus": str(gen_dir)} | NET | PAIRS | {"feature_clustering": clustering}
    tr.train(tmp_path / "one", requested | {"epochs": 2}, progress=False, log=lambda s: None)
    tr.train(tmp_path / "two", requested | {"epochs": 1}, progress=False, log=lambda s: None)
    tr.train(tmp_path / "two", {"epochs": 2}, resume=True, progress=False, log=lambda s: None)
    one, two = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("one", "two"))
    corpus = load_corpus(gen_dir, min_count=json.loads((tmp_path / "one" / "run.json").read_text())["min_count"])
    expected = feature_classes(corpus.train, len(corpus.vocab), 5, clustering)  # the run's classes are these
    np.testing.assert_array_equal(one["context_class"][:-1].numpy(), expected)
    assert set(one) == set(two)
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor)


@pytest.mark.parametrize("options,fragment", [
    ({"class_context": True}, "--class-context applies to --init-features exchange only"),
    ({"feature_clustering": "trigram"}, "--feature-clustering applies to --init-features exchange only"),
    (PAIRS | {"order": 2}, "--class-context needs n >= 3"),
])
def test_bad_combinations_are_refused_before_anything_is_written(options, fragment, gen_dir, tmp_path):
    with pytest.raises(NnlmError, match=fragment):
        tr.train(tmp_path / "x", {"corpus": str(gen_dir)} | NET | options | {"epochs": 1}, progress=False,
                 log=lambda s: None)
    assert not (tmp_path / "x").exists()


def test_a_damaged_class_map_is_one_clear_error(trained, tmp_path):
    import shutil

    copy = tmp_path / "bad"
    shutil.copytree(trained, copy)
    weights, meta = load_tensors(copy / "model.safetensors")
    weights["context_class"][3] = 99  # (a well-formed file with its checksum: the class map itself is bad)
    save_tensors(copy / "model.safetensors", weights, {k: v for k, v in meta.items() if k != "sha256"})
    with pytest.raises(NnlmError, match="context classes must be class ids from 0 to 4"):
        load_neural(copy)


def test_auto_takes_the_classes_where_they_explain_the_text(gen_dir, tmp_path):
    tr.train(tmp_path / "auto", {"corpus": str(gen_dir)} | NET | {"epochs": 1}, progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "auto" / "run.json").read_text())
    evidence = run["init_evidence"]
    assert evidence["class_trigram_valid"] < 0.9 * evidence["kn_trigram_valid"]
    assert (run["init_features"], run["class_context"]) == ("exchange", True)
    assert run["model"]["class_context"] == run["feature_classes"] == evidence["classes"]
    refined = evidence["refined_class_trigram_valid"] < evidence["class_trigram_valid"]
    assert run["feature_clustering"] == ("trigram" if refined else "exchange")


def test_auto_keeps_random_rows_where_words_not_classes_explain_the_text(tmp_path):
    rng = np.random.default_rng(0)  # 60 fixed 5-word phrases: word sequences, no classes behind them
    phrases = rng.integers(0, 60, size=(60, 5))
    for split, lines in (("train", 600), ("valid", 60), ("test", 60)):
        rows = phrases[rng.integers(0, 60, size=lines)]
        (tmp_path / "phr").mkdir(exist_ok=True)
        (tmp_path / "phr" / f"{split}.txt").write_text("\n".join(" ".join(f"w{i}" for i in r) for r in rows) + "\n")
    tr.train(tmp_path / "auto", {"corpus": str(tmp_path / "phr"), "min_count": 1} | NET | {"epochs": 1},
             progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "auto" / "run.json").read_text())
    assert run["init_evidence"]["class_trigram_valid"] > run["init_evidence"]["kn_trigram_valid"]
    assert (run["init_features"], run["class_context"], run["model"].get("class_context")) == ("random", None, None)


@pytest.mark.parametrize("options", [{"loss": "sampled"}, {"order": 2}, {"parallel": "hogwild"}])
def test_auto_is_random_without_counting_where_rows_cannot_be_tied(options, gen_dir, tmp_path):
    requested = {"corpus": str(gen_dir)} | NET | {k: v for k, v in options.items() if k != "parallel"} | {"epochs": 1}
    if "parallel" in options:
        from nnlm.neural.parallel.ranks import train_parallel

        train_parallel(tmp_path / "r", requested, options["parallel"], 2, progress=False, log=lambda s: None)
    else:
        tr.train(tmp_path / "r", requested, progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (run["init_features"], run["init_evidence"]) == ("random", None)
