"""`--init-features exchange`: every word of an exchange class starts from its class's rows of C, U and W, the
class pull's gradient is the penalty's, the run trains and resumes exactly, and contradictory options are refused."""
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
from nnlm.neural.net.feature_init import add_class_pull, feature_classes, tie_rows_to_classes
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.run import train as tr

NET = {"preset": "mlp7", "order": 3, "hidden": 8, "features": 4, "batch_size": 32, "threads": 1}
EXCHANGE = {"init_features": "exchange", "feature_classes": 5}


@pytest.fixture
def gen_dir(tmp_path) -> Path:
    write_corpus(tmp_path / "gen", 3000, words=40, classes=5, seed=3)
    return tmp_path / "gen"


def tiny_net(vocab_size: int) -> NPLM:
    torch.manual_seed(0)
    return NPLM(ModelConfig(vocab_size=vocab_size, order=3, features=4, hidden=8, direct=True))


def test_rows_of_a_class_start_equal(gen_dir):
    corpus = load_corpus(gen_dir, min_count=1)
    v = len(corpus.vocab)
    classes = feature_classes(corpus.train, v, 5)
    assert sorted(set(classes.tolist())) == list(range(5))
    net = tiny_net(v)
    tie_rows_to_classes(net, classes, seed=0)
    for name in ("C", "U", "W"):
        rows = getattr(net, name).detach()
        for k in range(5):
            members = rows[torch.as_tensor(classes == k)]
            assert torch.equal(members, members[:1].expand_as(members)), (name, k)
        firsts = torch.stack([rows[int(np.flatnonzero(classes == k)[0])] for k in range(5)])
        assert torch.unique(firsts, dim=0).shape[0] == 5  # one row per class, different classes differ
    assert net.C.abs().max() <= 0.5


def test_the_pull_is_the_gradient_of_the_within_class_sum_of_squares(gen_dir):
    corpus = load_corpus(gen_dir, min_count=1)
    v = len(corpus.vocab)
    classes = feature_classes(corpus.train, v, 5)
    plain, pulled = tiny_net(v), tiny_net(v)
    add_class_pull(pulled, classes, 0.3)
    contexts = torch.as_tensor(np.stack([corpus.train[:40], corpus.train[1:41]], axis=1)).long()
    targets = torch.as_tensor(corpus.train[2:42]).long()
    penalty = 0.0
    for name in ("C", "U", "W"):
        rows = getattr(plain, name)
        means = torch.stack([rows[torch.as_tensor(classes == k)].mean(0) for k in range(5)])
        penalty = penalty + 0.15 * ((rows - means[torch.as_tensor(classes)]) ** 2).sum()
    loss = torch.nn.functional.cross_entropy(plain(contexts), targets)
    (loss + penalty).backward()
    torch.nn.functional.cross_entropy(pulled(contexts), targets).backward()
    for name, param in plain.named_parameters():
        torch.testing.assert_close(dict(pulled.named_parameters())[name].grad, param.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("recipe", [{}, {"recipe": "paper"}, {"recipe": "paper", "bf16": True}],
                         ids=["default", "paper-kept-fp32", "paper-kept-bf16"])
def test_a_run_from_classes_trains_stores_its_options_and_resumes_exactly(recipe, gen_dir, tmp_path):
    """The default recipe pulls through gradient hooks; the paper's (the kept output layer) in its update."""
    requested = {"corpus": str(gen_dir)} | NET | EXCHANGE | recipe
    state = tr.train(tmp_path / "one", requested | {"epochs": 2}, progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "one" / "run.json").read_text())
    assert (run["init_features"], run["feature_classes"], run["class_pull"]) == ("exchange", 5, 1.0)
    assert state["best"]["valid_ppl"] < 40
    tr.train(tmp_path / "two", requested | {"epochs": 1}, progress=False, log=lambda s: None)
    tr.train(tmp_path / "two", {"epochs": 2}, resume=True, progress=False, log=lambda s: None)
    one, two = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("one", "two"))
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor)


def test_a_pull_too_strong_for_its_step_stops_with_a_hint_to_lower_it(gen_dir, tmp_path):
    from nnlm.neural.run.trainer import TrainingDiverged

    requested = {"corpus": str(gen_dir)} | NET | EXCHANGE | {"recipe": "paper", "class_pull": 1e6, "epochs": 1}
    with pytest.raises(TrainingDiverged, match="Try a smaller --lr, --batch-size or --class-pull"):
        tr.train(tmp_path / "run", requested, progress=False, log=lambda s: None)


@pytest.mark.parametrize("options,fragment", [
    ({"feature_classes": 5}, "--feature-classes applies to --init-features exchange only"),
    ({"class_pull": 1.0}, "--class-pull applies to --init-features exchange only"),
    (EXCHANGE | {"loss": "sampled"}, "it trains the full softmax, not --loss sampled"),
    (EXCHANGE | {"output_layer": "classes"}, "--output-layer classes has other output rows"),
    (EXCHANGE | {"energy": True}, "the energy network"),
    ({"init_features": "exchange", "feature_classes": 500}, "--feature-classes 500: the exchange clustering"),
])
def test_contradictory_options_are_refused_before_anything_is_written(options, fragment, gen_dir, tmp_path):
    with pytest.raises(NnlmError, match=fragment):
        tr.train(tmp_path / "x", {"corpus": str(gen_dir)} | NET | options | {"epochs": 1}, progress=False,
                 log=lambda s: None)
    assert not (tmp_path / "x").exists()


def test_parallel_trainers_refuse_it_before_anything_is_written(gen_dir, tmp_path):
    from nnlm.neural.parallel.ranks import train_parallel

    with pytest.raises(NnlmError, match="--init-features exchange pulls the rows towards their classes in one process"):
        train_parallel(tmp_path / "h", {"corpus": str(gen_dir)} | NET | EXCHANGE | {"epochs": 1}, "hogwild", 2,
                       progress=False, log=lambda s: None)
    assert not (tmp_path / "h").exists()


def test_a_run_json_from_before_the_trigram_refinement_resumes_with_exchange_classes(gen_dir, tmp_path):
    requested = {"corpus": str(gen_dir)} | NET | EXCHANGE
    tr.train(tmp_path / "old", requested | {"epochs": 1}, progress=False, log=lambda s: None)
    path = tmp_path / "old" / "run.json"
    run = json.loads(path.read_text())
    assert run.pop("feature_clustering") == "exchange"
    path.write_text(json.dumps(run))
    state = tr.train(tmp_path / "old", {"epochs": 2}, resume=True, progress=False, log=lambda s: None)
    assert state["epoch"] == 2


def test_the_same_classes_are_clustered_once_a_process_and_handed_out_as_copies(gen_dir, monkeypatch):
    """auto's evidence and the run's setup ask for the same classes: the second ask is remembered."""
    import nnlm.neural.net.feature_init as fi
    import nnlm.neural.net.output_clustering as oc

    monkeypatch.setattr(fi, "_CLUSTERED", {})  # (nothing remembered from other tests in this process)
    corpus = load_corpus(gen_dir, min_count=1)
    v = len(corpus.vocab)
    calls = []
    clustering = oc.output_classes
    monkeypatch.setattr(oc, "output_classes", lambda *args: calls.append(args[3]) or clustering(*args))
    first = feature_classes(corpus.train, v, 6)
    refined = feature_classes(corpus.train, v, 6, "trigram")
    first[:] = 0  # a caller's copy; the remembered classes are not changed by it
    again, refined_again = feature_classes(corpus.train, v, 6), feature_classes(corpus.train, v, 6, "trigram")
    assert calls == [6] and again.max() > 0 and np.array_equal(refined, refined_again)
    other = corpus.train.copy()
    other[:2] = other[2:4]  # another text: clustered anew
    feature_classes(other, v, 6)
    assert calls == [6, 6]
