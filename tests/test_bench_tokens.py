"""Token counting: any tokenizer shape, no special tokens, loading by path, and which tokenizer is chosen."""

from __future__ import annotations

import pytest

from cadedit.bench.tokens import TokenCounter, load_tokenizer, tokenizer_spec
from cadedit.errors import ModelError
from tests.conftest import approve_settings
from tests.bench_helpers import CharTokenizer, write_byte_tokenizer


class AddsSpecials:
    """Like a transformers tokenizer: a BOS unless add_special_tokens=False."""

    def encode(self, text, add_special_tokens=True):
        return ([0] if add_special_tokens else []) + [ord(c) for c in text]


def test_counts_work_for_every_tokenizer_shape(tmp_path):
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(write_byte_tokenizer(tmp_path / "t.json")))
    for tokenizer in (CharTokenizer(), AddsSpecials(), backend):
        counter = TokenCounter(tokenizer)
        assert counter.count("héllo\n") == (7 if tokenizer is backend else 6)  # bytes vs characters
        assert counter.count("") == 0 and counter.ids("ab") == counter.ids("ab")


def test_load_tokenizer_from_a_file_or_a_folder(tmp_path):
    path = write_byte_tokenizer(tmp_path / "tokenizer.json")
    assert load_tokenizer(str(path)).count("abc") == 3
    assert load_tokenizer(str(tmp_path)).count("abc\n") == 4


def test_load_tokenizer_errors_are_model_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ModelError, match="cannot read tokenizer"):
        load_tokenizer(str(bad))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelError, match="not a tokenizer.json file"):
        load_tokenizer(str(tmp_path / "notes.txt"))


def test_tokenizer_spec_follows_the_model_choice(tmp_path, monkeypatch):
    from cadedit.settings import DEFAULT_MODEL

    monkeypatch.chdir(tmp_path)
    assert tokenizer_spec(None, None) == DEFAULT_MODEL
    (tmp_path / "pyproject.toml").write_text('[tool.cadedit]\nmodel = "from-pyproject"\n')
    approve_settings(tmp_path)
    assert tokenizer_spec(None, None) == "from-pyproject"
    (tmp_path / ".cadedit.toml").write_text('model = "from-dotfile"\n')
    approve_settings(tmp_path)
    assert tokenizer_spec(None, None) == "from-dotfile"
    monkeypatch.setenv("CADEDIT_MODEL", "from-env")
    assert tokenizer_spec(None, None) == "from-env"
    assert tokenizer_spec(None, "model") == "model"
    assert tokenizer_spec("tok.json", "model") == "tok.json"
