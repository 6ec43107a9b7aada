"""Counts in messages read right for one and for many ("after 1 pass", "after 12 passes")."""
import pytest

from nnlm.wording import counted


@pytest.mark.parametrize("count, noun, text", [
    (1, "pass", "1 pass"), (0, "pass", "0 passes"), (12, "pass", "12 passes"), (1, "epoch", "1 epoch"),
    (3, "epoch", "3 epochs"), (2, "trial", "2 trials"), (2, "box", "2 boxes")])
def test_counted_nouns(count, noun, text):
    assert counted(count, noun) == text


def test_an_irregular_plural_is_given():
    assert counted(2, "child", "children") == "2 children" and counted(1, "child", "children") == "1 child"
