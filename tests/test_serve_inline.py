"""The InlineBatcher (nnlm.serve.batcher): a fast model's jobs of one event-loop turn are one model call,
computed on the loop's thread; a cancelled request's job is never computed; jobs from other threads go
through the loop; and `batcher_for` serves an n-gram model inline and a slow model on a thread."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from nnlm.serve.batcher import Batcher, Cancel, InlineBatcher, batcher_for


@pytest.fixture(scope="module")
def kn3(tmp_path_factory):
    from conftest import random_corpus_texts, write_text_corpus

    from nnlm.data import load_corpus
    from nnlm.ngram.build import build_ngram

    root = tmp_path_factory.mktemp("inline")
    corpus = load_corpus(str(write_text_corpus(root / "rand", *random_corpus_texts())), use_cache=False)
    return build_ngram("kn", corpus, 3)


def recording(model, sleep: float = 0.0):
    """`model` whose log_prob records (rows, thread) of every call (and sleeps `sleep` s in it)."""
    calls: list[tuple[int, int]] = []

    class Recorded(type(model)):
        def log_prob(self, contexts, targets):
            calls.append((len(contexts), threading.get_ident()))
            time.sleep(sleep)
            return model.log_prob(contexts, targets)

    recorded = object.__new__(Recorded)
    recorded.__dict__.update(model.__dict__)
    return recorded, calls


def jobs(model, sizes, seed=0):
    rng = np.random.default_rng(seed)
    v = len(model.vocab)
    return [(rng.integers(0, v, (n, model.context_size)), rng.integers(0, v, n)) for n in sizes]


def test_one_turn_of_jobs_is_one_call_on_the_loop_thread(kn3):
    model, calls = recording(kn3)
    batcher = InlineBatcher(model)
    work = jobs(kn3, (1, 4, 2, 7))

    async def main():
        return await asyncio.gather(*(batcher.answer(c, t, Cancel()) for c, t in work)), threading.get_ident()

    answers, loop_thread = asyncio.run(main())
    assert calls == [(14, loop_thread)] and batcher.batches == 1
    for (c, t), got in zip(work, answers, strict=True):
        assert np.allclose(got, kn3.log_prob(c, t))


def test_a_cancelled_request_is_not_computed(kn3):
    model, calls = recording(kn3)
    batcher = InlineBatcher(model)
    (c1, t1), (c2, t2) = jobs(kn3, (3, 5))

    async def main():
        gone = Cancel()
        left = asyncio.ensure_future(batcher.answer(c1, t1, gone))
        stays = asyncio.ensure_future(batcher.answer(c2, t2, Cancel()))
        await asyncio.sleep(0)  # both queued, the flush not yet run
        gone.cancel()
        left.cancel()
        with pytest.raises(asyncio.CancelledError):
            await left
        return await stays

    got = asyncio.run(main())
    assert [rows for rows, _ in calls] == [5] and batcher.dropped == 1
    assert np.allclose(got, kn3.log_prob(c2, t2))


def test_jobs_from_threads_are_computed_on_the_loop(kn3):
    model, calls = recording(kn3)
    batcher = InlineBatcher(model)
    work = jobs(kn3, (2, 3, 4), seed=1)
    results = {}

    async def main():
        await batcher.answer(*jobs(kn3, (1,))[0], None)  # the loop is known to the batcher from now on
        loop_thread = threading.get_ident()
        done = asyncio.get_running_loop().run_in_executor
        outs = await asyncio.gather(*(done(None, batcher.log_prob, c, t, 10.0) for c, t in work))
        results["outs"] = outs
        return loop_thread

    loop_thread = asyncio.run(main())
    assert {thread for _, thread in calls} == {loop_thread}
    for (c, t), got in zip(work, results["outs"], strict=True):
        assert np.allclose(got, kn3.log_prob(c, t))
    # with no loop running, a call is computed at once in the caller's thread
    c, t = work[0]
    assert np.allclose(batcher.log_prob(c, t, 10.0), kn3.log_prob(c, t))


def test_batcher_for_chooses_by_measured_speed(kn3):
    assert isinstance(batcher_for(kn3), InlineBatcher)
    slow, _ = recording(kn3, sleep=0.005)
    chosen = batcher_for(slow)
    assert isinstance(chosen, Batcher)
    chosen.close()
