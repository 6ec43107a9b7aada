import json

import numpy as np
import pytest
from helpers import assert_one_line_error
from helpers import run_nnlm as run

from nnlm.errors import NnlmError
from nnlm.lm import split_log_probs
from nnlm.loading import load
from nnlm.ngram.simple import AddOneBigram
from nnlm.use import generate, next_words, render, score_lines, score_text, score_words, text_perplexity


@pytest.fixture
def saved_addone(random_corpus, tmp_path):
    m = AddOneBigram.fit(random_corpus.vocab, random_corpus.train)
    m.save(tmp_path / "addone")
    return tmp_path / "addone"


def test_scoring_train_text_reproduces_split_log_probs(random_corpus, saved_addone, tmp_path):
    # The random corpus is a text directory: its train split starts the stream, padded with <p>,
    # which is also what scoring a file starts from. Same function, same numbers.
    model = load(saved_addone)
    lines = (random_corpus_dir(tmp_path) / "train.txt").read_text().splitlines()
    scores, bad = score_lines(model, lines)
    assert not bad
    ours = np.concatenate([s.word_log10 for s in scores]) / np.log10(np.e)
    assert np.allclose(ours, split_log_probs(model, random_corpus, "train"), rtol=0, atol=1e-12)


def random_corpus_dir(tmp_path):
    return tmp_path / "rand"


def test_text_functions_take_a_model_and_a_string(saved_addone):
    model = load(saved_addone)
    words = score_words(model, "w1 w2 w3\n\nw4")
    assert words.shape == (6,)  # 4 words + 2 <p>; the blank line is skipped, as in corpora
    assert text_perplexity(model, "w1 w2") == pytest.approx(np.exp(-score_words(model, "w1 w2").mean()))
    top = next_words(model, "w1", k=3)
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1] and top == next_words(model, ["w1"], k=3)
    assert generate(model, "w1", 5, seed=3) == generate(model, ["w1"], 5, seed=3)


def test_blank_lines_are_skipped_and_counted(saved_addone):
    model = load(saved_addone)
    scored = score_text(model, ["w1 w2", "", "   ", "w3"])
    assert [s.line_number for s in scored.lines] == [1, 4] and scored.blank == 2 and not scored.skipped
    together = score_text(model, ["w1 w2", "w3"])
    assert scored.log10_prob == pytest.approx(together.log10_prob) and scored.tokens == together.tokens == 5


def test_generation_is_reproducible_and_sampling_options_work(saved_addone):
    model = load(saved_addone)
    a = generate(model, ["w1"], 40, seed=7)
    assert a == generate(model, ["w1"], 40, seed=7)
    assert a != generate(model, ["w1"], 40, seed=8)
    greedy = generate(model, ["w1"], 5, top_k=1)
    assert greedy == [next_words(model, ([ "w1"] + greedy)[i:i + 1], 1)[0][0] for i in range(5)]


@pytest.mark.parametrize("kwargs, message", [({"temperature": 0}, "temperature"), ({"top_k": 10**6}, "top-k")])
def test_generation_bad_options(saved_addone, kwargs, message):
    with pytest.raises(NnlmError, match=message):
        generate(load(saved_addone), [], 5, **kwargs)


def test_next_words_k_too_large(saved_addone):
    with pytest.raises(NnlmError, match="between 1 and"):
        next_words(load(saved_addone), ["w1"], 10**6)


def test_render_paragraphs_and_texts():
    assert render(["a", "b", "<p>", "c", "<text>", "d"]) == "a b\n\nc\n\n---\n\nd"


def test_cli_score_json_and_skip_bad(saved_addone, tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"w1 w2\n\n\xff bad\nw3 zzz\n")
    assert_one_line_error(run("score", str(saved_addone), str(f)), "not valid UTF-8")
    proc = run("score", str(saved_addone), str(f), "--skip-bad", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [line["line"] for line in out["lines"]] == [1, 4]
    assert out["total"]["skipped"] == [3] and out["total"]["blank"] == 1  # blank lines are skipped, as in corpora
    assert out["total"]["oov"] == 1 and out["total"]["tokens"] == 6
    text = run("score", str(saved_addone), str(f), "--skip-bad")
    assert text.stdout.splitlines()[-1].endswith("\tskipped 1\tblank 1"), text.stdout


def test_cli_generate_same_seed_same_text(saved_addone):
    a = run("generate", str(saved_addone), "--prompt", "w1 w2", "--tokens", "20", "--seed", "3")
    b = run("generate", str(saved_addone), "--prompt", "w1 w2", "--tokens", "20", "--seed", "3")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout.startswith("w1 w2")


@pytest.mark.parametrize("args, message", [
    (("generate", "{m}", "--prompt", "qqq zzz"), "outside the model's vocabulary"),
    (("generate", "{m}", "--temperature", "-1"), "temperature"),
    (("next", "{m}", "w1", "-k", "100000"), "between 1 and"),
    (("score", "/nonexistent/model"), "no model at"),
])
def test_cli_use_errors(saved_addone, args, message):
    assert_one_line_error(run(*[a.format(m=saved_addone) for a in args]), message)


def test_not_a_model(tmp_path):
    assert_one_line_error(run("score", str(tmp_path)), "not a model")


def test_load_arpa_file_scores_like_the_model(random_corpus, tmp_path):
    from nnlm.ngram.arpa import write_arpa
    from nnlm.ngram.build import build_ngram

    kn = build_ngram("kn", random_corpus, 3)
    write_arpa(kn, tmp_path / "kn3.arpa")
    loaded = load(tmp_path / "kn3.arpa")
    text = "w1 w2 w3 w4\nw5 w1"
    # the ARPA's vocabulary is ordered like the file, so compare by words, not ids
    assert np.allclose(score_words(loaded, text), score_words(kn, text), atol=1e-6)
