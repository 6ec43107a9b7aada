"""`nnlm.load(path)`: any saved model -> a LanguageModel, chosen by what is at `path`; and a count model built
by kind, for code outside nnlm.ngram that compares against one (`build_count_model`)."""
from __future__ import annotations

from pathlib import Path

from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel


def load(path: str | Path) -> LanguageModel:
    """Load a saved n-gram directory, an ARPA file, a `nnlm train` run directory or a mixture saved by
    `nnlm mix --save` (see `LOADERS`)."""
    path = Path(path)
    if not path.exists():
        raise NnlmError(f"no model at {path}")
    for accepts, loader in LOADERS:
        if accepts(path):
            return loader(path)
    raise NnlmError(f"{path} is not a model nnlm can load "
                    "(a saved n-gram directory, an ARPA file, a neural run directory or a saved mixture)")


def is_ngram_dir(path: Path) -> bool:
    """A directory saved by `nnlm ngram --save`."""
    return path.is_dir() and (path / "arrays.npz").exists()


def _load_ngram(path: Path) -> LanguageModel:
    from nnlm.ngram.build import load_ngram

    return load_ngram(path)


def is_arpa(path: Path) -> bool:
    """A file that begins with ARPA's \\data\\ header (only its first bytes are read); a file that cannot be read
    is an NnlmError."""
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip().startswith(b"\\data\\")
    except OSError as exc:
        raise NnlmError(f"cannot read {path}: {exc.strerror}") from None


def _load_arpa(path: Path) -> LanguageModel:
    from nnlm.ngram.arpa import read_arpa

    return read_arpa(path)  # its vocabulary is the file's unigrams


def _is_neural_run(path: Path) -> bool:
    return path.is_dir() and (path / "run.json").exists()


def _load_neural(path: Path) -> LanguageModel:
    from nnlm.neural.run.checkpoint import load_neural

    return load_neural(path)


def _is_mixture(path: Path) -> bool:
    return path.is_dir() and (path / "mixture.json").exists()


def _load_mixture(path: Path) -> LanguageModel:
    from nnlm.mixture_store import load_mixture

    return load_mixture(path, _load_part)


def _load_part(path: Path) -> LanguageModel:
    """A saved mixture's part: an n-gram directory or a neural run directory (never a mixture: no recursion)."""
    for accepts, loader in PART_LOADERS:
        if accepts(path):
            return loader(path)
    raise NnlmError(f"{path} is not a saved n-gram directory or a neural run directory")


LOADERS = [(is_ngram_dir, _load_ngram), (is_arpa, _load_arpa), (_is_neural_run, _load_neural),
           (_is_mixture, _load_mixture)]
PART_LOADERS = LOADERS[:1] + LOADERS[2:3]  # what a saved mixture's parts may be: n-gram and neural run directories


def load_or_build(spec: str, corpus) -> LanguageModel:
    """A model from a path (saved model) or a spec `kind[:order]` built on `corpus` (e.g. kn:5)."""
    if Path(spec).exists():
        return load(spec)
    from nnlm.ngram.build import KINDS

    kind, _, order = spec.partition(":")
    if kind not in KINDS:
        raise NnlmError(f"{spec!r} is neither a saved model nor a model spec like "
                        f"{', '.join(k + ':N' for k in KINDS)}")
    try:
        return build_count_model(kind, corpus, int(order) if order else None)
    except ValueError:
        raise NnlmError(f"bad order in model spec {spec!r}: expected kind:N") from None


def build_count_model(kind: str, corpus, order: int | None = None, **options) -> LanguageModel:
    """A count-based model of `kind` (nnlm.ngram.build.KINDS: kn, class, ...) of `order` (None: the kind's default)
    counted from `corpus`'s train, with the kind's `options` (class: classes, clusters, progress).

    Why here: the neural side compares its choices against count models (nnlm.neural.net.feature_init) through the
    LanguageModel interface alone; asking this neutral module for one keeps nnlm.neural from importing nnlm.ngram,
    and nnlm.ngram is imported only when a count model is built."""
    from nnlm.ngram.build import build_ngram

    return build_ngram(kind, corpus, order, **options)


def match_corpus(model: LanguageModel, path: str | Path, corpus) -> LanguageModel:
    """`model` (loaded from `path`), except that an ARPA file whose words are not the corpus's vocabulary
    in its order is read again with its words mapped onto the corpus's ids (ARPA files carry no ids)."""
    if model.vocab.fingerprint != corpus.vocab.fingerprint and is_arpa(Path(path)):
        from nnlm.ngram.arpa import read_arpa

        return read_arpa(path, corpus.vocab)
    return model
