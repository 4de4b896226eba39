"""The decode loop: every mode is a cursor and a drafter over one language model.

Contract: decode(lm, cursor, prompt_ids, span_ids, pick, budget, drafter) drives a cursor to
completion and returns the token ids it took, with statistics. Each step asks the *cursor* what
is allowed (a mask, or None for any token), what is forced (literals), what to splice (the lines of
a copy just closed) and whether it is done, and asks the *drafter* what to propose. One forward
carries everything the model has not seen yet -- the picked token, forced literals, a spliced span
-- plus the draft; the sampler walks the draft and keeps the longest prefix it agrees with, the cache
is cropped past the rest (paper §2.3-2.4: one forward per decision, never one per forced, copied or
accepted token). The modes (cadedit.decode.pipeline builds them):

| mode    | cursor                                   | drafter                               |
|---------|------------------------------------------|---------------------------------------|
| program | the program grammar (grammar.py)         | program guesses (draft.make_drafter)  |
| rewrite | fenced text (fence.FenceCursor)          | none                                  |
| verify  | fenced text                              | the source, aligned (verify.py)       |
| lookup  | fenced text                              | n-grams of prompt + output (draft.py) |

Candidates side by side (`--candidates`) are rows of the same loop (decode_rows; decode is its one-row
case): each row has its own cursor, sampler, drafter, ids and crop; the prompt is fed once and the
cache forked into rows, and each forward carries every unfinished row's tokens and draft. Branches
(decode_branches) are rows forked from a finished decode's cache where it hesitated; a branch given
that decode's answer (Rejoin) takes its rest once it writes a stretch of it again.

Greedy picking keeps exactly the tokens one-token-at-a-time decoding would pick; sampling keeps the
plain sampling distribution (a drafted token is accepted with the model's probability of it, the
speculative-sampling rule for a deterministic draft).
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from cadedit.errors import BudgetError, ModelError, ProgramError
from cadedit.options import Sampling
from cadedit.text.program import Copy
from cadedit.results import Alternative, Decoded, DecodeStats, Step  # noqa: F401 - re-exported


class Cursor(Protocol):
    """What may come next (grammar.py's program cursor, fence.FenceCursor; tests may script one)."""

    def allowed_mask(self) -> np.ndarray | None: ...  # None: any token
    def advance(self, token: int) -> bool: ...
    def forced(self) -> tuple[int, ...]: ...
    def completed_copy(self) -> Copy | None: ...
    def is_done(self) -> bool: ...
    def text(self) -> str: ...


class LM(Protocol):
    """One KV cache over a causal LM (cadedit.backends.model.CachedLM). Candidates decoded side by side also
    need rows: fork(k) copies the cache into k rows (row 0 is the cache itself; fork(1) drops the
    others), feed_rows feeds each listed row its own ids in one forward ([keep_i, V] logits each),
    crop_row(i, n) forgets row i's last n positions, copy_row(j, i) gives row i (a prefix of
    row j) the rest of row j's positions."""

    def feed(self, ids: Sequence[int], keep: int = 1) -> Logits: ...  # [keep, V]
    def crop(self, n: int) -> None: ...
    def fork(self, k: int) -> None: ...
    def feed_rows(self, rows: Sequence[int], ids: Sequence[Sequence[int]], keeps: Sequence[int]) -> list[Logits]: ...
    def crop_row(self, row: int, n: int) -> None: ...
    def copy_row(self, source: int, row: int) -> None: ...


class Logits(Protocol):
    """The logits of a forward's kept positions: logits[i] is position i's float32 row ([V]). They may
    live in a buffer the model reuses: read them before the next forward, or copy what is kept longer."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> np.ndarray: ...


# (logits [V], mask or None, ids so far, drafted guess or None) -> the chosen id
Sampler = Callable[[np.ndarray, "np.ndarray | None", Sequence[int], "int | None"], int]
SpanIds = Callable[[Copy], Sequence[int]]
Drafter = Callable[[Cursor, Sequence[int]], list[int]]  # (cursor, ids so far) -> drafted ids


# -- picking a token ---------------------------------------------------------------------------
#
# Logits reach the samplers as float32 numpy rows ([V] each): llama.cpp hands them over as they are,
# torch's model converts a row when the loop reads it (cadedit.backends.torch.qwen2.LogitRows). So the loop and
# its samplers need no torch, and a llama.cpp process never imports it (the largest import of a cold start).


def allowed_array(mask: np.ndarray, width: int) -> np.ndarray:
    """The grammar mask as a bool array as wide as the logits (the LM head may be padded past the vocab)."""
    allowed = np.zeros(width, dtype=bool)
    n = min(width, mask.shape[0])
    allowed[:n] = mask[:n]  # a copy: the grammar's masks are read-only
    return allowed


def log_softmax_at(logits: np.ndarray, token: int) -> float:
    """log p(token) under softmax(logits), computed stably in float64."""
    row = np.asarray(logits, dtype=np.float64)
    top = row.max()
    return float(row[token] - top - np.log(np.exp(row - top).sum()))


def sample(
    logits: np.ndarray,
    allowed: np.ndarray | None,
    sampling: Sampling,
    rng: np.random.Generator | None,
    guess: int | None = None,
) -> int:
    """Greedy or sampled choice; with a drafted `guess`, accept it with the model's probability of it
    and otherwise sample from the rest (the result has the plain sampling distribution)."""
    logits = np.asarray(logits, dtype=np.float32)  # [V]
    if allowed is not None:
        logits = np.where(allowed, logits, np.float32(-np.inf))
    if sampling.temperature <= 0:
        return int(np.argmax(logits))
    rng = rng if rng is not None else np.random.default_rng()
    scaled = logits.astype(np.float64) / sampling.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()  # [V]
    if sampling.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        ranked = probs[order]
        ranked[np.cumsum(ranked) - ranked > sampling.top_p] = 0.0  # keep the smallest nucleus
        probs = np.zeros_like(probs)
        probs[order] = ranked
    if guess is not None and 0 <= guess < probs.shape[0]:
        total = probs.sum()
        if rng.random() * total < probs[guess]:
            return guess
        probs = probs.copy()
        probs[guess] = 0.0
        if probs.sum() <= 0.0:
            return guess
    cumulative = np.cumsum(probs)
    # The first index whose cumulative mass passes a uniform draw: never a zero-probability token.
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(probs) - 1))


def sampler_for(sampling: Sampling = Sampling()) -> Sampler:
    """The model's own choice among the tokens the cursor allows (greedy unless temperature > 0)."""
    rng = np.random.default_rng(sampling.seed)

    def pick(logits: np.ndarray, mask: np.ndarray | None, ids: Sequence[int], guess: int | None = None) -> int:
        allowed = None
        if mask is not None:
            allowed = allowed_array(mask, logits.shape[-1])
            if not allowed.any():
                raise ModelError(f"decoder: the grammar allows no token after {len(ids)} tokens")
        return sample(logits, allowed, sampling, rng, guess)

    return pick


def script_sampler(target: str, tokens: Sequence[bytes], encode: Callable[[str], list[int]] | None = None) -> Sampler:
    """A sampler that spells out `target`, ignoring the logits: the token the tokenizer would start the
    rest of the text with (`encode`, when given and allowed), else the longest allowed token that
    continues it. Used to force a known answer through the real loop (tests, benchmarks)."""
    goal = target.encode("utf-8")
    index: dict[bytes, list[int]] = {}
    for token_id, piece in enumerate(tokens):
        if piece:
            index.setdefault(piece, []).append(token_id)
    longest = max(map(len, index), default=1)

    def canonical(rest: bytes, mask: np.ndarray) -> int | None:
        try:
            first = encode(rest[:256].decode("utf-8", errors="ignore"))[0] if encode and rest else None
        except (UnicodeDecodeError, IndexError):
            return None
        ok = first is not None and first < len(mask) and mask[first] and rest.startswith(tokens[first])
        return first if ok else None

    def pick(logits: np.ndarray, mask: np.ndarray | None, ids: Sequence[int], guess: int | None = None) -> int:
        if mask is None:
            mask = np.ones(len(tokens), dtype=bool)
        rest = goal[sum(len(tokens[t]) for t in ids) :]
        first = canonical(rest, mask)
        if first is not None:
            return first
        for k in range(min(longest, len(rest)), 0, -1):
            for token_id in index.get(rest[:k], ()):
                if token_id < len(mask) and mask[token_id]:
                    return token_id
        if not rest and mask.any():
            return int(np.flatnonzero(mask)[0])  # past the text: the end-of-sequence the grammar wants
        raise ProgramError(f"script cannot continue at {rest[:40]!r}: the cursor allows no token for it")

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


def _take(cursor: Cursor, token: int, ids: list[int], what: str) -> None:
    if not cursor.advance(token):
        raise ModelError(f"decoder: the cursor rejected {what} token {token} at {cursor.text()[-40:]!r}")
    ids.append(token)


def _splice_if_complete(cursor: Cursor, pending: _Pending, span_ids: SpanIds | None) -> None:
    """A copy just closed: queue the tokens of its lines, so the model reads them as if it wrote them."""
    copy = cursor.completed_copy()
    if copy is not None and span_ids is not None:
        span = list(span_ids(copy))
        pending.ids += span
        pending.spliced += len(span)
        pending.copies += 1


def _follow(cursor: Cursor, pending: _Pending, ids: list[int], span_ids: SpanIds | None) -> None:
    """After a token: splice a completed copy, then queue forced literals (each may close a copy)."""
    _splice_if_complete(cursor, pending, span_ids)
    while not cursor.is_done() and (forced := cursor.forced()):
        for token in forced:
            _take(cursor, token, ids, "forced")
            pending.ids.append(token)
            pending.forced += 1
            _splice_if_complete(cursor, pending, span_ids)


def _accept(
    cursor: Cursor, logits: Logits, draft: Sequence[int], pick: Sampler, ids: list[int], span_ids: SpanIds | None
) -> tuple[_Pending, int, int, int]:
    """Keep the drafted tokens the sampler itself chooses, then make the usual step at the first
    position it disagrees (or after the last). Returns what to feed next, how many drafted tokens
    were kept (they are in the cache already), how many of those the sampler chose (the rest were
    forced literals the draft matched), and how many tokens the sampler chose in all."""
    picked = chosen_kept = 0
    for i, guess in enumerate(draft):
        forced = cursor.forced()
        token = forced[0] if forced else pick(logits[i], cursor.allowed_mask(), ids, guess)
        _take(cursor, token, ids, "forced" if forced else "sampled")
        picked += not forced
        pending = _Pending(ids=[token], forced=bool(forced))
        if token != guess:  # the draft ends here; what was picked instead is fed next
            _follow(cursor, pending, ids, span_ids)
            return pending, i, chosen_kept, picked
        chosen_kept += not forced
        if cursor.completed_copy() is not None or cursor.is_done():  # the copied lines come first
            pending = _Pending()
            _follow(cursor, pending, ids, span_ids)
            return pending, i + 1, chosen_kept, picked
    if cursor.forced():  # the draft ended where a literal starts: the literal is fed, nothing picked
        pending = _Pending()
        _follow(cursor, pending, ids, span_ids)
        return pending, len(draft), chosen_kept, picked
    token = pick(logits[len(draft)], cursor.allowed_mask(), ids, None)  # [V]: the usual step
    _take(cursor, token, ids, "sampled")
    pending = _Pending(ids=[token])
    _follow(cursor, pending, ids, span_ids)
    return pending, len(draft), chosen_kept, picked + 1


def _check_budget(ids: list[int], budget: int, cursor: Cursor) -> None:
    if len(ids) > budget and not cursor.is_done():
        raise BudgetError(
            f"the model used its budget of {budget} new tokens before finishing its answer "
            f"(last text: {cursor.text()[-60:]!r}); nothing was written",
            hint="raise --max-new-tokens, or give a narrower instruction",
        )


# Candidates side by side stop at ROW_FORWARDS times candidate 1's forwards plus ROW_SLACK, once it is
# done: a row that runs far past it (a sample that lost its place in the file, one token a forward)
# would set the batch's wall, and is rarely the answer. The slack lets a sample that changed a line
# find its place again (a miss restarts the drafts small): a candidate 1 that copies its region
# unchanged is done in a few forwards, and a smaller slack stopped the samples that fixed it (docs/
# measurements/candidates.md). A branch may also take one forward per token candidate 1
# wrote after the branch point, plus the slack (branch_limit): where candidate 1 was drafted in a few
# forwards, a branch that changed a line early retypes the rest with short drafts, which a cap by
# forwards alone would stop with its answer all but written.
ROW_FORWARDS = 2.0
ROW_SLACK = 32


def row_limit(forwards: int) -> int:
    """The forwards a row decoded beside candidate 1 may take, candidate 1 having taken `forwards`."""
    return int(ROW_FORWARDS * forwards + 0.5) + ROW_SLACK


def branch_limit(forwards: int, tokens: int, at: int) -> int:
    """The forwards a branch at ids index `at` of candidate 1 (`tokens` ids in `forwards` forwards) may
    take: row_limit, or one forward per token candidate 1 wrote after `at`, plus ROW_SLACK."""
    return max(row_limit(forwards), tokens - at + ROW_SLACK)


# A branch that has found candidate 1's text again -- its last REJOIN_TOKENS ids, all written after the
# branch point, are a stretch candidate 1 wrote after it -- takes the rest of candidate 1's answer as
# its own instead of verifying it: each row's forward carries its own drafts, so a branch that verified
# candidate 1's rest would cost about what candidate 1 did, for the same tokens. 12 tokens are a line
# or more of code; nothing was tuned on it (docs/measurements/rejoin.md).
REJOIN_TOKENS = 12


@dataclass(frozen=True)
class Rejoin:
    """Candidate 1's answer for a branch of it at ids index `at`: its ids, the model's log-probability
    of ids[:i] at each i after a picked token (`through`), and where each stretch of REJOIN_TOKENS ids
    starting at or after `at` first ends (`ends`)."""

    ids: tuple[int, ...]
    through: tuple[tuple[int, float], ...]
    ends: dict[tuple[int, ...], int]
    at: int

    @classmethod
    def of(cls, ids: Sequence[int], through: Sequence[tuple[int, float]], at: int) -> Rejoin:
        ends: dict[tuple[int, ...], int] = {}
        for end in range(at + REJOIN_TOKENS, len(ids) + 1):
            ends.setdefault(tuple(ids[end - REJOIN_TOKENS : end]), end)
        return cls(tuple(ids), tuple(through), ends, at)

    def logprob(self, end: int) -> float:
        """The model's log-probability of ids[:end] (tokens it did not pick, forced ones, add nothing)."""
        return logprob_through(self.through, end)


def logprob_through(through: Sequence[tuple[int, float]], end: int) -> float:
    """A decode's log-probability of its ids[:end], from its Row.through."""
    index = bisect.bisect_right(through, end, key=lambda mark: mark[0]) - 1
    return through[index][1] if index >= 0 else 0.0


class Row:
    """One candidate of a batched decode: its own cursor, sampler, drafter, ids, what it feeds next,
    the model's log-probability of the tokens it picked, and a budget error if it ran out. With
    `record`, also where it hesitated (Alternative: the next choice at each picked token) and the
    log-probability so far after each picked token (`through`), for branches of it (decode_branches).
    A branch's `rejoin` is the answer it branched from (None: it decodes to its end)."""

    def __init__(
        self, cursor: Cursor, pick: Sampler, drafter: Drafter | None = None, score: bool = False, record: bool = False
    ):
        self.cursor, self.drafter = cursor, drafter
        self.pick = _scored(pick, self, record) if score or record else pick
        self.ids: list[int] = []
        self.pending = _Pending()
        self.produced = 0
        self.logprob = 0.0
        self.alternatives: list[Alternative] = []
        self.through: list[tuple[int, float]] = []
        self.rejoin: Rejoin | None = None
        self.error: BudgetError | None = None

    @property
    def running(self) -> bool:
        return self.error is None and not self.cursor.is_done()


def _scored(pick: Sampler, row: Row, record: bool = False) -> Sampler:
    """The sampler, adding the model's log-probability of each token it picks to row.logprob; with
    `record`, noting the likeliest other token the cursor allowed there in row.alternatives."""

    def scored(logits: np.ndarray, mask: np.ndarray | None, ids: Sequence[int], guess: int | None = None) -> int:
        token = pick(logits, mask, ids, guess)
        if record:
            other = np.array(logits, dtype=np.float32)  # [V]
            if mask is not None:
                other[~allowed_array(mask, other.shape[-1])] = -np.inf
            other[token] = -np.inf
            alt = int(np.argmax(other))
            if np.isfinite(other[alt]):
                row.alternatives.append(
                    Alternative(
                        len(ids),
                        alt,
                        float(logits[token]) - float(logits[alt]),
                        row.logprob + log_softmax_at(logits, alt),
                    )
                )
        row.logprob += log_softmax_at(logits, token)
        if record:
            row.through.append((len(ids) + 1, row.logprob))
        return token

    return scored


def decode_rows(
    lm: LM, rows: Sequence[Row], prompt_ids: Sequence[int], span_ids: SpanIds | None, budget: int, reused: int = 0
) -> Iterator[tuple[int, Step]]:
    """The loop as a generator: (row index, Step) for each row in each forward pass, until every row's
    cursor is done. One row is the plain decode (lm.feed, lm.crop); several are candidates decoded side
    by side: the prompt (past the `reused` tokens already in the cache) is fed once, with what the
    cursors force first and the first draft, then the cache is forked into one row per candidate
    (lm.fork) and each forward carries every unfinished row's pending tokens and draft (lm.feed_rows).
    A row that runs out of budget stops (row.error) while the others go on; alone, it raises."""
    for row in rows:
        row.pending = _Pending(ids=list(prompt_ids[reused:]), prompt=len(prompt_ids) - reused)
        _follow(row.cursor, row.pending, row.ids, span_ids)  # e.g. "<program>\n" rides along with the prompt prefill
    yield from _loop(lm, rows, span_ids, budget, forked=False)


def _loop(
    lm: LM,
    rows: Sequence[Row],
    span_ids: SpanIds | None,
    budget: int,
    forked: bool,
    first: int = 0,
    limits: Sequence[int] | None = None,
) -> Iterator[tuple[int, Step]]:
    """decode_rows' loop over rows whose pending tokens are set: rows[k] is the cache's row first + k
    once forked (before, one feed serves every row); rows[k] still running after limits[k] forwards
    (by default row_limit of rows[0]'s forwards, once it is done) stops with a BudgetError."""
    forwards = 0
    try:
        while True:
            if limits is None and not rows[0].running and len(rows) > 1:
                limits = [row_limit(forwards)] * len(rows)
            if limits is not None:
                _stop_rows([row for row, limit in zip(rows, limits) if row.running and forwards >= limit], forwards)
            if not (active := [k for k, row in enumerate(rows) if row.running]):
                break
            forwards += 1
            drafts = [
                rows[k].drafter(rows[k].cursor, rows[k].ids) if rows[k].drafter is not None else [] for k in active
            ]
            start = time.perf_counter()
            feeds = [rows[k].pending.ids + draft for k, draft in zip(active, drafts)]
            keeps = [len(draft) + 1 for draft in drafts]  # the last fed position, then each drafted one
            if forked:
                logits = _feed_distinct(lm, rows, active, feeds, keeps, first)
            else:  # the rows are all alike until they pick: one feed serves every row
                logits = [lm.feed(feeds[0], keeps[0])] * len(active)
                if len(rows) > 1:
                    lm.fork(len(rows))
                    forked = True
            forward = time.perf_counter() - start
            for k, draft, row_logits in zip(active, drafts, logits):
                index = first + k if forked else None
                step = _row_step(lm, rows[k], index, row_logits, draft, span_ids, forward)
                if rows[k].rejoin is not None and (taken := _rejoin(rows[k])):
                    step = replace(step, spliced=step.spliced + taken, token=rows[k].ids[-1])
                yield k, step
                _row_budget(rows[k], budget, alone=len(rows) == 1 and not first)
    finally:
        if forked:
            lm.fork(1)  # row 0 stays the cache (its prefix is reused by the next decode)


def branch(
    row: Row, ids: Sequence[int], alternative: Alternative, through: Sequence[tuple[int, float]] | None = None
) -> None:
    """Set a fresh row (its cursor at the start of the answer) to a decode's first alternative.at ids,
    then alternative.token in place of the one it picked: the row's pending token is that one (and
    what the cursor forces after it). Only for modes without splices (every id is fed, in order).
    With `through` (the decode's Row.through; ids its whole answer), the row takes the rest of that
    answer once it writes a stretch of it again (REJOIN_TOKENS)."""
    for token in ids[: alternative.at]:
        _take(row.cursor, token, row.ids, "replayed")
    row.produced = len(row.ids)  # the replayed ids were counted by the decode they came from
    row.pending = _Pending(ids=[alternative.token])
    _take(row.cursor, alternative.token, row.ids, "branched")
    _follow(row.cursor, row.pending, row.ids, None)
    row.logprob = alternative.logprob
    if through is not None:
        row.rejoin = Rejoin.of(ids, through, alternative.at)


def _rejoin(row: Row) -> int:
    """A branch whose last REJOIN_TOKENS ids (all after its branch point) are a stretch of the answer it
    branched from takes that answer's rest, once: into its ids and cursor, and queued to be fed should
    the cursor want more (a forced token it refuses ends the rest there); its log-probability adds the
    answer's for those tokens. Returns how many ids it added (its statistics count them as spliced)."""
    rejoin = row.rejoin
    if not row.running or len(row.ids) - REJOIN_TOKENS <= rejoin.at:
        return 0
    end = rejoin.ends.get(tuple(row.ids[-REJOIN_TOKENS:]))
    if end is None:
        return 0
    row.rejoin, taken, start = None, 0, len(row.ids)
    for token in rejoin.ids[end:]:
        if row.cursor.is_done() or not row.cursor.advance(token):
            break
        row.ids.append(token)
        row.pending.ids.append(token)
        taken += 1
    row.logprob += rejoin.logprob(end + taken) - rejoin.logprob(end)
    _follow(row.cursor, row.pending, row.ids, None)
    row.produced = len(row.ids)  # counted here, not by the next forward's step
    return len(row.ids) - start


def decode_branches(
    lm: LM,
    rows: Sequence[Row],
    held: Sequence[int],
    prefixes: Sequence[Sequence[int]],
    budget: int,
    limits: Sequence[int],
) -> Iterator[tuple[int, Step]]:
    """Rows made by branch(), decoded side by side from the cache of the decode they branch from:
    the cache holds `held` (its ids: the prompt, then that decode's fed answer) and rows[i] goes on
    from prefixes[i] (the prompt and the ids before its branch). Each row is a fork of the cache
    cropped to what it shares with its prefix (the rest of the prefix is fed first); the cache
    itself is left as it was. rows[i] still running after limits[i] forwards stops (row.error)."""
    lm.fork(len(rows) + 1)
    held = list(held)
    for r, (row, prefix) in enumerate(zip(rows, prefixes), 1):
        kept = len(os.path.commonprefix([held, list(prefix)]))
        lm.crop_row(r, len(held) - kept)
        missing = list(prefix[kept:])
        row.pending = _Pending(ids=missing + row.pending.ids, prompt=len(missing), forced=row.pending.forced)
    yield from _loop(lm, rows, None, budget, forked=True, first=1, limits=limits)


def _feed_distinct(
    lm: LM, rows: Sequence[Row], active: list[int], feeds: list[list[int]], keeps: list[int], offset: int = 0
) -> list[Logits]:
    """One forward for the active rows, each distinct row once: rows that took the same tokens (so
    far, sampled rows often agree with the greedy one) and feed the same ones hold the same cache, so
    the first of them is fed and the others take its new positions and its logits (lm.copy_row)."""
    first: dict[tuple, int] = {}
    leader = {}
    for k, feed in zip(active, feeds):
        leader[k] = first.setdefault((tuple(rows[k].ids), tuple(feed)), k)
    fed = [k for k in active if leader[k] == k]
    at = {k: i for i, k in enumerate(active)}
    out = dict(
        zip(fed, lm.feed_rows([offset + k for k in fed], [feeds[at[k]] for k in fed], [keeps[at[k]] for k in fed]))
    )
    for k in active:
        if leader[k] != k:
            lm.copy_row(offset + leader[k], offset + k)
    return [out[leader[k]] for k in active]


def _row_step(
    lm: LM, row: Row, index: int | None, logits: Logits, draft: list[int], span_ids: SpanIds | None, forward: float
) -> Step:
    """One row after a forward: keep what its sampler agrees with, crop the rest from its cache."""
    fed, start_pick = row.pending, time.perf_counter()
    row.pending, kept, chosen_kept, picked = _accept(row.cursor, logits, draft, row.pick, row.ids, span_ids)
    if index is None:
        lm.crop(len(draft) - kept)  # the cache forgets drafted tokens that were not kept
    else:
        lm.crop_row(index, len(draft) - kept)
    step = Step(
        fed.phase,
        fed.prompt,
        picked,
        len(row.ids) - row.produced - picked,
        fed.spliced,
        fed.copies,
        len(draft),
        chosen_kept,
        forward,
        time.perf_counter() - start_pick,
        row.ids[-1],
    )
    row.produced = len(row.ids)
    return step


def _stop_rows(rows: Sequence[Row], forwards: int) -> None:
    for row in rows:
        row.error = BudgetError(
            f"stopped after {forwards} forwards, far past candidate 1's, before finishing its answer "
            f"(last text: {row.cursor.text()[-60:]!r})",
            hint="use fewer --candidates",
        )


def _row_budget(row: Row, budget: int, alone: bool) -> None:
    try:
        _check_budget(row.ids, budget, row.cursor)
    except BudgetError as exc:
        if alone:
            raise
        row.error = exc


def decode_steps(
    lm: LM,
    cursor: Cursor,
    prompt_ids: Sequence[int],
    span_ids: SpanIds | None,
    pick: Sampler,
    budget: int,
    ids: list[int],
    drafter: Drafter | None = None,
    reused: int = 0,
) -> Iterator[Step]:
    """The loop for one row: one Step per forward pass, until the cursor is done; ids collects the
    tokens as they come."""
    row = Row(cursor, pick, drafter)
    row.ids = ids
    for _, step in decode_rows(lm, [row], prompt_ids, span_ids, budget, reused):
        yield step


def add_step(stats: DecodeStats, step: Step) -> DecodeStats:
    """Statistics after one more forward pass."""
    phase_field = {
        "prefill": "seconds_prefill",
        "step": "seconds_steps",
        "forced": "seconds_forced",
        "splice": "seconds_splices",
    }[step.phase]
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


def decode(
    lm: LM,
    cursor: Cursor,
    prompt_ids: Sequence[int],
    span_ids: SpanIds | None,
    pick: Sampler,
    budget: int,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    drafter: Drafter | None = None,
    reused: int = 0,
) -> Decoded:
    """Run the loop until the cursor is done; on_step sees the running statistics (progress display)."""
    start = time.perf_counter()
    stats = DecodeStats(tokens_reused=reused)
    ids: list[int] = []
    for step in decode_steps(lm, cursor, prompt_ids, span_ids, pick, budget, ids, drafter, reused):
        stats = add_step(stats, step)
        if on_step is not None:
            on_step(stats, step)
    stats = DecodeStats(**{**stats.__dict__, "seconds_total": time.perf_counter() - start})
    return Decoded(cursor.text(), tuple(ids), stats)


@dataclass(frozen=True)
class Candidate:
    """One row of a batched decode: what it wrote (None: it ran out of budget, `error` says so) and
    the model's summed log-probability of the tokens it picked."""

    decoded: Decoded | None
    logprob: float
    error: BudgetError | None = None
    alternatives: tuple[Alternative, ...] = ()  # where it hesitated (a row with record=True), even if it ran out


def decode_candidates(
    lm: LM,
    rows: Sequence[Row],
    prompt_ids: Sequence[int],
    span_ids: SpanIds | None,
    budget: int,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    reused: int = 0,
    steps: Iterator[tuple[int, Step]] | None = None,
) -> list[Candidate]:
    """Run the loop over several rows at once; each row's statistics count every forward it was in
    (a forward's seconds are the whole batch's). on_step sees row 0's running statistics. steps: the
    loop to run (default decode_rows; decode_branches for branches)."""
    start = time.perf_counter()
    stats = [DecodeStats(tokens_reused=reused) for _ in rows]
    steps = steps if steps is not None else decode_rows(lm, rows, prompt_ids, span_ids, budget, reused)
    for k, step in steps:
        stats[k] = add_step(stats[k], step)
        if on_step is not None and k == 0:
            on_step(stats[0], step)
    total = time.perf_counter() - start
    return [
        Candidate(
            None
            if row.error
            else Decoded(row.cursor.text(), tuple(row.ids), DecodeStats(**{**s.__dict__, "seconds_total": total})),
            row.logprob,
            row.error,
            tuple(row.alternatives),
        )
        for row, s in zip(rows, stats)
    ]
