"""The truncation warning: once per run of steps above the threshold, its kind kept beside it (never read back from
the warning's text), across a checkpoint and from a checkpoint written before the kind was kept."""

from __future__ import annotations

from ablate.train.evaluate import TRUNCATION_MIN_STEPS, Health


def test_the_truncation_warning_comes_once_and_its_kind_survives_a_checkpoint():
    h = Health()
    said = [h.after_step(0.5, step) for step in range(1, TRUNCATION_MIN_STEPS + 3)]
    assert [s is not None for s in said] == [False] * (TRUNCATION_MIN_STEPS - 1) + [True, False, False]
    assert h.warnings == [said[TRUNCATION_MIN_STEPS - 1]] and h.last_warning_kind == "truncation"
    again = Health()
    again.load_state_dict(h.state_dict())
    assert again.after_step(0.5, 99) is None and again.warnings == h.warnings


def test_a_checkpoint_without_the_kind_reads_its_warnings_as_truncation_warnings():
    old = Health()
    old.load_state_dict({"r0": 0.5, "trunc_window": [0.5] * TRUNCATION_MIN_STEPS, "warnings": ["some text"]})
    assert old.last_warning_kind == "truncation" and old.after_step(0.5, 9) is None
    fresh = Health()
    fresh.load_state_dict({"r0": 0.5, "trunc_window": [0.5] * TRUNCATION_MIN_STEPS, "warnings": []})
    assert fresh.last_warning_kind is None and fresh.after_step(0.5, 9) is not None
