"""Reading and writing n-best lists: SRILM (`acoustic lm nwords words` per line, one file per utterance,
or NBestList2.0), Moses (`id ||| hypothesis ||| features ||| score`) and Kaldi-style text
(`uttid-N words` with a scores file `uttid-N score...`). Writers give each list back in its own format,
best first by the combined score."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from nnlm.data.tokenize import paragraphs
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text, read_input
from nnlm.rescore.nbest import NBestSet, Utterance

FORMATS = ("srilm", "moses", "kaldi")
SRILM_NAMES = ["acoustic", "lm", "nwords"]
_SRILM_V2_GROUP = re.compile(r"\(\s*st:[^)]*\)")
_SRILM_V2_SCORE = re.compile(r"^\(\s*(-?[0-9.eE+-]+)\s*\)")
_NOT_WORDS = {"<s>", "</s>"}

# Which existing column ranks the lists when no weight is given: the decoder's own score.
# Kaldi's scores are costs (negative log-likelihoods), hence -1.
ONE_BEST = "one-best.txt"  # written beside the reranked lists

DEFAULT_WEIGHTS = {"srilm": {"acoustic": 1.0}, "srilm2": {"score": 1.0}, "moses": {"score": 1.0},
                   "kaldi": {"ac_cost": -1.0}}


def _text(path: Path | str, what: str) -> list[str]:
    try:
        return read_input(path, what).decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise NnlmError(f"{path} is not UTF-8 text") from None


def words_of(text: str) -> list[str]:
    """A hypothesis' words by the one tokenization rule (nnlm.data.tokenize), as its score counts them."""
    return [word for paragraph in paragraphs(text) for word in paragraph]


def _number(value: str, where: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise NnlmError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise NnlmError(f"{where}: the score {value!r} is not a finite number; fix or drop that hypothesis")
    return number


def _count(value: str, where: str) -> float:
    """SRILM's word count: a whole number, not negative."""
    if not (value.isascii() and value.isdigit()):
        raise NnlmError(f"{where}: the word count {value!r} is not a whole number >= 0")
    return float(value)


def _first_seen(seen: dict[str, str], key: str, where: str, what: str) -> None:
    """Refuse a second `key` (a hypothesis or utterance id): the first one would be lost silently."""
    if key in seen:
        raise NnlmError(f"{where}: {what} {key!r} appears twice (first at {seen[key]}); ids must be unique")
    seen[key] = where


def read_nbest(fmt: str, paths: list[str], scores: str | None = None,
               score_names: list[str] | None = None) -> NBestSet:
    """An n-best set from files in format `fmt` (one of FORMATS)."""
    if fmt == "srilm":
        nbest = _read_srilm(paths)
    elif fmt not in FORMATS:
        raise NnlmError(f"unknown n-best format {fmt!r} (one of {', '.join(FORMATS)})")
    elif len(paths) != 1:
        raise NnlmError(f"the {fmt} format is one file holding every utterance, got {len(paths)}")
    elif fmt == "moses":
        nbest = _read_moses(paths[0])
    elif scores is None:
        raise NnlmError("the kaldi format needs --scores FILE (lines `uttid-N score...`)")
    else:
        nbest = _read_kaldi(paths[0], scores, score_names or ["ac_cost"])
    if not nbest.utterances:
        raise NnlmError(f"no hypotheses in {', '.join(paths)}")
    return nbest


def _srilm_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    if not files:
        raise NnlmError(f"no n-best files in {', '.join(paths)}")
    return files


def _read_srilm(paths: list[str]) -> NBestSet:
    utterances, versions, seen = [], set(), {}
    for path in _srilm_files(paths):
        if path.name == ONE_BEST:
            raise NnlmError(f"{path}: an n-best file named {ONE_BEST} would be overwritten by the one-best list "
                            f"(is it a previous rescore's output?); move it or rename it")
        _first_seen(seen, path.name, str(path), "the utterance (file name)")
        lines = [line for line in _text(path, "n-best file") if line.strip()]
        if not lines:
            raise NnlmError(f"{path}: an empty n-best list (no hypothesis); drop the file or fill it")
        version2 = bool(lines) and lines[0].strip() == "NBestList2.0"
        versions.add(version2)
        rows = [_srilm_v2_line(line, f"{path}:{i}") if version2 else _srilm_line(line, f"{path}:{i}")
                for i, line in enumerate(lines[1:] if version2 else lines, start=2 if version2 else 1)]
        utterances.append(Utterance(path.name, [words for words, _ in rows],
                                    np.array([s for _, s in rows], dtype=np.float64).reshape(len(rows), -1)))
    if len(versions) > 1:
        raise NnlmError("the n-best files mix NBestList2.0 and plain `acoustic lm nwords` lists")
    return NBestSet("srilm2" if True in versions else "srilm", ["score"] if True in versions else list(SRILM_NAMES),
                    utterances)


def _srilm_line(line: str, where: str) -> tuple[list[str], list[float]]:
    fields = line.split()
    if len(fields) < 3:
        raise NnlmError(f"{where}: expected `acoustic lm nwords word...`")
    return words_of(" ".join(fields[3:])), [_number(fields[0], where), _number(fields[1], where),
                                            _count(fields[2], where)]


def _srilm_v2_line(line: str, where: str) -> tuple[list[str], list[float]]:
    match = _SRILM_V2_SCORE.match(line.strip())
    if match is None:
        raise NnlmError(f"{where}: an NBestList2.0 hypothesis starts with its score in parentheses")
    words = [w for w in words_of(_SRILM_V2_GROUP.sub(" ", line.strip()[match.end():]))
             if w not in _NOT_WORDS and not w.startswith("-")]  # -pau- and the like are not words
    return words, [_number(match.group(1), where)]


def _read_moses(path: str) -> NBestSet:
    by_id: dict[str, Utterance] = {}
    rows: dict[str, list[tuple[list[str], float, str]]] = {}
    for i, line in enumerate(_text(path, "Moses n-best list"), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("|||")]
        if len(fields) < 4:
            raise NnlmError(f"{path}:{i}: expected `id ||| hypothesis ||| features ||| score`")
        rows.setdefault(fields[0], []).append((words_of(fields[1]), _number(fields[3], f"{path}:{i}"), fields[2]))
    for uid, hyps in rows.items():
        by_id[uid] = Utterance(uid, [h for h, _, _ in hyps], np.array([[s] for _, s, _ in hyps]),
                               [f for _, _, f in hyps])
    return NBestSet("moses", ["score"], list(by_id.values()))


def _split_hyp_id(hyp_id: str, where: str) -> str:
    uid, dash, n = hyp_id.rpartition("-")
    if not dash or not uid or not n.isdigit():
        raise NnlmError(f"{where}: {hyp_id!r} is not a hypothesis id `uttid-N`")
    return uid


def _read_kaldi(text_path: str, scores_path: str, names: list[str]) -> NBestSet:
    scores: dict[str, list[float]] = {}
    seen: dict[str, str] = {}
    for i, line in enumerate(_text(scores_path, "scores file"), start=1):
        fields = line.split()
        if fields:
            _first_seen(seen, fields[0], f"{scores_path}:{i}", "the hypothesis id")
            if len(fields) != 1 + len(names):
                raise NnlmError(f"{scores_path}:{i}: expected `uttid-N` and {len(names)} score(s) "
                                f"({', '.join(names)}; see --score-names)")
            scores[fields[0]] = [_number(v, f"{scores_path}:{i}") for v in fields[1:]]
    rows: dict[str, list[tuple[str, list[str]]]] = {}
    seen = {}
    for i, line in enumerate(_text(text_path, "n-best text"), start=1):
        fields = words_of(line)
        if not fields:
            continue
        _first_seen(seen, fields[0], f"{text_path}:{i}", "the hypothesis id")
        if fields[0] not in scores:
            raise NnlmError(f"{text_path}:{i}: {fields[0]} has no line in {scores_path}")
        rows.setdefault(_split_hyp_id(fields[0], f"{text_path}:{i}"), []).append((fields[0], fields[1:]))
    utterances = [Utterance(uid, [w for _, w in hyps], np.array([scores[h] for h, _ in hyps], dtype=np.float64),
                            [h for h, _ in hyps]) for uid, hyps in rows.items()]
    return NBestSet("kaldi", list(names), utterances)


def _num(x: float) -> str:
    return f"{x:.6g}"


def output_names(nbest: NBestSet) -> list[str]:
    """The files `write_reranked` and the one-best list put in the output directory."""
    if nbest.format in ("srilm", "srilm2"):
        names = [u.uid for u in nbest.utterances]
    else:
        names = ["nbest.txt"] if nbest.format == "moses" else ["text", "scores"]
    return [*names, ONE_BEST]


def write_reranked(nbest: NBestSet, weights: np.ndarray, orders: list[np.ndarray], out: Path,
                   lm_names: list[str]) -> None:
    """Each list best first, in its own format, under directory `out` (which must exist).

    SRILM: one file per utterance, `acoustic lm nwords words` with lm = combined - acoustic score (the list
    stays sortable by the sum, as SRILM's tools expect). Moses: the added scores appended to the feature
    string (`name= value`), the score field the combined score. Kaldi: `text` and `scores` with the added
    columns."""
    if nbest.format in ("srilm", "srilm2"):
        first = 0 if nbest.format == "srilm2" else nbest.column("acoustic")
        for utt, order in zip(nbest.utterances, orders, strict=True):
            total = utt.features @ weights
            atomic_write_text(out / utt.uid, "".join(
                f"{_num(utt.features[i, first])} {_num(total[i] - utt.features[i, first])} "
                f"{len(utt.hypotheses[i])} {' '.join(utt.hypotheses[i])}\n" for i in order))
    elif nbest.format == "moses":
        lm_cols = [nbest.column(n) for n in lm_names]
        lines = []
        for utt, order in zip(nbest.utterances, orders, strict=True):
            total = utt.features @ weights
            for i in order:
                added = " ".join(f"{n}= {_num(utt.features[i, c])}" for n, c in zip(lm_names, lm_cols, strict=True))
                lines.append(f"{utt.uid} ||| {' '.join(utt.hypotheses[i])} ||| {utt.extra[i]} {added} ||| "
                             f"{_num(total[i])}\n")
        atomic_write_text(out / "nbest.txt", "".join(lines))
    else:
        text, scores = [], []
        for utt, order in zip(nbest.utterances, orders, strict=True):
            for i in order:
                text.append(f"{utt.extra[i]} {' '.join(utt.hypotheses[i])}\n")
                scores.append(f"{utt.extra[i]} {' '.join(_num(v) for v in utt.features[i])}\n")
        atomic_write_text(out / "text", "".join(text))
        atomic_write_text(out / "scores", "".join(scores))


def one_best_text(nbest: NBestSet, orders: list[np.ndarray]) -> str:
    """`uttid words` of each utterance's best hypothesis, in the input's order."""
    return "".join(f"{u.uid} {' '.join(u.hypotheses[o[0]])}\n" for u, o in zip(nbest.utterances, orders, strict=True))
