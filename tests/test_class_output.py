"""The class-factored output layer (nnlm.neural.net.class_output): exact gradients, a distribution that sums
to 1, the same numbers on every path (loss, log_prob, distribution, stepping, padded), its classes,
training, saving and loading, the commands, parallel training, and one-line refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import api_call
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from nnlm.cli import main
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.loading import load
from nnlm.neural.lm.class_lm import ClassNeuralLM
from nnlm.neural.net.class_output import ClassNPLM, class_output_loss, within_class_log_probs_padded
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.output_clustering import default_class_count, frequency_classes, output_classes
from nnlm.neural.net.presets import preset
from nnlm.neural.parallel.ranks import ShardLoss, train_parallel
from nnlm.neural.run import train as tr
from nnlm.neural.run.batches import batch_loss

TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 32, "threads": 1, "output_layer": "classes",
        "min_count": 1}  # the vocabulary of the random_corpus fixture


def tiny_class_net(v: int = 13, k: int = 4, h: int = 5, direct: bool = True, seed: int = 0,
                   dtype: torch.dtype = torch.float64) -> ClassNPLM:
    """A small net with a shuffled class map and weights large enough that every factor matters."""
    torch.manual_seed(seed)
    net = ClassNPLM(ModelConfig(vocab_size=v, order=3, hidden=h, features=3, direct=direct, output_classes=k))
    net.set_classes(np.random.default_rng(seed).permutation(np.arange(v) % k))
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 0.7)
    return net.to(dtype)


@pytest.mark.parametrize("h,direct", [(5, True), (0, True), (5, False)])
def test_the_loss_gradient_equals_finite_differences(h, direct):
    """torch.autograd.gradcheck in float64 over every parameter (the within-class softmax's hand-written
    backward included), through the training loss; the targets leave classes 1 and 3 out (their rows'
    gradient is zero)."""
    net = tiny_class_net(h=h, direct=direct)
    names = [name for name, _ in net.named_parameters()]
    candidates = torch.nonzero((net.word_class == 0) | (net.word_class == 2))[:, 0]
    contexts, targets = torch.randint(0, 13, (17, 2)), candidates[torch.randint(0, len(candidates), (17,))]

    def loss(*values: torch.Tensor) -> torch.Tensor:
        return _loss_with(net, names, values, contexts, targets)

    values = [p.detach().clone().requires_grad_() for p in net.parameters()]
    assert torch.autograd.gradcheck(loss, values, fast_mode=True)


def _loss_with(net: ClassNPLM, names: list[str], values, contexts, targets) -> torch.Tensor:
    class Loss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, c, t):
            return class_output_loss(self.net, c, t)

    return torch.func.functional_call(Loss(), {f"net.{n}": v for n, v in zip(names, values, strict=True)},
                                      (contexts, targets))


@settings(max_examples=25, deadline=None)
@given(v=st.integers(2, 40), data=st.data())
def test_the_distribution_sums_to_one_and_every_path_agrees(v, data):
    """Any |V|, K, class map and contexts: the distribution sums to 1; log_prob, the training loss, the
    padded variant and the stateful API give log P of the same distribution."""
    k = data.draw(st.integers(2, v))
    seed = data.draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    classes = np.concatenate([np.arange(k), rng.integers(0, k, v - k)])
    rng.shuffle(classes)
    torch.manual_seed(seed)
    net = ClassNPLM(ModelConfig(vocab_size=v, order=3, hidden=data.draw(st.sampled_from([0, 4])), features=2,
                                direct=data.draw(st.booleans()), output_classes=k))
    net.set_classes(classes)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 2.0)
    lm = ClassNeuralLM(net, Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(2, v))), "<p>")
    contexts = rng.integers(0, v, (25, 2))
    targets = rng.integers(0, v, 25)
    dist = lm.distribution(contexts)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (dist > 0).all()
    log_probs = lm.log_prob(contexts, targets)
    np.testing.assert_allclose(log_probs, np.log(dist[np.arange(25), targets]), rtol=0, atol=2e-5)
    np.testing.assert_allclose(lm.log_partition(contexts), 0.0, atol=2e-5)
    c, t = torch.as_tensor(contexts), torch.as_tensor(targets)
    with torch.no_grad():
        assert float(class_output_loss(net, c, t)) == pytest.approx(-log_probs.mean(), abs=2e-5)
        zs, _ = net.output_operands_from_features(net.features(c))
        torch.testing.assert_close(within_class_log_probs_padded(net, zs, t), net.within_class_log_probs(zs, t))
    state = lm.begin_state(1, contexts[0])
    stepped, _ = lm.advance(state, targets[:1])
    assert stepped[0] == pytest.approx(log_probs[0], abs=2e-5)


@settings(max_examples=60, deadline=None)
@given(v=st.integers(2, 300), data=st.data())
def test_frequency_bins_make_exactly_k_classes_frequent_words_first(v, data):
    k = data.draw(st.integers(2, v))
    train = np.random.default_rng(data.draw(st.integers(0, 99))).zipf(1.5, data.draw(st.integers(1, 3000))) % v
    classes = frequency_classes(train, v, k)
    assert sorted(np.unique(classes)) == list(range(k))
    counts = np.bincount(train, minlength=v)
    ranked = np.argsort(-counts, kind="stable")
    assert (np.diff(classes[ranked]) >= 0).all() and (np.diff(classes[ranked]) <= 1).all()


def test_exchange_classes_are_the_class_based_ngram_clustering(random_corpus):
    from nnlm.wordclasses.exchange import exchange_clusters

    v = len(random_corpus.vocab)
    found = output_classes("exchange", random_corpus.train, v, 7)
    np.testing.assert_array_equal(found, exchange_clusters(random_corpus.train, v, 7, progress=False).classes)
    with pytest.raises(NnlmError, match="can make from 2 to"):
        output_classes("exchange", random_corpus.train, v, v + 5)
    with pytest.raises(NnlmError, match="unknown --output-clustering"):
        output_classes("kmeans", random_corpus.train, v, 7)


def test_the_preset_is_mlp1_with_about_sqrt_v_classes():
    config = preset("mlp1-classes", 17_907)
    assert (config.order, config.hidden, config.features, config.direct) == (5, 50, 60, True)
    assert config.output_classes == default_class_count(17_907) == 134
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert "output_classes" not in preset("mlp1", 100).to_dict()  # old configs stay as they were
    assert config.parameter_count() == sum(p.numel() for p in ClassNPLM(config).parameters())


def test_a_damaged_class_map_is_refused_in_one_line():
    net = tiny_class_net()
    with pytest.raises(NnlmError, match="leave 1 of its 4 classes empty"):
        net.set_classes(np.arange(13) % 3)
    with pytest.raises(NnlmError, match="class ids from 0 to 3"):
        net.set_classes(np.arange(13))


def test_training_saves_the_classes_with_the_model_and_loads_as_a_language_model(random_corpus, tmp_path):
    """Training with --output-layer classes: run.json holds K and the clustering, model.safetensors the
    class map (integers, beside the weights); nnlm.load gives a ClassNeuralLM scoring the saved best
    perplexity; resuming continues exactly as an uninterrupted run."""
    corpus_dir = str(tmp_path / "rand")
    requested = {"corpus": corpus_dir} | TINY
    state = tr.train(tmp_path / "one", requested | {"epochs": 2}, progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "one" / "run.json").read_text())
    v = len(random_corpus.vocab)
    k = default_class_count(v)
    assert (run["output_layer"], run["output_classes"], run["output_clustering"], run["bf16"]) == \
        ("classes", k, "exchange", False)
    assert run["model"]["output_classes"] == k
    weights = load_file(str(tmp_path / "one" / "model.safetensors"))
    np.testing.assert_array_equal(weights["word_class"].numpy(),
                                  output_classes("exchange", random_corpus.train, v, k))
    model = load(tmp_path / "one")
    assert isinstance(model, ClassNeuralLM)
    assert perplexity(model, random_corpus, "valid") == pytest.approx(state["best"]["valid_ppl"], rel=1e-9)
    assert state["best"]["valid_ppl"] < 0.5 * v

    tr.train(tmp_path / "two", requested | {"epochs": 1}, progress=False, log=lambda s: None)
    tr.train(tmp_path / "two", {"epochs": 2}, resume=True, progress=False, log=lambda s: None)
    resumed = load_file(str(tmp_path / "two" / "model.safetensors"))
    for name, tensor in weights.items():
        torch.testing.assert_close(resumed[name], tensor)


def test_frequency_classes_and_an_explicit_k(random_corpus, tmp_path):
    requested = {"corpus": str(tmp_path / "rand"), "output_classes": 5, "output_clustering": "frequency", "epochs": 1}
    tr.train(tmp_path / "f", requested | TINY, progress=False, log=lambda s: None)
    weights = load_file(str(tmp_path / "f" / "model.safetensors"))
    np.testing.assert_array_equal(weights["word_class"].numpy(),
                                  frequency_classes(random_corpus.train, len(random_corpus.vocab), 5))


@pytest.mark.parametrize("options,fragment", [
    ({"loss": "sampled"}, "--loss sampled samples the full softmax; --output-layer classes"),
    ({"bf16": True}, "--bf16 applies to the full softmax"),
    ({"output_layer": "full", "output_classes": 5}, "--output-classes applies to --output-layer classes or tree only"),
    ({"output_layer": None, "output_clustering": "frequency"}, "--output-clustering applies to --output-layer"),
    ({"output_classes": 500}, "--output-classes 500: the exchange clustering of this corpus can make at most"),
])
def test_contradictory_options_are_refused_before_anything_is_written(options, fragment, random_corpus, tmp_path):
    requested = {"corpus": str(tmp_path / "rand")} | TINY | options
    with pytest.raises(NnlmError, match=fragment):
        tr.train(tmp_path / "x", {k: v for k, v in requested.items() if v is not None}, progress=False,
                 log=lambda s: None)
    assert not (tmp_path / "x" / "model.safetensors").exists()


def test_vocab_parallel_refuses_and_ddp_trains_like_one_process(random_corpus, tmp_path):
    corpus_dir = str(tmp_path / "rand")
    requested = {"corpus": corpus_dir} | TINY | {"recipe": "paper", "lr": 0.05, "epochs": 1}
    with pytest.raises(NnlmError, match="--parallel vocab slices the full softmax's output rows"):
        train_parallel(tmp_path / "vp", requested, "vocab", 2, progress=False, log=lambda s: None)
    assert not (tmp_path / "vp").exists()
    single = tr.train(tmp_path / "one", requested, progress=False, log=lambda s: None)
    ddp = train_parallel(tmp_path / "ddp", requested, "ddp", 2, progress=False, log=lambda s: None, timeout=60.0)
    one, two = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("one", "ddp"))
    assert set(one) == set(two)
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5)
    assert ddp["best"]["valid_ppl"] == pytest.approx(single["best"]["valid_ppl"], rel=1e-4)


def test_an_empty_ddp_shard_gives_a_zero_gradient_to_every_parameter():
    net = tiny_class_net(dtype=torch.float32)
    loss = ShardLoss(net, batch_loss)(torch.zeros((0, 2), dtype=torch.long), torch.zeros(0, dtype=torch.long), False)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is not None and not p.grad.any() for p in net.parameters())


def test_hogwild_trains_it(random_corpus, tmp_path):
    requested = {"corpus": str(tmp_path / "rand")} | TINY | {"epochs": 2}
    state = train_parallel(tmp_path / "hog", requested, "hogwild", 2, progress=False, log=lambda s: None)
    assert state["epoch"] == 2 and state["best"]["valid_ppl"] < 0.5 * len(random_corpus.vocab)


@pytest.fixture
def class_run(random_corpus, tmp_path):
    tr.train(tmp_path / "run", {"corpus": str(tmp_path / "rand")} | TINY | {"epochs": 1}, progress=False,
             log=lambda s: None)
    return tmp_path / "run", tmp_path / "rand"


def test_the_commands_use_it(class_run, capsys, tmp_path):
    run_dir, corpus_dir = class_run

    def cli(*args) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = cli("eval", run_dir, "--json")
    assert code == 0, err
    evaluated = json.loads(out)["perplexity"]
    code, out, err = cli("score", run_dir, "--split", "valid", "--json")
    assert code == 0 and json.loads(out)["perplexity"] == evaluated["valid"], err
    code, out, err = cli("generate", run_dir, "--tokens", "8", "--seed", "1")
    assert code == 0 and out.strip(), err
    code, out, err = cli("mix", run_dir, run_dir, "--corpus", corpus_dir, "--json")
    assert code == 0, err
    code, _, err = cli("score", run_dir, "--split", "valid", "--unnormalized")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--unnormalized: this model's class-factored" in err
    code, out, err = cli("eval", run_dir, "--json", "--precision", "bf16")
    assert code == 0 and json.loads(out)["perplexity"] == evaluated, err  # always exact fp32


def test_the_server_scores_it_as_the_library_does(class_run):
    """`nnlm serve`'s score and next endpoints on a class-factored run give the library's numbers."""
    from nnlm.lm import LOG10_E
    from nnlm.serve.api import served_models
    from nnlm.serve.server import ModelServer
    from nnlm.use import next_words, score_words

    model, text = load(class_run[0]), "w1 w2 w3 never-seen\nw4 w5"
    srv = ModelServer(served_models([str(class_run[0])], timeout=20)).start()
    try:
        def call(path: str, body: dict) -> dict:
            status, answer = api_call(srv, path, body)
            assert status == 200, answer
            return answer

        scored = call("/api/score", {"model": "run", "text": text})
        np.testing.assert_allclose([w["log10"] for w in scored["words"]], score_words(model, text) * LOG10_E)
        following = call("/api/next", {"model": "run", "history": "w1 w2", "k": 4})["next"]
        assert [n["word"] for n in following] == [w for w, _ in next_words(model, "w1 w2", 4)]
    finally:
        srv.stop()


def test_unknown_words_get_the_expected_feature_vector(class_run):
    """The paper's C(j) = sum_i C(i) P(i | context) uses the whole factored distribution."""
    model = load(class_run[0])
    words = model.vocab.tokens[4:8]
    text = [words[0], words[1], "never-seen-word", words[2], words[3]]
    scores = model.log_prob_text(text)
    context = np.array([model.vocab.id(w) for w in text[:2]])  # the unknown word's context (n = 3)
    expected = model.distribution(context[None, :])[0] @ model.word_feature_matrix()
    assert np.isfinite(scores).all() and len(scores) == 5
    with torch.no_grad():
        got = model.net.expected_features(torch.as_tensor(context[None, :]))[0].double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

