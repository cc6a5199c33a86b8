"""Length penalty at its edges, forced interruption and truncation flags; expected values worked out by hand."""

import pytest
import torch

from ablate.errors import ErrorKind
from ablate.storage.metricsfile import TRUNCATION_WARN
from ablate.train.length import (
    draw_think_budgets,
    ends_with_phrase,
    interrupt,
    length_penalty,
    phrase_end,
    truncated,
    truncation_rate,
)
from jobs import refused


def test_length_penalty_edges_and_midpoint():
    # l_max 100, l_cache 20: free up to 80 tokens, linear to -1 at 100, -1 beyond
    lengths = torch.tensor([50, 80, 85, 90, 95, 100, 130])
    pen = length_penalty(lengths, torch.ones(7, dtype=torch.bool), l_max=100, l_cache=20)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0])


def test_length_penalty_only_for_correct_answers():
    pen = length_penalty(torch.tensor([95.0, 95.0, 130.0]), torch.tensor([True, False, False]), l_max=100, l_cache=20)
    assert pen.tolist() == pytest.approx([-0.75, 0.0, 0.0])


def test_length_penalty_rejects_a_cache_outside_the_budget():
    with refused(ErrorKind.RECIPE, "l_cache=20", "l_max=10"):
        length_penalty(torch.tensor([1]), torch.tensor([True]), l_max=10, l_cache=20)
    with refused(ErrorKind.RECIPE, "l_cache=0", "l_max=10"):
        length_penalty(torch.tensor([1]), torch.tensor([True]), l_max=10, l_cache=0)


def test_interrupt_appends_the_phrase_after_the_budget():
    tokens = [5, 6, 7, 8, 9]
    assert interrupt(tokens, [1, 2]) == [5, 6, 7, 8, 9, 1, 2]
    assert interrupt(tokens, [1, 2], budget=3) == [5, 6, 7, 1, 2]  # overshoot past the budget is cut
    assert interrupt([5, 1, 2], [1, 2]) == [5, 1, 2]  # already interrupted: not twice
    assert tokens == [5, 6, 7, 8, 9]  # input untouched
    with refused(ErrorKind.RECIPE, "end-of-thinking phrase"):
        interrupt(tokens, [])


def test_think_budget_is_uniform_on_the_closed_window():
    draws = draw_think_budgets(torch.Generator().manual_seed(0), 3, 5, 600)
    assert draws.dtype == torch.long and set(draws.tolist()) == {3, 4, 5}
    counts = torch.bincount(draws)[3:].tolist()
    assert min(counts) > 150  # each of the three values about a third of the time
    again = draw_think_budgets(torch.Generator().manual_seed(0), 3, 5, 600)
    assert torch.equal(draws, again)
    assert draw_think_budgets(None, 4, 4, 3).tolist() == [4, 4, 4]
    with refused(ErrorKind.RECIPE, "lo=6", "hi=5"):
        draw_think_budgets(None, 6, 5, 1)


def test_the_model_ending_its_thinking_is_found_in_both_forms():
    assert phrase_end([5, 6, 1, 2, 7], [1, 2]) == 4
    assert phrase_end([5, 6, 1, 2, 7], [1, 2], start=3) is None  # must end at or after start + len - 1
    assert phrase_end([5, 1], [1, 2]) is None
    rows = torch.tensor([[5, 1, 2], [1, 2, 5], [0, 0, 1]])
    assert ends_with_phrase(rows, torch.tensor([1, 2])).tolist() == [True, False, False]
    assert ends_with_phrase(rows[:, :1], torch.tensor([1, 2])).tolist() == [False, False, False]


def test_truncation_flags_and_rate():
    lengths = torch.tensor([3, 5, 5, 6])
    assert truncated(lengths, 5).tolist() == [False, True, True, True]
    finished = torch.tensor([True, True, False, False])  # row 1 ended with EOS exactly at max_len
    flags = truncated(lengths, 5, finished)
    assert flags.tolist() == [False, False, True, True]
    assert truncation_rate(flags) == 0.5 and truncation_rate(flags) > TRUNCATION_WARN
    assert truncation_rate(torch.zeros(0, dtype=torch.bool)) == 0.0
