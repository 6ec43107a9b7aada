"""The command line as a user meets it: JSON output, and bad input -> one line, exit 2."""
import json

import pytest
from helpers import assert_one_line_error, run_nnlm

run = run_nnlm


@pytest.mark.brown
def test_stats_json_on_brown():
    proc = run("stats", "--corpus", "brown", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["splits"]["train"]["tokens"], s["splits"]["valid"]["tokens"], s["splits"]["test"]["tokens"],
            s["vocab"]) == (800_000, 200_000, 177_359, 17_907)


@pytest.mark.brown
def test_ngram_uniform_json_on_brown():
    proc = run("ngram", "--corpus", "brown", "--kind", "uniform", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["perplexity"]["test"] == pytest.approx(17907, rel=1e-6)


def test_ngram_on_text_dir(toy_dir):
    proc = run("ngram", "--corpus", str(toy_dir), "--kind", "addone", "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["order"] == 2 and set(out["perplexity"]) == {"train", "valid", "test"}


def test_missing_brown(tmp_path):
    proc = run("stats", "--corpus", "brown", env={"NLTK_DATA": str(tmp_path), "HOME": str(tmp_path)})
    assert_one_line_error(proc, "nltk.downloader brown")


@pytest.mark.parametrize(
    "args, fragment",
    [(("stats", "--corpus", "no-such-corpus"), "unknown corpus"),
     (("ngram", "--kind", "nonsense", "--corpus", "brown"), "unknown n-gram kind"),
     (("ngram", "--frobnicate"), "unrecognized arguments"),
     (("stats", "--corpus", "brown", "--min-count", "3"), "fixed bengio2003 protocol"),
     (("stats", "--corpus", ""), "--corpus is empty")],
)
def test_bad_arguments(args, fragment):
    assert_one_line_error(run(*args), fragment)


def test_bad_text_dir(toy_dir):
    (toy_dir / "train.txt").write_bytes(b"\xff\xfe\x00\x00binary")
    assert_one_line_error(run("stats", "--corpus", str(toy_dir), "--no-cache"), "binary")
