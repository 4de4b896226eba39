"""Scripted answers: the tiny random model 'chooses' a known answer through the real decode loop
(real model, real cursor, real drafter), injected through public seams only:

- `cadedit fix`, the hook, `cadedit bench tries / multiline / longfile`: tries.edit_verified's `picks=`
  (picks(k): try k's sampler factory, pipeline.SamplerFactory; picks(0): the where-step's, loaded -> sampler),
  which the CLI takes from its context object (cli.common.Scripted: `app(obj=Scripted(picks))`).
  inject_picks sets this test's picks and invoke() runs the CLI with them.
- `cadedit bench e2e`: bench.e2e.methods' `make_sampler=`, which the CLI takes from the same context
  object (Scripted(make_sampler=...)); inject_e2e sets it. The server: serve(make_sampler=).
- where branches start: pipeline.LocalEditor's `choose_points=` (in place of branch_points), which the
  CLI takes from Scripted(choose_points=...); inject_branches sets it.

A sampler factory gets (loaded, document, prepared) once the request is prepared, so a script can
use the prepared fence, source and regions, and record what was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typer.testing import CliRunner, Result  # typer's own Result (it vendors click), not click's

from cadedit.cli import root as cli
from cadedit.decode import pipeline
from cadedit.cli.common import Scripted
from cadedit.decode.loop import Sampler, script_sampler
from cadedit.text.document import Document
from cadedit.backends.model import encode, token_bytes
from cadedit.options import Mode
from cadedit.text.oracle import oracle
from cadedit.text.program import format
from cadedit.prompt.messages import fenced_source
from cadedit.text.resolve import to_display_program


# This test's scripted answers, which invoke() gives the CLI; monkeypatch puts them back after each test.
_SCRIPTED: dict[str, Any] = {"picks": None, "make_sampler": None, "choose_points": None}


def inject_picks(monkeypatch, picks: Callable[[int], Any]) -> None:
    """Every CLI run by invoke() from here on (cadedit fix, the hook, bench tries) edits with
    picks=picks; where picks(k) is None, picks injected before answer (a where-step script and a
    tries script compose)."""
    earlier = _SCRIPTED["picks"]

    def composed(k: int):
        mine = picks(k)
        return earlier(k) if mine is None and earlier is not None else mine

    monkeypatch.setitem(_SCRIPTED, "picks", composed)


def scripted() -> Scripted:
    """This test's scripted answers as the CLI takes them (its context object)."""
    return Scripted(
        picks=_SCRIPTED["picks"], make_sampler=_SCRIPTED["make_sampler"], choose_points=_SCRIPTED["choose_points"]
    )


def invoke(args: list[str], **kwargs) -> Result:
    """CliRunner().invoke(cli.app, args, ...) with this test's scripted answers."""
    return CliRunner().invoke(cli.app, args, obj=scripted(), **kwargs)


def inject_e2e(monkeypatch, make_sampler: pipeline.SamplerFactory) -> None:
    """Every `cadedit bench e2e` run with scripted() (invoke()) builds its mode methods with make_sampler
    (bench.e2e.methods' own parameter, given through Scripted)."""
    monkeypatch.setitem(_SCRIPTED, "make_sampler", make_sampler)


def scripted_sampler(loaded, document: Document, prepared: pipeline.Prepared, after: Document) -> Sampler:
    """A sampler that makes the model 'choose' `after` in the prepared mode: the oracle program in
    program mode; in the fenced modes the new file's display text and the closing fence."""
    if prepared.mode is Mode.PROGRAM:
        target = format(to_display_program(oracle(document, after), document))
        return script_sampler(target, pipeline.grammar_for(loaded).vocab.tokens)
    assert not prepared.regions, "a scoped answer has segments; these scripts retype whole files"
    answer = fenced_source(after, prepared.fence)
    return script_sampler(answer, token_bytes(loaded), lambda text: encode(loaded.tokenizer, text))


def given(pick: Sampler) -> pipeline.SamplerFactory:
    """A sampler factory that gives `pick` whatever the request."""
    return lambda loaded, document, prepared: pick


def spelling(answer: Callable[[pipeline.Prepared], str]) -> pipeline.SamplerFactory:
    """A sampler factory that spells answer(prepared), the whole answer text (fence and all)."""
    return lambda loaded, document, prepared: script_sampler(answer(prepared), token_bytes(loaded))


def editing(
    edit: Callable[[Document], Document], on_prepared: Callable[[pipeline.Prepared], None] | None = None
) -> pipeline.SamplerFactory:
    """A sampler factory whose answer is edit(document) (scripted_sampler); on_prepared sees each
    decode's prepared request first."""

    def make_sampler(loaded, document: Document, prepared: pipeline.Prepared) -> Sampler:
        if on_prepared is not None:
            on_prepared(prepared)
        return scripted_sampler(loaded, document, prepared, edit(document))

    return make_sampler


def every_try(make_sampler: pipeline.SamplerFactory) -> Callable[[int], Any]:
    """picks for edit_verified: the same factory for every try, the where-step unscripted."""
    return lambda k: make_sampler if k else None


def inject_branches(monkeypatch, old: bytes, new: bytes) -> list:
    """Every CLI run by invoke() from here on branches (pipeline.edit_branches, through LocalEditor's
    choose_points, given as Scripted.choose_points) where candidate 1's ids first spell `old` and take the
    token that spells `new` there, wherever the random model hesitated: the branch rows' own samplers
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

    monkeypatch.setitem(_SCRIPTED, "choose_points", points)
    return calls
