"""Length control: DAPO's soft overlong penalty, ScaleRL's forced interruption, and truncation flags.

    penalty:      R_len(y) = clip((L_max - |y|)/L_cache - 1, -1, 0), added to correct answers only
                  (DAPO, arXiv 2503.14476 §3.4)
    interruption: at a thinking budget b ~ U[lo, hi] (b < L_max), continue from y[:b] + end-of-thinking phrase
                  (ScaleRL, arXiv 2510.13786)
    truncation:   truncated_i = |y_i| >= L_max and no EOS; truncation rate > 10% is ScaleRL's instability warning

The penalty is 0 up to L_max - L_cache tokens, falls linearly to -1 at L_max, and stays -1 beyond. It applies to
correct completions only: a wrong answer already gets the lowest verifier reward, and penalising it
further would only teach "fail shorter".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ablate.errors import ErrorKind, UserError


def length_penalty(lengths: Tensor, correct: Tensor, l_max: int, l_cache: int) -> Tensor:
    """Per-completion penalty [N] in [-1, 0]: clip((l_max - len)/l_cache - 1, -1, 0) where correct, else 0.

    lengths: [N] completion lengths in tokens; correct: [N] bool (the verifier's verdict). Add it to the reward.
    """
    if not (isinstance(l_cache, int) and isinstance(l_max, int) and 0 < l_cache <= l_max):
        raise UserError(
            f"length penalty needs integers 0 < l_cache <= l_max, got l_cache={l_cache!r}, l_max={l_max!r}",
            kind=ErrorKind.RECIPE,
        )
    if lengths.shape != correct.shape:
        raise ValueError(f"lengths {tuple(lengths.shape)} and correct {tuple(correct.shape)} must match")
    dtype = lengths.dtype if lengths.is_floating_point() else torch.get_default_dtype()
    pen = ((l_max - lengths.to(dtype)) / l_cache - 1.0).clamp(-1.0, 0.0)
    return torch.where(correct.to(torch.bool), pen, torch.zeros_like(pen))


def setting(value: int | None, name: str) -> int:
    """A length setting the recipe's length method needs (validation sees that it is set)."""
    if value is None:
        raise UserError(f"{name} is not set: the recipe's length method needs it", kind=ErrorKind.RECIPE)
    return value


def draw_think_budgets(generator: torch.Generator | None, lo: int, hi: int, n: int) -> Tensor:
    """Thinking budgets [n] (long), each drawn uniformly from the integers lo..hi (both included). Drawn per
    completion so the model cannot learn one fixed cut-off point."""
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise UserError(
            f"thinking budget window needs integers 1 <= lo <= hi, got lo={lo!r}, hi={hi!r}", kind=ErrorKind.RECIPE
        )
    return torch.randint(lo, hi + 1, (n,), generator=generator)


def interrupt(tokens: Sequence[int], phrase_ids: Sequence[int], budget: int | None = None) -> list[int]:
    """The token sequence to continue generating from, for a completion that hit its thinking budget.

    tokens: the completion so far (prompt excluded); phrase_ids: the tokenised end-of-thinking phrase; budget:
    if given, tokens beyond it are cut first (a backend may overshoot by a block). Returns tokens[:budget] + phrase.
    If the budget-cut tokens already end with the phrase, nothing is appended (never interrupt twice).
    Both samplers take what to force from here.
    """
    if not phrase_ids:
        raise UserError("forced interruption needs a non-empty end-of-thinking phrase", kind=ErrorKind.RECIPE)
    kept = list(tokens if budget is None else tokens[: max(int(budget), 0)])
    phrase = list(phrase_ids)
    if len(kept) >= len(phrase) and kept[-len(phrase) :] == phrase:
        return kept
    return kept + phrase


def phrase_end(tokens: Sequence[int], phrase_ids: Sequence[int], start: int = 0) -> int | None:
    """End index (exclusive) of the first occurrence of the phrase in `tokens` that ends at or after
    start + len(phrase) - 1: where the model ended its thinking by itself. None when it has not."""
    L = len(phrase_ids)
    phrase = list(phrase_ids)
    for e in range(max(start + L, L), len(tokens) + 1):
        if list(tokens[e - L : e]) == phrase:
            return e
    return None


def ends_with_phrase(tokens: Tensor, phrase_ids: Tensor) -> Tensor:
    """bool [N]: row n of tokens [N, t] ends with the phrase [L] (the vectorised `phrase_end` of one new token)."""
    L = phrase_ids.numel()
    if tokens.shape[1] < L:
        return torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    return (tokens[:, -L:] == phrase_ids).all(1)


def truncated(lengths: Tensor, max_len: int, finished: Tensor | None = None) -> Tensor:
    """bool [N]: the completion hit the max length. lengths: [N]; finished: optional bool [N], True where the
    completion ended with EOS (an answer that ends exactly at max_len with EOS is not truncated)."""
    hit = lengths >= max_len
    if finished is not None:
        hit = hit & ~finished.to(torch.bool)
    return hit


def truncation_rate(flags: Tensor) -> float:
    """Share of completions truncated (the `truncation_rate` metric); 0.0 for an empty batch."""
    return float(flags.to(torch.float64).mean()) if flags.numel() else 0.0
