"""Verifiable tasks (registry `task`): problems with a held-out validation split, and reward checkers.

A task is built from the run config's `task` section (`build_task(cfg.task, val_size, phrase)`) and gives:
- `train` / `val`: lists of `Problem(prompt, answer, target)`. `target` is the full supervised completion
  (thinking + end-of-thinking phrase + answer) used by the warm-up; RL never sees it.
- `check(completion, answer) -> bool`: the checker, a plain deterministic callable on text.
- `reward(correct) -> float`: +1/0 (`binary`) or +1/-1 (`signed`), as the recipe's `task.reward` says.
- `alphabet`: every character the task can produce (the tiny model's character tokenizer is built from it).

Both splits depend on the task config only (never on the run seed), so every run of a sweep trains on the
same prompts and is evaluated on the same held-out set; the run seed only orders the training prompts.

`synthetic_math`: `ddd+ddd=` addition. The completion first writes the carries, least significant column
first (the "thinking"; e.g. 347+285 -> carries of the units and tens columns -> "11"), then the end-of-thinking
phrase, then the sum: `11>632` then EOS, at most 2*digits+2 tokens (8 for 3 digits, base.yaml's max_new_tokens).
Writing the carries first is the scratchpad that makes the answer tractable for a 2-layer model, and it
gives forced interruption something to cut: an interrupted model must answer without them.

`unseen_frac` (synthetic_math): that share of the problems are subtractions `ddd-ddd=` (a >= b > 0), checked like
the sums (the difference after the phrase) but with no supervised target, so the warm-up never teaches them. The
warmed-up policy practically never samples a correct difference, so their groups carry no reward
variance and RL cannot learn them: the pass rate has a ceiling near 1 - unseen_frac, as problems beyond a
model's reach give ScaleRL's curves a ceiling A < 1. (Without them the tiny model can eventually solve every
sum, and a run's curve is still climbing toward 1 when the CPU budget ends.)

`jsonl`: one `{"prompt": str, "answer": str}` object per line (optional `thinking`: a worked solution the
warm-up may imitate); the checker normalises numbers (`1,000` = `1000.0` = `1e3`), `\\boxed{}`, `$`, spaces.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from ablate.config.sections import TaskConfig
from ablate.errors import ErrorKind, UserError
from ablate.registry import Registry
from ablate.storage import store


@dataclass(frozen=True)
class Problem:
    prompt: str
    """The text the policy continues (no special tokens)."""
    answer: str
    """The reference final answer the checker compares against."""
    target: str = ""
    """A full supervised completion (thinking + phrase + answer) for the warm-up; '' if none."""


@dataclass
class Task:
    name: str
    train: list[Problem]
    val: list[Problem]
    check: Callable[[str, str], bool]
    """check(completion_text, answer) -> correct; completion_text excludes special tokens."""
    reward_kind: str
    alphabet: str
    phrase: str

    def reward(self, correct: bool) -> float:
        """The scalar reward of a verdict: binary 1/0 or signed +1/-1 (task.reward)."""
        return REWARDS.get(self.reward_kind)(correct)

    def grade(self, texts: list[str], answers: list[str], truncated: list[bool]) -> list[bool]:
        """Verdicts of completions: correct = finished (not truncated) and the checker accepts the final answer.
        The one grading rule of training, evaluation and the warm-up's check."""
        return [(not tr) and self.check(t, a) for t, a, tr in zip(texts, answers, truncated)]


REWARDS: Registry[Callable[[bool], float]] = Registry("reward")
REWARDS.add("binary", lambda ok: 1.0 if ok else 0.0)
REWARDS.add("signed", lambda ok: 1.0 if ok else -1.0)

TASKS: Registry[Callable[..., Task]] = Registry("task")


def build_task(cfg: TaskConfig, val_size: int, phrase: str) -> Task:
    """The task of a run config's `task` section with `val_size` validation problems (train.val_size); `phrase` is
    the end-of-thinking phrase (length.phrase, or the task's own marker)."""
    REWARDS.get(cfg.reward)  # fail early, with the valid names
    return TASKS.get(cfg.name)(cfg, val_size, phrase)


# ---- answer extraction and normalisation (shared by every task) ----

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def final_answer(completion: str, phrase: str) -> str:
    """The final-answer part of a completion: the text after the last end-of-thinking phrase, if any.

    >>> final_answer("110>632", ">")
    '632'
    """
    if phrase and phrase in completion:
        completion = completion.rsplit(phrase, 1)[1]
    return completion.strip()


def normalize_answer(text: str) -> str:
    """A canonical form for comparing answers: boxed content, no `$`/spaces/thousands commas; numbers as fractions.

    >>> normalize_answer(" $1,000.50$ ") == normalize_answer("2001/2")
    True
    """
    m = _BOXED.findall(text)
    if m:
        text = m[-1]
    text = text.replace("$", "").replace(" ", "").strip().rstrip(".")
    num = text.replace(",", "")
    try:
        return str(Fraction(num))
    except (ValueError, ZeroDivisionError):
        pass
    try:
        return str(Fraction(float(num))) if re.fullmatch(r"-?[\d.]+[eE][-+]?\d+", num) else text.lower()
    except (ValueError, OverflowError):
        return text.lower()


def make_checker(phrase: str, lenient_number: bool) -> Callable[[str, str], bool]:
    """A checker: the final answer (after `phrase`) equals the reference after normalisation.

    lenient_number: if the final answer has no exact match, accept its last number (free-form answers of real
    models); the synthetic task is strict (the answer part must be exactly the number).
    """

    def check(completion: str, answer: str) -> bool:
        got = final_answer(completion, phrase)
        if got == answer.strip():  # the common case, without parsing numbers
            return True
        if not lenient_number and got.isdigit() and answer.strip().isdigit():
            return False  # strict: two different digit strings (a leading zero is wrong too)
        ref = normalize_answer(answer)
        if normalize_answer(got) == ref:
            return True
        if lenient_number:
            nums = _NUMBER.findall(got)
            return bool(nums) and normalize_answer(nums[-1]) == ref
        return False

    return check


# ---- synthetic_math ----


def addition_problem(a: int, b: int, digits: int, phrase: str) -> Problem:
    """`a+b=` with operands zero-padded to `digits`; target = carries of the low columns (LSB first) + phrase + sum.

    >>> addition_problem(347, 285, 3, ">")
    Problem(prompt='347+285=', answer='632', target='11>632')
    """
    carries, c = [], 0
    for i in range(digits - 1):  # the top column's carry is the sum's leading 1: no need to think it
        s = (a // 10**i) % 10 + (b // 10**i) % 10 + c
        c = s // 10
        carries.append(str(c))
    return Problem(f"{a:0{digits}d}+{b:0{digits}d}=", str(a + b), "".join(carries) + phrase + str(a + b))


def subtraction_problem(a: int, b: int, digits: int) -> Problem:
    """`a-b=` (a >= b) zero-padded to `digits`; no target: the warm-up never sees subtraction (`unseen_frac`).

    >>> subtraction_problem(632, 285, 3)
    Problem(prompt='632-285=', answer='347', target='')
    """
    return Problem(f"{a:0{digits}d}-{b:0{digits}d}=", str(a - b), "")


@TASKS.register("synthetic_math")
def synthetic_math(cfg: TaskConfig, n_val: int, phrase: str) -> Task:
    """Fixed-width addition; task.digits, digits_min (null = digits), train_size, unseen_frac, data_seed (the split's
    seed, not the run's)."""
    digits, n_train = cfg.digits, cfg.train_size
    if digits is None or n_train is None:
        raise UserError(
            "task=synthetic_math needs task.digits and task.train_size (see recipes/task/synthetic_math.yaml)",
            kind=ErrorKind.RECIPE,
        )
    lo = cfg.digits_min or digits
    if digits < 1 or n_train < 1 or n_val < 1 or not 1 <= lo <= digits:
        raise UserError(
            f"task: need 1 <= digits_min <= digits and train_size, val_size >= 1 "
            f"(got digits_min={lo}, digits={digits}, train_size={n_train}, val_size={n_val})",
            kind=ErrorKind.RECIPE,
        )
    space = 10 ** (2 * digits)
    if n_train + n_val > space:
        raise UserError(
            f"task: train_size + val_size = {n_train + n_val} is too many for {digits}-digit addition",
            kind=ErrorKind.RECIPE,
        )
    rng = random.Random(cfg.data_seed)  # noqa: S311 (a seeded, reproducible data split, not a secret)
    if lo == digits:
        pairs = rng.sample(range(space), n_train + n_val)  # distinct, so the splits are disjoint
        ab = [(p // 10**digits, p % 10**digits) for p in pairs]
    else:
        # mixed difficulty: each operand's length uniform in digits_min..digits (zero-padded to a fixed width),
        # so short sums the tiny model masters mix with long ones it may not: a smoother rise
        seen: set[tuple[int, int]] = set()
        ab = []
        while len(ab) < n_train + n_val:
            a = rng.randrange(10 ** (rng.randint(lo, digits)))
            b = rng.randrange(10 ** (rng.randint(lo, digits)))
            if (a, b) not in seen:
                seen.add((a, b))
                ab.append((a, b))
    unseen = cfg.unseen_frac
    # a fixed, seeded choice of which problems are subtractions (the same in every run of a sweep)
    minus = random.Random(cfg.data_seed + 1).random  # noqa: S311 (seeded data, not a secret)
    # (x - 0 is never a subtraction: an adding policy would solve it)
    probs = [
        subtraction_problem(max(a, b), min(a, b), digits)
        if unseen and minus() < unseen and min(a, b) > 0
        else addition_problem(a, b, digits, phrase)
        for a, b in ab
    ]
    return Task(
        name="synthetic_math",
        train=probs[n_val:],
        val=probs[:n_val],
        check=make_checker(phrase, lenient_number=False),
        reward_kind=cfg.reward,
        alphabet="0123456789+=" + ("-" if unseen else "") + phrase,
        phrase=phrase,
    )


# ---- jsonl ----


def load_jsonl_problems(path: Path | str, phrase: str) -> list[Problem]:
    """Rows `{"prompt": str, "answer": str|number[, "thinking": str]}`; a bad row is a UserError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f'task.path: no such file {str(path)!r}; give a JSONL file of {{"prompt", "answer"}} rows',
            kind=ErrorKind.FILE,
        )
    probs = []
    for lineno, row in store.jsonl_rows(path):
        where = f"{path}:{lineno}"
        missing = [k for k in ("prompt", "answer") if k not in row]
        if missing:
            raise UserError(
                f"{where}: missing key {missing[0]!r}; each row needs 'prompt' and 'answer'", kind=ErrorKind.FILE
            )
        prompt, answer = row["prompt"], row["answer"]
        if not isinstance(prompt, str) or not prompt:
            raise UserError(f"{where}: 'prompt' must be a non-empty string", kind=ErrorKind.FILE)
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or str(answer).strip() == "":
            raise UserError(f"{where}: 'answer' must be a non-empty string or number", kind=ErrorKind.FILE)
        thinking = row.get("thinking", "")
        if not isinstance(thinking, str):
            raise UserError(f"{where}: 'thinking' must be a string", kind=ErrorKind.FILE)
        probs.append(Problem(prompt, str(answer), thinking + phrase + str(answer)))
    if not probs:
        raise UserError(f"task.path: {str(path)!r} has no rows", kind=ErrorKind.FILE)
    return probs


@TASKS.register("jsonl")
def jsonl_task(cfg: TaskConfig, n_val: int, phrase: str) -> Task:
    """A JSONL file (task.path); the validation split is task.val_path if given, else the first `n_val` rows after a
    fixed shuffle (task.data_seed), so the split does not depend on the run seed."""
    if not cfg.path:
        raise UserError(
            'task.path is required for task=jsonl (a JSONL file of {"prompt", "answer"} rows)', kind=ErrorKind.RECIPE
        )
    rows = load_jsonl_problems(cfg.path, phrase)
    if cfg.val_path:
        train, val = rows, load_jsonl_problems(cfg.val_path, phrase)
    else:
        if not 0 < n_val < len(rows):
            raise UserError(
                f"train.val_size={n_val} must be between 1 and the number of rows - 1 ({len(rows) - 1}) in {cfg.path}",
                kind=ErrorKind.RECIPE,
            )
        rows = rows[:]
        random.Random(cfg.data_seed).shuffle(rows)  # noqa: S311 (a seeded, reproducible split, not a secret)
        train, val = rows[n_val:], rows[:n_val]
    chars = sorted(set("".join(p.prompt + p.target for p in train + val)))
    return Task(
        name="jsonl",
        train=train,
        val=val,
        check=make_checker(phrase, lenient_number=True),
        reward_kind=cfg.reward,
        alphabet="".join(chars),
        phrase=phrase,
    )
