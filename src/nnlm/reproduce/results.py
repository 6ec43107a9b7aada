"""OUT/results.json: every finished row with the options it was built under, and the last call.

A row is kept across calls only while its options key matches the call's: a net trained with
`--loss sampled` is not shown as an exact-softmax net by a later `--loss full` call, which trains
its own (in another run directory) instead. The report is written from this file alone."""
from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text

FORMAT = "nnlm-reproduce/1"


@dataclass
class RowResult:
    """What a row runner returns: perplexities (None where not scored), its cost, and why it is as it is."""

    perplexity: dict[str, float | None]
    parameters: int | None
    seconds: float
    status: str = "done"  # "done", "shortened", "skipped" (for lack of budget) or "not applicable"
    note: str = ""  # why it was shortened or skipped, with the numbers
    options: dict[str, Any] = field(default_factory=dict)  # what built it (the results key)
    plan: dict[str, Any] | None = None  # the planner's grant and reason, for budgeted rows
    extra: dict[str, Any] = field(default_factory=dict)  # epochs, finished, weight, run directory ...

    @property
    def cut(self) -> bool:
        """Shortened or skipped for lack of budget: a later call redoes it."""
        return self.status in ("shortened", "skipped")

    def to_dict(self) -> dict[str, Any]:
        core = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return core | {"cut": self.cut} | self.extra

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> RowResult:
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in entry.items() if k in names}
        extra = {k: v for k, v in entry.items() if k not in names and k not in ("cut", "commit")}
        known.setdefault("status", "shortened" if entry.get("cut") else "done")
        return cls(**{"perplexity": {}, "parameters": None, "seconds": 0.0} | known, extra=extra)


def recipe_values(run: dict[str, Any]) -> dict[str, Any]:
    """The recipe a run trained with, as values: the named recipe's fields, overlaid with any recipe
    fields the run's run.json records itself (so a recipe changed since keeps its old values)."""
    from nnlm.neural.run.recipes import RECIPES

    recipe = run.get("recipe")
    if isinstance(recipe, dict):
        return dict(recipe)
    values = asdict(RECIPES[recipe]) if recipe in RECIPES else {"name": recipe}
    values |= {k: run[k] for k in values if k != "name" and k in run and run[k] is not None}
    if run.get("lr") is not None:
        values["lr"] = run["lr"]
    return values


def net_options(run: dict[str, Any], hogwild: int | None) -> dict[str, Any]:
    """The key of a net row: loss, samples, Hogwild workers and the recipe's values, from a run.json
    (or what a new run's run.json will hold)."""
    loss = run.get("loss", "full")
    return {"loss": loss, "samples": run.get("samples") if loss != "full" else None,
            "hogwild": hogwild, "recipe": recipe_values(run)}


def requested_options(loss: str, samples: int | None, hogwild: int | None, vocab_size: int,
                      device: str, recipe: str | None = None) -> dict[str, Any]:
    """The key a net trained by this call will have (bf16 as the trainer resolves it on `device`;
    recipe None: the loss's default recipe)."""
    from nnlm.neural.run.config import DEFAULT_SAMPLES
    from nnlm.neural.run.recipes import RECIPES, default_recipe
    from nnlm.neural.run.run_config import bf16_is_fast, pick_device

    k = None if loss == "full" else (samples or min(DEFAULT_SAMPLES, vocab_size))
    recipe = recipe or default_recipe(loss)
    bf16 = RECIPES[recipe].bf16 and bf16_is_fast(pick_device(device))
    return net_options({"loss": loss, "samples": k, "recipe": recipe, "bf16": bf16}, hogwild)


def options_tag(options: dict[str, Any]) -> str:
    """A short, stable name for an options key (a net's run directory is runs/<net>-<tag>)."""
    return hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10).stdout.strip()
        return sha or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def built_by(rows: dict[str, dict[str, Any]], keys: list[str]) -> dict[str, list[str]]:
    """The commit that built each of `keys`' rows (skipped and not-applicable rows built nothing), grouped:
    commit -> row keys in `keys`' order; "unrecorded" for a row from before commits were kept."""
    built: dict[str, list[str]] = {}
    for key in keys:
        if key in rows and rows[key].get("status") not in ("skipped", "not applicable"):
            built.setdefault(rows[key].get("commit", "unrecorded"), []).append(key)
    return built


def read(path: Path) -> dict[str, Any]:
    """results.json, checked; NnlmError when it is not a reproduction's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NnlmError(f"{path} is unreadable ({exc}); remove it or choose another --out") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise NnlmError(f"{path} is not an nnlm reproduction; choose another --out")
    return data


class Results:
    """One entry per finished row, rewritten atomically after each row."""

    def __init__(self, out: Path, corpus: Corpus, call: dict[str, Any]) -> None:
        self.path = out / "results.json"
        self.commit = commit()  # read once, at the start: the code that builds this call's rows
        self.corpus_key = {"corpus": corpus.name, "vocab": corpus.vocab.fingerprint}
        self.corpus_info = {"name": corpus.name, "train": len(corpus.train), "valid": len(corpus.valid),
                            "test": len(corpus.test), "vocab": len(corpus.vocab)}
        self.call = call | {"commit": self.commit}
        if out.exists() and any(out.iterdir()):
            if not self.path.exists():
                raise NnlmError(f"{out} already holds files that are not an nnlm reproduction; choose another --out")
            data = read(self.path)
            if data.get("corpus") != self.corpus_key:
                raise NnlmError(f"{out} holds a reproduction on another corpus or vocabulary; choose another --out")
            self.rows: dict[str, dict[str, Any]] = data.get("rows", {})
        else:
            out.mkdir(parents=True, exist_ok=True)
            self.rows = {}
        self.save()

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps({"format": FORMAT, "corpus": self.corpus_key,
                                                 "corpus_info": self.corpus_info, "call": self.call,
                                                 "rows": self.rows}, indent=1))

    def put(self, row_id: str, result: RowResult) -> None:
        self.rows[row_id] = result.to_dict() | {"commit": self.commit}
        self.save()

    def get(self, row_id: str) -> RowResult | None:
        entry = self.rows.get(row_id)
        return None if entry is None else RowResult.from_dict(entry)

    def pending(self, row_id: str, options: dict[str, Any] | None = None) -> bool:
        """Not done, done only in part for lack of budget, or built under other options than `options`."""
        entry = self.rows.get(row_id)
        if entry is None or entry.get("cut"):
            return True
        return options is not None and entry.get("options") != options
