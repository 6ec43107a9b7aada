"""A training run's directory: weights in safetensors, configuration and progress in JSON.

    run.json                    what was asked: corpus, vocabulary fingerprint, model, recipe, seed
    vocab.json                  the vocabulary
    model.safetensors           the best weights so far (by validation perplexity)
    state.json                  progress: epoch, batch, examples, history, best, elapsed time, finished
    checkpoint-<step>.safetensors  model + optimizer tensors + RNG state for `--resume`
    metrics.jsonl, curve.png    per-epoch metrics and the learning curve
    valid_scores.safetensors    the best weights' log P of every valid token (read by `nnlm reproduce`)

Every file of the directory is written here (run.json and vocab.json by `write_run`, the
checkpoints and state.json by `save_training_state`, the best weights by `save_tensors`, the metrics
and the curve by `write_metrics`), to a temporary name then renamed (nnlm.io); state.json names the
checkpoint tensors it goes with, written before it: a kill -9 at any moment leaves a state.json
whose tensors exist. Every safetensors file carries a SHA-256 of its tensors in its header, so a
truncated or tampered file is refused. Nothing is unpickled: loading never executes code.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from nnlm.bounds import Check, Schema, schema
from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.io import JSON_LIMIT, atomic_path, atomic_write_text, read_input, remove_stale_temps, require_regular
from nnlm.neural.lm.neural_lm import NeuralLM
from nnlm.neural.lm.scoring import EXACT, Scoring
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.run.config import RUN_FORMAT, RunRecord

RUN, STATE, VOCAB, WEIGHTS = "run.json", "state.json", "vocab.json", "model.safetensors"


class Optimizer(Protocol):
    def state_tensors(self) -> dict[str, torch.Tensor]: ...
    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None: ...


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write tensors atomically, with their digest in the header."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta = dict(metadata or {}) | {"sha256": tensors_digest(tensors)}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a file written by `save_tensors`; refuse it if unreadable or if its digest disagrees."""
    if not os.path.lexists(path):
        raise NnlmError(f"{path} is missing")
    require_regular(path, "tensor file")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118 (safe_open is no dict)
    except Exception as exc:  # safetensors raises its own error types for truncated or malformed files
        raise NnlmError(f"{path} is truncated or not a safetensors file ({str(exc).splitlines()[0][:120]})") from None
    if meta.get("sha256") != tensors_digest(tensors):
        raise NnlmError(f"{path} is corrupt or was modified: its tensors do not match the checksum in its header")
    return tensors, meta


def read_json(path: Path, what: str) -> dict[str, Any]:
    if not os.path.lexists(path):
        raise NnlmError(f"{path} is missing: not a complete nnlm training run")
    raw = read_input(path, what, JSON_LIMIT)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise NnlmError(f"cannot read {what} {path} ({exc})") from None
    if not isinstance(data, dict):
        raise NnlmError(f"{path} is not a {what}")
    return data


# --- one typed schema for run.json and state.json: field -> (required, check, what it must be) -----
# Unknown keys are tolerated (newer versions add fields); known keys are checked for type and range,
# so a hand-edited or damaged file is one line naming the field, never a TypeError deep in training.

MAX_PARAMETERS = 4_000_000_000  # a run.json asking for more is damaged (or no machine holds it)


def _int(lo: int, hi: int | None = None, optional: bool = False) -> Check:
    return lambda v: (optional and v is None) or (isinstance(v, int) and not isinstance(v, bool)
                                                  and v >= lo and (hi is None or v <= hi))


def _number(lo: float, optional: bool = False, positive: bool = False) -> Check:
    return lambda v: (optional and v is None) or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and math.isfinite(v) and v >= lo and (not positive or v > lo))


def _bool(optional: bool = False) -> Check:
    return lambda v: (optional and v is None) or isinstance(v, bool)


# run.json: every field as RunOptions and RunRecord declare it (its limits, its allowed values, null or not),
# the schema the command line and the library apply too (nnlm.bounds.schema)
RUN_SCHEMA: Schema = schema(RunRecord)
STATE_SCHEMA: Schema = {
    "step": (True, _int(0), "an integer >= 0"),
    "epoch": (True, _int(0), "an integer >= 0"),
    "batch": (True, _int(0), "an integer >= 0"),
    "examples": (True, _int(0), "an integer >= 0"),
    "loss_count": (True, _int(0), "an integer >= 0"),
    "loss_sum": (True, _number(-math.inf), "a finite number"),
    "history": (True, lambda v: isinstance(v, list) and all(isinstance(h, dict) for h in v), "a list of objects"),
    "best": (True, lambda v: v is None or (isinstance(v, dict) and _number(0.0)(v.get("valid_ppl"))),
             "null or an object with a valid_ppl"),
    "stop_reason": (False, lambda v: v is None or isinstance(v, str), "null or a string"),
    "bad_epochs": (True, _int(0), "an integer >= 0"),
    "elapsed": (True, _number(0.0), "a finite number >= 0"),
    "finished": (True, _bool(), "true or false"),
    "tensors": (True, lambda v: isinstance(v, str) and v.startswith("checkpoint-") and "/" not in v,
                "the name of a checkpoint-*.safetensors file"),
}


def validate(data: dict[str, Any], fields: Schema, path: Path) -> None:
    """Refuse the first field of `data` that the schema's check rejects (unknown fields pass)."""
    for key, (required, check, what) in fields.items():
        if key not in data:
            if required:
                raise NnlmError(f"{path} is damaged: it lacks {key!r}")
            continue
        if not check(data[key]):
            shown = repr(data[key]) if len(repr(data[key])) <= 60 else repr(data[key])[:57] + "..."
            raise NnlmError(f"{path} is damaged: {key} = {shown}, expected {what}")


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def write_run(out: Path, run: dict[str, Any], vocab: Vocabulary) -> None:
    """A new run's definition, what `read_run` reads back: vocab.json, then run.json (the file that makes
    `out` a run)."""
    out.mkdir(parents=True, exist_ok=True)
    vocab.save(out / VOCAB)
    write_json(out / RUN, run)


def check_weights(net_config: ModelConfig, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """The weights must be exactly the parameters the config describes, with their shapes (and the
    class map of a class-factored net, integer class ids: its values are checked when it is loaded)."""

    shapes = build_net(ModelConfig(**net_config.to_dict())).to("meta").state_dict()
    expected = {name: tuple(t.shape) for name, t in shapes.items()}
    got = {name: tuple(t.shape) for name, t in tensors.items()}
    if set(got) != set(expected):
        raise NnlmError(f"{source} does not match the model config: it holds {sorted(got)}, "
                        f"the config needs {sorted(expected)}")
    for name, shape in expected.items():
        if got[name] != shape:
            raise NnlmError(f"{source} does not match the model config: {name} is {list(got[name])}, "
                            f"the config needs {list(shape)}")
        if shapes[name].is_floating_point() != tensors[name].is_floating_point():
            kind = "a floating-point" if shapes[name].is_floating_point() else "an integer"
            raise NnlmError(f"{source}: {name} is not {kind} tensor")
        if tensors[name].is_floating_point() and not bool(torch.isfinite(tensors[name]).all()):
            raise NnlmError(f"{source}: {name} holds NaN or infinite values (a damaged or diverged model)")


def read_run(run_dir: Path) -> tuple[dict[str, Any], Vocabulary, ModelConfig]:
    """run.json + vocab.json of a run directory, checked against each other."""
    if not run_dir.is_dir():
        raise NnlmError(f"{run_dir} is not a directory (expected a run directory written by `nnlm train`)")
    run = read_json(run_dir / RUN, "run config")
    if run.get("format") != RUN_FORMAT:
        raise NnlmError(f"{run_dir / RUN} is not an nnlm neural run config (format {RUN_FORMAT})")
    validate(run, RUN_SCHEMA, run_dir / RUN)
    vocab = Vocabulary.load(run_dir / VOCAB)
    if vocab.fingerprint != run.get("vocab_fingerprint"):
        raise NnlmError(f"{run_dir}: vocab.json does not match run.json (another vocabulary)")
    config = ModelConfig.from_dict(run["model"])
    if config.parameter_count() > MAX_PARAMETERS:
        raise NnlmError(f"{run_dir / RUN} is damaged: its model has {config.parameter_count():,} parameters")
    if config.vocab_size != len(vocab):
        raise NnlmError(f"{run_dir}: the model config has {config.vocab_size} outputs, "
                        f"the vocabulary {len(vocab)} words")
    return run, vocab, config


def load_weights(net: NPLM, path: Path) -> dict[str, str]:
    tensors, meta = load_tensors(path)
    check_weights(net.config, tensors, path)
    net.load_state_dict(tensors)  # (copied into the net's own dtypes)
    return meta


def load_neural(run_dir: Path | str, device: str = "cpu", scoring: Scoring = EXACT) -> NeuralLM:
    """The best model of a run directory, as a LanguageModel scoring by `scoring` (nnlm.neural.lm.scoring)."""
    run_dir = Path(run_dir)
    run, vocab, config = read_run(run_dir)
    if not (run_dir / WEIGHTS).exists():
        raise NnlmError(f"{run_dir} holds no trained model yet ({WEIGHTS} is written after the first epoch)")

    net = build_net(config)
    load_weights(net, run_dir / WEIGHTS)
    return language_model(net.to(device), vocab, run["pad_token"], device, scoring)


# --- exact resume ----------------------------------------------------------------------------

def read_state(out: Path) -> dict[str, Any]:
    """state.json, or {} if there is none (a symlink loop or a FIFO is there, and refused)."""
    return read_json(out / STATE, "training state") if os.path.lexists(out / STATE) else {}


def save_training_state(out: Path, net: NPLM, optimizer: Optimizer, state: dict[str, Any]) -> None:
    """Tensors first (a new file per step), then state.json naming them, then drop older tensors."""
    tensors = {f"model.{k}": v for k, v in net.state_dict().items()} | optimizer.state_tensors()
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    name = f"checkpoint-{state['step']:09d}.safetensors"
    save_tensors(out / name, tensors, {"step": str(state["step"])})
    state["tensors"] = name
    write_json(out / STATE, state)
    for old in out.glob("checkpoint-*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def load_training_state(out: Path, net: NPLM, optimizer: Optimizer) -> dict[str, Any] | None:
    """Put the saved weights, optimizer and RNG state back; the progress dict, or None if nothing was saved."""
    remove_stale_temps(out)  # what a kill -9 mid-write left: never renamed, never read
    state = read_state(out)
    if not state:
        if os.path.lexists(out / WEIGHTS):  # starting again would overwrite the best model
            raise NnlmError(f"--resume: {out} holds {WEIGHTS} but no {STATE}: the run is damaged; it is not "
                            f"restarted over its best model (copy {WEIGHTS} away, or choose another --out)")
        return None  # killed before its first checkpoint: nothing to resume, nothing to lose
    validate(state, STATE_SCHEMA, out / STATE)
    source = out / state["tensors"]
    tensors, _ = load_tensors(source)
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    check_weights(net.config, model, source)
    net.load_state_dict(model)
    optimizer.load_state_tensors({k: v for k, v in tensors.items() if k.startswith("optim.")})
    if "rng.torch" not in tensors:
        raise NnlmError(f"{source} lacks the RNG state")
    torch.set_rng_state(tensors["rng.torch"])
    cuda_states = [tensors[f"rng.cuda.{i}"] for i in range(torch.cuda.device_count()) if f"rng.cuda.{i}" in tensors]
    if cuda_states:
        torch.cuda.set_rng_state_all(cuda_states)
    return state


# --- metrics.jsonl and curve.png -------------------------------------------------------------

def log_scale_plain_labels(ax: Any) -> None:
    """A log-scale y axis labelled 242.5, not 2.425 x 10^2 (what matplotlib writes within one decade)."""
    from matplotlib.ticker import StrMethodFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.yaxis.set_minor_formatter(StrMethodFormatter("{x:g}"))


# The learning curve is redrawn after every epoch; NNLM_CURVE_EVERY_EPOCH=0 draws it when the run ends only. A test
# hook: tests/conftest.py sets it for the tests' processes, whose tiny nets' epochs (~0.1 s) cost less than
# matplotlib's drawing of a curve (~0.22 CPU s: 37% of the training tests' time)
CURVE_EVERY_EPOCH = os.environ.get("NNLM_CURVE_EVERY_EPOCH", "1") != "0"


def write_metrics(out: Path, history: list[dict[str, Any]], full_softmax: bool = True, last: bool = True) -> None:
    """metrics.jsonl (rewritten whole, so a resumed run never duplicates a line) and curve.png (after an
    epoch that is not the run's `last`, only if CURVE_EVERY_EPOCH). A sampled loss's running "train ppl"
    is exp of its objective, not a perplexity: not plotted."""
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in history))
    if not (last or CURVE_EVERY_EPOCH):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = [h["epoch"] for h in history]
    if full_softmax:
        ax.plot(epochs, [h["train_ppl"] for h in history], "o-", label="train (running, during the epoch)")
    ax.plot(epochs, [h["valid_ppl"] for h in history], "s-", label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity")
    log_scale_plain_labels(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(out.name)
    fig.tight_layout()
    with atomic_path(out / "curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


# --- the best epoch's validation scores, kept beside its weights ---------------------------------------------
# Why: a run scores all of valid exactly after every epoch, and the best epoch's weights are model.safetensors;
# `nnlm reproduce` then needs valid's log P of those weights, which is the same computation bit for bit (same
# weights, same exact fp32 path; exact scoring does not depend on the thread count: tests/test_valid_scores.py).
# So each best epoch's log P of every valid token is kept in valid_scores.safetensors, tagged with the digest of
# the weights it came from, and read instead of scoring again (one |V|-wide pass over Brown's 200k valid tokens:
# 42 CPU-s for MLP1 on an AVX2 host, 7 s on an AMX one; docs/experiments/host-speed.md). A file whose tag does not
# match the weights (a run continued or changed by another version) is ignored: the split is scored as before.

VALID_SCORES = "valid_scores.safetensors"


def weights_digest(run_dir: Path) -> str | None:
    """The digest model.safetensors carries in its header (of its tensors), or None without the file."""
    path = run_dir / WEIGHTS
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as fh:
        return (fh.metadata() or {}).get("sha256")


def keep_valid_scores(run_dir: Path, log_probs: np.ndarray | None) -> None:
    """Keep `log_probs` (log P of every valid token) as the scores of the weights model.safetensors now holds
    (None: nothing to keep; a file kept for earlier weights no longer matches their digest)."""
    digest = weights_digest(run_dir)
    if digest is None or log_probs is None:
        return
    save_tensors(run_dir / VALID_SCORES, {"log_probs": torch.from_numpy(np.ascontiguousarray(log_probs))},
                    {"weights_sha256": digest})


def kept_valid_scores(run_dir: Path, tokens: int) -> np.ndarray | None:
    """The valid scores of the weights in model.safetensors, if the run kept them for exactly these weights
    and a split of `tokens` tokens; else None (the caller scores the split)."""
    path = run_dir / VALID_SCORES
    if not os.path.isfile(path):
        return None
    digest = weights_digest(run_dir)
    try:
        tensors, meta = load_tensors(path)
    except NnlmError:
        return None  # damaged: scoring again costs time, not correctness
    scores = tensors.get("log_probs")
    if digest is None or meta.get("weights_sha256") != digest or scores is None or scores.shape != (tokens,) \
            or scores.dtype != torch.float64:
        return None
    return scores.numpy()
