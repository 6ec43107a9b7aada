"""The recurrent NPLM (nnlm.neural.net.recurrent, --recurrent lstm / rnn): distributions that sum to 1 for any
context and state, the stateful API against whole-text scoring, chunked and piecewise stream scoring against
one call, training through `nnlm train` with an exact --resume, every command's path, mixing with a KN model,
and the one-line refusals."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.lm import chunked_log_probs, perplexity, stream_log_probs, text_stream
from nnlm.neural.lm.recurrent_lm import RecurrentLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import build_net, language_model

V = 12
SHAPES = [  # (cell, layers, h, m, direct, tied)
    ("lstm", 2, 6, 6, False, True),
    ("rnn", 1, 5, 3, True, False),
    ("lstm", 1, 4, 3, True, False),
]


def recurrent_lm(cell: str, layers: int, h: int, m: int, direct: bool, tied: bool, order: int = 4) -> RecurrentLM:
    torch.manual_seed(0)
    config = ModelConfig(V, order, h, m, direct, layers=layers, recurrent=cell, tied=tied)
    net = build_net(config)
    with torch.no_grad():  # larger weights than the initial ones, so that the state matters
        for p in net.parameters():
            p.mul_(4.0)
    vocab = Vocabulary([f"w{i}" for i in range(V - 3)] + ["<unk>", "<p>", "<text>"])
    lm = language_model(net, vocab, "<text>")
    assert isinstance(lm, RecurrentLM)
    return lm


ids_of = st.lists(st.integers(0, V - 1), min_size=1, max_size=25)


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=8, deadline=None)
@given(contexts=st.lists(st.lists(st.integers(0, V - 1), min_size=3, max_size=3), min_size=1, max_size=6),
       history=ids_of)
def test_distributions_sum_to_one_for_any_context_and_state(shape, contexts, history):
    lm = recurrent_lm(*shape)
    dist = lm.distribution(np.array(contexts))
    assert np.allclose(dist.sum(axis=1), 1.0, atol=1e-9) and (dist >= 0).all()
    targets = np.array([c[0] for c in contexts])
    assert np.allclose(lm.log_prob(np.array(contexts), targets), np.log(dist[np.arange(len(dist)), targets]))
    state = lm.begin_state(1, history)
    every, _ = lm.advance(state.take([0] * V), np.arange(V))
    assert np.exp(every).sum() == pytest.approx(1.0, abs=1e-5)  # (fp32 logits)


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=8, deadline=None)
@given(ids=ids_of)
def test_states_give_the_numbers_of_whole_text_scoring(shape, ids):
    """Word by word through states, in chunks of any size, and in pieces that carry only the last n-1 ids
    (nnlm.score_stream's next piece of a long file): the numbers of one call over the whole text, which
    restarts after every <text> (id V-1) inside it."""
    lm = recurrent_lm(*shape)
    ids = np.array(ids)
    whole = stream_log_probs(lm, ids)
    state, stepped = lm.begin_state(1), []
    for word in ids:
        lp, state = lm.advance(state, [word])
        stepped.append(lp[0])
    assert np.allclose(stepped, whole, atol=1e-5)
    k, pad = lm.context_size, V - 1
    stream = text_stream(ids, k, pad)
    assert np.allclose(chunked_log_probs(lm, stream, k, len(ids), pad, chunk=4), whole, atol=1e-5)
    cut = len(ids) // 2
    first = lm.stream_log_prob(stream, k, cut, pad)
    rest = stream[cut:]  # the next piece: the last k ids scored, then the new ones
    assert np.allclose(np.concatenate([first, lm.stream_log_prob(rest.copy(), k, len(ids) - cut, pad)]), whole,
                       atol=1e-5)


def test_a_text_inside_a_stream_is_read_from_its_start():
    """A call that begins inside a text reads it from its start-of-text token (or from `since_start`'s start):
    the numbers of scoring the text alone; a row shorter than its text's start is the text itself."""
    lm = recurrent_lm(*SHAPES[0])
    text = np.array([1, 2, 3, 4, 5, 6, 7, 2])
    stream = np.concatenate([[3, 4, 5, 0, V - 1], text])
    alone = stream_log_probs(lm, text)
    assert np.allclose(lm.stream_log_prob(stream, 8, 5, V - 1), alone[3:], atol=1e-5)
    lm._carry = None
    since = np.arange(3, 8)
    assert np.allclose(lm.stream_log_prob(np.concatenate([[4, 4], text]), 5, 5, V - 1, since), alone[3:], atol=1e-5)
    rows = np.array([[V - 1, 1, 2], [V - 1, V - 1, 1]])
    assert np.allclose(lm.log_prob(rows, np.array([3, 2])), [alone[2], alone[1]], atol=1e-5)


def test_the_config_round_trips_and_old_configs_load_as_before():
    config = ModelConfig(100, 36, 20, 20, False, layers=2, recurrent="lstm", tied=True)
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert "recurrent" not in ModelConfig(100, 5, 50, 60, True).to_dict()
    net = build_net(config)
    assert sum(p.numel() for p in net.parameters()) == config.parameter_count()
    rnn = ModelConfig(100, 6, 7, 5, True, recurrent="rnn")
    assert sum(p.numel() for p in build_net(rnn).parameters()) == rnn.parameter_count()


def train_args(corpus: Path, out: Path, *more: str) -> list[str]:
    return ["train", "--corpus", str(corpus), "--out", str(out), "--preset", "lstm", "--hidden", "8", "--features",
            "8", "--order", "6", "--batch-size", "40", "--threads", "1", "--no-progress", *more]


def test_training_resumes_exactly_and_every_command_takes_the_run(random_corpus, tmp_path, capsys):
    from nnlm.cli import main
    from nnlm.neural.run.checkpoint import WEIGHTS, load_tensors

    corpus, whole, cut = tmp_path / "rand", tmp_path / "whole", tmp_path / "cut"
    assert main(train_args(corpus, whole, "--epochs", "2", "--json")) == 0
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["best"]["valid_ppl"]
    assert main(train_args(corpus, cut, "--epochs", "2", "--time-budget", "0")) == 0  # one window, then stop
    assert main(["train", "--out", str(cut), "--resume", "--epochs", "2", "--time-budget", "10", "--threads", "1",
                 "--no-progress"]) == 0
    a, b = load_tensors(whole / WEIGHTS)[0], load_tensors(cut / WEIGHTS)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)

    import nnlm
    lm = nnlm.load(str(whole))
    assert isinstance(lm, RecurrentLM)
    assert perplexity(lm, nnlm.load_corpus(str(corpus), use_cache=False), "valid") == pytest.approx(best, rel=1e-6)
    text = tmp_path / "text.txt"
    text.write_text("w1 w2 w3 w4\nw5 w0 w9\n")
    assert main(["eval", str(whole), "--split", "valid,test"]) == 0
    assert main(["score", str(whole), str(text)]) == 0
    assert main(["generate", str(whole), "--tokens", "5", "--seed", "1"]) == 0
    capsys.readouterr()
    assert main(["score", str(whole), str(text), "--oov-vector"]) == 2
    assert "--oov-vector applies to the feed-forward nets only, not to the recurrent net" in capsys.readouterr().err
    assert main(["mix", str(whole), "kn:3", "--corpus", str(corpus), "--json"]) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert 0 < mixed["perplexity"]["valid"] < best


def test_a_mixture_with_kn_sums_to_one_and_scores(random_corpus):
    from nnlm.loading import build_count_model
    from nnlm.mixture import Mixture, mix_on_corpus

    torch.manual_seed(0)
    net = build_net(ModelConfig(len(random_corpus.vocab), 4, 6, 6, False, recurrent="lstm", tied=True))
    lm = language_model(net, random_corpus.vocab, random_corpus.pad_token)
    kn = build_count_model("kn", random_corpus, 3)
    fitted = mix_on_corpus([lm, kn], random_corpus, "em")
    assert np.isfinite(fitted.perplexity["valid"])
    mix = Mixture([lm, kn], [0.3, 0.7])
    contexts = np.array([[1, 2, 3], [random_corpus.pad_id] * 3])
    assert np.allclose(mix.distribution(contexts).sum(axis=1), 1.0)


def test_the_sampled_loss_at_every_word_is_the_softmax_cross_entropy():
    """With K = |V| samples and no self-normalization term, the recurrent net's sampled loss (its operands'
    rows gathered through autograd) is the exact cross-entropy, and so are its gradients."""
    from nnlm.neural.net.sampled import SampledLoss, proposal
    from nnlm.neural.net.softmax_loss import softmax_cross_entropy

    lm = recurrent_lm("lstm", 1, 4, 3, True, False)
    net, targets = lm.net, torch.tensor([1, 5, 5, 0, 11])
    a, x, _ = net.read(torch.tensor([[10, 2, 3, 4, 7]]), np.zeros((1, 5), dtype=bool))
    zs = [z.reshape(5, -1) for z in net.output_operands(a, x)]
    sampled = SampledLoss("sampled", proposal(np.arange(V), V), V, alpha=0.0)
    losses = [sampled.output_loss(zs, net.output_weights(), net.b, targets),
              softmax_cross_entropy(zs, net.output_weights(), net.b, targets, torch.float32)]
    grads = [torch.autograd.grad(loss, [net.C, net.U, net.W, net.b], retain_graph=True) for loss in losses]
    assert losses[0].item() == pytest.approx(losses[1].item(), rel=1e-5)
    assert all(torch.allclose(g, h, atol=1e-6) for g, h in zip(*grads, strict=True))


def test_a_sampled_recurrent_run_learns_and_scores_exactly(random_corpus, tmp_path, capsys):
    from nnlm.cli import main

    corpus, out = tmp_path / "rand", tmp_path / "sampled"
    assert main(train_args(corpus, out, "--epochs", "2", "--loss", "sampled", "--samples", "6", "--json")) == 0
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["best"]["valid_ppl"]
    assert main(["eval", str(out), "--split", "valid"]) == 0  # (no log Z for a sampled recurrent run: normalized)
    assert main(["eval", str(out), "--log-z"]) == 2 and "a recurrent net is scored normalized only" in \
        capsys.readouterr().err
    import nnlm
    assert best < len(random_corpus.vocab)
    assert perplexity(nnlm.load(str(out)), nnlm.load_corpus(str(corpus), use_cache=False), "valid") == \
        pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--recurrent", "gru"], "invalid choice: 'gru'"),
    (["--tied", "--hidden", "6"], "--tied uses C as the output weights U of a recurrent net"),
    (["--preset", "mlp1", "--tied", "--hidden", "0"], "--tied uses C as the output weights U of the full softmax's"),
    (["--parallel", "hogwild"], "trains in one process, not --parallel hogwild"),
    (["--energy", "--layers", "1"], "--recurrent lstm needs a hidden state (h > 0) and the full softmax"),
    (["--hidden", "0", "--no-tied", "--layers", "1"], "--recurrent lstm needs a hidden state"),
    (["--init-features", "exchange"], "the recurrent net (--recurrent) has other output rows"),
])
def test_what_the_recurrent_net_cannot_do_is_one_line(args, message, random_corpus, tmp_path, capsys):
    from nnlm.cli import main

    out = tmp_path / "run"
    base = ["train", "--corpus", str(tmp_path / "rand"), "--out", str(out), "--epochs", "1", "--threads", "1",
            "--no-progress", "--hidden", "8", "--features", "8", "--order", "4"]
    preset = [] if "--preset" in args else ["--preset", "lstm"]
    try:
        code = main(base + preset + args)
    except SystemExit as usage:  # (argparse's own: a value outside --recurrent's choices)
        code = usage.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert not Path(out / "model.safetensors").exists()


def test_a_mixture_scores_its_recurrent_part_from_the_whole_text(random_corpus):
    """A mixture's stream scores are its components' own (the LSTM's from each token's whole text, not its n-1
    words), mixed per bucket: a saved `nnlm mix` scores what the mix was fitted on, chunked or not."""
    from nnlm.lm import split_log_probs, stream_contexts
    from nnlm.loading import build_count_model
    from nnlm.mixture import Mixture, mix_on_corpus

    torch.manual_seed(0)
    net = build_net(ModelConfig(len(random_corpus.vocab), 3, 6, 6, False, recurrent="lstm", tied=True))
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(4.0)  # so that words further back than n-1 change the scores
    lm = language_model(net, random_corpus.vocab, random_corpus.pad_token)
    kn = build_count_model("kn", random_corpus, 3)
    fitted = mix_on_corpus([lm, kn], random_corpus, "em-buckets")
    mix = fitted.model
    whole = split_log_probs(mix, random_corpus, "valid")
    assert np.allclose(whole, fitted.split_log_probs["valid"], rtol=0, atol=1e-9)
    chunked = split_log_probs(mix, random_corpus, "valid", chunk=7)
    assert np.allclose(chunked, whole, rtol=0, atol=1e-6)  # (the LSTM in other blocks: fp32 rounding)
    ids = random_corpus.split("valid")
    offset = random_corpus.split_offset("valid")
    rows = mix.log_prob(stream_contexts(random_corpus.stream(), np.arange(offset, offset + len(ids)), mix.context_size,
                                        random_corpus.pad_id), ids.astype(np.int64))
    assert not np.allclose(rows, whole, rtol=0, atol=1e-6)  # rows show the LSTM only n-1 words
    assert isinstance(mix, Mixture)

