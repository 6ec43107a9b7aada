"""Parallel training on torch.distributed: synchronous data-parallel (`ddp`) and the paper's
parameter-parallel output layer (`vocab`); Hogwild lives in `nnlm.neural.parallel.hogwild`.

Both modes run the loop of `nnlm.neural.run.train` (`run_epochs`: same recipes, epoch permutation,
validation, early stopping, time budget) in every rank, through a Trainer (DDPTrainer,
VocabTrainer) that computes this rank's part of each batch and agrees with the other ranks; they
leave the same run directory, written by rank 0 only: model.safetensors holds the whole model,
so `nnlm eval`, `nnlm.load` etc. see no difference.

- ddp: the global batch of `--batch-size` examples is cut into `world` contiguous shards, rank r
  computing the loss of shard r; DistributedDataParallel sums the gradients (each rank's loss is
  scaled so their average is the gradient of the global batch mean). The update is therefore the
  single-process update of that batch, up to float summation order.
- vocab: every rank reads the whole batch and owns a slice of the output layer
  (`nnlm.neural.parallel.vocab_parallel`); all ranks share one RNG state, so even dropout masks match a
  single process.
In bf16 both run the single process's fused output-layer step (`softmax_loss`): ddp inside
DistributedDataParallel's forward (`ShardLoss`), vocab as its vocabulary-parallel version
(`vocab_parallel.vocab_softmax_cross_entropy`).

Checkpoints hold whole tensors (slices gathered, optimizer state included), so a run may be
resumed with another world size or mode: the checkpoint is re-sharded when it is loaded.
Rank 0 alone reads and writes the run directory and broadcasts what it read; the corpus must be
readable by every rank (`brown` from its cache, or the same directory path on every machine).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from nnlm import threads
from nnlm.data.corpus import Corpus
from nnlm.errors import NnlmError
from nnlm.lm import LanguageModel
from nnlm.neural.lm.scoring import BF16, EXACT
from nnlm.neural.net.model import NPLM
from nnlm.neural.net.nets import build_net, language_model
from nnlm.neural.parallel import distributed as dd
from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.batches import batch_loss
from nnlm.neural.run.config import TrainRequest, as_request
from nnlm.neural.run.pipeline import TRAINERS, build_optimizer, nothing_left_to_do, prepare
from nnlm.neural.run.run_config import Run, open_corpus, pick_device
from nnlm.neural.run.train import run_setup, train, train_with, under_torchrun
from nnlm.neural.run.trainer import Trainer, TrainingSetup

MODES = ("none", *(name for name in TRAINERS if name != "single"))  # --parallel: none is the single process
_torchrun_rank = False  # this process joined torchrun's group in train_parallel: it ends by exit_torchrun_rank


def _quiet(_: str) -> None:
    pass


def train_parallel(out: Path | str, request: TrainRequest | Mapping[str, Any], mode: str, workers: int | None = None,
                   resume: bool = False, progress: bool = True, log: Callable[[str], None] = print,
                   timeout: float = dd.DEFAULT_TIMEOUT) -> dict[str, Any] | None:
    """Train with `mode`; under torchrun this process is one rank, otherwise `workers` local
    processes are started. Returns the final state (on rank 0; None on the other ranks). `request`: the
    typed request, or its keyword form (`TrainRequest.of`)."""
    if mode not in MODES:
        raise NnlmError(f"--parallel must be one of {', '.join(MODES)}, got {mode!r}")
    request = as_request(request)
    if mode != "none":  # before anything is written
        asked = request.run
        TRAINERS[mode].check(asked.loss, lr_schedule=asked.lr_schedule, output_layer=asked.asked_output_layer(),
                             energy=asked.asks_energy())
    if mode == "none":
        if workers is not None:
            raise NnlmError("--workers needs --parallel hogwild, ddp or vocab")
        return train(out, request, resume=resume, progress=progress, log=log)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise NnlmError(f"--workers must be a positive integer, got {workers!r}")
    if timeout <= 0:
        raise NnlmError(f"--dist-timeout must be positive, got {timeout}")
    out = Path(out)
    if mode == "hogwild":
        if under_torchrun():
            raise NnlmError("--parallel hogwild shares memory between local processes: run it without torchrun")
        return train_with("hogwild", out, request, resume=resume, progress=progress, log=log, workers=workers or 2)
    if under_torchrun():
        if workers is not None and workers != int(os.environ["WORLD_SIZE"]):
            raise NnlmError("under torchrun the number of processes is torchrun's (--nproc-per-node x --nnodes); "
                            "drop --workers")
        device = dd.rank_device(pick_device(request.session.device))
        dd.init_group(device, timeout)
        global _torchrun_rank
        _torchrun_rank = True
        try:
            return run_rank(out, request, mode, resume, progress, log if dist.get_rank() == 0 else _quiet, timeout)
        finally:
            dd.leave_group()
    if request.session.device == "cuda":
        raise NnlmError("--parallel ddp/vocab on GPUs: launch with torchrun (one process per GPU)")
    dd.launch_local(run_rank, workers or 2,
                    args=(out, request.with_session(device="cpu"), mode, resume, progress,
                          log if log is print else None, timeout),
                    timeout=timeout)
    return ck.read_json(out / ck.STATE, "training state")


def exit_torchrun_rank(code: int) -> None:
    """End a torchrun rank that joined its group in `train_parallel` (and has left it, its files written)
    without interpreter finalization, as the local launcher's forked children end: torch's C++ teardown of
    gloo's threads can still abort there ("terminate called without an active exception", about 1 run in 50
    here, even after destroy_process_group), and torchrun then reports the finished run as failed. No-op
    otherwise (`nnlm train` calls it after every run, whatever its outcome)."""
    if _torchrun_rank:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_rank(out: Path, request: TrainRequest, mode: str, resume: bool, progress: bool,
             log: Callable[[str], None] | None, timeout: float) -> dict[str, Any] | None:
    """One rank's whole training run; turns a failed collective into one clear line."""
    log = log if (log is not None and dist.get_rank() == 0) else _quiet
    try:
        state = _run_rank(out, request, mode, resume, progress and dist.get_rank() == 0, log)
        # Rank 0 writes the final checkpoint after the others are done: a rank that tore its group down
        # meanwhile could abort in gloo's teardown (seen under torchrun) and get rank 0 killed mid-write.
        dist.barrier()
        return state
    except NnlmError:
        raise
    except RuntimeError as exc:  # gloo/NCCL: a peer closed its connection, or the timeout expired
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise NnlmError(f"rank {dist.get_rank()}: lost contact with the other ranks ({first}); a rank died or "
                        f"stalled for more than {timeout:.0f} s. The last checkpoint in {out} is intact: "
                        "restart with --resume") from None


def _step_seed(seed: int, step: int, rank: int) -> int:
    """ddp: each rank's dropout RNG for one step, from numbers the run state holds (exact resume)."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, np.uint64)[0]) >> 1


def _sliced_view(tensors: dict[str, torch.Tensor], lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Rows [lo, hi) of the output layer's tensors (parameters and their optimizer state)."""
    return {k: (t[lo:hi] if k.rsplit(".", 1)[-1] in ("b", "W", "U") else t) for k, t in tensors.items()}


def _run_rank(out: Path, request: TrainRequest, mode: str, resume: bool, progress: bool,
              log: Callable[[str], None]) -> dict[str, Any] | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = TRAINERS[mode]
    session = request.session
    device = dd.rank_device(pick_device(session.device))
    # --threads, or this rank's share of the cores free now (the job's local ranks split them)
    threads.govern(session.threads, device, share=int(os.environ.get("LOCAL_WORLD_SIZE", world)))

    # Rank 0 prepares (or checks) the run directory and reads the checkpoint; the others receive it.
    failure = run = state = None
    whole: dict[str, torch.Tensor] | None = None
    if rank == 0:
        try:
            setup = prepare(out, request, resume, device, spec)
            run, corpus, state = setup.run, setup.corpus, setup.state
            whole = {f"model.{k}": v for k, v in setup.net.state_dict().items()} | setup.optimizer.state_tensors()
            whole["rng.torch"] = torch.get_rng_state()
            del setup
        except NnlmError as exc:
            failure = str(exc)
    failure, run, state = dd.broadcast_object((failure, run, state))
    if failure:
        raise NnlmError(failure)
    if rank != 0:
        corpus = open_corpus(run)
        if corpus.vocab.fingerprint != run.vocab_fingerprint:
            raise NnlmError(f"rank {rank}: the corpus {run.corpus} has another vocabulary here than on rank 0")
    whole = {k: v.cpu() for k, v in dd.broadcast_tensors(whole, device).items()}
    torch.set_rng_state(whole.pop("rng.torch").to(torch.uint8))
    net, optimizer = rank_model(whole, run, mode, rank, world, device)
    setup = TrainingSetup(out, run, session, corpus, device, net, optimizer, batch_loss, state, resume, world)
    if nothing_left_to_do(setup, log):
        return state if rank == 0 else None
    before = state.get("parallel")
    if resume and before and (before["mode"], before["world_size"]) != (mode, world):
        log(f"re-sharding the checkpoint: it was written by {before['mode']} on {before['world_size']} processes, "
            f"continuing with {mode} on {world}")
    state["parallel"] = {"mode": mode, "world_size": world}
    state = run_setup(setup, spec, log, progress)
    return state if rank == 0 else None


def rank_model(whole: dict[str, torch.Tensor], run: Run, mode: str, rank: int, world: int,
                device: torch.device) -> tuple[nn.Module, Any]:
    """This rank's model (a replica for ddp, its slice of the output layer for vocab) and optimizer,
    from the whole checkpoint rank 0 broadcast."""
    recipe = run.training_recipe
    config = run.model_config
    model_part = {k[len("model."):]: v for k, v in whole.items() if k.startswith("model.")}
    optim_part = {k: v for k, v in whole.items() if k.startswith("optim.")}
    if mode == "ddp":
        net = build_net(config, dropout_x=recipe.dropout_x, dropout_h=recipe.dropout_h)
        net.load_state_dict(model_part)
        net.to(device)
    else:
        from nnlm.neural.parallel.vocab_parallel import VocabParallelNPLM, vocab_slices

        lo, hi = vocab_slices(config.vocab_size, world)[rank]
        net = VocabParallelNPLM.from_full(model_part, config, rank, world, recipe.dropout_x,
                                          recipe.dropout_h).to(device)
        optim_part = _sliced_view(optim_part, lo, hi)
    optimizer = build_optimizer(net, recipe, run.learning_rate)
    optimizer.load_state_tensors({k: v.to(device) for k, v in optim_part.items()})
    return net, optimizer


def _threads_each() -> str:
    governor = threads.current()
    return f"each {governor.describe()}" if governor else f"{threads.thread_count(torch.get_num_threads())} each"


class _RankTrainer(Trainer):
    """What every rank of a torch.distributed run shares: rank 0 alone logs and writes, the
    loss parts and rank 0's clock flags travel in one small all-reduce per step."""

    validates_alone = False  # validation is shared by the ranks: a signal waits for its end

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.writer = self.rank == 0

    def agree(self, numbers: list[float]) -> list[float]:
        total = torch.tensor(numbers, dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return total.tolist()

    def share(self, value: Any) -> Any:
        return dd.broadcast_object(value)


class RowShardedLM(LanguageModel):
    """A model every rank of a data-parallel run holds whole, scored by all of them together:
    every rank calls `log_prob` with the same arguments (a collective), scores a contiguous share of
    the rows, and gets every row's result. DDP's per-epoch validation uses it."""

    def __init__(self, lm: LanguageModel, device: torch.device) -> None:
        self.lm, self.vocab, self.order = lm, lm.vocab, lm.order
        self.device = device  # where the collective's buffers live (NCCL takes CUDA tensors only)

    def parameter_count(self) -> int:
        return self.lm.parameter_count()

    def log_prob(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        rank, world = dist.get_rank(), dist.get_world_size()
        bounds = np.linspace(0, len(targets), world + 1).astype(int)
        lo, hi = bounds[rank], bounds[rank + 1]
        mine = torch.as_tensor(self.lm.log_prob(contexts[lo:hi], targets[lo:hi]), device=self.device)
        return dd.all_gather_rows(mine, np.diff(bounds).tolist()).cpu().numpy()

    def distribution(self, contexts: np.ndarray) -> np.ndarray:
        return self.lm.distribution(contexts)


class ShardLoss(nn.Module):
    """A rank's shard of the batch -> its summed -log P, as a module, so that DistributedDataParallel
    runs the single process's loss (the fused bf16 step included) inside its own forward."""

    def __init__(self, net: NPLM, loss_fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.net, self.loss_fn = net, loss_fn

    def forward(self, contexts: torch.Tensor, targets: torch.Tensor, bf16: bool) -> torch.Tensor:
        if len(targets) == 0:  # more ranks than rows in a last batch: a zero that still reaches every parameter
            return self.net(contexts).sum()
        return self.loss_fn(self.net, contexts, targets, bf16) * len(targets)


class DDPTrainer(_RankTrainer):
    """Rank r computes shard r of every global batch; DistributedDataParallel sums the gradients."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        self.engine = DistributedDataParallel(ShardLoss(self.net, self.loss_fn), device_ids=device_ids)
        recipe = self.run.training_recipe
        self.dropout = recipe.dropout_x > 0 or recipe.dropout_h > 0

    def validation_model(self, whole_net: nn.Module, corpus: Corpus) -> LanguageModel:
        """Every rank scores its share of the validation positions with its replica (a collective)."""
        lm = language_model(self.net, corpus.vocab, corpus.pad_token, self.device, BF16 if self.run.bf16 else EXACT)
        return RowShardedLM(lm, self.device)

    def describe(self) -> str:
        return (f"global batch {self.batch}, --parallel ddp on {self.world} processes ({dist.get_backend()}), "
                f"{_threads_each()}, {self.device}")

    def batch_loss(self, rows: torch.Tensor, step: int) -> tuple[torch.Tensor, float]:
        if self.dropout:
            torch.manual_seed(_step_seed(self.run.seed, step, self.rank))
        mine = rows.tensor_split(self.world)[self.rank]
        loss_sum = self.engine(mine[:, :self.k], mine[:, self.k], self.run.bf16)
        # DDP averages the gradients over the ranks: this scale makes them the global batch mean's
        return loss_sum * (self.world / len(rows)), float(loss_sum.detach())


class VocabTrainer(_RankTrainer):
    """Every rank reads the whole batch and owns a slice of the output layer (vocab_parallel)."""

    def describe(self) -> str:
        return (f"global batch {self.batch}, --parallel vocab on {self.world} processes ({dist.get_backend()}), "
                f"{_threads_each()}, {self.device}")

    def batch_loss(self, rows: torch.Tensor, step: int) -> tuple[torch.Tensor, float]:
        loss = self.net.loss(rows[:, :self.k], rows[:, self.k], self.run.bf16)
        return loss, float(loss.detach()) * len(rows) if self.writer else 0.0  # the same loss on every rank

    def validation_model(self, whole_net: nn.Module, corpus: Corpus) -> LanguageModel:
        """Every rank scores its slice of the output layer (a collective), as in training."""
        from nnlm.neural.parallel.vocab_parallel import VocabParallelLM

        return VocabParallelLM(self.net, corpus.vocab, bf16=bool(self.run.bf16))

    def whole(self) -> tuple[NPLM, Any]:
        """The slices gathered (a collective: every rank calls it); meaningful on rank 0."""
        from nnlm.neural.parallel.vocab_parallel import assemble_nplm, full_tensors

        gathered = full_tensors(self.net, self.optimizer.state_tensors())
        params = {k: v.cpu() for k, v in gathered.items() if not k.startswith("optim.")}
        optim_state = {k: v for k, v in gathered.items() if k.startswith("optim.")}
        return assemble_nplm(params, self.config).to(self.device), SimpleNamespace(state_tensors=lambda: optim_state)
