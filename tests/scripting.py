"""Scripted answers: the tiny random model 'chooses' a known answer through the real decode loop
(real model, real cursor, real drafter), injected through public seams only:

- `cadedit fix` and the hook: tries.edit_verified's `picks=` (picks(k): try k's picker factory,
  pipeline.PickFor; picks(0): the where-step's, loaded -> picker). inject_picks gives every
  edit_verified the CLI makes those picks (the CLI looks the function up on cadedit.tries.loop when it
  runs).
- `cadedit bench`: the runners' own `pick_for=` / `picks=` parameters, the same way (the bench CLI
  looks them up on their modules when it runs); the server: serve(pick_for=).

A picker factory gets (loaded, document, prepared) once the request is prepared, so a script can
use the prepared fence, source and regions, and record what was asked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cadedit.tries import loop as tries
from cadedit.decode import pipeline
from cadedit.decode.loop import Picker, script_picker
from cadedit.text.document import Document
from cadedit.backends.model import encode, token_bytes
from cadedit.options import Mode
from cadedit.text.oracle import oracle
from cadedit.text.program import format
from cadedit.prompt.messages import fenced_source
from cadedit.text.resolve import to_display_program


def inject_picks(monkeypatch, picks: Callable[[int], Any]) -> None:
    """Every tries.edit_verified call from here on (cadedit fix, the hook) runs with picks=picks;
    where picks(k) is None, picks injected before answer (a where-step script and a tries script
    compose)."""
    current = tries.edit_verified
    earlier = current.keywords.get("picks") if isinstance(current, functools.partial) else None

    def composed(k: int):
        mine = picks(k)
        return earlier(k) if mine is None and earlier is not None else mine

    monkeypatch.setattr(tries, "edit_verified", functools.partial(current, picks=composed))


def inject_e2e(monkeypatch, pick_for: pipeline.PickFor) -> None:
    """`cadedit bench e2e` builds its mode methods with pick_for (bench.e2e.methods' own parameter)."""
    from cadedit.bench import e2e

    monkeypatch.setattr(e2e, "methods", functools.partial(e2e.methods, pick_for=pick_for))


def scripted_picker(loaded, document: Document, prepared: pipeline.Prepared, after: Document) -> Picker:
    """A picker that makes the model 'choose' `after` in the prepared mode: the oracle program in
    program mode; in the fenced modes the new file's display text and the closing fence."""
    if prepared.mode is Mode.PROGRAM:
        target = format(to_display_program(oracle(document, after), document))
        return script_picker(target, pipeline.grammar_for(loaded).vocab.tokens)
    assert not prepared.regions, "a scoped answer has segments; these scripts retype whole files"
    answer = fenced_source(after, prepared.fence)
    return script_picker(answer, token_bytes(loaded), lambda text: encode(loaded.tokenizer, text))


def given(pick: Picker) -> pipeline.PickFor:
    """A picker factory that gives `pick` whatever the request."""
    return lambda loaded, document, prepared: pick


def spelling(answer: Callable[[pipeline.Prepared], str]) -> pipeline.PickFor:
    """A picker factory that spells answer(prepared), the whole answer text (fence and all)."""
    return lambda loaded, document, prepared: script_picker(answer(prepared), token_bytes(loaded))


def editing(edit: Callable[[Document], Document],
            on_prepared: Callable[[pipeline.Prepared], None] | None = None) -> pipeline.PickFor:
    """A picker factory whose answer is edit(document) (scripted_picker); on_prepared sees each
    decode's prepared request first."""

    def pick_for(loaded, document: Document, prepared: pipeline.Prepared) -> Picker:
        if on_prepared is not None:
            on_prepared(prepared)
        return scripted_picker(loaded, document, prepared, edit(document))

    return pick_for


def every_try(pick_for: pipeline.PickFor) -> Callable[[int], Any]:
    """picks for edit_verified: the same factory for every try, the where-step unscripted."""
    return lambda k: pick_for if k else None


def inject_branches(monkeypatch, old: bytes, new: bytes) -> list:
    """Branches (pipeline.edit_branches) start where candidate 1's ids first spell `old` and take the
    token that spells `new` there, wherever the random model hesitated: the branch rows' own pickers
    then spell the rest (a script continues by the bytes spelled so far). Returns what each call was
    given and gave: (candidate 1's ids, the points, the branch points taken before)."""
    from cadedit.results import Alternative

    calls = []

    def points(alternatives, ids, n, tokens, fence="", taken=()):
        index = {piece: token for token, piece in enumerate(tokens) if piece}
        at = next((i for i, token in enumerate(ids) if tokens[token] == old), None)
        found = [] if at is None else [Alternative(at, index[new], 0.0, -1.0)] * n
        calls.append((list(ids), found, set(taken)))
        return found

    monkeypatch.setattr(pipeline, "branch_points", points)
    return calls
