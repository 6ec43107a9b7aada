"""The budget planner, pure: simulated rates on Brown's split sizes (idle, loaded, very slow)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnlm.reproduce.planner import Need, Rates, clustering_need, net_need, plan, unused_share

BROWN = (800_000, 200_000, 177_359)  # train, valid, test tokens
# Rates, tokens/s. "loaded": measured on the 2-core machine at load 4.6-4.8 with one thread
# (rates.training_rate / scoring_rate; MLP1 12,008 / 1,355, MLP3 32,539 / 2,629).
LOADED = {"mlp1": Rates(12_000, 1_355), "mlp3": Rates(32_500, 2_630)}
IDLE = {net: Rates(r.train * 4, r.score * 10) for net, r in LOADED.items()}
VERY_SLOW = {net: Rates(r.train / 10, r.score / 10) for net, r in LOADED.items()}
LATE_CLASS = [clustering_need(f"class{c}-3", c, 0.2, 20.0) for c in (150, 200, 1000, 2000)]


def needs(rates: dict[str, Rates]) -> list[Need]:
    return [net_need(net, r, *BROWN) for net, r in rates.items()] + LATE_CLASS


def by_id(grants):
    return {g.id: g for g in grants}


def test_idle_every_row_gets_what_it_wants():
    grants = by_id(plan(28 * 60, needs(IDLE)))
    assert all(g.status == "full" for g in grants.values())
    assert "min of training" in grants["mlp1"].reason


def test_loaded_both_nets_train_an_epoch_or_more_and_mlp1_comes_first():
    left = 25 * 60  # a 30-minute budget after the n-gram rows before the nets (under 35% of it)
    grants = by_id(plan(left, needs(LOADED)))
    mlp1, mlp3 = net_need("mlp1", LOADED["mlp1"], *BROWN), net_need("mlp3", LOADED["mlp3"], *BROWN)
    assert grants["mlp1"].status == grants["mlp3"].status == "shortened"  # not skipped
    assert grants["mlp3"].work >= mlp3.tiers[1]  # MLP3's first epoch ...
    assert grants["mlp1"].work > mlp1.tiers[1]  # ... before MLP1 gets more than its first
    assert all(g.status != "skipped" for g in grants.values())
    assert unused_share(left, grants.values()) == pytest.approx(0, abs=1e-6)
    assert "shortened for lack of budget" in grants["mlp1"].reason and "min left" in grants["mlp1"].reason


def test_the_issues_case_a_net_alone_with_nine_minutes_left_is_shortened_not_skipped():
    # `--models mlp1 --threads 1 --budget-minutes 14`: 9.0 min left; the old reserve took all of it
    grant = plan(9 * 60, [net_need("mlp1", LOADED["mlp1"], *BROWN)])[0]
    assert grant.status == "shortened" and grant.work > 0


def test_very_slow_keeps_the_first_net_and_says_why_the_second_is_skipped():
    first = net_need("mlp1", VERY_SLOW["mlp1"], *BROWN)
    # room for MLP1's scoring and half an epoch, and the class rows' model building, not for MLP3's scoring
    left = first.fixed + first.floor + sum(n.fixed for n in LATE_CLASS) + 60
    grants = by_id(plan(left, needs(VERY_SLOW)))
    assert grants["mlp1"].status == "shortened"
    assert grants["mlp3"].status == "skipped"
    reason = grants["mlp3"].reason
    assert reason.startswith("skipped for lack of budget: it needs at least") and "min left of" in reason
    assert all(grants[n.id].status == "shortened" for n in LATE_CLASS)  # no clustering, but a row each


def test_slow_class_rows_get_time_only_after_the_nets_have_all_they_want():
    left = 25 * 60
    grants = by_id(plan(left, needs(LOADED)))
    assert all(grants[n.id].work == 0 and grants[n.id].status == "shortened" for n in LATE_CLASS)
    grants = by_id(plan(10 * 3600, needs(LOADED)))
    assert all(g.status == "full" for g in grants.values())
    # what the nets do not want is shared by the class rows, not left unused on a low estimate
    assert unused_share(10 * 3600, grants.values()) == pytest.approx(0, abs=1e-6)
    assert all(grants[n.id].work > n.want for n in LATE_CLASS)


def test_a_run_continued_wants_only_the_epochs_it_has_not_had():
    fresh = net_need("mlp1", LOADED["mlp1"], *BROWN)
    later = net_need("mlp1", LOADED["mlp1"], *BROWN, done_epochs=9.5)
    assert later.want == pytest.approx(fresh.tiers[1]) and later.fixed == fresh.fixed


@given(left=st.floats(0, 4 * 3600),
       rates=st.lists(st.tuples(st.floats(100, 1e6), st.floats(10, 1e5)), min_size=1, max_size=5))
def test_invariants(left, rates):
    """Never more than what is left; a row is skipped only if it fits nowhere (so no row is skipped while
    its least need is unused); no row is shortened while time is unassigned; with a class row kept,
    nothing is left unassigned (its estimate may be low: the clustering stops when it converges)."""
    all_needs = [net_need(f"mlp{2 * i + 1}", Rates(*r), *BROWN) for i, r in enumerate(rates)] + LATE_CLASS
    grants = plan(left, all_needs)
    unused = unused_share(left, grants)
    assert unused >= -1e-6
    for need, grant in zip(all_needs, grants, strict=True):
        if grant.status == "skipped":
            assert need.fixed + need.floor > unused
        else:
            assert need.floor - 1e-9 <= grant.work and (need.elastic or grant.work <= need.want + 1e-9)
        if grant.status == "shortened" or (need.elastic and grant.status != "skipped"):
            assert unused <= 1e-6


def test_a_grant_of_whole_epochs_ends_the_run_at_an_epoch_not_mid_epoch(tmp_path):
    """A run cut mid-epoch validates the part epoch too; whole epochs avoid paying that validation."""
    from types import SimpleNamespace

    from nnlm.reproduce.net_run import NetRun, limits
    from nnlm.reproduce.planner import Grant

    job = SimpleNamespace(out=tmp_path, rates={"mlp1": Rates(1000, 100)},
                          corpus=SimpleNamespace(train=[0] * 1000, valid=[0] * 100))  # epoch: 1.15 s + 1.15 s
    run = NetRun("mlp1", "mlp1", "sampled", {}, rates_key="mlp1")
    # (time budgets in minutes, rounded up to the hundredth: 1.3 x 7 s = 0.1517 min -> 0.16)
    assert limits(job, run, Grant("mlp1", "shortened", 7.0, 0.0, "")) == {"epochs": 3, "time_budget": 0.16}
    assert limits(job, run, Grant("mlp1", "shortened", 1.5, 0.0, "")) == {"time_budget": 0.02}
    assert limits(job, run, Grant("mlp1", "full", 0.2, 0.0, "")) == {"time_budget": 0.02}  # (1 s, not 0)


def test_a_clustering_may_overrun_its_estimate_with_what_the_later_rows_can_spare():
    """On an idle machine the per-class estimate was low for c = 150 and the clustering was cut while
    13 minutes were left: a started clustering may go on until the rows after it would lose their floors."""
    from nnlm.reproduce.planner import elastic_limit, scoring_need

    late = LATE_CLASS + [scoring_need("mlp1-train", BROWN[0], 5_000.0)]
    left = 13 * 60.0
    grants = plan(left, late)
    first = grants[0]
    assert first.status == "full" and first.work == pytest.approx(late[0].want)
    later_floors = sum(n.fixed + n.floor for n in late[1:])
    assert elastic_limit(left, late, first) == pytest.approx(left - first.fixed - later_floors)
    assert elastic_limit(left, late, first) > first.work
    # when the later rows' floors take everything, it keeps its grant; a skipped row gets nothing
    assert elastic_limit(1.0, late, first) == first.work
    skipped = [g for g in plan(0.0, late) if g.status == "skipped"]
    assert skipped and elastic_limit(0.0, late, skipped[0]) == 0.0


def test_a_runs_own_epochs_give_its_rates():
    """Training seconds are the time between validations less the validation; the run starts at 0."""
    from nnlm.reproduce.rates import from_history

    assert from_history([], 500) is None
    history = [{"examples": 1000, "elapsed_seconds": 12.0, "valid_seconds": 2.0},
               {"examples": 2000, "elapsed_seconds": 24.0, "valid_seconds": 2.0},
               {"examples": 3000, "elapsed_seconds": 40.0, "valid_seconds": 6.0}]
    assert from_history(history[:1], 500) == Rates(train=100.0, score=250.0, path="run")
    assert from_history(history, 500, last=2) == Rates(train=2000 / 20.0, score=1000 / 8.0, path="run")
    assert from_history([{"examples": 0, "elapsed_seconds": 0.0, "valid_seconds": 0.0}], 500) is None
    quick = from_history([{"examples": 1000, "elapsed_seconds": 0.0, "valid_seconds": 0.0}], 500)
    # quicker than the records' tenths: as fast as they say
    assert quick == Rates(train=1000 / 0.05, score=500 / 0.05, path="run")


def test_the_train_split_is_planned_at_the_speed_the_runs_validation_scored(tmp_path):
    """A long split is scored from the per-position tables, faster than the slice the rate is measured
    on; the run's own validation scored that way, so the faster of the two plans the train split."""
    import json
    from types import SimpleNamespace

    from nnlm.neural.run import checkpoint as ck
    from nnlm.reproduce.net_rows import run_dir, train_scoring_rate

    job = SimpleNamespace(out=tmp_path, options={}, rates={"apnews": Rates(train=1000, score=100)},
                          net_options=lambda net: {}, shapes={}, loss="sampled", vocabulary_options=lambda: {},
                          corpus=SimpleNamespace(valid=[0] * 500))
    assert train_scoring_rate(job, "apnews") == 100  # no run yet: the slice's rate
    run = run_dir(job, "apnews")
    run.mkdir(parents=True)
    history = [{"examples": 1000, "elapsed_seconds": 3.0, "valid_seconds": 2.0}]
    (run / ck.STATE).write_text(json.dumps({"history": history}))
    assert train_scoring_rate(job, "apnews") == 250  # 500 validation tokens in 2 s
    job.rates["apnews"] = Rates(train=1000, score=400)
    assert train_scoring_rate(job, "apnews") == 400  # never slower than measured now


# --- the scoring rate of the path that will run (issue 32): decided as the long pass decides it ---
# (rates injected: time_plain / time_tables stand for the timings, the memory is set by hand)

PLAIN_RATE, TABLES_RATE = 1_000.0, 8_000.0


@pytest.fixture
def timed_paths(monkeypatch):
    from nnlm.reproduce import rates

    monkeypatch.setattr(rates, "time_plain", lambda lm, ctx, targets: PLAIN_RATE)
    monkeypatch.setattr(rates, "time_tables", lambda lm, ctx, targets, tokens: TABLES_RATE)
    return rates


def set_memory(monkeypatch, available: int | None) -> None:
    from nnlm.neural.lm import direct_tables

    monkeypatch.setattr(direct_tables, "available_bytes", lambda: available)


def long_valid_corpus(tmp_path, vocab: int):
    """A corpus whose validation split is long enough for the tables (>= 16 |V| tokens) at `max_vocab`."""
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.data import load_corpus

    train, valid, test = random_corpus_texts()
    root = write_text_corpus(tmp_path / "long", train, valid * 4, test)
    corpus = load_corpus(str(root), max_vocab=vocab, use_cache=False)
    assert len(corpus.valid) >= 16 * len(corpus.vocab)
    return corpus


def test_scoring_is_planned_on_the_tables_when_they_will_be_built(timed_paths, monkeypatch, tmp_path):
    set_memory(monkeypatch, 1 << 34)
    corpus = long_valid_corpus(tmp_path, 40)
    assert timed_paths.scoring_rate("apnews", corpus, "cpu") == (TABLES_RATE, "tables")


def test_scoring_is_planned_on_the_plain_path_when_the_tables_do_not_fit(timed_paths, monkeypatch, tmp_path):
    from nnlm.neural.lm.direct_tables import table_bytes

    corpus = long_valid_corpus(tmp_path, 40)
    need = table_bytes(5, len(corpus.vocab), len(corpus.vocab))  # the AP net: n - 1 = 5 positions
    set_memory(monkeypatch, 3 * need - 1)  # a third of it is less than the tables need
    assert timed_paths.scoring_rate("apnews", corpus, "cpu") == (PLAIN_RATE, "plain")
    set_memory(monkeypatch, 3 * need)
    assert timed_paths.scoring_rate("apnews", corpus, "cpu") == (TABLES_RATE, "tables")


def test_scoring_is_planned_on_the_plain_path_without_direct_connections_or_for_a_short_split(
        timed_paths, monkeypatch, tmp_path, random_corpus):
    set_memory(monkeypatch, 1 << 34)
    corpus = long_valid_corpus(tmp_path, 40)
    assert timed_paths.scoring_rate("apnews", corpus, "cpu", {"direct": False}) == (PLAIN_RATE, "plain")
    assert len(random_corpus.valid) < 16 * len(random_corpus.vocab)  # a pass too short to pay for the tables
    assert timed_paths.scoring_rate("apnews", random_corpus, "cpu") == (PLAIN_RATE, "plain")


def test_a_net_is_planned_with_the_scoring_rate_of_its_path():
    """The same net, split sizes and budget: skipped on the plain path's rate, granted on the tables'."""
    sizes = (14_000_000, 963_000, 963_000)
    plain, tables = Rates(20_000, 1_500, "plain"), Rates(20_000, 12_000, "tables")
    needs = {r.path: net_need("apnews", r, *sizes, floor_epochs=0.1) for r in (plain, tables)}
    assert needs["plain"].fixed == pytest.approx(8 * needs["tables"].fixed)
    assert by_id(plan(20 * 60, [needs["plain"]]))["apnews"].status == "skipped"
    assert by_id(plan(20 * 60, [needs["tables"]]))["apnews"].status != "skipped"
