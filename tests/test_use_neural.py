"""Using a trained neural model: scoring (same numbers as `nnlm eval`, the OOV feature vector,
long lines in bounded memory), nearest neighbors, the feature map and exports."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_cli import run

from nnlm.cli import main
from nnlm.data.corpus import load_corpus
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import EVAL_CHUNK, perplexity, split_log_probs
from nnlm.loading import load
from nnlm.neural.lm import direct_tables
from nnlm.neural.lm import scoring as neural_scoring
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.net.features import neighbors, pca_2d, word2vec_text
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.ngram.simple import AddOneBigram
from nnlm.use import score_lines, score_words


@pytest.fixture
def cli(capsys):
    """`nnlm ARGS` in this process (no interpreter start-up): (exit code, stdout, stderr)."""
    def call(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return call


def one_line_error(result: tuple[int, str, str], fragment: str) -> None:
    code, _, err = result
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err, err


@pytest.fixture
def saved_addone(random_corpus, tmp_path):
    AddOneBigram.fit(random_corpus.vocab, random_corpus.train).save(tmp_path / "addone")
    return tmp_path / "addone"


def test_score_split_is_eval_same_function_same_number(neural_run, cli):
    run_dir, _ = neural_run
    evaluated = json.loads(cli("eval", run_dir, "--json")[1])["perplexity"]
    for split in ("valid", "test"):
        code, out, err = cli("score", run_dir, "--split", split, "--json")
        assert code == 0, err
        scored = json.loads(out)
        assert scored["perplexity"] == evaluated[split]  # exactly: one function computes both
        assert scored["tokens"] == len(load_corpus(str(neural_run[1])).split(split))


def test_scoring_the_train_file_equals_split_log_probs(neural_run):
    run_dir, corpus_dir = neural_run
    model, corpus = load(run_dir), load_corpus(str(corpus_dir))
    scores, _ = score_lines(model, (corpus_dir / "train.txt").read_text().splitlines())
    ours = np.concatenate([s.word_log10 for s in scores]) / np.log10(np.e)
    np.testing.assert_allclose(ours, split_log_probs(model, corpus, "train"), rtol=1e-12)


def test_cli_file_and_split_agree_for_an_ngram_model(saved_addone, tmp_path, cli):
    train_file = tmp_path / "rand" / "train.txt"
    by_file = json.loads(cli("score", saved_addone, train_file, "--json")[1])["total"]
    by_split = json.loads(cli("score", saved_addone, "--split", "train", "--corpus", tmp_path / "rand", "--json")[1])
    assert by_file["tokens"] == by_split["tokens"]
    assert by_file["log10_prob"] == pytest.approx(by_split["log10_prob"], rel=1e-12)
    assert by_file["perplexity"] == pytest.approx(by_split["perplexity"], rel=1e-9)


def test_oov_vector_changes_only_the_words_after_an_unknown_word(neural_run):
    model = load(neural_run[0])
    k = model.context_size
    text = "w1 w2 zebra w3 w4 w5 w6\nw2 w3"
    plain, vector = score_words(model, text), score_words(model, text, oov_vector=True)
    at = 2  # zebra's position
    np.testing.assert_array_equal(plain[:at + 1], vector[:at + 1])  # before it, and zebra itself (as <unk>)
    assert np.all(plain[at + 1:at + 1 + k] != vector[at + 1:at + 1 + k])  # its feature vector is in these contexts
    np.testing.assert_allclose(plain[at + 1 + k:], vector[at + 1 + k:], rtol=1e-12)  # out of context again
    clean = "w1 w2 w3 w4\nw5 w6 w7"
    np.testing.assert_allclose(score_words(model, clean, oov_vector=True), score_words(model, clean), rtol=1e-12)
    independent, _ = score_lines(model, ["w1 zebra w2", "w3 w4"], carry_context=False, oov_vector=True)
    assert [s.tokens for s in independent] == [4, 3] and independent[0].oov == 1


def test_oov_vector_is_for_neural_models_only(saved_addone, tmp_path, cli):
    f = tmp_path / "t.txt"
    f.write_text("w1 w2\n")
    one_line_error(cli("score", str(saved_addone), str(f), "--oov-vector"), "neural models only")


def test_a_200k_token_line_is_scored_in_bounded_chunks(neural_run, saved_addone, monkeypatch):
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in rng.integers(0, 60, size=200_000)]
    words[::1000] = ["zebra"] * len(words[::1000])
    line = " ".join(words)
    model = load(neural_run[0])
    rows: list[int] = []
    hidden = model.net.hidden_output  # what every scoring path calls per block (the net has a hidden layer)
    monkeypatch.setattr(model.net, "hidden_output", lambda x, **kw: rows.append(len(x)) or hidden(x, **kw))
    for oov_vector in (False, True):
        rows.clear()
        (score,), _ = score_lines(model, [line], oov_vector=oov_vector)
        assert score.tokens == 200_001 and score.oov == 200 and np.isfinite(score.word_log10).all()
        assert rows and max(rows) <= max(neural_scoring.score_rows(len(model.vocab)), direct_tables.ROWS)
    ngram = load(saved_addone)
    calls: list[int] = []
    log_prob = ngram.log_prob
    monkeypatch.setattr(ngram, "log_prob", lambda c, t: calls.append(len(t)) or log_prob(c, t))
    (score,), _ = score_lines(ngram, [line])
    assert score.tokens == 200_001 and max(calls) <= EVAL_CHUNK and sum(calls) == 200_001


def hand_made_model(rows: dict[str, list[float]]) -> NeuralLM:
    vocab = Vocabulary(tuple(rows))
    net = NPLM(ModelConfig(len(vocab), 2, 0, 2))
    with torch.no_grad():
        net.C.copy_(torch.tensor(list(rows.values())))
    return NeuralLM(net, vocab, "<p>")


def test_neighbors_rank_by_cosine_and_exclude_the_word():
    model = hand_made_model({"<unk>": [-1, -1], "<p>": [-1, 0.5], "monday": [1, 0], "tuesday": [2, 0.1],
                             "cat": [0, 1], "dog": [-0.1, 3], "friday": [0.5, 0.1]})
    ranked = neighbors(model, "monday", 4)
    assert [w for w, _ in ranked] == ["tuesday", "friday", "cat", "dog"]
    assert "monday" not in [w for w, _ in neighbors(model, "monday", len(model.vocab) - 1)]
    assert ranked[0][1] == pytest.approx(2 / np.hypot(2, 0.1))
    with pytest.raises(NnlmError, match="not in the model's vocabulary"):
        neighbors(model, "zebra")
    with pytest.raises(NnlmError, match="between 1 and"):
        neighbors(model, "cat", len(model.vocab))


def test_neighbors_of_a_trained_run_match_brute_force(neural_run, cli):
    model = load(neural_run[0])
    C = model.net.C.detach().double().numpy()
    target = model.vocab.id("w5")
    cos = C @ C[target] / (np.linalg.norm(C, axis=1) * np.linalg.norm(C[target]))
    expected = [model.vocab.tokens[i] for i in np.argsort(-cos, kind="stable") if i != target][:7]
    assert [w for w, _ in neighbors(model, "w5", 7)] == expected
    code, out, _ = cli("neighbors", neural_run[0], "w5", "-k", "7", "--json")
    assert code == 0 and [n["word"] for n in json.loads(out)["neighbors"]] == expected


def test_neighbors_map_and_embeddings_need_a_neural_model(saved_addone, tmp_path, cli):
    one_line_error(cli("neighbors", str(saved_addone), "w1"), "only neural models")
    one_line_error(cli("map", str(saved_addone), "--out", str(tmp_path / "m.png")), "only neural models")
    one_line_error(cli("export", str(saved_addone), "--embeddings", str(tmp_path / "e.txt")), "only neural models")
    assert not (tmp_path / "m.png").exists() and not (tmp_path / "e.txt").exists()


def test_pca_axes_carry_the_most_variance():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(200, 5)) * np.array([5.0, 3.0, 0.1, 0.1, 0.1])
    coords = pca_2d(points)
    assert coords.shape == (200, 2)
    assert np.var(coords[:, 0]) > np.var(coords[:, 1]) > 1.0
    assert np.allclose(coords.mean(axis=0), 0)


def test_map_writes_a_labeled_png(neural_run, tmp_path, cli):
    out = tmp_path / "map.png"
    code, stdout, err = cli("map", neural_run[0], "--out", out, "--top", "20")
    assert code == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "20 words" in stdout
    words = tmp_path / "words.txt"
    words.write_text("w1 w2 w3\nw4 zebra\n")
    one_line_error(cli("map", str(neural_run[0]), "--out", str(out), "--words", str(words)), "zebra")
    one_line_error(cli("map", str(neural_run[0]), "--out", str(out), "--top", "1000"), "--top")


def test_embeddings_in_word2vec_text_format(neural_run, tmp_path, cli):
    out = tmp_path / "vectors.txt"
    assert cli("export", neural_run[0], "--embeddings", out)[0] == 0
    model = load(neural_run[0])
    header, *rows = out.read_text(encoding="utf-8").splitlines()
    assert header == f"{len(model.vocab)} {model.config.features}"
    table = {r.split(" ")[0]: np.array(r.split(" ")[1:], dtype=float) for r in rows}
    assert list(table) == list(model.vocab.tokens)
    np.testing.assert_allclose(np.stack(list(table.values())), model.net.C.detach().double().numpy(),
                               rtol=1e-6, atol=1e-9)
    with pytest.raises(NnlmError, match="whitespace"):
        word2vec_text(Vocabulary(("<unk>", "a b")), np.zeros((2, 3)))


def test_export_arpa_of_a_backoff_model(random_corpus, tmp_path, neural_run, cli):
    from nnlm.ngram.build import build_ngram, save_ngram

    kn = build_ngram("kn", random_corpus, 3)
    save_ngram(kn, tmp_path / "kn3")
    arpa = tmp_path / "kn3.arpa"
    assert cli("export", tmp_path / "kn3", "--arpa", arpa)[0] == 0
    text = "w1 w2 w3 w4\nw5 w1"
    np.testing.assert_allclose(score_words(load(arpa), text), score_words(kn, text), atol=1e-6)
    # an ARPA file scores a split once its words are mapped onto the corpus's ids
    code, out, err = cli("score", arpa, "--split", "test", "--corpus", tmp_path / "rand", "--json")
    assert code == 0, err
    assert json.loads(out)["perplexity"] == pytest.approx(perplexity(kn, random_corpus, "test"), rel=1e-5)
    one_line_error(cli("export", str(neural_run[0]), "--arpa", str(arpa)), "back-off")
    one_line_error(cli("export", str(tmp_path / "kn3")), "nothing to export")


def test_neural_generation_same_seed_same_text(neural_run, cli, capsys):
    args = ("generate", str(neural_run[0]), "--prompt", "w1 w2", "--tokens", "30", "--seed", "5", "--top-k", "10")
    a, b = run(*args), run(*args)  # two separate processes
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout.startswith("w1 w2")
    one_line_error(cli("generate", neural_run[0], "--prompt", "zebra okapi"), "outside the model's vocabulary")
    with pytest.raises(SystemExit) as exit_:  # refused while parsing: argparse ends the process (2, one line)
        cli("generate", neural_run[0], "--temperature", "0")
    assert exit_.value.code == 2 and "--temperature: must be a finite number in (0, " in capsys.readouterr().err


def test_score_options_may_come_before_the_file(saved_addone, tmp_path, cli, capsys):
    f = tmp_path / "t.txt"
    f.write_text("w1 w2\nw3\n")
    assert cli("score", saved_addone, "--per-word", f) == cli("score", saved_addone, f, "--per-word")
    with pytest.raises(SystemExit) as exit_:  # argparse usage errors end the process (code 2, one line)
        cli("score", saved_addone, f, "other.txt")
    assert exit_.value.code == 2 and "unrecognized arguments: other.txt" in capsys.readouterr().err
    one_line_error(cli("score", saved_addone, "--split", "test", f), "not both")


@pytest.mark.brown
def test_score_a_brown_split_is_the_perplexity_function(brown, tmp_path, cli):
    model = AddOneBigram.fit(brown.vocab, brown.train)
    model.save(tmp_path / "addone")
    code, out, err = cli("score", tmp_path / "addone", "--split", "test", "--json")  # --corpus defaults to brown
    assert code == 0, err
    scored = json.loads(out)
    assert scored["perplexity"] == perplexity(model, brown, "test")
    assert (scored["tokens"], scored["oov"]) == (177_359, int((brown.test == brown.vocab.unk_id).sum()))


def test_eval_scores_the_splits_asked_for(neural_run, cli):
    run_dir, _ = neural_run
    default = json.loads(cli("eval", run_dir, "--json")[1])
    assert list(default["perplexity"]) == ["valid", "test"]  # the long train split only when asked
    asked = json.loads(cli("eval", run_dir, "--split", "test,train", "--threads", "1", "--json")[1])
    assert list(asked["perplexity"]) == ["test", "train"] and asked["threads"] == "1 thread (--threads 1)"
    assert asked["perplexity"]["test"] == pytest.approx(default["perplexity"]["test"], rel=1e-6)
    for bad in (["--split", "dev"], ["--split", ","]):
        code, _, err = cli("eval", run_dir, *bad)
        assert code == 2 and err.count("\n") == 1 and err.startswith("nnlm: error:")
    with pytest.raises(SystemExit) as exit_info:  # a range checked at parse time: argparse's one-line usage error
        cli("eval", run_dir, "--threads", "0")
    assert exit_info.value.code == 2


def test_exact_path_follows_weights_changed_in_place(neural_run):
    """The exact path joins [W, U] once per weights version: a change in place (training, a loaded
    state) must give the new numbers, never the joined copy's."""
    run, corpus_dir = neural_run
    model = load(run)
    ctx = np.zeros((4, model.context_size), dtype=np.int64)
    targets = np.arange(4)
    before = model.log_prob(ctx, targets)
    assert np.array_equal(before, model.log_prob(ctx, targets))
    with torch.no_grad():
        model.net.U.mul_(2.0)
    after = model.log_prob(ctx, targets)
    with torch.no_grad():
        model.net.U.div_(2.0)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(model.log_prob(ctx, targets), before, rtol=0, atol=1e-6)
