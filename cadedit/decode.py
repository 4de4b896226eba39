"""The decode loop: grammar-masked model steps, forced literals and copy splices over one KV cache.

Contract: decode(model, cursor, prompt_ids, span_ids, pick, budget) drives a grammar cursor to
completion and returns the program text it spelled, with statistics. It knows nothing about
tokenisers or files: `model(ids, keep)` feeds ids (appending to its cache) and returns the logits of
the last `keep` positions; `span_ids(copy)` gives the tokens of the copied lines; `pick` chooses a
token from masked logits. Every token the model has not yet seen is fed in the NEXT forward, so a
forward carries the picked token, then any forced literal ids, then any spliced copy span, all at
once: one forward per decision, never one per forced or copied token (paper §2.3-2.4).
An optional drafter guesses further program tokens; they ride along with that forward and the
longest prefix the picker itself chooses is kept (greedy output is unchanged; others are cropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from cadedit.errors import BudgetError, ModelError, ProgramError
from cadedit.program import Copy, Gen, Op, Program


class Cursor(Protocol):
    """The per-request grammar state (cadedit.grammar builds it; tests may script one)."""

    def allowed_mask(self) -> np.ndarray: ...
    def advance(self, token: int) -> bool: ...
    def forced(self) -> tuple[int, ...]: ...
    def completed_copy(self) -> Copy | None: ...
    def is_done(self) -> bool: ...
    def text(self) -> str: ...
    def rollback(self, k: int) -> None: ...


Picker = Callable[[torch.Tensor, np.ndarray, Sequence[int]], int]  # (logits, mask, program ids) -> id
SpanIds = Callable[[Copy], Sequence[int]]
Drafter = Callable[[Cursor], list[int]]  # cursor -> drafted token ids (cadedit.draft.make_drafter)


@dataclass(frozen=True)
class Sampling:
    """temperature 0 means greedy (argmax); otherwise softmax(logits / T), nucleus top_p, seeded."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


@dataclass(frozen=True)
class Step:
    """One forward pass of the loop: what it fed, what was chosen after it, how long each took."""

    phase: str  # "prefill" | "step" | "forced" | "splice": the most expensive kind of token it fed
    prompt: int  # prompt tokens fed
    sampled: int  # tokens the picker chose after this forward (kept drafted ones included)
    forced: int  # forced literal tokens that followed
    spliced: int  # copied-line tokens fed
    copies: int  # copies whose lines were fed
    drafted: int  # drafted tokens fed
    kept: int  # drafted tokens kept
    forward_seconds: float
    pick_seconds: float
    token: int  # the last program token so far


@dataclass(frozen=True)
class DecodeStats:
    forward_passes: int = 0
    tokens_prompt: int = 0
    tokens_sampled: int = 0
    tokens_forced: int = 0
    tokens_spliced: int = 0
    copies: int = 0
    tokens_drafted: int = 0
    drafts_kept: int = 0
    seconds_prefill: float = 0.0
    seconds_steps: float = 0.0
    seconds_forced: float = 0.0
    seconds_splices: float = 0.0
    seconds_pick: float = 0.0
    seconds_total: float = 0.0

    @property
    def seconds_forwards(self) -> float:
        return self.seconds_prefill + self.seconds_steps + self.seconds_forced + self.seconds_splices

    @property
    def tokens_new(self) -> int:
        """Program tokens the loop produced (sampled + forced): what the budget counts."""
        return self.tokens_sampled + self.tokens_forced


@dataclass(frozen=True)
class Decoded:
    text: str  # the program text, as the model wrote it (display form: "\n" newlines, no BOM)
    program_ids: tuple[int, ...]
    stats: DecodeStats


# -- picking a token ---------------------------------------------------------------------------


def allowed_tensor(mask: np.ndarray, width: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The grammar mask as a bool tensor as wide as the logits (the LM head may be padded past the vocab)."""
    allowed = torch.zeros(width, dtype=torch.bool)
    n = min(width, mask.shape[0])
    allowed[:n] = torch.tensor(mask[:n], dtype=torch.bool)  # a copy: the grammar's masks are read-only
    return allowed.to(device)


def sample(logits: torch.Tensor, allowed: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    logits = logits.float().masked_fill(~allowed, float("-inf"))  # [V]
    if sampling.temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits / sampling.temperature, dim=-1)  # [V]
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > sampling.top_p  # keep the smallest nucleus
        probs = probs.scatter(0, order, sorted_probs.masked_fill(outside, 0.0))
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def sampling_picker(sampling: Sampling = Sampling()) -> Picker:
    """The model's own choice among the tokens the grammar allows (greedy unless temperature > 0)."""
    generator = torch.Generator()
    if sampling.seed is not None:
        generator.manual_seed(sampling.seed)

    def pick(logits: torch.Tensor, mask: np.ndarray, program_ids: Sequence[int]) -> int:
        allowed = allowed_tensor(mask, logits.shape[-1], logits.device)
        if not bool(allowed.any()):
            raise ModelError(f"decoder: the grammar allows no token after {len(program_ids)} program tokens")
        return sample(logits, allowed, sampling, generator)

    return pick


def script_picker(target: str, tokens: Sequence[bytes], encode: Callable[[str], list[int]] | None = None) -> Picker:
    """A picker that spells out `target` (a program text), ignoring the logits: the token the tokenizer
    would start the rest of the text with (`encode`, when given and allowed), else the longest allowed
    token that continues it. Used to force an oracle program through the real loop (tests, benchmarks)."""
    goal = target.encode("utf-8")
    index: dict[bytes, list[int]] = {}
    for token_id, piece in enumerate(tokens):
        if piece:
            index.setdefault(piece, []).append(token_id)
    longest = max(map(len, index), default=1)

    def canonical(rest: bytes, mask: np.ndarray) -> int | None:
        try:
            first = encode(rest[:256].decode("utf-8", errors="ignore"))[0] if encode and rest else None
        except UnicodeDecodeError:
            return None
        ok = first is not None and first < len(mask) and mask[first] and rest.startswith(tokens[first])
        return first if ok else None

    def pick(logits: torch.Tensor, mask: np.ndarray, program_ids: Sequence[int]) -> int:
        rest = goal[sum(len(tokens[t]) for t in program_ids) :]
        first = canonical(rest, mask)
        if first is not None:
            return first
        for k in range(min(longest, len(rest)), 0, -1):
            for token_id in index.get(rest[:k], ()):
                if token_id < len(mask) and mask[token_id]:
                    return token_id
        if not rest and mask.any():
            return int(np.flatnonzero(mask)[0])  # past the text: the end-of-sequence the grammar wants
        raise ProgramError(f"script cannot continue the program at {rest[:40]!r}: the grammar allows no token for it")

    return pick


# -- the loop ----------------------------------------------------------------------------------


@dataclass
class _Pending:
    """Ids the model has not seen yet, in order, with what kind each was."""

    ids: list[int] = field(default_factory=list)
    prompt: int = 0
    spliced: int = 0
    forced: int = 0
    copies: int = 0

    @property
    def phase(self) -> str:
        if self.prompt:
            return "prefill"
        return "splice" if self.spliced else "forced" if self.forced else "step"


def _take(cursor: Cursor, token: int, program_ids: list[int], what: str) -> None:
    if not cursor.advance(token):
        raise ModelError(f"decoder: the grammar rejected {what} token {token} at {cursor.text()[-40:]!r}")
    program_ids.append(token)


def _splice_if_complete(cursor: Cursor, pending: _Pending, span_ids: SpanIds) -> None:
    """A copy just closed: queue the tokens of its lines, so the model reads them as if it wrote them."""
    copy = cursor.completed_copy()
    if copy is not None:
        span = list(span_ids(copy))
        pending.ids += span
        pending.spliced += len(span)
        pending.copies += 1


def _follow(cursor: Cursor, pending: _Pending, program_ids: list[int], span_ids: SpanIds) -> None:
    """After a token: splice a completed copy, then queue forced literals (each may close a copy)."""
    _splice_if_complete(cursor, pending, span_ids)
    while not cursor.is_done() and (forced := cursor.forced()):
        for token in forced:
            _take(cursor, token, program_ids, "forced")
            pending.ids.append(token)
            pending.forced += 1
            _splice_if_complete(cursor, pending, span_ids)


def _verify(cursor: Cursor, logits: torch.Tensor, draft: Sequence[int], pick: Picker, program_ids: list[int],
            span_ids: SpanIds) -> tuple[_Pending, int, int]:
    """Keep the drafted tokens the picker itself would choose, then make the usual step at the first
    position it disagrees (or after the last). Returns what to feed next, how many drafted tokens
    were kept (they are in the cache already), and how many tokens the picker chose."""
    picked = 0
    for i, guess in enumerate(draft):
        forced = cursor.forced()
        token = forced[0] if forced else pick(logits[i], cursor.allowed_mask(), program_ids)
        _take(cursor, token, program_ids, "forced" if forced else "sampled")
        picked += not forced
        pending = _Pending(ids=[token], forced=bool(forced))
        if token != guess:  # the draft ends here; what was picked instead is fed next
            _follow(cursor, pending, program_ids, span_ids)
            return pending, i, picked
        if cursor.completed_copy() is not None or cursor.is_done():  # the copied lines come first
            pending = _Pending()
            _follow(cursor, pending, program_ids, span_ids)
            return pending, i + 1, picked
    token = pick(logits[len(draft)], cursor.allowed_mask(), program_ids)  # [V]: the usual masked step
    _take(cursor, token, program_ids, "sampled")
    pending = _Pending(ids=[token])
    _follow(cursor, pending, program_ids, span_ids)
    return pending, len(draft), picked + 1


def _check_budget(program_ids: list[int], budget: int, cursor: Cursor) -> None:
    if len(program_ids) > budget:
        raise BudgetError(
            f"the model used its budget of {budget} new tokens before finishing the program "
            f"(last text: {cursor.text()[-60:]!r}); nothing was written",
            hint="raise --max-new-tokens, or give a narrower instruction",
        )


def decode_steps(model: CachedModel, cursor: Cursor, prompt_ids: Sequence[int], span_ids: SpanIds, pick: Picker,
                 budget: int, program_ids: list[int], drafter: Drafter | None = None) -> Iterator[Step]:
    """The loop as a generator: one Step per forward pass, until the grammar says the program is done.

    Each forward feeds what the model has not seen (the last picked token, forced literals, a copy's
    lines) plus an optional draft; program_ids collects the program's tokens as they come.
    """
    pending = _Pending(ids=list(prompt_ids), prompt=len(prompt_ids))
    _follow(cursor, pending, program_ids, span_ids)  # "<program>\n" rides along with the prompt prefill
    produced = 0
    while not cursor.is_done():
        draft = drafter(cursor) if drafter is not None else []
        start = time.perf_counter()
        logits = model(pending.ids + draft, len(draft) + 1)  # [k+1, V]: last fed position, then each drafted one
        fed, start_pick = pending, time.perf_counter()
        pending, kept, picked = _verify(cursor, logits, draft, pick, program_ids, span_ids)
        model.crop(len(draft) - kept)  # the cache forgets drafted tokens that were not kept
        yield Step(fed.phase, fed.prompt, picked, len(program_ids) - produced - picked, fed.spliced, fed.copies,
                   len(draft), kept, start_pick - start, time.perf_counter() - start_pick, program_ids[-1])
        produced = len(program_ids)
        _check_budget(program_ids, budget, cursor)


def add_step(stats: DecodeStats, step: Step) -> DecodeStats:
    """Statistics after one more forward pass."""
    phase_field = {"prefill": "seconds_prefill", "step": "seconds_steps", "forced": "seconds_forced",
                   "splice": "seconds_splices"}[step.phase]
    values = dict(stats.__dict__)
    values[phase_field] += step.forward_seconds
    values.update(
        forward_passes=stats.forward_passes + 1,
        tokens_prompt=stats.tokens_prompt + step.prompt,
        tokens_sampled=stats.tokens_sampled + step.sampled,
        tokens_forced=stats.tokens_forced + step.forced,
        tokens_spliced=stats.tokens_spliced + step.spliced,
        copies=stats.copies + step.copies,
        tokens_drafted=stats.tokens_drafted + step.drafted,
        drafts_kept=stats.drafts_kept + step.kept,
        seconds_pick=stats.seconds_pick + step.pick_seconds,
    )
    return DecodeStats(**values)


def decode(model: CachedModel, cursor: Cursor, prompt_ids: Sequence[int], span_ids: SpanIds, pick: Picker,
           budget: int, on_step: Callable[[DecodeStats, Step], None] | None = None,
           drafter: Drafter | None = None) -> Decoded:
    """Run the loop to the end of the program; on_step sees the running statistics (progress display)."""
    start = time.perf_counter()
    stats = DecodeStats()
    program_ids: list[int] = []
    for step in decode_steps(model, cursor, prompt_ids, span_ids, pick, budget, program_ids, drafter):
        stats = add_step(stats, step)
        if on_step is not None:
            on_step(stats, step)
    stats = DecodeStats(**{**stats.__dict__, "seconds_total": time.perf_counter() - start})
    return Decoded(cursor.text(), tuple(program_ids), stats)


# -- the model -------------------------------------------------------------------------------------


class CachedModel:
    """A Hugging Face causal LM and its KV cache: feed ids, get the logits of the last `keep`
    positions; crop the cache back. logits_to_keep: only those positions go through the LM head
    (151,936 wide for Qwen: a quarter of the 0.5B model's FLOPs per token)."""

    def __init__(self, model, cache):
        self.model, self.cache, self.device = model, cache, model.device

    @torch.inference_mode()
    def __call__(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # [1, T]
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0]  # [keep, V]

    def crop(self, n: int) -> None:
        """Forget the last n positions (drafted tokens that were not kept)."""
        if n:
            self.cache.crop(-n)


def model_forward(model, cache) -> CachedModel:
    return CachedModel(model, cache)
