"""What a forward of k new tokens costs on the loaded model, and the draft lengths that follow from it.

Contract: forward_costs(loaded) is the cost curve c(k) -- a forward of k new tokens with the logits
of all k kept (what a verified draft needs), in one-token steps -- measured once per model file,
backend, threads and CPU on a fresh cache of the loaded model, and kept in the per-machine
measurement cache beside the backend probe's answers (hardware.measured_once); looked up there once
per loaded model, however many decodes ask. FittedLengths(curve)
chooses each verify draft's length to maximise the tokens a forward is expected to yield per unit
of its cost, given the acceptance this decode's drafts have met so far. No torch here.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from cadedit.backends.hardware import _cpu_identity, measured_once, tell
from cadedit.backends.llama.llamacpp import MAX_OUTPUTS
from cadedit.backends.model import CachedLM, new_cache
from cadedit.backends.prefix_store import model_identity

# The widths timed: c(k) between them is read off a straight line, past the last along the last
# two. Width 2 is the first with a draft in it: where one-token steps take another path than wider
# forwards (torch's compact step weights), c(2) is already about c(4), and a line from c(1) to
# c(4) would call a one-token draft nearly free. A forward of k tokens follows PREFIX tokens in the
# cache (an edit's drafts follow its prompt); each width is the best of its REPS forwards (the narrow
# ones are short and noisy, the widest long).
WIDTHS = (1, 2, 4, 16, 64, 256)
REPS = (7, 7, 5, 3, 2, 1)
PREFIX = 128
MEASURE = "forward-costs-3"  # in the cache key: a change to how it is measured measures again

# The acceptance a decode starts with, as (drafted tokens kept, drafts that missed): about a run of
# 32 tokens a miss, what a retype's first drafts meet. Each draft's outcome is added after the
# earlier ones are weighed by DECAY, so the last few drafts decide (misses come in clusters, at the
# lines an edit changes), and a decode that keeps everything soon drafts as long as pays.
PRIOR = (32.0, 1.0)
DECAY = 0.7
# Draft lengths considered (a forward carries the pending token and the draft: k + 1 new tokens).
CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
# The longest draft one forward carries, by backend: torch keeps the logits of any number of tokens
# in one forward (a 1,024-token draft holds [1025, vocab] logits in the model's dtype, about 300 MB
# for Qwen's 151,936 tokens); llama.cpp returns at most MAX_OUTPUTS rows a call and would split a
# longer one into calls. Drafts past the widest width measured cost what the curve's last two
# points say: a forward that long is compute-bound, its cost linear in its tokens.
MOST = {"torch": 1024, "llama": MAX_OUTPUTS}


def interpolate(points: tuple[tuple[int, float], ...], x: float) -> float:
    """y at x on measured (x, y) points, x rising: the first y below the first point, linear between
    points, past the last along the last two (never falling)."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = points[-2:] if len(points) > 1 else (points[0], (points[0][0] + 1, points[0][1]))
    return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (x - x1)


@dataclass(frozen=True)
class CostCurve:
    """c(k) at measured widths: ((k, seconds of a k-token forward / seconds of a one-token one), ...)."""

    points: tuple[tuple[int, float], ...]

    def cost(self, k: int) -> float:
        """c(k), in one-token steps: linear between measured widths, past the last along the last two."""
        return interpolate(self.points, k)

    def best_draft(self, p: float, most: int) -> int:
        """The draft length (at most `most`, one of CHOICES, or 0: no draft) with the most tokens a
        forward yields per unit of its cost, each drafted token kept with probability p given the
        ones before it. 0 where no draft pays for its width: a one-token step yields one token for
        c(1) = 1."""

        def rate(k: int) -> float:
            kept = k if p >= 1 else p * (1 - p**k) / (1 - p)  # expected run of kept drafted tokens
            return (1 + kept) / self.cost(k + 1)  # the sampler's own token, then the kept ones

        return max((k for k in (0, *CHOICES) if k <= most), key=rate)

    def to_json(self) -> list:
        return [[k, c] for k, c in self.points]

    @classmethod
    def from_json(cls, value: object) -> "CostCurve | None":
        """The curve stored in the cache (None if it is not one: then it is measured again)."""
        try:
            points = tuple((int(k), float(c)) for k, c in value)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            return None
        ok = (
            len(points) >= 2
            and points[0] == (1, 1.0)
            and all(a[0] < b[0] for a, b in zip(points, points[1:]))
            and all(math.isfinite(c) and c > 0 for _, c in points)
        )
        return cls(points) if ok else None


def measure_curve(lm, vocab: int, room: int, clock: Callable[[], float] = time.perf_counter) -> CostCurve:
    """c(k) on `lm` (a decode.LM over an empty cache, left empty): PREFIX tokens, then each width's
    forward, logits kept for all its tokens, cropped after each; the widths that fit `room` tokens."""
    widths = [(k, reps) for k, reps in zip(WIDTHS, REPS) if PREFIX + k <= room]
    filler = [(1000 + t) % vocab for t in range(PREFIX + widths[-1][0])]
    lm.feed(filler[:PREFIX])
    try:
        widest = widths[-1][0]
        lm.feed(filler[PREFIX : PREFIX + widest], keep=widest)  # one-off costs: buffers sized for the widest
        lm.crop(widest)
        seconds = {}
        for k, reps in widths:
            best = math.inf
            for _ in range(reps):
                start = clock()
                lm.feed(filler[PREFIX : PREFIX + k], keep=k)
                best = min(best, clock() - start)
                lm.crop(k)
            seconds[k] = max(best, 1e-9)
    finally:
        lm.crop(len(lm.ids))
    return CostCurve(tuple((k, round(seconds[k] / seconds[1], 3)) for k, _ in widths))


# Each loaded model's curve, looked up once: every verify decode (each candidate, each try) asks for
# it, and the lookup reads /proc/cpuinfo, stats the weight files and reads the measurement cache.
# Keyed by the model object as backends.model's language models are (load_model makes a new one for
# each load; LoadedModel is frozen and backends.model cannot import this module), and gone with it.
_CURVES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def forward_costs(loaded) -> CostCurve:
    """The loaded model's cost curve on this CPU, measured once (with a progress line) and cached;
    looked up once per loaded model."""
    curve = _CURVES.get(loaded.model)
    if curve is None:
        curve = _CURVES[loaded.model] = _look_up(loaded)
    return curve


def draft_most(loaded) -> int:
    """The longest verify draft on the loaded model's backend (MOST)."""
    return MOST[loaded.backend]


def _look_up(loaded) -> CostCurve:
    """The curve stored in the measurement cache for this model, backend, threads and CPU, else measured and stored."""
    key = f"{_cpu_identity(loaded.threads)}|{MEASURE}|{model_identity(loaded)}"

    def measure() -> list:
        tell(
            f"measuring what a forward of 1 to {WIDTHS[-1]} tokens costs on {loaded.name} "
            f"(once per machine, model file and threads; a few seconds to a minute)"
        )
        lm = CachedLM(loaded.model, new_cache(loaded))
        curve = measure_curve(lm, loaded.model.config.vocab_size, loaded.context_limit)
        tell(
            "a forward of k tokens costs "
            + ", ".join(f"k={k}: {c:.1f}" for k, c in curve.points)
            + " one-token steps here"
        )
        return curve.to_json()

    value, _ = measured_once(key, lambda v: CostCurve.from_json(v) is not None, measure)
    return CostCurve.from_json(value)


class FittedLengths:
    """Verify draft lengths fitted to a cost curve (verify.Lengths): each draft's length maximises
    the expected tokens per unit cost (CostCurve.best_draft), with p the share of drafted tokens kept
    among kept tokens and misses, weighed towards the latest drafts (PRIOR, DECAY). On a CPU where
    wide forwards cost many steps the drafts stay short while acceptance is uncertain; where they
    cost little more than a step, they are long from the start. Where even the shortest draft does
    not pay for its width (acceptance low, c(2) several steps) the length is 0: no draft is sent,
    and the drafter scores the draft it would have sent (verify.VerifyDrafter), so acceptance is
    still learnt and drafting resumes once the output follows the source again."""

    def __init__(self, curve: CostCurve, most: int = 256):
        self.curve, self.most = curve, most
        self.kept, self.missed = PRIOR

    @property
    def p(self) -> float:
        return self.kept / (self.kept + self.missed)

    def first(self) -> int:
        return self.curve.best_draft(self.p, self.most)

    def after(self, size: int, drafted: int, kept: int) -> int:
        """The next draft's length, a draft of `drafted` tokens having kept `kept`."""
        self.kept = DECAY * self.kept + kept
        self.missed = DECAY * self.missed + (kept < drafted)
        return self.curve.best_draft(self.p, self.most)
