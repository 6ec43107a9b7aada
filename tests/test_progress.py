"""Progress as a user sees it: a bar on a terminal; in a redirected log, a plain line at most once a minute
(tokens/s, the time left), never a bar's carriage-return frames; training, clustering and generation alike."""
from __future__ import annotations

import io

import numpy as np
import pytest

from nnlm import progress
from nnlm.progress import Bar, LogLines, Silent, duration, show_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_a_log_gets_lines_and_disabled_gets_nothing():
    assert isinstance(show_progress(10, "x", stream=Terminal()), Bar)
    assert isinstance(show_progress(10, "x", stream=io.StringIO()), LogLines)
    silent = show_progress(10, "x", enabled=False, stream=io.StringIO())
    assert type(silent) is Silent


def test_log_lines_come_at_most_once_a_minute_with_rate_and_time_left():
    now = [0.0]
    log = io.StringIO()
    lines = LogLines(1000, "epoch 1", "tok", 100, log, clock=lambda: now[0])
    lines.note("train ppl 300.0")
    for _ in range(5):  # 50 s: nothing yet
        now[0] += 10
        lines.update(10)
    assert log.getvalue() == ""
    now[0] += 10
    lines.update(50)  # 60 s, 100 tokens since the start: 100 / 60 tok/s, 800 left
    assert log.getvalue() == "epoch 1: 200/1,000 tok (20%), 2 tok/s, ETA 8.0 min; train ppl 300.0\n"
    now[0] += 30
    lines.update(10)
    assert log.getvalue().count("\n") == 1  # the next one a minute after the first
    now[0] += 30
    lines.update(10)
    assert log.getvalue().count("\n") == 2 and "\r" not in log.getvalue()


@pytest.mark.parametrize("desc, unit, seconds, done, line", [
    ("clustering", "word", 61.0, 122, "clustering: 122 word, 2 word/s\n"),
    ("fitted", "model", 150.0, 1, "fitted: 1 model, 2.5 min/model\n"),  # slow work: the time a unit takes, not 0/s
])
def test_an_unknown_total_has_no_share_and_no_eta(desc, unit, seconds, done, line):
    now = [0.0]
    log = io.StringIO()
    lines = LogLines(None, desc, unit, 0, log, clock=lambda: now[0])
    now[0] = seconds
    lines.update(done)
    assert log.getvalue() == line


@pytest.mark.parametrize("seconds, text", [(40, "40 s"), (750, "12.5 min"), (3 * 3600 + 720, "3.2 h")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_a_bar_on_a_terminal_draws_and_takes_a_note():
    screen = Terminal()
    with show_progress(100, "epoch 1", stream=screen) as bar:
        bar.update(50)
        bar.note("valid ppl 10")
    assert "epoch 1" in screen.getvalue()


def test_training_logs_plain_progress_lines_when_stderr_is_not_a_terminal(random_corpus, tmp_path, capsys,
                                                                          monkeypatch):
    from nnlm.cli import main

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)  # every update a line, as if each took a minute
    code = main(["train", "--corpus", str(tmp_path / "rand"), "--out", str(tmp_path / "run"), "--preset", "mlp7",
                 "--hidden", "4", "--features", "2", "--epochs", "1", "--batch-size", "256", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("epoch 1: ")]
    assert lines and "\r" not in err and all(" tok/s" in line for line in lines), err
    assert "ETA" in lines[0]


def test_clustering_progress_goes_through_the_same_helper(monkeypatch, capsys):
    from nnlm.wordclasses.exchange import exchange_clusters

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    rng = np.random.default_rng(0)
    exchange_clusters(rng.integers(0, 40, 3000), 40, 4, max_passes=2, progress=True)
    err = capsys.readouterr().err
    assert "clustering into 4 classes: " in err and " word/s" in err and "\r" not in err


def test_init_features_auto_shows_each_trigram_it_fits(tmp_path, monkeypatch, capsys):
    from nnlm.data import load_corpus
    from nnlm.data.synthetic import write_corpus
    from nnlm.neural.net.feature_init import class_evidence

    write_corpus(tmp_path / "gen", 3000, words=40, classes=5, seed=3)
    corpus = load_corpus(str(tmp_path / "gen"), min_count=1)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    class_evidence(corpus, 5, 40, progress=True)
    err = capsys.readouterr().err
    assert "--init-features auto: trigrams fitted: 1 model" in err and "word KN trigram: valid perplexity" in err
    assert "class trigram, K = 5: valid perplexity" in err and "\r" not in err
    class_evidence(corpus, 5, 40)  # without progress: silent
    assert capsys.readouterr().err == ""


def test_generation_shows_progress_when_its_text_goes_to_a_file(random_corpus, tmp_path, capsys, monkeypatch):
    from nnlm.cli import main
    from nnlm.ngram.simple import AddOneBigram

    AddOneBigram.fit(random_corpus.vocab, random_corpus.train).save(tmp_path / "addone")
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    assert main(["generate", str(tmp_path / "addone"), "--tokens", "30", "--seed", "2"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("generating: ")]
    assert len(lines) == 30 and lines[-1].startswith("generating: 30/30 tok (100%)") and " tok/s" in lines[-1]
    assert captured.out.strip()
    assert main(["generate", str(tmp_path / "addone"), "--tokens", "30", "--seed", "2", "--no-progress"]) == 0
    again = capsys.readouterr()
    assert again.err == "" and again.out == captured.out  # the progress changes nothing in the text


def test_generation_draws_what_numpy_choice_would(random_corpus):
    """The inverse-CDF draw from a block of uniforms picks exactly what one Generator.choice per token picks."""
    from nnlm.ngram.simple import AddOneBigram
    from nnlm.use import generate, next_context

    model = AddOneBigram.fit(random_corpus.vocab, random_corpus.train)
    for temperature, top_k in ((1.0, None), (0.7, None), (1.3, 5)):
        rng, history, expected = np.random.default_rng(4), ["w1"], []
        for _ in range(200):
            logits = np.log(model.distribution(next_context(model, history)[None, :])[0])
            logits = (logits - logits.max()) / temperature
            if top_k:
                logits = np.where(logits >= np.partition(logits, -top_k)[-top_k], logits, -np.inf)
            q = np.exp(logits)
            history.append(model.vocab.tokens[int(rng.choice(len(q), p=q / q.sum()))])
            expected.append(history[-1])
        assert generate(model, ["w1"], 200, temperature, top_k, seed=4) == expected
