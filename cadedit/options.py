"""The user's choices for one edit, as the decode sees them (defaults from cadedit.settings), and what
one try of it adds (TryState, set by cadedit.tries.loop). Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from cadedit.settings import (
    CONTEXT_LINES,
    DEFAULT_CANDIDATES,
    DEFAULT_DTYPE,
    DEFAULT_LAYOUT,
    DEFAULT_MODE,
    DEFAULT_WHERE_BY,
    Mode,
)

__all__ = ["CONTEXT_LINES", "DEFAULT_CANDIDATES", "DEFAULT_MODE", "EditOptions", "Mode", "Sampling", "TryState"]


@dataclass(frozen=True)
class Sampling:
    """temperature 0 means greedy (argmax); otherwise softmax(logits / T), nucleus top_p, seeded."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


@dataclass(frozen=True)
class TryState:
    """What one try of an edit adds to the user's choices (cadedit.tries.loop sets it per try; a plain edit
    keeps the defaults)."""

    feedback: str = ""  # what failed in the previous try, for the prompt
    # Branched candidates (pipeline.edit_branches): a branch that writes a stretch of candidate 1's
    # answer again takes candidate 1's rest instead of decoding it (decode.REJOIN_TOKENS). The tries
    # set it per try (settings.REJOIN_TRIES).
    rejoin: bool = True
    # (line, byte column, token id, log-probability) each: where the where-step's reading expected other
    # tokens on the line it named, and which (cadedit.decode.where.surprise); a branched try branches there first.
    expected: tuple = ()
    # The branch points earlier tries of this edit branched at (pipeline.branch_key each; through an
    # engine, engine.hesitation_key): a branch from the same answer with the same token writes what that
    # one wrote, so edit_branches takes the next.
    branched: tuple[int, ...] = ()


@dataclass(frozen=True)
class EditOptions:
    model: str | None = None  # hub id, folder or .gguf; None: config.choose_model()
    device: str = "auto"
    dtype: str = DEFAULT_DTYPE
    backend: str | None = None  # auto, torch or llama; None: config.choose_backend() (CADEDIT_BACKEND, settings)
    threads: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    max_new_tokens: int | None = None  # None: twice the file's tokens + 256 (a full rewrite fits)
    variant: str = "default"  # program-mode prompt variant, see prompt.VARIANTS
    layout: str = DEFAULT_LAYOUT.value  # fenced modes: where the instruction goes, see prompt.LAYOUTS (measured there)
    draft: bool = True  # program mode: guess program tokens ahead and verify them in the same forward
    mode: Mode = DEFAULT_MODE
    # The line ranges (1-based, inclusive, in file order) the model retypes; the rest is copied by
    # construction. Empty: the whole file. Fenced modes only (cadedit.scope.plan resolves them).
    regions: tuple[tuple[int, int], ...] = ()
    # Wider scopes for later tries, each holding the one before (cadedit.scope.plan: for a line
    # reference, its statement, then its function; cadedit.tries.loop). Empty: no widening.
    wider: tuple[tuple[tuple[int, int], ...], ...] = ()
    # The regions are definitions the instruction names without a line: the tries first find where
    # (cadedit.decode.where) and retype from that line up (cadedit.scope.plan.located_levels).
    locate: bool = False
    where_by: str = DEFAULT_WHERE_BY  # how the where-step finds the line (cadedit.decode.where.WHERE_BY)
    # The regions are definitions the instruction names without a line and the where-step does not run
    # first: once try 1 failed its test, the later tries branch where the model's reading of them least
    # expected the code written too (cadedit.tries.loop, settings.READ_BRANCHES).
    read_later: bool = False
    referenced: tuple[int, ...] = ()  # lines the instruction names by number, quoted in the prompt
    # Scoped edits: how many lines on each side of the regions the prompt shows (with the file's
    # first lines); None: the whole file. Measured (docs/measurements/context-window.md): on long files the
    # whole file costs most of the time and did not make small models more exact.
    context: int | None = CONTEXT_LINES
    attempt: TryState = field(default_factory=TryState)  # this try's state (cadedit.tries.loop)
