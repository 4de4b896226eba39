"""edit_file(): one edit, from a document and an instruction to the edited text, as numbered steps.

Contract: edit_file(document, instruction, options) loads the model (or takes a loaded one),
refuses a file whose prompt cannot fit the model's context before any model work, decodes with the
mode's cursor and drafter (the MODES table), and reports the answer as a copy/gen program
resolved strictly against the document. Nothing is written here: the caller shows or applies
EditResult.new_text. The helpers (prepare, run_decode) are public so benchmarks reuse exactly this
code path. A caller may choose the decode's sampler once the request is prepared (make_sampler: tests
and benchmarks spell a known answer, which needs the prepared fence and source). edit_candidates
decodes several candidates side by side; edit_branches decodes one, and only if the caller
rejects it, branches of it from its own cache.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from cadedit.text import program as P
from cadedit.decode.loop import Candidate, Decoded, DecodeStats, Sampler, Row, Step, branch, decode
from cadedit.decode.loop import Alternative, branch_limit, decode_branches, decode_candidates, logprob_through
from cadedit.decode.loop import sampler_for
from cadedit.results import EditCandidate, Editor, EditResult, result_json  # noqa: F401 - re-exported
from cadedit.text.document import Document
from cadedit.decode.draft import DRAFT_LIMIT, LookupDrafter, make_drafter, propose
from cadedit.errors import BudgetError, CadeditError, ModelError
from cadedit.prompt.fence import FenceCursor, writes_again
from cadedit.backends.forward_cost import FittedLengths, draft_most, forward_costs
from cadedit.backends.model import (
    LoadedModel,
    chat_prompt,
    check_ids,
    encode,
    eos_ids,
    language_model,
    load_model,
    token_bytes,
)
from cadedit.backends.prefix_store import PREFIX_MIN_TOKENS, PrefixStore, model_identity
from cadedit.options import EditOptions, Mode
from cadedit.settings import choose_draft_lengths
from cadedit.prompt.request import PROGRAM_ROOM, build_request, default_budget, parse_mode, read_answer, scoped_regions
from cadedit.text.resolve import resolve
from cadedit.decode.verify import Lengths, Schedule, VerifyDrafter
from cadedit.decode.fsm import compile_grammar
from cadedit.backends.vocab import vocab_from_tokenizer


@dataclass(frozen=True)
class Prepared:
    """What a decode needs: the prompt's token ids, the file's size in tokens, the budget, and for
    the fenced modes the fence and the text an unchanged answer would print."""

    mode: Mode
    prompt_ids: tuple[int, ...]
    file_tokens: int
    budget: int
    fence: str = ""
    source: str = ""
    regions: tuple[tuple[int, int], ...] = ()  # scoped: the ranges retyped, in file order
    headers: tuple[str, ...] = ()  # scoped: the forced text before each region after the first
    reuse_at: int = 0  # prompt tokens that do not depend on the instruction (stored on disk for reuse)
    # Scoped: the file's lines after the last region, which the verify drafter may also propose (a
    # model that runs past its region retypes them; scoped_text trims that run past again).
    draft_tail: str = ""
    draft_indented: tuple[str, str] | None = None  # scoped: source and tail in the file's own indentation


# A decode's sampler, chosen from its prepared request (e.g. a scripted answer in the prepared fence).
SamplerFactory = Callable[[LoadedModel, Document, Prepared], Sampler]


def prepare(loaded: LoadedModel, document: Document, instruction: str, options: EditOptions) -> Prepared:
    """Tokenise the prompt (request.build_request's); refuse a file that cannot fit (prompt + the edited file + room)."""
    mode = parse_mode(options)
    _refuse_by_size(loaded, document, whole=not scoped_regions(document, options, mode) or options.context is None)
    request = build_request(document, instruction, options)
    prompt, prompt_ids = chat_prompt(loaded.tokenizer, list(request.messages), request.opening)
    prompt_ids = tuple(prompt_ids)
    check_ids(prompt_ids, loaded.model.config.vocab_size)  # a tokenizer of other weights: before any lookup
    file_tokens = len(encode(loaded.tokenizer, request.answer)) if request.answer else 0
    room = loaded.context_limit - len(prompt_ids) - file_tokens - request.room_needed
    if room < 0:
        raise ModelError(
            f"{document.path}: too large for {loaded.name}: {document.n_lines} lines, a {len(prompt_ids)}-token prompt "
            f"plus {file_tokens} tokens for the edited file, but the context limit is {loaded.context_limit} tokens",
            hint=request.hint,
        )
    budget = options.max_new_tokens or default_budget(file_tokens, bool(request.regions))
    limit = room + PROGRAM_ROOM - DRAFT_LIMIT if request.mode is Mode.PROGRAM else room + file_tokens
    reuse_at = 0
    if request.mode is not Mode.PROGRAM and options.layout != "both":
        reuse_at = _instruction_free(loaded, prompt, prompt_ids, request.task)
    return Prepared(
        request.mode,
        prompt_ids,
        file_tokens,
        min(budget, limit),
        request.fence,
        request.source,
        request.regions,
        request.headers,
        reuse_at,
        request.draft_tail,
        request.draft_indented,
    )


# No token of Qwen's vocabulary spans more bytes than this on average over a file: a file this many
# times the context in bytes cannot fit, and is refused before any tokenising (16 MiB took minutes).
MOST_BYTES_PER_TOKEN = 32


def _refuse_by_size(loaded: LoadedModel, document: Document, whole: bool) -> None:
    size = len(document.text.encode("utf-8"))
    if whole and size > MOST_BYTES_PER_TOKEN * loaded.context_limit:
        raise ModelError(
            f"{document.path}: too large for {loaded.name}: {document.n_lines} lines, {size:,} bytes, "
            f"at least {size // MOST_BYTES_PER_TOKEN:,} tokens, but the context limit is "
            f"{loaded.context_limit} tokens",
            hint="edit a smaller file, or name the lines to edit (--lines)",
        )


def _instruction_free(loaded: LoadedModel, prompt: str, prompt_ids: tuple[int, ...], task: str) -> int:
    """How many prompt tokens come before the instruction (so another instruction's prompt has the
    same ones), less two: the tokens at a text boundary may merge with what follows it."""
    at = prompt.find(task)
    if at < 0:
        return 0
    limit, used, k = len(prompt[:at].encode("utf-8")), 0, 0
    tokens = token_bytes(loaded)
    while k < len(prompt_ids) and used + len(tokens[prompt_ids[k]]) <= limit:
        used += len(tokens[prompt_ids[k]])
        k += 1
    return max(0, k - 2)


_GRAMMARS: dict[int, tuple[object, object]] = {}


def grammar_for(loaded: LoadedModel):
    """The program grammar compiled against this model's vocabulary (once per tokenizer)."""

    key = id(loaded.tokenizer)
    if key not in _GRAMMARS:
        vocab = vocab_from_tokenizer(loaded.tokenizer, n_logits=loaded.model.config.vocab_size)
        grammar = compile_grammar(vocab, encode=lambda text: encode(loaded.tokenizer, text))
        _GRAMMARS[key] = (loaded.tokenizer, grammar)  # keep the tokenizer alive so its id stays unique
    return _GRAMMARS[key][1]


def _program_parts(loaded: LoadedModel, document: Document, draft: bool):
    grammar = grammar_for(loaded)
    cursor = grammar.for_document(document.n_lines, monotonic=True).cursor()
    drafter = None
    if draft:
        guesses = make_drafter(
            lambda text: propose(text, document), lambda text: encode(loaded.tokenizer, text), grammar.vocab.tokens
        )
        drafter = lambda cursor, ids: guesses(cursor)  # noqa: E731

    def span_ids(copy: P.Copy) -> list[int]:
        # The program text before a splice ends with '"/>\n' and the span starts at a line start, so
        # tokenising the span on its own is how Qwen's BPE splits the joint text -- except when the span
        # starts with a blank line ('"/>\n\n' would be one pre-token): the model still reads exactly
        # the right text, in a slightly different split. Checked on the 1,246 oracle copies of
        # HumanEvalFix Python+JS (both contexts): 329 start with a blank line and differ, no other
        # start seam differs, and no end seam (span, then the next op's "<") ever differs.
        return encode(loaded.tokenizer, document.display_text(copy.start, copy.end))

    return cursor, span_ids, drafter


def _fenced_parts(loaded: LoadedModel, document: Document, prepared: Prepared, draft: bool):
    tokens = token_bytes(loaded)
    headers = [encode(loaded.tokenizer, h) for h in prepared.headers]
    cursor = FenceCursor(tokens, eos_ids(loaded), prepared.fence, headers)
    make_draft = MODES[prepared.mode].drafter
    return cursor, None, make_draft(loaded, prepared) if make_draft is not None else None


def draft_lengths(loaded: LoadedModel) -> Lengths:
    """Verify draft lengths: fitted to what a k-token forward costs on this model, backend and CPU
    (measured once), or the fixed schedule with CADEDIT_DRAFT_LENGTHS=fixed (the same on any machine)."""
    return Schedule() if choose_draft_lengths() == "fixed" else FittedLengths(forward_costs(loaded), draft_most(loaded))


def _verify_drafter(loaded: LoadedModel, prepared: Prepared) -> VerifyDrafter:
    return VerifyDrafter(
        prepared.source,
        lambda text: encode(loaded.tokenizer, text),
        token_bytes(loaded),
        prepared.budget,
        draft_lengths(loaded),
        tail=prepared.draft_tail,
        also=prepared.draft_indented,
    )


def _lookup_drafter(loaded: LoadedModel, prepared: Prepared) -> LookupDrafter:
    return LookupDrafter(prepared.prompt_ids, prepared.budget)


@dataclass(frozen=True)
class ModeRow:
    """One mode as the decode loop runs it: how its cursor and spans are made (the answer's format:
    an edit program under the grammar, or the file retyped in a fence) and, for the fenced modes,
    what drafts the answer (None: nothing, one token per forward)."""

    parts: Callable  # (loaded, document, prepared, draft) -> (cursor, span_ids, drafter)
    drafter: Callable[[LoadedModel, Prepared], object] | None = None


# The mode table (decode.py's docstring shows it as a table for the reader).
MODES: dict[Mode, ModeRow] = {
    Mode.PROGRAM: ModeRow(lambda loaded, document, prepared, draft: _program_parts(loaded, document, draft)),
    Mode.REWRITE: ModeRow(_fenced_parts),
    Mode.LOOKUP: ModeRow(_fenced_parts, _lookup_drafter),
    Mode.VERIFY: ModeRow(_fenced_parts, _verify_drafter),
}


def run_decode(
    loaded: LoadedModel,
    document: Document,
    prepared: Prepared,
    pick: Sampler,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    draft: bool = True,
) -> Decoded:
    """One decode for `document` in the prepared mode, reusing the cached prompt prefix."""
    cursor, span_ids, drafter = mode_parts(loaded, document, prepared, draft)
    with _prompt_cache(loaded, prepared) as (lm, reused):
        return decode(lm, cursor, prepared.prompt_ids, span_ids, pick, prepared.budget, on_step, drafter, reused)


def run_candidates(
    loaded: LoadedModel,
    document: Document,
    prepared: Prepared,
    samplers: Sequence[Sampler],
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    draft: bool = True,
) -> list[Candidate]:
    """len(samplers) candidates decoded side by side (decode.decode_rows): the prompt fed once, each row
    with its own cursor, drafter and sampler; each with the model's log-probability of its picks."""
    rows, span_ids = [], None
    for sampler in samplers:
        cursor, span_ids, drafter = mode_parts(loaded, document, prepared, draft)
        rows.append(Row(cursor, sampler, drafter, score=True))
    with _prompt_cache(loaded, prepared) as (lm, reused):
        return decode_candidates(lm, rows, prepared.prompt_ids, span_ids, prepared.budget, on_step, reused)


def mode_parts(loaded: LoadedModel, document: Document, prepared: Prepared, draft: bool):
    """The mode's cursor, span ids and drafter (the MODES table)."""
    return MODES[prepared.mode].parts(loaded, document, prepared, draft)


@contextlib.contextmanager
def _prompt_cache(loaded: LoadedModel, prepared: Prepared):
    """The model's cache holding as much of the prompt as memory or the on-disk store has: (lm, reused)."""
    lm = language_model(loaded)
    reused = lm.reuse(prepared.prompt_ids)
    # The instruction-free prefix (the file) from disk when memory had less of it; stored after if still missing.
    store = prefix_store() if reused < prepared.reuse_at and prepared.reuse_at >= PREFIX_MIN_TOKENS else None
    identity = model_identity(loaded) if store is not None else ""
    if store is not None and store.load(lm, identity, prepared.prompt_ids[: prepared.reuse_at]):
        reused, store = prepared.reuse_at, None
    yield lm, reused
    if store is not None:
        store.save(lm, identity, prepared.reuse_at)


def prefix_store() -> PrefixStore | None:
    """The on-disk store of prompt prefixes, unless CADEDIT_PREFIX_CACHE=0."""
    return None if os.environ.get("CADEDIT_PREFIX_CACHE", "1") == "0" else PrefixStore()


def answer_program(document: Document, prepared: Prepared, decoded: Decoded) -> P.Program:
    """The answer as a copy/gen program in the file's own newlines (request.read_answer)."""
    return placed_program(document, prepared, decoded)[0]


def placed_program(document: Document, prepared: Prepared, decoded: Decoded) -> tuple[P.Program, str]:
    """answer_program, and why a scoped answer could not be placed in its regions exactly ("" when it
    could, or the answer is not scoped): request.read_answer."""
    return read_answer(document, prepared.mode, decoded.text, prepared.fence, prepared.regions, prepared.headers)


def edit_file(
    document: Document,
    instruction: str,
    options: EditOptions = EditOptions(),
    *,
    loaded: LoadedModel | None = None,
    make_sampler: SamplerFactory | None = None,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    on_loaded: Callable[[LoadedModel], None] | None = None,
) -> EditResult:
    """Edit one document as the instruction says; see the module docstring. make_sampler: the decode's
    sampler from the prepared request (None: the options' sampling)."""
    # 1. The model (the caller may pass one already loaded).
    loaded = loaded or load_model(options.model, options.device, options.dtype, options.threads, options.backend)
    if on_loaded is not None:
        on_loaded(loaded)
    # 2. The prompt as token ids; a file that cannot fit is refused here, before any model work.
    prepared = prepare(loaded, document, instruction, options)
    # 3. Decode: one loop, the mode's cursor and drafter.
    pick = make_sampler(loaded, document, prepared) if make_sampler is not None else sampler_for(options.sampling)
    decoded = run_decode(loaded, document, prepared, pick, on_step, draft=options.draft)
    # 4. The answer as a program in the file's own newlines, resolved strictly against the file.
    program, problem = placed_program(document, prepared, decoded)
    return EditResult(
        document,
        prepared.mode,
        program,
        decoded.text,
        resolve(program, document),
        decoded.stats,
        loaded.name,
        len(prepared.prompt_ids),
        problem,
    )


@dataclass(frozen=True)
class LocalEditor(Editor):
    """The model loaded in this process as a results.Editor: edit_file, edit_candidates and
    edit_branches with it; factories None: every candidate with the options' sampling. choose_points:
    where branches start (branch_points' parameters and result; a test scripts them), None: branch_points."""

    loaded: LoadedModel
    choose_points: Callable[..., list] | None = None
    shared_engine = False

    @property
    def name(self) -> str:
        return self.loaded.name

    @property
    def load_seconds(self) -> float:
        return self.loaded.load_seconds

    def edit(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        *,
        on_step: Callable[[DecodeStats, Step], None] | None = None,
        make_sampler: SamplerFactory | None = None,
    ) -> EditResult:
        return edit_file(document, instruction, options, loaded=self.loaded, make_sampler=make_sampler, on_step=on_step)

    def edit_candidates(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        k: int,
        *,
        on_step: Callable[[DecodeStats, Step], None] | None = None,
        factories: Sequence[SamplerFactory] | None = None,
    ) -> list[EditCandidate]:
        factories = factories or [_sampled(options)] * k
        return edit_candidates(document, instruction, options, factories, loaded=self.loaded, on_step=on_step)

    def edit_branches(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        k: int,
        accept: Callable[[EditCandidate], bool],
        *,
        on_step: Callable[[DecodeStats, Step], None] | None = None,
        factories: Sequence[SamplerFactory] | None = None,
    ) -> list[EditCandidate]:
        factories = factories or [_sampled(options)] * k
        return edit_branches(
            document,
            instruction,
            options,
            factories,
            accept,
            loaded=self.loaded,
            on_step=on_step,
            choose_points=self.choose_points,
        )


def _sampled(options: EditOptions) -> SamplerFactory:
    """A sampler factory: the options' sampling, whatever the request."""
    return lambda loaded, document, prepared: sampler_for(options.sampling)


def edit_candidates(
    document: Document,
    instruction: str,
    options: EditOptions,
    factories: Sequence[SamplerFactory],
    *,
    loaded: LoadedModel,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
) -> list[EditCandidate]:
    """edit_file for len(factories) candidates at once: one prompt, one batched decode, one edit each;
    factories: each candidate's sampler factory (tries.candidate_factories gives `--candidates`')."""
    prepared = prepare(loaded, document, instruction, options)
    samplers = [make_sampler(loaded, document, prepared) for make_sampler in factories]
    return [
        _edit_candidate(loaded, document, prepared, found)
        for found in run_candidates(loaded, document, prepared, samplers, on_step, draft=options.draft)
    ]


def _edit_candidate(loaded: LoadedModel, document: Document, prepared: Prepared, found: Candidate) -> EditCandidate:
    """One decoded row as an edit; an answer that does not resolve against the file fails on its own."""
    if found.decoded is None:
        return EditCandidate(None, found.logprob, found.error)
    try:
        program, problem = placed_program(document, prepared, found.decoded)
        result = EditResult(
            document,
            prepared.mode,
            program,
            found.decoded.text,
            resolve(program, document),
            found.decoded.stats,
            loaded.name,
            len(prepared.prompt_ids),
            problem,
        )
    except CadeditError as exc:
        return EditCandidate(None, found.logprob, exc)
    return EditCandidate(result, found.logprob)


def edit_branches(
    document: Document,
    instruction: str,
    options: EditOptions,
    factories: Sequence[SamplerFactory],
    accept: Callable[[EditCandidate], bool],
    *,
    loaded: LoadedModel,
    on_step: Callable[[DecodeStats, Step], None] | None = None,
    choose_points: Callable[..., list] | None = None,
) -> list[EditCandidate]:
    """len(factories) candidates, one after the other's hesitations: candidate 1 is the plain decode (factories[0]);
    if accept(it) is false, the others branch from it where the model hesitated most (branch_points:
    the smallest margins between its pick and its next choice) and go on with their own samplers,
    decoded side by side from candidate 1's cache (decode.decode_branches); with options.attempt.rejoin, a branch that
    writes a stretch of candidate 1's answer again takes its rest (decode.REJOIN_TOKENS). Returns the candidates
    decoded: [candidate 1] when it was accepted. Fenced modes only (a program's copies splice spans
    between its ids, which branch() does not replay). choose_points: in place of branch_points (a test's
    script of where branches start), None: branch_points."""
    prepared = prepare(loaded, document, instruction, options)
    samplers = [make_sampler(loaded, document, prepared) for make_sampler in factories]
    cursor, _, drafter = mode_parts(loaded, document, prepared, options.draft)
    first_row = Row(cursor, samplers[0], drafter, record=True)
    with _prompt_cache(loaded, prepared) as (lm, reused):
        try:
            [found] = decode_candidates(lm, [first_row], prepared.prompt_ids, None, prepared.budget, on_step, reused)
        except BudgetError as exc:  # out of budget: the branches may still finish
            found = Candidate(None, first_row.logprob, exc, tuple(first_row.alternatives))
    first = _edit_candidate(loaded, document, prepared, found)
    if accept(first) or len(factories) == 1:
        return [first]
    ids, tokens = first_row.ids, token_bytes(loaded)
    points = (choose_points or branch_points)(
        found.alternatives, ids, len(factories) - 1, tokens, prepared.fence, options.attempt.branched
    )
    # Where the where-step's reading expected other tokens: those branches first, then the hesitations;
    # none an earlier try branched at from the same answer (options.attempt.branched).
    attempt = options.attempt
    expected = [
        e
        for e in expected_points(document, attempt.expected, ids, first_row.through, tokens)
        if branch_key(ids, e) not in attempt.branched
    ]
    taken = {e.at for e in expected}
    points = [*expected, *(p for p in points if p.at not in taken)][: len(factories) - 1]
    if not points:
        return [first]
    rows, prefixes = [], []
    for alternative, pick in zip(points, samplers[1:]):
        cursor, _, drafter = mode_parts(loaded, document, prepared, options.draft)
        row = Row(cursor, pick, drafter, score=True)
        branch(row, ids, alternative, first_row.through if attempt.rejoin and found.decoded is not None else None)
        rows.append(row)
        prefixes.append(list(prepared.prompt_ids) + ids[: alternative.at])
    lm = language_model(loaded)
    forwards = found.decoded.stats.forward_passes if found.decoded is not None else 0
    limits = [branch_limit(forwards, len(ids), alternative.at) for alternative in points]
    steps = decode_branches(lm, rows, list(lm.ids), prefixes, prepared.budget, limits)
    branched = decode_candidates(lm, rows, prepared.prompt_ids, None, prepared.budget, on_step, steps=steps)
    return [
        first,
        *(
            replace(_edit_candidate(loaded, document, prepared, c), branch=branch_key(ids, p))
            for c, p in zip(branched, points)
        ),
    ]


def branch_key(ids: Sequence[int], alternative: Alternative) -> int:
    """A branch point as a number: the answer's ids before it and the token put there (never 0)."""
    return hash((*ids[: alternative.at], alternative.token)) % (1 << 61) or 1


def expected_points(
    document: Document,
    expected: Sequence[tuple],
    ids: Sequence[int],
    through: Sequence[tuple[int, float]],
    tokens: Sequence[bytes],
) -> list[Alternative]:
    """The where-step's Where.expected (line, byte column, token, its log-probability each) as branch
    points of candidate 1's answer `ids`, in their order: the id that starts at that column of that
    line's text, which must appear once in the answer, with the expected token in its place; one
    that cannot be placed so is left out. A point's log-probability: candidate 1's up to there
    (`through`) plus the reading's of the token."""
    if not expected:
        return []
    answer, lines = b"".join(tokens[t] for t in ids), document.display_lines()
    starts = dict(zip(itertools.accumulate((len(tokens[t]) for t in ids), initial=0), range(len(ids))))
    points = []
    for line, column, token, logprob in expected:
        body = lines[line - 1].encode("utf-8")
        if not body.strip() or answer.count(body) != 1:
            continue
        at = starts.get(answer.index(body) + column)
        if at is not None and at < len(ids) and ids[at] != token:
            points.append(Alternative(at, token, 0.0, logprob_through(through, at) + logprob))
    return points


def branch_points(
    alternatives: Sequence,
    ids: Sequence[int],
    n: int,
    tokens: Sequence[bytes],
    fence: str = "",
    taken: Collection[int] = (),
) -> list:
    """The n alternatives with the smallest margins (one is recorded a position), leaving out those that
    would write the answer again (fence.writes_again, the code ending at the closing `fence`) and those
    an earlier try branched at from the same answer (`taken`: branch_key each)."""
    answer = b"\n" + b"".join(tokens[t] for t in ids)  # byte k of the answer is answer[k + 1]
    starts = list(itertools.accumulate((len(tokens[t]) for t in ids), initial=0))
    closing = b"\n" + fence.encode("utf-8")
    points = []
    for alternative in sorted(alternatives, key=lambda a: a.margin):
        start = starts[min(alternative.at, len(ids))] + 1
        end = answer.find(closing, start - 1) if fence else -1  # the newline before the closing fence
        if writes_again(tokens[alternative.token], answer, start, end + 1 if end >= 0 else -1):
            continue
        if taken and branch_key(ids, alternative) in taken:
            continue
        points.append(alternative)
        if len(points) == n:
            break
    return points
