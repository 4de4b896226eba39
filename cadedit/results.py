"""What a decode and an edit produce, whatever the mode: counts, steps, the edited text.

Frozen dataclasses with no torch, so that a client of the warm server (cadedit.server.warm) and the
tries loop build and read them without importing the model code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from cadedit.text.document import Document
from cadedit.options import EditOptions, Mode
from cadedit.text.program import Program
from cadedit.text.program import format as format_program


@dataclass(frozen=True)
class Step:
    """One forward pass of the loop: what it fed, what was chosen after it, how long each took."""

    phase: str  # "prefill" | "step" | "forced" | "splice": the most expensive kind of token it fed
    prompt: int  # prompt tokens fed
    sampled: int  # tokens the sampler chose after this forward (kept drafted ones included)
    forced: int  # forced literal tokens that followed
    spliced: int  # copied-line tokens fed
    copies: int  # copies whose lines were fed
    drafted: int  # drafted tokens fed
    kept: int  # drafted tokens kept that the sampler chose (forced literals a draft matched are `forced`)
    forward_seconds: float
    pick_seconds: float
    token: int  # the last token so far


@dataclass(frozen=True)
class DecodeStats:
    """The counts of one decode, the same for every mode."""

    forward_passes: int = 0
    tokens_prompt: int = 0  # prompt tokens fed (a reused prompt prefix is not fed again)
    tokens_reused: int = 0  # prompt tokens whose KV cache was kept from an earlier decode
    tokens_sampled: int = 0  # tokens the sampler chose (accepted drafted tokens included)
    tokens_forced: int = 0
    tokens_spliced: int = 0  # copied-line tokens (program mode)
    copies: int = 0
    tokens_drafted: int = 0
    drafts_kept: int = 0  # drafted tokens the sampler agreed with
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
        """Tokens the loop produced (sampled + forced): what the budget counts."""
        return self.tokens_sampled + self.tokens_forced

    @property
    def tokens_copied(self) -> int:
        """Tokens taken over from the file without a decode step each: spliced or drafted and kept."""
        return self.tokens_spliced + self.drafts_kept


@dataclass(frozen=True)
class Alternative:
    """Where a decode hesitated: at ids[at] it picked one token and `token` was the model's next choice
    among the tokens allowed there (a branch of that decode takes it instead)."""

    at: int  # the index in the decode's ids
    token: int
    margin: float  # log p(the picked token) - log p(token): the smaller, the nearer a tie
    logprob: float  # the model's log-probability of ids[:at], then token


@dataclass(frozen=True)
class Decoded:
    text: str  # what the cursor spelled (a program's display form, or the fenced answer)
    ids: tuple[int, ...]
    stats: DecodeStats


@dataclass(frozen=True)
class EditResult:
    """One edit, whatever the mode: the answer as a program, the new text, the decode's counts."""

    document: Document
    mode: Mode
    program: Program  # in the file's own newlines: resolve(program, document) == new_text
    program_text: str  # what the model wrote (a program, or the fenced file)
    new_text: str
    stats: DecodeStats
    model: str
    prompt_tokens: int
    # A scoped answer a repair could not place in its regions exactly (regions.scoped_text): why, and
    # new_text is the answer placed without that repair; "" when it was placed exactly.
    placement: str = ""
    engine: dict | None = None  # what a shared engine reported (cadedit.server.engine.Usage), None for a local edit
    # "rename" or "delete": made without a model (cadedit.tries.mechanical); "": a model's answer
    mechanical: str = ""

    @property
    def changed(self) -> bool:
        return self.new_text != self.document.text


@dataclass(frozen=True)
class EditCandidate:
    """One of several candidates decoded side by side: its edit (None: it did not finish, `error` says
    why) and the model's summed log-probability of the tokens it picked."""

    result: EditResult | None
    logprob: float
    error: Exception | None = None
    branch: int = 0  # a branch's point (pipeline.branch_key); 0: not a branch


class Editor(Protocol):
    """What makes an edit's answers (tries.edit_verified edits through one): the model loaded in this
    process (pipeline.LocalEditor), the warm server's client (server.ServerClient) or a shared engine's
    (engine.EngineClient). on_step sees the decode's steps; make_sampler (a pipeline.SamplerFactory) and factories (one
    each candidate) choose the decode's samplers from the prepared request, which only a local model
    uses (tests script answers with them); the others decode as the options' sampling says."""

    name: str
    load_seconds: float
    # The model in this process (a backends.model.LoadedModel: results sits below backends/, so the
    # annotation names no class), for the where-step that reads its logits (cadedit.decode.where); None
    # through a server or an engine, which then makes no where-step.
    loaded: Any | None
    shared_engine: bool  # a shared engine decodes (settings.default_candidates' defaults differ)

    def edit(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        *,
        on_step: Callable | None = None,
        make_sampler: Callable | None = None,
    ) -> EditResult:
        """One answer (pipeline.edit_file)."""

    def edit_candidates(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        k: int,
        *,
        on_step: Callable | None = None,
        factories: Sequence[Callable] | None = None,
    ) -> list[EditCandidate]:
        """k answers decoded side by side (pipeline.edit_candidates)."""

    def edit_branches(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        k: int,
        accept: Callable[[EditCandidate], bool],
        *,
        on_step: Callable | None = None,
        factories: Sequence[Callable] | None = None,
    ) -> list[EditCandidate]:
        """Candidate 1, then if accept(it) is false up to k-1 branches of it (pipeline.edit_branches)."""


def result_json(result: EditResult, diff_text: str) -> dict:
    """The machine-readable form of an edit (`cadedit fix --json`)."""
    stats = asdict(result.stats)
    stats["seconds_forwards"] = result.stats.seconds_forwards
    stats["tokens_copied"] = result.stats.tokens_copied
    return {
        "file": result.document.path,
        "model": None if result.mechanical else result.model,  # null: no model ran
        "mechanical": result.mechanical or None,
        "mode": None if result.mechanical else result.mode.value,
        "changed": result.changed,
        "program": format_program(result.program),
        "program_as_written": result.program_text,
        "diff": diff_text,
        "prompt_tokens": result.prompt_tokens,
        "statistics": stats,
        **({"engine": result.engine} if result.engine is not None else {}),
    }
