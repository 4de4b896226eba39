"""The on-disk store of prompt prefixes: a second edit of the same file with another instruction,
in a fresh KV cache (as a new process has), feeds only the prompt after the file, and answers
exactly as a cold start does; entries are keyed by the model and the ids, bounded in size, and
a damaged entry is ignored."""

from __future__ import annotations

import os

import pytest
import torch

from cadedit.decode import pipeline
from cadedit.decode.loop import script_sampler
from cadedit.text.document import Document
from cadedit.backends.model import LoadedModel, language_model, token_bytes
from cadedit.backends.prefix_store import PREFIX_MIN_TOKENS, PrefixStore, model_identity
from cadedit.options import EditOptions, Mode
from tests.scripting import given
from tests.tinymodel import make_model
from tests.tinytok import make_tokenizer

DOC = Document.from_text("def f(x):\n    return x + 1\n" * 12, "x.py")


@pytest.fixture
def loaded():
    return LoadedModel(make_model(0).double(), make_tokenizer(), "tiny", "cpu", torch.float64, 1, 4096, 0.0)


def edit(loaded, instruction: str, **options):
    answer = DOC.text.replace("f(", "g(") + "```\n"
    return pipeline.edit_file(
        DOC,
        instruction,
        EditOptions(mode=Mode.VERIFY, **options),
        loaded=loaded,
        make_sampler=given(script_sampler(answer, token_bytes(loaded))),
    )


def store_files():
    root = PrefixStore().root
    return sorted(root.glob("*.kv")) if root.is_dir() else []


def test_a_second_instruction_on_the_same_file_prefills_only_what_follows_the_file(loaded):
    first = edit(loaded, "Rename f to g.")
    assert first.stats.tokens_reused == 0 and len(store_files()) == 1
    language_model(loaded).reset()  # a new process: nothing in memory
    second = edit(loaded, "Call the function g instead.")
    assert second.stats.tokens_reused > 0
    assert second.stats.tokens_prompt < 0.5 * (second.stats.tokens_prompt + second.stats.tokens_reused)
    language_model(loaded).reset()
    os.environ["CADEDIT_PREFIX_CACHE"] = "0"
    try:
        cold = edit(loaded, "Call the function g instead.")
    finally:
        del os.environ["CADEDIT_PREFIX_CACHE"]
    assert cold.stats.tokens_reused == 0
    assert cold.program_text == second.program_text and cold.new_text == second.new_text


def test_a_short_file_is_stored_too(loaded):
    """A prefix of tens of tokens loads in milliseconds and prefills in seconds on a CPU without AMX."""
    short = Document.from_text("def f(x):\n    return x + 1\n", "x.py")
    answer = short.text.replace("f(", "g(") + "```\n"
    prepared = pipeline.prepare(loaded, short, "Rename f to g.", EditOptions(mode=Mode.VERIFY))
    assert PREFIX_MIN_TOKENS <= prepared.reuse_at < 256
    pipeline.edit_file(
        short,
        "Rename f to g.",
        EditOptions(mode=Mode.VERIFY),
        loaded=loaded,
        make_sampler=given(script_sampler(answer, token_bytes(loaded))),
    )
    assert len(store_files()) == 1


def test_the_instruction_first_layout_has_nothing_to_store(loaded):
    edit(loaded, "Rename f to g.", layout="both")
    assert store_files() == []


def test_a_damaged_entry_is_ignored_and_removed(loaded):
    edit(loaded, "Rename f to g.")
    (entry,) = store_files()
    entry.write_bytes(b"not a tensor file")
    language_model(loaded).reset()
    again = edit(loaded, "Call the function g instead.")
    assert again.stats.tokens_reused == 0  # fed in full, stored anew
    assert len(store_files()) == 1 and store_files()[0].read_bytes() != b"not a tensor file"


def test_entries_are_keyed_by_model_and_the_store_is_bounded(loaded, tmp_path):
    lm = language_model(loaded)
    lm.reset()
    lm.feed(list(range(10, 60)))
    store = PrefixStore(tmp_path / "kv", limit=1)
    store.save(lm, model_identity(loaded), 50)
    other = LoadedModel(make_model(1).double(), loaded.tokenizer, "tiny", "cpu", torch.float64, 1, 4096, 0.0)
    assert model_identity(other) != model_identity(loaded)
    assert not store.load(language_model(other), model_identity(other), list(range(10, 60)))
    assert list((tmp_path / "kv").glob("*.kv")) == []  # over its limit: the oldest went first


def test_an_entry_with_the_wrong_kv_heads_is_deleted_and_rebuilt(loaded):
    edit(loaded, "Rename f to g.")
    (entry,) = store_files()
    layers = torch.load(entry, weights_only=True)
    torch.save([(torch.cat([k, k[:1]]), torch.cat([v, v[:1]])) for k, v in layers], entry)  # one KV head too many
    language_model(loaded).reset()
    again = edit(loaded, "Call the function g instead.")
    assert again.stats.tokens_reused == 0 and again.new_text == DOC.text.replace("f(", "g(")
    (rebuilt,) = store_files()
    assert torch.load(rebuilt, weights_only=True)[0][0].shape == layers[0][0].shape  # made again, whole


def test_a_store_this_user_may_read_but_not_write_is_used_without_errors(loaded, monkeypatch):
    edit(loaded, "Rename f to g.")
    language_model(loaded).reset()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    import os
    import tempfile

    for name in ("utime", "replace", "unlink"):
        monkeypatch.setattr(os, name, refuse)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    again = edit(loaded, "Call the function g instead.")
    assert again.stats.tokens_reused > 0 and again.new_text == DOC.text.replace("f(", "g(")


def test_a_store_or_entry_of_another_user_is_neither_read_nor_written(loaded):
    """KV states another user put in the store would steer the model; ours in their folder would show them the code."""
    edit(loaded, "Rename f to g.")
    (entry,) = store_files()
    os.chown(entry, 12345, 12345)
    language_model(loaded).reset()
    assert edit(loaded, "Call the function g instead.").stats.tokens_reused == 0  # not read
    assert store_files() == [entry] and entry.stat().st_uid == 12345  # nor replaced
    entry.unlink()
    PrefixStore().root.chmod(0o777)  # a store others may write
    language_model(loaded).reset()
    assert edit(loaded, "Rename f to g.").new_text == DOC.text.replace("f(", "g(")
    assert store_files() == []  # nothing written into it
