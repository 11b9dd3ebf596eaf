"""Stop strings for `continue_`: a StoppingCriteria that ends a row at the token that completes one of
the stop strings in its decoded new text, also when the string spans several tokens (as transformers'
`StopStringCriteria`, but it looks only at the new tokens, never at the prefix, and records which token
and which string ended each row)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


class StopStrings:
    """Callable as a transformers StoppingCriteria: (input_ids [n, L], scores) -> done [n] bool.

    start: the column where the new tokens begin (the padded prefix length P).
    eos_ids: rows that already drew one of them are left alone (they ended at their EOS).
    After generation, `ended[i]` is the index (in the new tokens) of the token that completed a stop
    string in row i, or -1; `which[i]` that string or None.
    Each step decodes only the row's last `window` new tokens (4 tokens per character of the longest
    stop string, + 8): a stop string that spans more tokens than that is not seen.
    Raises ValueError for an empty stop string.
    """

    def __init__(self, tokenizer, stops: Sequence[str], start: int, n: int, eos_ids: Sequence[int]) -> None:
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty strings, got {list(stops)!r}")
        self.tokenizer, self.stops, self.start = tokenizer, list(stops), int(start)
        self.window = 4 * max((len(s) for s in stops), default=0) + 8
        self.eos = torch.tensor(list(eos_ids), dtype=torch.long)
        self.ended = [-1] * n
        self.which: list[str | None] = [None] * n

    def _hit(self, tokens: list[int]) -> str | None:
        """The stop string the last token completes, or None."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        hits = [s for s in self.stops if s in text]
        if not hits:
            return None
        before = self.tokenizer.decode(tokens[:-1], skip_special_tokens=True)
        fresh = [s for s in hits if s not in before]
        return fresh[0] if fresh else None

    def __call__(self, input_ids: Tensor, scores: Tensor | None = None, **kwargs) -> Tensor:
        new = input_ids[:, self.start :]
        done = torch.zeros(new.shape[0], dtype=torch.bool, device=input_ids.device)
        if not self.stops or new.shape[1] == 0:
            return done
        seen_eos = torch.isin(new[:, :-1], self.eos.to(new.device)).any(1).tolist()
        for i in range(new.shape[0]):
            if self.ended[i] >= 0:
                done[i] = True
                continue
            if seen_eos[i]:
                continue
            hit = self._hit(new[i, -self.window :].tolist())
            if hit is not None:
                self.ended[i], self.which[i] = new.shape[1] - 1, hit
                done[i] = True
        return done
