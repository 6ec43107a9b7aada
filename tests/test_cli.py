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


def test_version_names_the_package_version():
    from importlib.metadata import version

    proc = run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"nnlm {version('nnlm')}") and len(proc.stdout.splitlines()) == 1


def _fake_repository(root, sha, packed=False):
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/work\n")
    if packed:
        (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{'0' * 40} refs/heads/other\n"
                                         f"{sha} refs/heads/work\n")
    else:
        (git / "refs" / "heads" / "work").write_text(sha + "\n")
    return git


@pytest.mark.parametrize("packed", [False, True])
def test_checkout_commit_reads_the_branch_head_without_git(tmp_path, packed):
    from nnlm.cli.version import checkout_commit

    sha = "0123456789abcdef0123456789abcdef01234567"
    _fake_repository(tmp_path, sha, packed)
    assert checkout_commit(tmp_path) == sha[:12]


def test_checkout_commit_of_a_worktree_and_a_detached_head(tmp_path):
    from nnlm.cli.version import checkout_commit

    sha = "89abcdef0123456789abcdef0123456789abcdef"
    main = _fake_repository(tmp_path / "main", sha)
    own = main / "worktrees" / "wt"
    own.mkdir(parents=True)
    (own / "HEAD").write_text("ref: refs/heads/work\n")
    (own / "commondir").write_text("../..\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {own}\n")
    assert checkout_commit(tmp_path / "wt") == sha[:12]
    (own / "HEAD").write_text("fedcba9876543210fedcba9876543210fedcba98\n")
    assert checkout_commit(tmp_path / "wt") == "fedcba987654"
    assert checkout_commit(tmp_path / "nowhere") is None  # an installed package: the version alone
