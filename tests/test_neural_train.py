"""The trainer: the paper's minibatch update, exact resume after kill -9, divergence, early
stopping, run-directory files, and bad input (one line, exit 2)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nnlm.cli import main
from nnlm.errors import NnlmError
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.model_config import ModelConfig
from nnlm.neural.run import pipeline  # (where a run gets its default batch loss)
from nnlm.neural.run import train as tr
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.checkpoint import load_neural
from nnlm.neural.run.optim import PaperSGD
from nnlm.neural.run.recipes import RECIPES
from nnlm.neural.run.trainer import Clock, TrainingDiverged

REPO = Path(__file__).resolve().parents[1]
TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16, "threads": 1}


def run_train(out: Path, corpus_dir: Path, resume: bool = False, **options):
    requested = ({} if resume else {"corpus": str(corpus_dir)} | TINY) | options
    return tr.train(out, requested, resume=resume, progress=False, log=lambda s: None)



@pytest.fixture
def rand_dir(random_corpus, tmp_path) -> Path:
    return tmp_path / "rand"


def test_paper_minibatch_step_is_b_online_updates_at_the_batch_start():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=9, order=3, hidden=3, features=2)
    net = NPLM(cfg).double()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    ctx = torch.randint(0, 9, (4, 2))
    tgt = torch.randint(0, 9, (4,))
    recipe = RECIPES["paper"]
    lr, seen = 0.05, 10_000_000  # eps_t = lr / (1 + r t) = lr / 1.1
    eps = lr / (1 + recipe.lr_decay * seen)

    expected = {k: v.clone() for k, v in before.items()}
    decay = {"C", "W", "H", "U"}
    for i in range(4):  # each example's gradient of log P at the batch-start parameters
        net.zero_grad()
        torch.log_softmax(net(ctx[i:i + 1]), 1)[0, tgt[i]].backward()
        for name, p in net.named_parameters():
            expected[name] += eps * p.grad
    for name in decay:  # the decay compounds once per example
        expected[name] -= before[name] * (1 - (1 - eps * recipe.weight_decay) ** 4)

    net.zero_grad()
    torch.nn.functional.cross_entropy(net(ctx), tgt).backward()
    PaperSGD(net, lr, recipe.lr_decay, recipe.weight_decay).step(seen, 4)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.detach(), expected[name], rtol=1e-12, atol=1e-14, msg=name)


def weights(run: Path) -> dict[str, torch.Tensor]:
    state = json.loads((run / "state.json").read_text())
    return load_file(str(run / state["tensors"]))


# adaptive: every epoch a stall (min_improvement 0.5), so its learning rate halves each epoch (state.json's lr)
# paper, in fp32 and with --bf16: the kept output layer (nnlm.neural.net.kept_output) is rebuilt from the checkpoint
@pytest.mark.parametrize("recipe, extra", [("modern", {}), ("paper", {}), ("paper", {"bf16": True}),
                                           ("adaptive", {"min_improvement": 0.5, "patience": 10})])
def test_resume_after_kill_9_ends_with_the_same_weights(rand_dir, tmp_path, recipe, extra):
    epochs = 4
    whole = tmp_path / "whole"
    run_train(whole, rand_dir, recipe=recipe, epochs=epochs, **extra)

    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "nnlm", "train", "--corpus", str(rand_dir), "--out", str(killed),
           "--recipe", recipe, "--epochs", str(epochs), "--checkpoint-minutes", "0.0005", "--no-progress",
           "--preset", "mlp7", "--hidden", "8", "--features", "4", "--batch-size", "16", "--threads", "1"]
    cmd += [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}" for k, v in extra.items()]
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state_file = killed / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if state_file.exists():
            try:
                state = json.loads(state_file.read_text())
            except ValueError:  # never happens with atomic writes; fail loudly below if it does
                raise AssertionError("state.json was read half-written") from None
            if state["step"] > 0:  # a checkpoint exists: kill -9 from here on, wherever it is
                break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    state = json.loads(state_file.read_text())
    assert state["step"] > 0 and state["epoch"] < epochs

    run_train(killed, rand_dir, resume=True, epochs=epochs, threads=1)
    a, b = weights(whole), weights(killed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    history_a = json.loads((whole / "state.json").read_text())["history"]
    history_b = json.loads((killed / "state.json").read_text())["history"]
    assert [h["valid_ppl"] for h in history_a] == [h["valid_ppl"] for h in history_b]
    assert len((killed / "metrics.jsonl").read_text().splitlines()) == epochs
    assert len(list(killed.glob("checkpoint-*.safetensors"))) == 1
    if recipe == "adaptive":
        assert [h["lr"] for h in history_b] == [0.002, 0.002, 0.001, 0.0005]  # (epoch 1 is always better)


def test_a_run_directory_holds_model_metrics_and_curve(rand_dir, tmp_path, capsys):
    out = tmp_path / "run"
    state = run_train(out, rand_dir, epochs=3)
    assert len(state["history"]) == 3
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == [1, 2, 3]
    assert all(m["valid_ppl"] > 1 and m["train_ppl"] > 1 for m in lines)
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = min(lines, key=lambda m: m["valid_ppl"])
    assert main(["eval", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    bf16 = json.loads((out / "run.json").read_text())["bf16"]  # training's validation used bf16 products
    assert math.isclose(result["perplexity"]["valid"], best["valid_ppl"], rel_tol=5e-3 if bf16 else 1e-9)
    lm = load_neural(out)
    assert lm.order == 3 and lm.config.hidden == 8



@pytest.mark.parametrize("every_epoch", [True, False], ids=["every-epoch", "final-only"])
def test_the_curve_is_drawn_after_each_epoch_unless_only_the_final_one_is_asked(every_epoch, rand_dir, tmp_path,
                                                                                 monkeypatch):
    """By default (what users get) curve.png is redrawn after every epoch, so it is there while a run goes
    on; the tests' setting (NNLM_CURVE_EVERY_EPOCH=0, tests/conftest.py) draws it when the run ends only.
    metrics.jsonl is written after every epoch either way, and the final curve is drawn in both."""
    from nnlm.neural.run import checkpoint

    monkeypatch.setattr(checkpoint, "CURVE_EVERY_EPOCH", every_epoch)
    out = tmp_path / "run"
    seen = {}

    def log(line: str) -> None:  # epoch 2's line comes before its own metrics are written
        if line.startswith("epoch 2:"):
            seen["curve"] = (out / "curve.png").exists()
            seen["metrics"] = len((out / "metrics.jsonl").read_text().splitlines())

    tr.train(out, {"corpus": str(rand_dir)} | TINY | {"epochs": 3}, progress=False, log=log)
    assert seen == {"curve": every_epoch, "metrics": 1}
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3

def test_nan_loss_stops_with_a_clear_message_and_keeps_the_best_model(random_corpus, rand_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    batches = math.ceil(len(random_corpus.train) / TINY["batch_size"])
    real, calls = batch_loss, {"n": 0}

    def nan_after_two_epochs(net, contexts, targets, bf16):
        calls["n"] += 1
        loss = real(net, contexts, targets, bf16)
        return loss * float("nan") if calls["n"] > 2 * batches + 5 else loss

    monkeypatch.setattr(pipeline, "batch_loss", nan_after_two_epochs)
    with pytest.raises(TrainingDiverged, match=r"loss became NaN.*best model \(epoch 2.*intact"):
        run_train(out, rand_dir, epochs=5)
    saved = load_file(str(out / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in saved.values())
    assert json.loads((out / "state.json").read_text())["best"]["epoch"] == 2
    assert isinstance(TrainingDiverged("x"), NnlmError)  # the CLI prints it on one line, exit 2


def test_early_stopping_keeps_the_best_epoch(rand_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    scores = iter([30.0, 20.0, 25.0, 26.0, 10.0])
    monkeypatch.setattr(tr, "scored_validation", lambda lm, corpus: (next(scores), None))
    state = run_train(out, rand_dir, epochs=5, patience=2)
    assert state["finished"] and "early stopping" in state["stop_reason"]
    assert [h["valid_ppl"] for h in state["history"]] == [30.0, 20.0, 25.0, 26.0]
    assert state["best"] == {"epoch": 2, "valid_ppl": 20.0}
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as fh:
        assert fh.metadata()["epoch"] == "2"


def cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # a usage error found while parsing (range checks of nnlm.cli.arg_types)
        code = exc.code
    err = capsys.readouterr().err
    return code, err


def test_train_ends_its_process_through_its_finish_hook(rand_dir, tmp_path, capsys, monkeypatch):
    """`nnlm train` hands its exit code to the torchrun rank's exit (a no-op outside torchrun), on an
    error as on success; other commands have no such hook."""
    import nnlm.neural.parallel.ranks as parallel

    ended: list[int] = []
    monkeypatch.setattr(parallel, "exit_torchrun_rank", ended.append)
    code, err = cli(["train", "--corpus", str(rand_dir), "--out", str(tmp_path / "r"), "--preset", "mlp99"], capsys)
    assert code == 2 and "unknown preset" in err and ended == [2]
    assert main(["stats", "--corpus", str(rand_dir)]) == 0 and ended == [2]


def test_bad_input_is_one_line_and_exit_2(rand_dir, tmp_path, capsys):
    base = ["train", "--corpus", str(rand_dir), "--no-progress", "--threads", "1"]
    for extra, message in [
        (["--preset", "mlp99"], "unknown preset"),
        (["--order", "1"], "argument --order: must be an integer in [2, 256], got 1"),
        (["--features", "0"], "argument --features: must be an integer in [1, 100,000]"),
        (["--hidden", "-1"], "argument --hidden: must be an integer in [0, 100,000]"),
        (["--recipe", "magic"], "unknown recipe"),
    ]:
        code, err = cli(base + ["--out", str(tmp_path / "x"), *extra], capsys)
        assert code == 2 and message in err and err.count("\n") == 1, err

    out = tmp_path / "run"
    run_train(out, rand_dir, epochs=1)
    code, err = cli(base + ["--out", str(out)], capsys)
    assert code == 2 and "already holds a trained model" in err
    other = tmp_path / "other-corpus"  # not the run's parent: that is refused first, as an input holding the output
    other.mkdir()
    code, err = cli(["train", "--out", str(out), "--resume", "--corpus", str(other), "--no-progress"], capsys)
    assert code == 2 and "was started with corpus" in err

    other = tmp_path / "other"  # same corpus name, another vocabulary
    other.mkdir()
    for split in ("train", "valid", "test"):
        (other / f"{split}.txt").write_text("a b c d e f\n")
    (out / "run.json").write_text((out / "run.json").read_text().replace(str(rand_dir.resolve()), str(other.resolve())))
    code, err = cli(["train", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 2 and "another vocabulary" in err and err.count("\n") == 1, err


def test_damaged_checkpoints_are_refused(rand_dir, tmp_path, capsys):
    out = tmp_path / "run"
    run_train(out, rand_dir, epochs=1)
    good = (out / "model.safetensors").read_bytes()

    (out / "model.safetensors").write_bytes(good[: len(good) // 2])
    code, err = cli(["eval", str(out)], capsys)
    assert code == 2 and "truncated" in err and err.count("\n") == 1, err

    tampered = bytearray(good)
    tampered[-5] ^= 0xFF
    (out / "model.safetensors").write_bytes(bytes(tampered))
    code, err = cli(["eval", str(out)], capsys)
    assert code == 2 and "corrupt or was modified" in err, err

    (out / "model.safetensors").write_bytes(good)
    run = json.loads((out / "run.json").read_text())
    run["model"]["hidden"] = 9
    (out / "run.json").write_text(json.dumps(run))
    code, err = cli(["eval", str(out)], capsys)
    assert code == 2 and "does not match the model config" in err, err

    run["model"]["hidden"] = 8
    (out / "run.json").write_text(json.dumps(run))
    state = json.loads((out / "state.json").read_text())
    ckpt = out / state["tensors"]
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    code, err = cli(["train", "--out", str(out), "--resume", "--epochs", "2", "--no-progress"], capsys)
    assert code == 2 and "truncated" in err, err

    code, err = cli(["eval", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "not a directory" in err


def test_time_budget_scores_the_last_weights_and_resume_continues(rand_dir, tmp_path):
    out = tmp_path / "run"
    state = run_train(out, rand_dir, epochs=3, time_budget=1e-6)
    assert not state["finished"] and "time budget" in state["stop_reason"]
    assert state["epoch"] == 0 and state["batch"] == 1  # stopped after the first update
    assert state["history"][-1]["partial"] and (out / "model.safetensors").exists()
    same = run_train(out, rand_dir, resume=True, epochs=3, time_budget=1e-6)  # used up: nothing to do
    assert same["step"] == state["step"] and same["history"] == state["history"]
    again = run_train(out, rand_dir, resume=True, epochs=3, time_budget=60)
    assert again["epoch"] == 3 and [h["epoch"] for h in again["history"]][-3:] == [1, 2, 3]


def test_a_budget_used_up_while_scoring_an_epoch_ends_the_run_there(rand_dir, tmp_path, monkeypatch):
    """No epoch of one batch (and a second validation of nearly the same weights) after the budget
    ran out during the validation of a whole epoch; the run resumes from the epoch's end."""
    out = tmp_path / "run"
    real, used = tr.scored_validation, {"up": False}

    def scoring_uses_the_budget(lm, corpus):
        used["up"] = True
        return real(lm, corpus)

    monkeypatch.setattr(tr, "scored_validation", scoring_uses_the_budget)
    monkeypatch.setattr(Clock, "out_of_time", lambda clock: used["up"])
    state = run_train(out, rand_dir, epochs=3, time_budget=60)
    assert (state["epoch"], state["batch"]) == (1, 0) and "time budget" in state["stop_reason"]
    assert [h["epoch"] for h in state["history"]] == [1] and not state["finished"]
    used["up"] = False
    monkeypatch.setattr(Clock, "out_of_time", lambda clock: False)
    again = run_train(out, rand_dir, resume=True, epochs=3, time_budget=60)
    assert [h["epoch"] for h in again["history"]] == [1, 2, 3]


def test_train_leaves_the_callers_thread_settings_as_they_were(rand_dir, tmp_path):
    from nnlm import threads

    before_count, before_governor = torch.get_num_threads(), threads.current()
    torch.set_num_threads(2)
    try:
        run_train(tmp_path / "run", rand_dir, epochs=1, threads=1)  # trains with 1 thread
        assert torch.get_num_threads() == 2 and threads.current() is before_governor
    finally:
        torch.set_num_threads(before_count)
