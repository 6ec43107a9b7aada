"""Newcomer paths through the command line: a model is scored on its own corpus unless --corpus says
otherwise, text directories get a --min-count that gives <unk> training examples, runs are named by
their shape, and outputs into missing directories are refused."""
from __future__ import annotations

import functools
import json

import pytest
from helpers import nnlm_cli

from nnlm.data.provenance import TEXT_DIR_MIN_COUNT, default_min_count


@pytest.fixture
def nnlm(capsys):
    """`nnlm ARGS` in this process: (exit code, stdout, stderr)."""
    return functools.partial(nnlm_cli, capsys)


@pytest.fixture
def saved_kn(random_corpus, tmp_path, nnlm):
    code, _, err = nnlm("ngram", "--corpus", tmp_path / "rand", "--kind", "kn", "--order", "3",
                        "--save", tmp_path / "kn3", "--json")
    assert code == 0, err
    return tmp_path / "kn3"


def test_a_saved_ngram_records_its_corpus_and_is_scored_on_it(saved_kn, tmp_path, nnlm):
    config = json.loads((saved_kn / "config.json").read_text())
    assert config["corpus"] == {"corpus": str((tmp_path / "rand").resolve()), "min_count": TEXT_DIR_MIN_COUNT,
                                "max_vocab": None, "vocab_from": "train", "heldout": None}
    code, out, err = nnlm("score", saved_kn, "--split", "test", "--json")  # no --corpus: its own, not brown
    assert code == 0, err
    ours = json.loads(out)
    code, out, _ = nnlm("ngram", "--corpus", tmp_path / "rand", "--load", saved_kn, "--json")
    assert ours["corpus"] == "rand" and ours["perplexity"] == pytest.approx(json.loads(out)["perplexity"]["test"])


def test_another_vocabulary_is_refused_with_a_hint_to_give_the_corpus(saved_kn, tmp_path, nnlm):
    code, _, err = nnlm("score", saved_kn, "--split", "test", "--corpus", tmp_path / "rand", "--max-vocab", "10")
    assert code == 2 and "is not the corpus rand's" in err and "--corpus" in err


def test_mix_builds_its_specs_on_the_runs_corpus(neural_run, nnlm):
    run, _ = neural_run
    code, out, err = nnlm("mix", run, "kn:3", "--json", "--threads", "1")
    assert code == 0, err
    result = json.loads(out)
    assert result["corpus"] == "rand" and len(result["weights"][0]) == 2


def test_text_directories_default_to_a_min_count_that_gives_unk_examples(random_corpus, tmp_path, nnlm):
    root = tmp_path / "rand"
    code, out, err = nnlm("stats", "--corpus", root)
    assert code == 0, err
    assert "--min-count 2, the default for text directories" in out
    stats = json.loads(nnlm("stats", "--corpus", root, "--json")[1])
    assert stats["min_count"] == 2
    (root / "train.txt").write_text("a b <unk> c\n" + (root / "train.txt").read_text())
    assert default_min_count(str(root)) == 1  # text that already holds <unk> keeps every word
    assert default_min_count("brown") is None


def test_eval_names_a_run_by_its_shape_when_it_is_not_the_presets(neural_run, nnlm):
    code, out, err = nnlm("eval", neural_run[0], "--threads", "1", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["preset"] == "mlp7" and result["name"] == "n3-h8-m4-direct" and "1 thread " in result["threads"]


def test_eval_in_bf16_is_near_fp32_and_says_so(neural_run, nnlm):
    code, out, err = nnlm("eval", neural_run[0], "--threads", "1", "--json")
    assert code == 0, err
    fp32 = json.loads(out)
    code, out, err = nnlm("eval", neural_run[0], "--threads", "1", "--json", "--precision", "bf16")
    assert code == 0, err
    bf16 = json.loads(out)
    assert bf16["precision"] == "bf16" and fp32["precision"] == "fp32"
    for split, ppl in fp32["perplexity"].items():  # bf16 keeps 8 bits of mantissa: ~1e-3 per logit
        assert bf16["perplexity"][split] == pytest.approx(ppl, rel=5e-3) and bf16["perplexity"][split] != ppl


def test_map_into_a_missing_directory_is_refused(neural_run, tmp_path, nnlm):
    code, _, err = nnlm("map", neural_run[0], "--out", tmp_path / "no" / "such" / "map.png")
    assert code == 2 and "does not exist" in err and not (tmp_path / "no").exists()


def test_score_takes_the_file_after_options(saved_kn, tmp_path, nnlm):
    text = tmp_path / "t.txt"
    text.write_text("w1 w2\n\nw3\n")
    code, out, err = nnlm("score", saved_kn, "--per-word", text)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("Total") and out.splitlines()[-1].endswith("\tblank 1")


def test_a_text_directory_pads_with_the_one_start_token(random_corpus):
    from nnlm.data.vocab import PARAGRAPH, start_token

    assert random_corpus.pad_token == start_token(random_corpus.vocab) == PARAGRAPH


@pytest.mark.brown
def test_brown_pads_with_the_one_start_token(brown):
    from nnlm.data.vocab import TEXT, start_token

    assert brown.pad_token == start_token(brown.vocab) == TEXT


def test_a_new_text_directory_run_records_the_default_min_count(random_corpus, tmp_path, nnlm):
    code, _, err = nnlm("train", "--corpus", tmp_path / "rand", "--out", tmp_path / "run", "--preset", "mlp7",
                        "--hidden", "4", "--features", "2", "--epochs", "1", "--batch-size", "64", "--threads", "1",
                        "--no-progress")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "run.json").read_text())["min_count"] == TEXT_DIR_MIN_COUNT
