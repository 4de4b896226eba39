"""Vocabularies: the Hugging Face byte-level adapter and the per-token UTF-8 tables."""

import itertools
import random

import pytest

from cadedit.errors import ModelError
from cadedit.backends.vocab import UTF8_STATES, Vocab, build_index, utf8_run, vocab_from_tokenizer
from tinytok import VOCAB_SIZE, make_tokenizer


def test_the_tiny_tokenizer_is_qwen2_shaped():
    tok = make_tokenizer()
    assert len(tok) == VOCAB_SIZE and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert [tok.decode([t]) for t in tok.encode("x = 12345")][-5:] == list("12345")  # one digit per token
    assert tok.convert_ids_to_tokens(VOCAB_SIZE - 1) == "<|im_end|>"  # specials at the end, as in Qwen2
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_vocab_from_tokenizer_gives_the_bytes_the_tokenizer_writes():
    tok = make_tokenizer()
    vocab = vocab_from_tokenizer(tok)
    assert len(vocab) == VOCAB_SIZE
    assert vocab.eos_ids == {tok.eos_token_id}
    assert vocab.special_ids == {tok.convert_tokens_to_ids(s) for s in ("<|endoftext|>", "<|im_start|>")}
    for text in ["def f(x):\r\n\treturn x  # é ⟨ 日本語 🙂\n", '<copy lines="12-345"/>\n', "  \n\n\n"]:
        assert b"".join(vocab.tokens[t] for t in tok.encode(text)) == text.encode()


def test_vocab_from_tokenizer_is_cached_and_pads_to_the_logits_width():
    tok = make_tokenizer()
    assert vocab_from_tokenizer(tok) is vocab_from_tokenizer(tok)
    wide = vocab_from_tokenizer(tok, n_logits=VOCAB_SIZE + 32, eos_ids=[1, 2])
    assert len(wide) == VOCAB_SIZE + 32 and wide.eos_ids == {1, 2}
    assert set(range(VOCAB_SIZE, VOCAB_SIZE + 32)) <= wide.special_ids
    assert tok.eos_token_id in wide.special_ids  # not an EOS here, so never allowed


def hand_tokenizer(pieces, merges, decoder=True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from cadedit.backends.vocab import _byte_decoder

    alphabet = sorted(_byte_decoder())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for piece in pieces:
        vocab[piece] = len(vocab)
    backend = Tokenizer(models.BPE(vocab, merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if decoder:
        backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_entries_no_merge_produces_are_never_allowed():
    tok = hand_tokenizer(["ab", "[PAD9]"], [("a", "b")])
    vocab = vocab_from_tokenizer(tok, eos_ids=[])
    assert tok.convert_tokens_to_ids("[PAD9]") in vocab.special_ids
    assert tok.convert_tokens_to_ids("ab") not in vocab.special_ids


def test_a_tokenizer_that_is_not_byte_level_is_refused():
    with pytest.raises(ModelError, match="byte-level"):
        vocab_from_tokenizer(hand_tokenizer([], [], decoder=False))


def test_utf8_table_matches_the_decoder_byte_by_byte():
    rng = random.Random(5)
    interesting = [
        0x00,
        0x3C,
        0x7F,
        0x80,
        0x8F,
        0x90,
        0x9F,
        0xA0,
        0xBF,
        0xC0,
        0xC2,
        0xDF,
        0xE0,
        0xE1,
        0xED,
        0xEE,
        0xF0,
        0xF1,
        0xF4,
        0xF5,
        0xFF,
    ]
    tokens = [bytes(p) for n in (1, 2) for p in itertools.product(interesting, repeat=n)]
    tokens += [bytes(rng.choice(interesting) for _ in range(rng.randint(3, 6))) for _ in range(3000)]
    tokens += ["日本".encode(), "🙂".encode()[1:], "é".encode()[:1]]
    index = build_index(Vocab(tuple(tokens)))
    for state in range(UTF8_STATES):
        for tid, token in enumerate(tokens):
            assert index.utf8_end[state, tid] == utf8_run(state, token), (state, token)


def test_prefix_ranges_find_exactly_the_tokens_with_a_prefix():
    tokens = (b"a", b"ab", b"abc", b"b", b"\xff", b"\xff\xff", b"\xff\x00", b"", b"a")
    index = build_index(Vocab(tokens))
    for prefix in [b"", b"a", b"ab", b"\xff", b"\xff\xff", b"c"]:
        start, stop = index.prefix_range(prefix)
        expected = [i for i, t in enumerate(tokens) if t and t.startswith(prefix)]
        assert sorted(index.sorted_ids[start:stop].tolist()) == expected
