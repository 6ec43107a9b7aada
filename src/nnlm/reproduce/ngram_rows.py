"""The n-gram rows: the cheap ones and c = 500 before the nets (at most NGRAM_SHARE of the budget),
the other class counts after them, with what the nets leave (planned by `planner.plan`)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from nnlm.lm import LanguageModel
from nnlm.reproduce import planner
from nnlm.reproduce.results import RowResult
from nnlm.reproduce.table import NgramRow
from nnlm.wordclasses.exchange import WordClasses, exchange_clusters, load_word_classes, save_word_classes
from nnlm.wording import counted

if TYPE_CHECKING:
    from nnlm.reproduce.job import Job

NGRAM_SHARE = 0.35  # of a budget: the most the rows before the nets may take
# Planning priors for a clustering not yet timed in this call (the default report's idle c = 500 row:
# 28.4 s, of which the model and its scoring ~3 s); replaced by this call's own c = 500 figures.
SECONDS_PER_CLASS = 0.05
CLASS_TAIL_SECONDS = 5.0
MIN_CLUSTERING_SECONDS = 1.0  # a class row granted less, with no exchange pass saved, is skipped, not built

def start_background_clusterings(job: Job) -> None:
    """Cluster the class counts of the rows after the nets in a second process from now on
    (`background_clusters`), those not already complete in OUT/clusters from an earlier call."""
    from nnlm.reproduce.background_clusters import BackgroundClusters

    by_id = {row.id: row for row in job.table.ngram_rows}
    counts = []
    for row in (by_id[i] for i in job.table.after_nets if i in by_id):
        c = row.classes
        if c is None or c > len(job.corpus.vocab) or c in counts or not job.results.pending(row.id):
            continue
        saved = load_word_classes(job.out / "clusters" / f"c{c}.npz")
        if saved is None or not saved[0].complete:
            counts.append(c)
    if counts:
        job.background = BackgroundClusters(job.corpus.train, len(job.corpus.vocab), counts, job.out / "clusters")
        job.log(f"clustering c = {', '.join(map(str, counts))} in a second process meanwhile")


def word_classes(job: Job, c: int, deadline: float | None) -> WordClasses:
    """Exchange-algorithm classes for c (they do not depend on the order): found once per call, kept in
    OUT/clusters/c{c}.npz (with the seconds they took); a clustering a budget cut short is continued."""
    if c in job.classes:  # complete, or cut by a deadline that is past for every later row
        return job.classes[c]
    if job.background is not None:  # clustered in the second process: saved there when it is done
        job.background.wait(c, deadline)
    path = job.out / "clusters" / f"c{c}.npz"
    found, saved_seconds = load_word_classes(path) or (None, 0.0)
    if found is not None and len(found.classes) != len(job.corpus.vocab):
        found = None
    if found is None or not found.complete:
        t0 = time.perf_counter()
        found = exchange_clusters(job.corpus.train, len(job.corpus.vocab), c, progress=job.progress,
                                  deadline=deadline, resume_from=found)
        save_word_classes(path, found, saved_seconds + time.perf_counter() - t0)
    job.classes[c] = found
    return found


def build_row(job: Job, row: NgramRow, deadline: float | None, why: str = "") -> tuple[RowResult, LanguageModel]:
    """Build and score one n-gram row (a class row clusters until `deadline` at most; `why` says
    where the deadline came from, for the note of a cut clustering)."""
    from nnlm.ngram.build import build_ngram

    t0 = time.perf_counter()
    note, status, options = "", "done", {}
    if row.classes is not None:
        classes = word_classes(job, row.classes, deadline)
        options = {"clusters": classes}
        if not classes.complete:
            status = "shortened"
            note = (f"shortened: the budget stopped the clustering after {counted(classes.passes, 'pass')}"
                    + (f" ({why})" if why else "") + "; a new call continues it")
        elif row.n != 3:
            note = f"the classes of class{row.classes}-3, reused"
    model = build_ngram(row.kind, job.corpus, row.n, classes=row.classes, progress=job.progress, **options)
    ppl = job.evaluate(row.id, model)
    result = RowResult(ppl, model.parameter_count(), time.perf_counter() - t0, status, note)
    job.log(f"    valid {ppl['valid']:.1f}  test {ppl['test']:.1f}  ({result.seconds:.1f} s)"
            + (f"  ({note})" if note else ""))
    return result, model


def not_applicable(job: Job, row: NgramRow) -> bool:
    if row.classes is not None and row.classes > len(job.corpus.vocab):
        job.results.put(row.id, RowResult({}, None, 0.0, "not applicable",
                                          f"skipped: c > |V| = {len(job.corpus.vocab)}"))
        return True
    return False


def early_rows(job: Job) -> LanguageModel:
    """The rows before the nets; returns the interpolated trigram (the mixing partner, always built)."""
    deadline = None if job.budget is None else job.start + NGRAM_SHARE * job.budget
    by_id = {row.id: row for row in job.table.ngram_rows}
    trigram = None
    for row in (by_id[i] for i in job.table.build_order if i in by_id):
        job.announce(row)
        if row.id != "interpolated" and not job.results.pending(row.id):
            continue
        if not_applicable(job, row):
            continue
        reuses = row.classes is not None and row.classes in job.classes  # its classes are found: seconds to build
        if row.id != "interpolated" and deadline is not None and time.monotonic() >= deadline and not reuses:
            note = (f"skipped for lack of budget: the rows before the nets may take {NGRAM_SHARE:.0%} of it "
                    f"({NGRAM_SHARE * job.budget / 60:.1f} min), used by the rows before this one")
            job.results.put(row.id, RowResult({}, None, 0.0, "skipped", note))
            job.log(f"    {note}")
            continue
        if row.id == "interpolated" and not job.results.pending(row.id):
            from nnlm.ngram.build import build_ngram

            trigram = build_ngram(row.kind, job.corpus, row.n, progress=job.progress)
            continue
        why = "" if job.budget is None else (f"the rows before the nets may take {NGRAM_SHARE:.0%} of the budget, "
                                             f"{NGRAM_SHARE * job.budget / 60:.1f} min")
        result, model = build_row(job, row, deadline, why)
        if row.id == "interpolated":
            trigram = model
        if any(r.partner == row.id for net in job.nets for r in job.table.net_rows(net)):
            job.ngrams[row.id] = model  # a mix row's partner: kept rather than built again
        job.results.put(row.id, result)
    assert trigram is not None
    return trigram


def class_rates(job: Job) -> tuple[float, float]:
    """(seconds per class of clustering, seconds to build and score a class row after it), from this
    call's c = 500 rows when they were built here, else the priors."""
    found = load_word_classes(job.out / "clusters" / "c500.npz")
    per_class = max(found[1] / 500 if found else 0.0, SECONDS_PER_CLASS)  # a cut clustering: a lower bound
    four = job.results.rows.get("class500-4", {})
    tail = four.get("seconds") if four.get("status") == "done" and four.get("commit") == job.results.commit else None
    return per_class, tail or CLASS_TAIL_SECONDS


def to_cluster(job: Job, c: int) -> int:
    """The classes a row still has to find: none once complete classes for c are saved (the second
    process clustered them, or an earlier call), else c."""
    if c == 0:
        return 0
    saved = load_word_classes(job.out / "clusters" / f"c{c}.npz")
    return 0 if saved is not None and saved[0].complete and len(saved[0].classes) == len(job.corpus.vocab) else c


def late_needs(job: Job) -> list[planner.Need]:
    """What the class rows after the nets still need (for the nets' plan, and their own), then the
    nets' train-split scoring, which comes last."""
    per_class, tail = class_rates(job)
    by_id = {row.id: row for row in job.table.ngram_rows}
    needs = [planner.clustering_need(i, to_cluster(job, by_id[i].classes or 0), per_class, tail)
             for i in job.table.after_nets
             if i in by_id and job.results.pending(i) and (by_id[i].classes or 0) <= len(job.corpus.vocab)]
    return needs + [planner.scoring_need(f"{net}-train", len(job.corpus.train), job.rates[net].score)
                    for net in job.nets if job.results.rows.get(net, {}).get("train_pending") and net in job.rates]


def has_passes(job: Job, row: NgramRow) -> bool:
    """An earlier call left classes for this row after at least one exchange pass (worth building on)."""
    saved = load_word_classes(job.out / "clusters" / f"c{row.classes}.npz")
    return saved is not None and saved[0].passes > 0


def late_rows(job: Job) -> None:
    """The slowest class rows, after the nets: each planned anew from the time then left."""
    by_id = {row.id: row for row in job.table.ngram_rows}
    for row in (by_id[i] for i in job.table.after_nets if i in by_id):
        job.announce(row)
        if not job.results.pending(row.id) or not_applicable(job, row):
            continue
        left = job.left()
        deadline, plan = None, None
        if left is not None:
            needs = late_needs(job)
            grant = next(g for g in planner.plan(left, needs) if g.id == row.id)
            plan = grant.to_dict()
            job.log(f"    plan: {grant.reason}")
            if grant.status == "skipped" or (grant.work < MIN_CLUSTERING_SECONDS and not has_passes(job, row)):
                # classes from no exchange pass at all are the initial assignment, not a model worth a row
                reason = grant.reason if grant.status == "skipped" else (
                    "skipped for lack of budget: no time left to cluster it ("
                    + grant.reason.removeprefix("shortened for lack of budget: ") + ")")
                job.results.put(row.id, RowResult({}, None, 0.0, "skipped", reason, plan=plan))
                job.log(f"    {reason}")
                continue
            deadline = time.monotonic() + planner.elastic_limit(left, needs, grant)
        result, _ = build_row(job, row, deadline, "" if plan is None else plan["reason"])
        result.plan = plan
        job.results.put(row.id, result)
