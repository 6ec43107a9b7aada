"""Nothing is written over an input, by any command (issue 33).

Every command with an output option is called (in this process) with the output equal to an input,
inside an input directory, containing an input, through a symlink to an input, and on an existing file
nnlm did not write: each is refused with one line and exit 2, and every file of the workspace is
byte-identical afterwards with nothing new beside it. --force replaces a user's file (never an input);
a file nnlm wrote is replaced without it. rescore checks all its inputs before it writes anything."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from conftest import random_corpus_texts, write_text_corpus
from test_use_neural import cli, one_line_error  # noqa: F401  (fixtures)

from nnlm.io import WRITTEN_MARK, written_by_nnlm
from nnlm.output_guard import guard_outputs
from nnlm.rescore.synthetic import write_srilm_set


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root` (links not followed): relative path -> content hash, link target or 'dir'."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                entries[key] = "-> " + os.readlink(path)
            elif path.is_dir():
                entries[key] = "dir"
            else:
                entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


@pytest.fixture(scope="module")
def ws(tmp_path_factory, neural_run) -> dict[str, Path]:
    """A workspace of inputs: a corpus, a saved KN3 and its ARPA file, a neural run, n-best lists in the
    three formats with references, a word list."""
    from nnlm.data import load_corpus
    from nnlm.ngram.arpa import write_arpa
    from nnlm.ngram.build import build_ngram

    root = tmp_path_factory.mktemp("inputs")
    corpus_dir = write_text_corpus(root / "corpus", *random_corpus_texts())
    kn3 = build_ngram("kn", load_corpus(str(corpus_dir), use_cache=False), 3)
    kn3.save(root / "kn3")
    write_arpa(kn3, root / "kn3.arpa")
    sentences = [line.split() for line in (corpus_dir / "test.txt").read_text().splitlines()[:6]]
    refs = write_srilm_set(sentences, root / "nbest", n=3, seed=1)
    (root / "moses").mkdir()
    (root / "moses" / "nbest.txt").write_text("0 ||| w1 w2 ||| LM0= -3 ||| -1.5\n0 ||| w1 ||| LM0= -5 ||| -2\n")
    (root / "kaldi").mkdir()
    (root / "kaldi" / "text").write_text("u1-1 w1 w2\nu1-2 w1\n")
    (root / "kaldi" / "scores").write_text("u1-1 10\nu1-2 9\n")
    (root / "words.txt").write_text("w1 w2 w3\n")
    return {"root": root, "corpus": corpus_dir, "kn3": root / "kn3", "arpa": root / "kn3.arpa",
            "nbest": root / "nbest", "refs": refs, "moses": root / "moses", "kaldi": root / "kaldi",
            "kaldi_text": root / "kaldi" / "text",
            "words": root / "words.txt", "run": neural_run[0], "run_corpus": neural_run[1]}


def rescore(ws, out, *extra):
    return ["rescore", ws["nbest"], "--lm", ws["kn3"], "--format", "srilm", "--out", out, *extra]


# (command, builder of its argv with the output `out`, the input the overlap cases aim at)
COMMANDS = {
    "rescore --out": (rescore, "nbest"),
    "rescore kaldi --out": (lambda ws, out: ["rescore", ws["kaldi"] / "text", "--scores", ws["kaldi"] / "scores",
                                             "--lm", ws["kn3"], "--format", "kaldi", "--out", out], "kaldi_text"),
    "rescore --refs": (lambda ws, out: rescore(ws, out, "--refs", ws["refs"]), "refs"),
    "export --embeddings": (lambda ws, out: ["export", ws["run"], "--embeddings", out], "run"),
    "export --arpa": (lambda ws, out: ["export", ws["kn3"], "--arpa", out], "kn3"),
    "export --arpa (ARPA in)": (lambda ws, out: ["export", ws["arpa"], "--arpa", out], "arpa"),
    "ngram --arpa": (lambda ws, out: ["ngram", "--load", ws["kn3"], "--corpus", ws["corpus"], "--arpa", out],
                     "kn3"),
    "ngram --arpa (corpus)": (lambda ws, out: ["ngram", "--corpus", ws["corpus"], "--kind", "kn", "--order", "2",
                                               "--arpa", out], "corpus"),
    "ngram --save": (lambda ws, out: ["ngram", "--load", ws["kn3"], "--corpus", ws["corpus"], "--save", out],
                     "kn3"),
    "ngram --save (corpus)": (lambda ws, out: ["ngram", "--corpus", ws["corpus"], "--save", out], "corpus"),
    "train --out": (lambda ws, out: ["train", "--corpus", ws["corpus"], "--out", out, "--epochs", "1",
                                     "--no-progress"], "corpus"),
    "tune --out": (lambda ws, out: ["tune", "--corpus", ws["corpus"], "--out", out, "--minutes", "0.05"], "corpus"),
    "reproduce --out": (lambda ws, out: ["reproduce", "--corpus", ws["corpus"], "--out", out,
                                         "--budget-minutes", "0.05", "--no-progress"], "corpus"),
    "map --out": (lambda ws, out: ["map", ws["run"], "--top", "20", "--out", out], "run"),
    "prune --arpa": (lambda ws, out: ["prune", ws["kn3"], "--threshold", "1e-6", "--arpa", out], "kn3"),
    "prune --save (ARPA in)": (lambda ws, out: ["prune", ws["arpa"], "--threshold", "1e-6", "--save", out], "arpa"),
    "map --out (--words)": (lambda ws, out: ["map", ws["run"], "--words", ws["words"], "--out", out], "words"),
}
FILE_OUTPUTS = ["rescore --out", "export --embeddings", "export --arpa", "ngram --arpa", "map --out", "prune --arpa"]


def outputs_for(ws: dict[str, Path], target: str, tmp_path: Path) -> dict[str, Path]:
    """The overlap cases for input `ws[target]`: equal, inside it (or beside a file in its directory's
    place: a file input has no inside), containing it, a symlink to it."""
    given = ws[target]
    link = tmp_path / "link"
    link.symlink_to(given)
    inside = given / "new-output" if given.is_dir() else given
    return {"equal": given, "inside": inside, "containing": given.parent, "symlink": link}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", ["equal", "inside", "containing", "symlink"])
def test_output_over_an_input_is_refused(ws, tmp_path, cli, command, case):  # noqa: F811
    build, target = COMMANDS[command]
    out = outputs_for(ws, target, tmp_path)[case]
    roots = [ws["root"], ws["run"].parent, tmp_path]
    before = [tree(r) for r in roots]
    code, _, err = cli(*build(ws, out))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "input" in err or "not written by nnlm" in err or "not a model saved by nnlm" in err, err
    assert [tree(r) for r in roots] == before  # inputs byte-identical, nothing new anywhere


def test_inside_an_input_run_directory_is_refused_for_each_of_its_files(ws, cli):  # noqa: F811
    """The issue's report: `export RUN --embeddings RUN/model.safetensors` (or RUN/vocab.json, or
    `export KN --arpa KN/arrays.npz`) replaced the model's own files."""
    before = tree(ws["run"]), tree(ws["kn3"])
    for name in ("model.safetensors", "vocab.json", "run.json"):
        one_line_error(cli("export", ws["run"], "--embeddings", ws["run"] / name), "lies inside the input")
    one_line_error(cli("export", ws["kn3"], "--arpa", ws["kn3"] / "arrays.npz"), "lies inside the input")
    assert (tree(ws["run"]), tree(ws["kn3"])) == before


def user_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("a user's notes\n")
    return path


@pytest.mark.parametrize("command", FILE_OUTPUTS)
def test_an_existing_file_nnlm_did_not_write_needs_force(ws, tmp_path, cli, command):  # noqa: F811
    build, _ = COMMANDS[command]
    if command == "rescore --out":
        out = tmp_path / "o"
        out.mkdir()
        notes = user_file(out, "one-best.txt")
    else:
        notes = out = user_file(tmp_path, "notes.txt")
    before = tree(ws["root"]), tree(ws["run"])
    one_line_error(cli(*build(ws, out)), "not written by nnlm")
    assert notes.read_text() == "a user's notes\n" and sorted(os.listdir(tmp_path)) == sorted(
        ["o"] if command == "rescore --out" else ["notes.txt"])
    code, _, err = cli(*build(ws, out), "--force")
    assert code == 0, err
    assert notes.read_bytes() != b"a user's notes\n" and written_by_nnlm(notes)
    code, _, err = cli(*build(ws, out))  # nnlm's own file now: replaced without --force
    assert code == 0, err
    assert (tree(ws["root"]), tree(ws["run"])) == before


def test_ngram_save_replaces_only_a_model_nnlm_saved(ws, tmp_path, cli):  # noqa: F811
    target = tmp_path / "saved"
    for _ in range(2):  # the second call replaces what the first saved
        code, _, err = cli("ngram", "--load", ws["kn3"], "--corpus", ws["corpus"], "--save", target)
        assert code == 0, err
    (tmp_path / "mine").mkdir()
    user_file(tmp_path / "mine", "a.txt")
    one_line_error(cli("ngram", "--load", ws["kn3"], "--corpus", ws["corpus"], "--save", tmp_path / "mine"),
                   "not a model saved by nnlm")
    assert (tmp_path / "mine" / "a.txt").read_text() == "a user's notes\n"


def test_export_writes_both_files_or_neither(ws, tmp_path, cli):  # noqa: F811
    emb, arpa = tmp_path / "e.txt", tmp_path / "m.arpa"
    # a neural run is no back-off model: refused before either file is written
    one_line_error(cli("export", ws["run"], "--embeddings", emb, "--arpa", arpa), "only back-off")
    assert os.listdir(tmp_path) == []
    one_line_error(cli("export", ws["kn3"], "--embeddings", emb, "--arpa", emb), "overlap")
    code, out, err = cli("export", ws["kn3"], "--arpa", arpa)
    assert code == 0 and str(arpa) in out and written_by_nnlm(arpa), err


def test_train_resume_and_reproduce_continued_still_pass_the_guard(ws, neural_run):
    from nnlm.cli.common import corpus_path

    run, corpus = neural_run
    assert corpus_path(None, str(run)) == str(corpus)  # the recorded corpus counts as an input of --resume
    guard_outputs(directories=[("--out", run)], inputs=[corpus_path(None, str(run))])  # --resume: no error
    guard_outputs(directories=[("--out", ws["root"] / "report")], inputs=[ws["corpus"]])


def test_the_library_refuses_a_run_directory_inside_its_corpus_before_writing(ws):
    from nnlm.errors import NnlmError
    from nnlm.neural.run.train import train

    before = tree(ws["corpus"])
    for out in (ws["corpus"] / "run", ws["corpus"]):
        with pytest.raises(NnlmError, match="never writes over"):
            train(out, {"corpus": str(ws["corpus"]), "preset": "mlp7", "order": 3, "hidden": 4, "features": 3,
                        "epochs": 1, "threads": 1}, progress=False)
    assert tree(ws["corpus"]) == before


def test_a_device_output_is_written_into_not_refused(ws, cli):  # noqa: F811
    code, _, err = cli("export", ws["kn3"], "--arpa", "/dev/null")
    assert code == 0, err


def test_the_mark_is_an_extended_attribute_and_leaves_the_format(ws, tmp_path, cli):  # noqa: F811
    arpa = tmp_path / "m.arpa"
    assert cli("export", ws["kn3"], "--arpa", arpa)[0] == 0
    assert os.getxattr(arpa, WRITTEN_MARK) == b"1"
    assert arpa.read_bytes() == ws["arpa"].read_bytes()  # the same ARPA text as write_arpa's
    copy = tmp_path / "copy.arpa"
    copy.write_bytes(arpa.read_bytes())  # a copy without the attribute is a user's file
    one_line_error(cli("export", ws["kn3"], "--arpa", copy), "not written by nnlm")


# --- rescore checks everything before it writes ------------------------------------------------

BAD_LISTS = {
    "nan score": ("srilm", "-1 nan 2 w1 w2\n", "not a finite number"),
    "inf score": ("srilm", "inf -1 2 w1 w2\n", "not a finite number"),
    "negative count": ("srilm", "-1 -2 -3 w1 w2\n", "not a whole number"),
    "empty list": ("srilm", "", "empty n-best list"),
    "duplicate hypothesis id": ("kaldi", "u1-1 w1\nu1-1 w2\n", "appears twice"),
    "moses inf": ("moses", "0 ||| w1 ||| LM0= -3 ||| inf\n", "not a finite number"),
}


@pytest.mark.parametrize("case", list(BAD_LISTS))
def test_rescore_refuses_bad_lists_and_writes_nothing(ws, tmp_path, cli, case):  # noqa: F811
    fmt, text, message = BAD_LISTS[case]
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "utt1").write_text(text)
    args = ["rescore", lists if fmt == "srilm" else lists / "utt1", "--lm", ws["kn3"], "--format", fmt,
            "--out", tmp_path / "o"]
    if fmt == "kaldi":
        (tmp_path / "scores").write_text("u1-1 1\n")
        args += ["--scores", tmp_path / "scores"]
    before = tree(tmp_path)
    one_line_error(cli(*args), message)
    assert tree(tmp_path) == before


@pytest.mark.parametrize(("refs", "message"), [("utt0000 w1\n", "no reference for utterance utt0001"),
                                              ("utt0000 w1\nutt0000 w2\n", "a second reference")])
def test_rescore_checks_references_before_writing(ws, tmp_path, cli, refs, message):  # noqa: F811
    (tmp_path / "refs").write_text(refs)
    before = tree(tmp_path)
    one_line_error(cli(*rescore(ws, tmp_path / "o", "--refs", tmp_path / "refs")), message)
    one_line_error(cli(*rescore(ws, tmp_path / "o", "--tune", ws["nbest"], "--tune-refs", tmp_path / "refs")),
                   message)
    assert tree(tmp_path) == before


def test_rescore_refuses_a_previous_one_best_and_duplicate_utterances(ws, tmp_path, cli):  # noqa: F811
    code, _, err = cli(*rescore(ws, tmp_path / "o"))
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["o"]  # the staging directory is gone
    one_line_error(cli("rescore", tmp_path / "o", "--lm", ws["kn3"], "--format", "srilm", "--out", tmp_path / "p"),
                   "one-best.txt")
    one_line_error(cli("rescore", ws["nbest"], tmp_path / "o" / "utt0000", "--lm", ws["kn3"], "--format", "srilm",
                       "--out", tmp_path / "p"), "appears twice")
    assert not (tmp_path / "p").exists()
    code, _, err = cli(*rescore(ws, tmp_path / "o"))  # rescoring into its own earlier output replaces it
    assert code == 0, err


def test_rescore_hypotheses_are_cut_by_the_tokenization_rule(tmp_path):
    from nnlm.rescore.formats import read_nbest

    (tmp_path / "k.txt").write_text("u1-1 w1\u00a0w2\tw3\nu1-2 w1\n")
    (tmp_path / "k.scores").write_text("u1-1 1\nu1-2 2\n")
    nbest = read_nbest("kaldi", [str(tmp_path / "k.txt")], str(tmp_path / "k.scores"))
    assert nbest.utterances[0].hypotheses == [["w1", "w2", "w3"], ["w1"]]
