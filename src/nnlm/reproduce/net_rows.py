"""The tables' nets: train each net for what the planner grants it, score it, mix it with the trigram.

Each net of a call trains in runs/<net>-<tag>, the tag naming its options key (loss, samples, Hogwild,
recipe values), so a call with other options trains its own net instead of relabelling another's. What a
net row is, its speeds, its need in the plan and its training are `net_run`'s, shared with `--beyond`."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlm.lm import LanguageModel, perplexity_from_log_probs
from nnlm.neural.run import checkpoint as ck
from nnlm.reproduce import net_lane, net_run, planner, rates, shape_plan
from nnlm.reproduce.net_run import NetRun
from nnlm.reproduce.ngram_rows import late_needs
from nnlm.reproduce.results import RowResult
from nnlm.reproduce.table import Row
from nnlm.threads import govern
from nnlm.wording import counted

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job


def table_net(job: Job, net: str) -> NetRun:
    """A table's net as a NetRun: its preset with the call's loss, in the shape it trains with."""
    shape = job.shapes.get(net)
    return NetRun(net, net, job.loss, job.net_options(net), rates_key=net,
                  request={**job.vocabulary_options(), **(shape or {})}, shape=shape)


def run_dir(job: Job, net: str) -> Path:
    return table_net(job, net).run_dir(job.out)


def plan_net(job: Job, i: int, measure: bool = True) -> planner.Grant | None:
    """The grant of the i-th net, planned with every net still to train in this process (not one training
    beside it: `net_lane` planned that one on its own core) and the class rows after them; `measure` times the
    net again first (not when its rates were just taken from its own epochs)."""
    left = job.left()
    if left is None:
        return None
    needs = [net_run.need(job, table_net(job, net), fresh=k == 0 and measure, floor_epochs=job.table.net_floor_epochs)
             for k, net in enumerate(job.nets[i:])
             if k == 0 or (job.results.pending(net, job.net_options(net)) and net != job.beside)]
    return next(g for g in planner.plan(left, partner_needs(job, i) + needs + late_needs(job)) if g.id == job.nets[i])


def partner_needs(job: Job, i: int) -> list[planner.Need]:
    """Building again, for the mixes of the i-th net and those after it, an n-gram partner (KN5) that an
    earlier call built (a call keeps its rows' perplexities, not their models): the seconds its row took
    then (built and scored on every split: an upper bound), all fixed."""
    ids = {row.partner for net in job.nets[i:] for row in job.table.net_rows(net)[1:]} - {"", "interpolated"}
    return [planner.Need(f"{p}-again", planner.SAFETY * job.results.rows[p].get("seconds", 0.0), (0.0,),
                         unit="building") for p in sorted(ids)
            if p not in job.ngrams and job.results.rows.get(p, {}).get("status") == "done"]


def choose_shape(job: Job, i: int) -> planner.Grant | None:
    """The net's shape and its grant, by measurement (`shape_plan`): each of the table's shapes
    (`PaperTable.net_shapes`, in order of preference) is timed on a slice and planned, until one's grant holds
    `shape_plan.MIN_EPOCHS` epochs; the rule picks among those measured. A table with one shape (Table 1)
    trains its preset as before; a shape an earlier call trained is kept."""
    net = job.nets[i]
    entry = job.results.rows.get(net, {})
    recorded = entry.get("shape") if entry.get("status") != "skipped" else None  # a run to continue
    shapes = [recorded] if recorded is not None else list(job.table.net_shapes)
    trials: list[shape_plan.Trial] = []
    for shape in shapes:
        if job.shapes.get(net) != shape:
            job.rates.pop(net, None)
        job.shapes[net] = shape
        grant = plan_net(job, i)
        if grant is None:  # no budget (--full): the first shape trains to early stopping
            return None
        trials.append(shape_plan.Trial(describe_shape(shape), job.rates[net], grant, len(job.corpus.train),
                                       len(job.corpus.valid)))
        if len(shapes) > 1:
            job.log(f"    {trials[-1].summary()}")
        if trials[-1].epochs >= shape_plan.MIN_EPOCHS:
            break
    if len(shapes) == 1:
        return trials[0].grant
    index, why = shape_plan.pick(trials)
    chosen = trials[index]
    job.shapes[net], job.rates[net] = shapes[index], chosen.rates
    job.log(f"    {why}")
    if chosen.grant.status == "skipped":  # none fits: the preset's reason, and what the others needed
        lighter = "; ".join(f"{t.label} {t.grant.reason.removeprefix('skipped for lack of budget: ')}"
                            for t in trials[1:])
        return dataclasses.replace(chosen.grant, reason=chosen.grant.reason + (f" (and {lighter})" if lighter else ""))
    job.shape_notes[net] = f"trained {chosen.label}, planned by measurement (see Plan)"
    job.shape_choice[net] = {"chosen": chosen.label, "why": why,
                             "trials": [{"label": t.label, "train_tokens_per_s": round(t.rates.train),
                                         "score_tokens_per_s": round(t.rates.score), "score_path": t.rates.path,
                                         "scoring_minutes": round(t.grant.fixed / 60, 2),
                                         "epochs": round(t.epochs, 2), "status": t.grant.status} for t in trials]}
    return plan_net(job, i, measure=False)  # planned again: measuring the others took time


def describe_shape(shape: dict) -> str:
    """A shape override in words, for the notes."""
    if not shape:
        return "as its preset"
    if shape.get("output_layer") == "classes":
        return (f"with the class-factored output layer ({shape.get('output_clustering', 'exchange')} classes, "
                f"the full softmax's loss)")
    return "with " + ", ".join("no direct connections" if k == "direct" and v is False else f"{k} = {v}"
                               for k, v in shape.items())


def partner(job: Job, row: Row, trigram: LanguageModel) -> LanguageModel:
    """The n-gram a mix row mixes the net with: the trigram, or another n-gram row (KN5), built in this call
    or again (an earlier call's rows keep their perplexities, not their models)."""
    if row.partner in ("", "interpolated"):
        return trigram
    if row.partner not in job.ngrams:
        from nnlm.ngram.build import build_ngram

        spec = next(r for r in job.table.ngram_rows if r.id == row.partner)
        job.ngrams[row.partner] = build_ngram(spec.kind, job.corpus, spec.n, progress=job.progress)
    return job.ngrams[row.partner]


def neural_rows(job: Job, trigram: LanguageModel) -> None:
    """Each net's row and its mixes, in the table's order; the last pending net trained beside the others when
    that pays (`net_lane`), collected at its row."""
    for net in job.nets:
        if job.results.rows.get(net, {}).get("status") not in (None, "skipped"):  # trained in this shape
            job.shapes[net] = job.results.rows[net].get("shape") or {}
    pending = [net for net in job.nets if job.results.pending(net, job.net_options(net))]
    lane = net_lane.start(job, {net: table_net(job, net) for net in pending}, partner_needs(job, 0), late_needs(job))
    try:
        for i, net in enumerate(job.nets):
            net_and_mixes(job, trigram, i, net, lane)
    finally:
        net_lane.stop(job, lane)


def net_and_mixes(job: Job, trigram: LanguageModel, i: int, net: str, lane: net_lane.Lane | None) -> None:
    alone, *mixes = job.table.net_rows(net)
    model = None
    if lane is not None and net == lane.net:
        job.announce(alone, "trained beside the other nets")
        state, scores, seconds = net_lane.collect(job, lane)
        for split, log_probs in scores.items():
            job.keep_scores(net, split, log_probs)
        model = finish_net(job, net, table_net(job, net), lane.grant, state, plan_record(job, net, lane.grant),
                           with_lane=True, timed=seconds)
        for row in mixes:
            job.results.rows.pop(row.id, None)
    elif job.results.pending(net, job.net_options(net)):
        grant = choose_shape(job, i)
        job.announce(alone, "" if grant is None else f"{grant.work / 60:.1f} min of training ({grant.status})")
        if grant is not None:
            job.log(f"    plan: {grant.reason}")
        model = train_net(job, net, grant, i, with_lane=lane is not None)
        for row in mixes:
            job.results.rows.pop(row.id, None)
    else:
        job.announce(alone, "done already")
    for row in mixes:
        job.announce(row)
        if not job.results.pending(row.id, job.net_options(net)):
            continue
        if model is None and job.results.rows[net]["perplexity"]:  # trained by an earlier call
            model = trained(job, net)
        other = trigram if model is None else partner(job, row, trigram)  # no net: nothing to build
        mix_row(job, row, "fixed" if row.mix == "0.5" else "em-buckets", net, model, other)


def trained(job: Job, net: str) -> LanguageModel:
    from nnlm.neural.run.checkpoint import load_neural

    return load_neural(run_dir(job, net), device=job.device_name())


def train_net(job: Job, net: str, grant: planner.Grant | None, i: int = 0,
              with_lane: bool = False) -> LanguageModel | None:
    """Train (or continue) `net` for what `grant` gives it and score it; None if skipped with no model.
    `with_lane`: a net trains beside the others in this call (`finish_net`)."""
    run = table_net(job, net)
    plan = plan_record(job, net, grant)
    if grant is not None and grant.status == "skipped":
        return skip_net(job, net, run, grant, plan)
    state = net_run.train(job, run, net_run.limits(job, run, grant), job.row_log(net))
    state, plan, grant = continue_shortened(job, net, run, grant, state, plan, i)
    return finish_net(job, net, run, grant, state, plan, with_lane)


def finish_net(job: Job, net: str, run: NetRun, grant: planner.Grant | None, state: dict[str, Any],
               plan: dict[str, Any] | None, with_lane: bool, timed: dict[str, float] | None = None) -> LanguageModel:
    """The trained net's row: scored (the splits it has no kept scores for), its result put in results.json.
    `with_lane`: a net trains beside the others in this call (`net_lane`): the train split is scored now, not at
    the end (the plan left time for it), and at the threads the governor picks -- one while the lane's process
    works, both cores once it has ended -- not at the one thread the nets train at meanwhile (a pass's numbers
    do not depend on its thread count). `timed`: the seconds of splits scored elsewhere (the lane's process)."""
    model = trained(job, net)
    govern(requested=None if with_lane else job.threads, device=job.device_name())  # else: the threads the
    # rates were measured at
    later = job.budget is not None and not with_lane  # the train split is scored at the end, if the budget allows
    job.kept_valid_scores(net, run.run_dir(job.out))  # the best epoch's validation, not a second pass
    ppl, scoring = {"train": None}, {}
    for split in ("valid", "test") if later else ("train", "valid", "test"):  # timed: the plan's estimate vs actual
        t0 = time.perf_counter()
        ppl |= job.evaluate(net, model, (split,))
        scoring[split] = round((timed or {}).get(split, time.perf_counter() - t0), 1)
    note = shortened_note(job, net, state, grant)
    extra = {"finished": state["finished"], "train_pending": later, "best": state["best"],
             "epochs": round(state["examples"] / len(job.corpus.train), 2),
             "run": str(run.run_dir(job.out).relative_to(job.out)), "shape": job.shapes.get(net, {}),
             "scoring_seconds": scoring} | ({"shape_choice": job.shape_choice[net]} if net in job.shape_choice else {})
    # (the run directory is named by the row's options, so its run holds them)
    job.results.put(net, RowResult(ppl, model.parameter_count(), state["elapsed"],
                                   "done" if state["finished"] else "shortened", note, job.net_options(net), plan,
                                   extra))
    job.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}" + (f"  ({note})" if note else ""))
    return model


def skip_net(job: Job, net: str, run: NetRun, grant: planner.Grant,
             plan: dict[str, Any] | None) -> LanguageModel | None:
    """A net the plan has no budget for: what it trained before if anything, else a skipped row."""
    if (run.run_dir(job.out) / ck.WEIGHTS).exists() and net in job.results.rows:
        job.log("    no budget left to continue it: keeping what it had")
        return trained(job, net)
    job.results.put(net, RowResult({}, net_run.parameters(job, run), 0.0, "skipped", grant.reason,
                                   job.net_options(net), plan, {"shape": job.shapes.get(net, {})}))
    job.log(f"    {grant.reason}")
    return None


def continue_shortened(job: Job, net: str, run: NetRun, grant: planner.Grant | None, state: dict[str, Any],
                       plan: dict[str, Any] | None,
                       i: int) -> tuple[dict[str, Any], dict[str, Any] | None, planner.Grant | None]:
    """A run the plan cut short that stops at its epoch limit with budget to spare (the rates measured on a
    slice were low: one process where Hogwild workers train, or the plain scoring path where the
    per-position tables score) is planned again with the rates of its own epochs and continued. The final
    state, the last plan (with the first beside it) and the last grant."""
    first = plan  # the plan made from the slice's rates, kept beside any later one to compare
    while grant is not None and grant.status == "shortened" and not state["finished"] \
            and str(state["stop_reason"]).startswith("reached"):
        seen = rates.from_history(state["history"], len(job.corpus.valid))
        if seen is None:
            break
        job.rates[run.rates_key] = seen
        grant = plan_net(job, i, measure=False)
        if grant is None or grant.status == "skipped" or "epochs" not in (limits := net_run.limits(job, run, grant)):
            break
        job.log(f"    budget left after its epochs: planned again with the rates they measured "
                f"({seen.train:,.0f} training, {seen.score:,.0f} scoring tokens/s) and continued to "
                f"{counted(limits['epochs'], 'epoch')}; {grant.reason}")
        plan = plan_record(job, net, grant)
        if plan is not None and first is not None:
            plan["first"] = first
        state = net_run.train(job, run, limits, job.row_log(net), resume=True)
    return state, plan, grant


def shortened_note(job: Job, net: str, state: dict[str, Any], grant: planner.Grant | None) -> str:
    """The row's note: why its training stopped short (nothing when it finished), after why it trains in
    another shape than its preset's."""
    note = "" if state["finished"] else f"shortened: {state['stop_reason']}" + (
        "" if grant is None else f" ({planner.AS_PLANNED})" if grant.status == "full"
        else f" ({grant.reason.removeprefix('shortened for lack of budget: ')})")
    if job.shape_notes.get(net):
        note = "; ".join(t for t in (job.shape_notes[net], note) if t)
    return note


def plan_record(job: Job, net: str, grant: planner.Grant | None) -> dict[str, Any] | None:
    """The grant as the results keep it, with the budget left and the rates it was planned with."""
    return None if grant is None else grant.to_dict() | {
        "left_minutes": round((job.left() or 0) / 60, 2),
        "rates": {"train_tokens_per_s": round(job.rates[net].train), "score_tokens_per_s": round(job.rates[net].score),
                  "score_path": job.rates[net].path},
        "estimates": {"train_seconds": round(planner.SAFETY * len(job.corpus.train) / job.rates[net].train, 1),
                      "valid_seconds": round(planner.SAFETY * len(job.corpus.valid) / job.rates[net].score, 1),
                      "test_seconds": round(planner.SAFETY * len(job.corpus.test) / job.rates[net].score, 1)}}


def mix_row(job: Job, row: Row, mode: str, net: str, model: LanguageModel | None, trigram: LanguageModel) -> None:
    from nnlm.mixture import mix_scored

    of_net = job.results.rows[net]
    if model is None:  # the net was skipped
        parameters = net_run.parameters(job, table_net(job, net)) + trigram.parameter_count()
        job.results.put(row.id, RowResult({}, parameters, 0.0, "skipped", of_net["note"], of_net.get("options", {}),
                                          of_net.get("plan")))
        job.log(f"    skipped: {net.upper()} was skipped")
        return
    splits = ("valid", "test")
    key = row.partner or "interpolated"  # the n-gram row whose scores these are (the trigram or KN5)
    scored = {s: [job.scored(net, model, s), job.scored(key, trigram, s)] for s in splits}
    t0 = time.perf_counter()
    fitted = mix_scored([model, trigram], job.corpus, scored, mode, [0.5, 0.5] if mode == "fixed" else None)
    ppl = {s: perplexity_from_log_probs(lp) for s, lp in fitted.split_log_probs.items()}
    weight = float(fitted.model.weights[:, 0].mean())  # on the net; mean over the context-frequency buckets
    job.results.put(row.id, RowResult({"train": None, **ppl}, fitted.model.parameter_count(),
                                      time.perf_counter() - t0, of_net.get("status", "done"), of_net["note"],
                                      of_net.get("options", {}), extra={"weight": weight}))
    job.log(f"    weight on the net {weight:.3f}: valid {ppl['valid']:.1f}  test {ppl['test']:.1f}")


def train_scoring_rate(job: Job, net: str) -> float:
    """Tokens per second for scoring the train split: the faster of the rate measured on a slice and
    the run's own validation, which scored a whole split the way the train split will be (a long pass
    takes the per-position tables: on the 14M corpus 19.7k tokens/s against the slice's 9.8k)."""
    seen = rates.from_history(ck.read_state(run_dir(job, net)).get("history", []), len(job.corpus.valid))
    return max(net_run.rates_of(job, table_net(job, net)).score, seen.score if seen is not None else 0.0)


def train_split_rows(job: Job) -> None:
    """The nets' train perplexity, left for last under a budget (the train split is four times
    validation's size): scored while the budget allows, else left blank, and the report says so."""
    for net in job.nets:
        entry = job.results.rows.get(net, {})
        if not entry.get("train_pending") or entry.get("options") != job.net_options(net):
            continue
        need = planner.SAFETY * len(job.corpus.train) / train_scoring_rate(job, net)
        left = job.left()
        if left is not None and left < need:
            entry["train_note"] = (f"train perplexity not scored: it needs ~{need / 60:.1f} min, "
                                   f"{max(left, 0) / 60:.1f} min left")
            job.log(f"{net}: {entry['train_note']}")
            job.results.save()
            continue
        job.log(f"{net}: train perplexity" + (f" - {job.budget_text()}" if job.budget else ""))
        govern(requested=job.threads, device=job.device_name())
        entry["perplexity"]["train"] = perplexity_from_log_probs(job.scored(net, trained(job, net), "train"))
        entry.pop("train_pending")
        entry.pop("train_note", None)
        job.results.save()
