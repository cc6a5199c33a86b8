"""Tasks and checkers: synthetic addition, JSONL math files, answer normalisation, clear errors on bad input."""

from __future__ import annotations

import json

import pytest

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.config.schema import ConfigErrors
from ablate.config.sections import TaskConfig
from ablate.errors import ErrorKind
from ablate.train.tasks import addition_problem, final_answer, normalize_answer
from ablate.train.tasks import build_task as _build
from jobs import refused


def build_task(cfg: dict, phrase: str):
    """A task from a plain `task` section plus `val_size` (train.val_size in a run config)."""
    cfg = dict(cfg)
    val_size = cfg.pop("val_size", 200)
    return _build(TaskConfig(**cfg), val_size, phrase)


def test_addition_problem_writes_low_carries_then_the_sum():
    assert addition_problem(347, 285, 3, ">").target == "11>632"
    assert addition_problem(999, 1, 3, ">").target == "11>1000"
    p = addition_problem(12, 5, 3, ">")
    assert (p.prompt, p.answer, p.target) == ("012+005=", "17", "00>17")


def test_synthetic_task_is_deterministic_with_disjoint_splits_and_a_strict_checker():
    cfg = {"name": "synthetic_math", "digits": 3, "train_size": 500, "val_size": 50, "reward": "signed"}
    a, b = build_task(cfg, ">"), build_task(cfg, ">")
    assert a.train == b.train and a.val == b.val
    assert len(a.train) == 500 and len(a.val) == 50
    assert not {p.prompt for p in a.train} & {p.prompt for p in a.val}
    other = build_task({**cfg, "data_seed": 7}, ">")
    assert other.val != a.val
    p = a.val[0]
    assert a.check(p.target, p.answer)
    assert not a.check(p.target + "1", p.answer)
    assert not a.check(p.answer, str(int(p.answer) + 1))
    assert a.reward(True) == 1.0 and a.reward(False) == -1.0
    assert build_task({**cfg, "reward": "binary"}, ">").reward(False) == 0.0
    assert set("".join(q.prompt + q.target for q in a.train)) <= set(a.alphabet)


def test_unseen_share_is_subtraction_without_targets_in_both_splits():
    cfg = {
        "name": "synthetic_math",
        "digits": 3,
        "digits_min": 1,
        "train_size": 4000,
        "val_size": 400,
        "unseen_frac": 0.25,
    }
    t = build_task(cfg, ">")
    again = build_task(cfg, ">")
    assert (t.train, t.val) == (again.train, again.val)  # the same problems in every run
    for split in (t.train, t.val):
        minus = [p for p in split if "-" in p.prompt]
        assert 0.18 < len(minus) / len(split) < 0.30  # 0.25 less the x - 0 pairs, which stay additions
        for p in minus:
            a, b = (int(x) for x in p.prompt[:-1].split("-"))
            assert a >= b > 0 and p.answer == str(a - b) and p.target == ""  # nothing for the warm-up to imitate
            assert t.check(">" + p.answer, p.answer)
        assert all(p.target for p in split if "+" in p.prompt)
    assert "-" in t.alphabet and "-" not in build_task({**cfg, "unseen_frac": 0.0}, ">").alphabet
    with refused(ErrorKind.RECIPE, "task.unseen_frac", "< 1.0") as e:
        compose_run(RECIPES_DIR / "base.yaml", ["task.unseen_frac=1.0"])
    assert isinstance(e.value, ConfigErrors)


def test_answer_normalisation():
    assert normalize_answer("$1,000$") == normalize_answer("1000.0") == normalize_answer("1e3")
    assert normalize_answer("\\boxed{3/4}") == normalize_answer("0.75")
    assert normalize_answer("Paris.") == normalize_answer("paris")
    assert normalize_answer("12") != normalize_answer("13")
    assert final_answer("think</think> 42", "</think>") == "42"
    assert final_answer("no phrase 42", "</think>") == "no phrase 42"


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_task_on_a_small_file(tmp_path):
    rows = [{"prompt": f"What is {i}*3?", "answer": str(3 * i)} for i in range(20)]
    rows[0] = {"prompt": "Total of 600 and 400?", "answer": 1000, "thinking": "600+400"}
    f = _write(tmp_path / "math.jsonl", rows)
    task = build_task({"name": "jsonl", "path": str(f), "val_size": 5, "reward": "binary"}, "</think>")
    assert len(task.train) == 15 and len(task.val) == 5
    again = build_task({"name": "jsonl", "path": str(f), "val_size": 5}, "</think>")
    assert [p.prompt for p in again.val] == [p.prompt for p in task.val]
    chk = task.check
    assert chk("let me think</think> The answer is 1,000.", "1000")
    assert chk("</think>\\boxed{1000}", "1000")
    assert not chk("</think> 999", "1000")
    assert not chk("1000 is what I'd guess but</think> 7", "1000")  # only the part after the phrase counts
    assert all(p.target.endswith("</think>" + p.answer) for p in task.train)
    assert set("".join(p.prompt + p.target for p in task.train)) <= set(task.alphabet)


@pytest.mark.parametrize(
    "line, culprits",
    [
        ("{not json", ["not valid JSON"]),  # tells it from JSON that is not an object
        (json.dumps({"prompt": "x"}), ["missing key 'answer'"]),  # tells it from an empty 'answer'
        (json.dumps({"answer": "1"}), ["missing key 'prompt'"]),  # tells it from an empty 'prompt'
        (json.dumps(["prompt", "answer"]), ["list"]),
        (json.dumps({"prompt": "", "answer": "1"}), ["'prompt'", "non-empty"]),  # tells it from a missing 'prompt'
        (json.dumps({"prompt": "x", "answer": None}), ["'answer'", "non-empty"]),  # tells it from a missing 'answer'
    ],
)
def test_bad_jsonl_row_names_file_and_line(tmp_path, line, culprits):
    f = _write(tmp_path / "math.jsonl", [{"prompt": "1+1", "answer": "2"}, line, {"prompt": "2+2", "answer": "4"}])
    with refused(ErrorKind.FILE, f"{f}:2", *culprits):
        build_task({"name": "jsonl", "path": str(f), "val_size": 1}, "</think>")


def test_missing_file_and_bad_settings_are_user_errors(tmp_path):
    with refused(ErrorKind.FILE, "task.path", str(tmp_path / "nope.jsonl")):
        build_task({"name": "jsonl", "path": str(tmp_path / "nope.jsonl")}, "</think>")
    with refused(ErrorKind.RECIPE, "task.path", "task=jsonl"):
        build_task({"name": "jsonl", "path": None}, "</think>")
    f = _write(tmp_path / "m.jsonl", [{"prompt": "1+1", "answer": "2"}] * 3)
    with refused(ErrorKind.RECIPE, "train.val_size=3", str(f)):
        build_task({"name": "jsonl", "path": str(f), "val_size": 3}, "</think>")
    with refused(ErrorKind.RECIPE, "'synthetic_maths'", "jsonl, synthetic_math", "'synthetic_math'"):
        build_task({"name": "synthetic_maths"}, ">")
    with refused(ErrorKind.RECIPE, "'dense'", "binary, signed"):
        build_task({"name": "synthetic_math", "reward": "dense"}, ">")
