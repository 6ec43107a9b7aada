"""The shape rule of `nnlm reproduce` (nnlm.reproduce.shape_plan) on given rates: pure, no timing."""
from __future__ import annotations

import pytest

from nnlm.reproduce.planner import SAFETY, Grant, Rates
from nnlm.reproduce.shape_plan import MIN_EPOCHS, Trial, pick

TRAIN, VALID = 1_000_000, 100_000


def trial(label: str, epochs: float, train: float = 10_000.0, score: float = 50_000.0) -> Trial:
    """A shape whose grant holds `epochs` epochs (0: skipped) at the given rates."""
    rates = Rates(train=train, score=score)
    epoch = SAFETY * TRAIN / train + SAFETY * VALID / score
    grant = Grant(label, "skipped" if epochs == 0 else "shortened", epochs * epoch, 2 * SAFETY * VALID / score, "r")
    return Trial(label, rates, grant, TRAIN, VALID)


def test_a_trial_counts_the_epochs_its_grant_holds():
    assert trial("a", 2.5).epochs == pytest.approx(2.5)
    assert trial("a", 0).epochs == 0.0


def test_the_first_shape_with_enough_epochs_is_chosen_over_a_later_one_with_more():
    index, why = pick([trial("preset", 0), trial("wide", MIN_EPOCHS + 0.1), trial("narrow", 6)])
    assert index == 1
    assert why.startswith("chose wide (the first shape whose grant holds at least 2 epochs)")
    assert "preset: trains 10,000 tokens/s, scores 50,000 tokens/s" in why and "does not fit" in why


def test_without_enough_epochs_anywhere_the_most_epochs_win_and_ties_go_to_the_earlier():
    assert pick([trial("preset", 0.5), trial("wide", 1.5), trial("narrow", 1.2)])[0] == 1
    index, why = pick([trial("preset", 1.0), trial("wide", 1.0)])
    assert index == 0 and "no shape's grant holds 2 epochs; the most epochs" in why


def test_when_nothing_fits_the_preset_keeps_the_row():
    index, why = pick([trial("preset", 0), trial("wide", 0)])
    assert index == 0 and why.startswith("no shape chosen (no shape fits the budget)")
