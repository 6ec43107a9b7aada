"""The section's nets: each trained in OUT/runs/<id>-<options tag> for what the planner grants it,
then scored on valid and test (the scores kept for the mixes). A net that is Table 1's run under
another name (MLP1 with seed 0 and the call's loss) is Table 1's row, reused. A section net is a
`net_run.NetRun` as Table 1's nets are: the same speeds, need in the plan and training."""
from __future__ import annotations

import shlex
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlm.neural.run import checkpoint as ck
from nnlm.neural.run.recipes import default_recipe
from nnlm.reproduce import net_run, planner, rates
from nnlm.reproduce.beyond_mixes import SPLITS, part_scores, save_scores
from nnlm.reproduce.beyond_rows import NetRow, row_key
from nnlm.reproduce.net_run import MAX_EPOCHS, NetRun
from nnlm.reproduce.results import RowResult, requested_options
from nnlm.threads import govern

if TYPE_CHECKING:
    from nnlm.reproduce.section import Section

MIX_RESERVE_SECONDS = 120.0  # kept from the nets for the mixes (n-gram parts, scoring, EM) on Brown ...
MIX_RESERVE_SHARE = 0.1  # ... or this share of a smaller budget
MIN_EPOCHS = 2  # the least training a section net gets (else it is skipped): its floor in the plan


def options_of(section: Section, net: NetRow) -> dict[str, Any]:
    """The results key of a net row: Table 1's key (loss, samples, Hogwild, recipe) with preset and seed."""
    job = section.job
    recipe = net.recipe or default_recipe(net.loss, net.preset)  # what the trainer will pick for this preset
    base = requested_options(net.loss, job.samples, job.hogwild, len(job.corpus.vocab), job.device, recipe)
    return base | {"preset": net.preset} | net.request()  # (a recipe it names is the one base resolved)


def section_net(section: Section, net: NetRow) -> NetRun:
    """A section net as a NetRun: its preset, seed and recipe; its speeds are its preset's with its loss."""
    training = {k: v for k, v in (("samples", net.samples), ("batch_size", net.batch_size)) if v is not None}
    key = "/".join([net.preset, net.loss, *(f"{k}={v}" for k, v in training.items())])
    return NetRun(net.id, net.preset, net.loss, options_of(section, net), rates_key=key, request=net.request(),
                  training=training or None)


def run_dir(section: Section, net: NetRow) -> Path:
    return section_net(section, net).run_dir(section.job.out)


def command(section: Section, net: NetRow) -> str:
    """The `nnlm train` a user would type for this row (trained to early stopping)."""
    job = section.job
    words = ["nnlm", "train", "--preset", net.preset, "--loss", net.loss]
    for key, value in net.request().items():  # what the run is trained with: seed, and recipe, dropout, n named
        words += [f"--{key.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    if job.samples and net.samples is None:
        words += ["--samples", str(job.samples)]
    if job.threads:
        words += ["--threads", str(job.threads)]
    if job.corpus_source != "brown":
        words += ["--corpus", job.corpus_source]
    return " ".join(shlex.quote(w) for w in words + ["--epochs", str(MAX_EPOCHS), "--out", f"runs/{net.id}"])


def twin_entry(section: Section, net: NetRow) -> dict[str, Any] | None:
    """Table 1's row that is this net's run, when it was trained with the same options and seed 0."""
    job = section.job
    entry = job.results.rows.get(net.twin) if net.twin and net.seed == 0 else None
    if not entry or not entry.get("perplexity") or "run" not in entry:
        return None
    mine = options_of(section, net)
    return entry if entry.get("options") == {k: v for k, v in mine.items() if k not in ("preset", "seed")} else None


def mix_reserve(section: Section) -> float:
    """The seconds kept from the trained rows for the mixes after them."""
    return min(MIX_RESERVE_SECONDS, MIX_RESERVE_SHARE * (section.budget or 0.0))


def plan_net(section: Section, net: NetRow) -> planner.Grant | None:
    """The grant of `net`: greedy, in the rows' order (`section_grant`), its floor MIN_EPOCHS epochs; a row
    with a `share` wants that share of the section's budget, not its recipe's expected epochs."""
    if section.left() is None:
        return None
    c, run = section.job.corpus, section_net(section, net)
    need = net_run.need(section.job, run, fresh=True)
    if net.share is not None:
        need = replace(need, tiers=(need.floor, net.share * section.budget))
    train, valid = planner.epoch_parts(net_run.rates_of(section.job, run), len(c.train), len(c.valid))
    return section_grant(section, need, train + valid)


def section_grant(section: Section, need: planner.Need, epoch_seconds: float) -> planner.Grant | None:
    """The grant of a row that trains (a net, or the reference: the same rule for both), greedy in the rows'
    order. Unlike Table 1's nets, which share the budget tier by tier, a section row gets all it wants if that
    is left (after the mixes' reserve), else what is left, and is skipped below MIN_EPOCHS epochs of
    `epoch_seconds` (training and its validation): an ensemble gains from whole nets, and a net cut at half an
    epoch costs as much time as it adds nothing. The rows after it get what it leaves."""
    left = section.left()
    if left is None:
        return None
    need = replace(need, tiers=(min(MIN_EPOCHS * epoch_seconds, need.want), need.want))
    reserve = planner.Need("mixes", mix_reserve(section), (0.0,), unit="mixing")
    return next(g for g in planner.plan(left, [reserve, need]) if g.id == need.id)


def net_row(section: Section, net: NetRow) -> None:
    """Reuse (Table 1's twin), keep (done by an earlier call), or train and score `net`."""
    job = section.job
    key, options = row_key(net.id), options_of(section, net)
    twin = twin_entry(section, net)
    if twin is not None:
        section.announce(net.label, f"Table 1's {net.twin.upper()}, reused")
        job.results.put(key, RowResult(twin["perplexity"], twin["parameters"], twin["seconds"], twin["status"],
                                       f"Table 1's {net.twin.upper()} (the same run)", options, twin.get("plan"),
                                       {"run": twin["run"], "epochs": twin.get("epochs"), "twin": net.twin,
                                        "command": command(section, net)}))
        for split in SPLITS:  # now, on the section's clock (an earlier call's Table 1 kept no scores)
            part_scores(section, net.id, split)
        return
    if not job.results.pending(key, options):
        section.announce(net.label, "done already")
        return
    grant = plan_net(section, net)
    section.announce(net.label, "" if grant is None else f"{grant.work / 60:.1f} min of training ({grant.status})")
    if grant is not None:
        job.log(f"    plan: {grant.reason}")
    train_and_score(section, net, grant)


def continue_in_grant(section: Section, net: NetRow, run: NetRun, grant: planner.Grant | None,
                      state: dict[str, Any], started: float) -> dict[str, Any]:
    """A run that stopped at the whole epochs its grant was converted to, with the grant's time left (its
    speeds, timed on a slice, were low: the recurrent net's scoring is timed on one text, and the 60-minute
    run's LSTM stopped at 10 epochs after 30.8 of its 49.7 minutes) trains on for the whole epochs the rest
    holds at its own speed (`rates.from_history`), within the same grant: the rows after it keep what the
    plan left them. Its final state."""
    job = section.job
    while grant is not None and not state["finished"] and str(state["stop_reason"]).startswith("reached"):
        seen = rates.from_history(state["history"], len(job.corpus.valid))
        if seen is None or state["epoch"] >= MAX_EPOCHS:
            break
        left = replace(grant, work=grant.work - (time.monotonic() - started))
        limits = net_run.run_limits(run.run_dir(job.out), seen, job, left)  # Table 1's rule, for the rest
        if "epochs" not in limits:  # less than a whole epoch left: a part epoch validates too, as dear as one
            break
        job.log(f"    {left.work / 60:.1f} min of its grant left after {state['epoch']} epochs: continued to "
                f"{limits['epochs']} at the speed they measured ({seen.train:,.0f} training, {seen.score:,.0f} "
                "scoring tokens/s)")
        state = net_run.train(job, run, limits, section.row_log(net.id), resume=True)
    return state


def train_and_score(section: Section, net: NetRow, grant: planner.Grant | None) -> None:
    from nnlm.neural.run.checkpoint import load_neural

    job, run, key = section.job, section_net(section, net), row_key(net.id)
    where, options = run.run_dir(job.out), run.options
    extra = {"run": str(where.relative_to(job.out)), "command": command(section, net)}
    if grant is not None and grant.status == "skipped":
        if (where / ck.WEIGHTS).exists() and key in job.results.rows:
            job.log("    no budget left to continue it: keeping what it had")
            return
        params = net_run.parameters(job, run)
        job.results.put(key, RowResult({}, params, 0.0, "skipped", grant.reason, options, grant.to_dict(), extra))
        job.log(f"    {grant.reason}")
        return
    started = time.monotonic()
    state = net_run.train(job, run, net_run.limits(job, run, grant), section.row_log(net.id))
    state = continue_in_grant(section, net, run, grant, state, started)
    model = load_neural(where, device=job.device_name())
    govern(requested=job.threads, device=job.device_name())
    job.kept_valid_scores(key, where)  # the best epoch's validation, not a second pass
    ppl = {"train": None} | job.evaluate(key, model, ("valid", "test"))
    for split in ("valid", "test"):
        save_scores(section, net.id, split, job.scored(key, model, split))
    note = "" if state["finished"] else f"shortened: {state['stop_reason']}"
    job.results.put(key, RowResult(ppl, model.parameter_count(), state["elapsed"],
                                   "done" if state["finished"] else "shortened", note, options,
                                   None if grant is None else grant.to_dict(),
                                   extra | {"epochs": round(state["examples"] / len(job.corpus.train), 2),
                                            "finished": state["finished"]}))
    section.models[net.id] = model
    job.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}" + (f"  ({note})" if note else ""))

