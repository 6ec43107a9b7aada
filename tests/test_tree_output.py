"""The tree (hierarchical) output layer (nnlm.neural.net.tree_output, nnlm.neural.net.output_tree): exact
normalized probabilities for any tree, its trees, its training options, and its life through the commands."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from nnlm.cli import main
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.loading import load
from nnlm.neural.lm.class_lm import TreeNeuralLM
from nnlm.neural.net.class_output import ClassRowLoss
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.output_tree import balanced_tree, huffman_tree, tree_layout, word_tree
from nnlm.neural.net.tree_output import TreeNPLM, tree_output_loss
from nnlm.neural.run import train as tr

TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 32, "threads": 1, "output_layer": "tree",
        "min_count": 1}


def random_tree(v: int, branching: int, rng: np.random.Generator) -> np.ndarray:
    """A Huffman tree of random counts, words grouped into random classes first (or not): any shape."""
    counts = rng.integers(0, 40, v)
    groupings = [rng.integers(0, max(1, v // 3), v)] if rng.random() < 0.5 else []
    return huffman_tree(counts, branching, groupings)


@settings(max_examples=60, deadline=None)
@given(v=st.integers(2, 40), branching=st.integers(2, 6), data=st.data())
def test_the_distribution_sums_to_one_and_every_path_agrees(v, branching, data):
    """Any |V|, branching, tree and weights: P sums to 1 over V for every context; log_prob along the target's
    path, the training loss (dense and with the touched rows), and the stateful API give log P of the same
    distribution."""
    seed = data.draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    net = TreeNPLM(ModelConfig(vocab_size=v, order=3, hidden=data.draw(st.sampled_from([0, 4])), features=2,
                               direct=data.draw(st.booleans()), output_tree=branching))
    net.set_tree(random_tree(v, branching, rng))
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 2.0)
    lm = TreeNeuralLM(net, Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(2, v))), "<p>")
    contexts, targets = rng.integers(0, v, (25, 2)), rng.integers(0, v, 25)
    dist = lm.distribution(contexts)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (dist > 0).all()
    log_probs = lm.log_prob(contexts, targets)
    np.testing.assert_allclose(log_probs, np.log(dist[np.arange(25), targets]), rtol=0, atol=2e-5)
    np.testing.assert_allclose(lm.log_partition(contexts), 0.0, atol=2e-5)
    c, t = torch.as_tensor(contexts), torch.as_tensor(targets)
    with torch.no_grad():
        assert float(tree_output_loss(net, c, t)) == pytest.approx(-log_probs.mean(), abs=2e-5)
        assert float(ClassRowLoss()(net, c, t)) == pytest.approx(-log_probs.mean(), abs=2e-5)
    stepped, _ = lm.advance(lm.begin_state(1, contexts[0]), targets[:1])
    assert stepped[0] == pytest.approx(log_probs[0], abs=2e-5)


def test_the_touched_rows_gradient_is_the_dense_one():
    """ClassRowLoss through the tree: the gradient of the rows a batch's paths use equals autograd's dense
    gradient in those rows, and the dense gradient is zero in every other row."""
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    net = TreeNPLM(ModelConfig(vocab_size=30, order=3, hidden=5, features=3, direct=True, output_tree=3)).double()
    net.set_tree(random_tree(30, 3, rng))
    c, t = torch.as_tensor(rng.integers(0, 30, (12, 2))), torch.as_tensor(rng.integers(0, 30, 12))
    tree_output_loss(net, c, t).backward()
    rows_loss = ClassRowLoss()
    rows_loss(net, c, t).backward()
    for name, rows, leaf in rows_loss.touched:
        dense = getattr(net, name).grad
        torch.testing.assert_close(leaf.grad, dense[rows])
        if name != "C":
            others = torch.ones(len(dense), dtype=torch.bool)
            others[rows] = False
            assert not dense[others].any()


@pytest.mark.parametrize("branching", [2, 3, 8])
def test_huffman_paths_are_short_for_frequent_words(branching):
    """The frequency tree is Huffman's: a more frequent word never has a longer path, and the mean path
    over the tokens is within one decision of the unigram entropy in base B."""
    counts = np.round(5000 / np.arange(1, 301) ** 1.1).astype(np.int64)
    layout = tree_layout(huffman_tree(counts, branching), 300)
    assert layout.branching == branching
    lengths = np.diff(layout.path_start)
    assert (np.diff(lengths[np.lexsort((lengths, -counts))]) >= 0).all()  # (equal counts: any order)
    p = (counts + 1) / (counts + 1).sum()
    entropy = -(p * np.log(p)).sum() / np.log(branching)
    assert entropy <= (p * lengths).sum() < entropy + 1


def test_the_exchange_tree_nests_the_classes(random_corpus):
    """Every exchange class of the output layer is one subtree: its words share their path down to it."""
    from nnlm.neural.net.output_clustering import output_classes

    train, v = random_corpus.train, len(random_corpus.vocab)
    parent = word_tree("exchange", train, v, 2, 6)
    classes = output_classes("exchange", train, v, 6)
    ancestors = [set() for _ in range(v)]
    for w in range(v):
        node = w
        while parent[node] >= 0:
            node = parent[node]
            ancestors[w].add(int(node))
    for c in range(6):
        members = np.flatnonzero(classes == c)
        common = set.intersection(*(ancestors[w] for w in members))
        outside = set().union(*(ancestors[w] for w in range(v) if classes[w] != c))
        assert len(members) == 1 or common - outside  # a node above this class's words and no other word


def test_a_balanced_tree_is_what_a_fresh_net_has():
    layout = tree_layout(balanced_tree(100, 4), 100)
    assert layout.branching == 4 and layout.max_depth == 4  # ceil(log_4 100)


@pytest.mark.parametrize("damage", ["cycle", "orphan", "one child", "wide"])
def test_a_damaged_tree_is_refused_in_one_line(damage):
    net = TreeNPLM(ModelConfig(vocab_size=8, order=3, hidden=0, features=2, direct=True, output_tree=2))
    parent = balanced_tree(8, 2 if damage != "wide" else 3)
    if damage == "cycle":
        parent[8], parent[9] = 9, 8
    elif damage == "orphan":
        parent[3] = -2
    elif damage == "one child":
        parent[1] = 12  # node 8 keeps one child, word 0
    with pytest.raises(NnlmError, match="output tree") as raised:
        net.set_tree(parent)
    assert "\n" not in str(raised.value)


def test_training_saves_the_tree_and_loads_as_a_language_model(random_corpus, tmp_path):
    """--output-layer tree: run.json holds the choices, model.safetensors the tree beside the weights;
    nnlm.load gives a TreeNeuralLM scoring the saved best perplexity; a resume continues exactly as an
    uninterrupted run; the paper's SGD and a frequency tree of branching 3 train too."""
    requested = {"corpus": str(tmp_path / "rand")} | TINY
    state = tr.train(tmp_path / "one", requested | {"epochs": 2}, progress=False, log=lambda s: None)
    run = json.loads((tmp_path / "one" / "run.json").read_text())
    v = len(random_corpus.vocab)
    assert (run["output_layer"], run["output_clustering"], run["tree_branching"], run["bf16"]) == \
        ("tree", "exchange", 2, False)
    assert run["model"]["output_tree"] == 2 and "output_classes" not in run["model"]
    weights = load_file(str(tmp_path / "one" / "model.safetensors"))
    np.testing.assert_array_equal(weights["tree_parent"].numpy(),
                                  word_tree("exchange", random_corpus.train, v, 2, run["output_classes"]))
    model = load(tmp_path / "one")
    assert isinstance(model, TreeNeuralLM)
    assert perplexity(model, random_corpus, "valid") == pytest.approx(state["best"]["valid_ppl"], rel=1e-9)
    assert state["best"]["valid_ppl"] < 0.5 * v

    tr.train(tmp_path / "two", requested | {"epochs": 1}, progress=False, log=lambda s: None)
    tr.train(tmp_path / "two", {"epochs": 2}, resume=True, progress=False, log=lambda s: None)
    resumed = load_file(str(tmp_path / "two" / "model.safetensors"))
    for name, tensor in weights.items():
        torch.testing.assert_close(resumed[name], tensor)

    other = requested | {"epochs": 1, "recipe": "paper", "lr": 0.05, "tree_branching": 3,
                         "output_clustering": "frequency"}
    state = tr.train(tmp_path / "sgd", other, progress=False, log=lambda s: None)
    assert state["best"]["valid_ppl"] < 0.7 * v
    parent = load_file(str(tmp_path / "sgd" / "model.safetensors"))["tree_parent"].numpy()
    np.testing.assert_array_equal(parent, huffman_tree(np.bincount(random_corpus.train, minlength=v), 3))


@pytest.mark.parametrize("options,fragment", [
    ({"loss": "sampled"}, "--loss sampled samples the full softmax; --output-layer tree"),
    ({"bf16": True}, "--bf16 applies to the full softmax's output layer; --output-layer tree"),
    ({"output_layer": "full", "tree_branching": 4}, "--tree-branching applies to --output-layer tree only"),
    ({"output_clustering": "frequency", "output_classes": 4}, "--output-classes applies to --output-layer classes, "
                                                              "or tree with exchange clustering"),
    ({"output_classes": 500}, "--output-classes 500: the exchange clustering of this corpus can make at most"),
    ({"init_features": "exchange"}, "--output-layer tree has other output rows"),
    ({"energy": True}, "--output-layer tree is an output layer of its own"),
])
def test_contradictory_options_are_refused_before_anything_is_written(options, fragment, random_corpus, tmp_path):
    requested = {"corpus": str(tmp_path / "rand")} | TINY | options
    with pytest.raises(NnlmError, match=fragment):
        tr.train(tmp_path / "x", requested, progress=False, log=lambda s: None)
    assert not (tmp_path / "x" / "model.safetensors").exists()


@pytest.mark.parametrize("args,fragment", [
    (["--tree-branching", "1"], "--tree-branching: must be an integer in [2, 1,024], got 1"),
    (["--tree-branching", "two"], "--tree-branching"),
    (["--output-layer", "trees"], "--output-layer"),
    (["--parallel", "hogwild"], "--output-layer tree trains in one process, not with --parallel hogwild"),
])
def test_bad_values_on_the_command_line_are_one_line(args, fragment, random_corpus, tmp_path, capsys):
    argv = ["train", "--corpus", str(tmp_path / "rand"), "--out", str(tmp_path / "x"), "--output-layer", "tree",
            "--hidden", "4", "--features", "2", *args]
    try:
        code = main(argv)
    except SystemExit as parse_error:  # (argparse's usage errors)
        code = parse_error.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err, err
    assert not (tmp_path / "x").exists()


def test_the_commands_use_it(random_corpus, tmp_path, capsys):
    tr.train(tmp_path / "run", {"corpus": str(tmp_path / "rand")} | TINY | {"epochs": 1}, progress=False,
             log=lambda s: None)
    run_dir, corpus_dir = tmp_path / "run", tmp_path / "rand"

    def cli(*args) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = cli("eval", run_dir, "--json")
    assert code == 0, err
    evaluated = json.loads(out)["perplexity"]
    code, out, err = cli("score", run_dir, "--split", "valid", "--json")
    assert code == 0 and json.loads(out)["perplexity"] == evaluated["valid"], err
    code, out, err = cli("mix", run_dir, run_dir, "--corpus", corpus_dir, "--json")
    assert code == 0, err
    code, _, err = cli("score", run_dir, "--split", "valid", "--unnormalized")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--unnormalized: this model's tree" in err


@pytest.mark.parametrize("branching", [2, 5])
def test_the_compiled_scores_are_the_torch_ones(branching):
    """Exact scoring without a gradient takes the compiled loop (nnlm.neural.net.tree_kernel); with one, the
    torch ops: the same log-probabilities, to float32 rounding."""
    rng = np.random.default_rng(branching)
    torch.manual_seed(branching)
    net = TreeNPLM(ModelConfig(vocab_size=300, order=4, hidden=7, features=5, direct=True, output_tree=branching))
    net.set_tree(random_tree(300, branching, rng))
    net.eval()
    x = net.features(torch.as_tensor(rng.integers(0, 300, (100, 3))))
    targets = torch.as_tensor(rng.integers(0, 300, 100))
    with torch.no_grad():
        compiled = net.target_log_probs_from_features(x, targets)
    torch.testing.assert_close(compiled, net.target_log_probs_from_features(x, targets).detach(), rtol=0, atol=2e-6)
