"""cadedit's own Qwen2 and tokenizer against transformers': the same logits for the same weights
(prompt, cached continuation, one-token steps, eager and fused attention), the same folder loaded
without copying its weights, the same token ids and the same chat prompt text."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cadedit.errors import ModelError
from cadedit.backends.torch import qwen2
from cadedit.backends.torch.qwen2 import Config, build, load_qwen2, read_safetensors
from cadedit.backends.torch.tokenizer import Tokenizer
from tests.tinymodel import make_config, make_hf_model, make_model, save_model
from tests.tinytok import make_tokenizer

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5-chat-template.jinja").read_text()


def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf(input_ids=torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("tied", [False, True])
def test_logits_equal_transformers_qwen2_for_prompt_continuation_and_steps(tied):
    hf = make_hf_model(3).double()
    if tied:
        config = make_config()
        config.tie_word_embeddings = True
        torch.manual_seed(3)
        from transformers import Qwen2ForCausalLM

        hf = Qwen2ForCausalLM(config).eval().double()
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    ours = build(Config.from_dict(hf.config.to_dict()), hf.state_dict(), torch.float64)
    assert ours.config.tie_word_embeddings == tied
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, hf.config.vocab_size, (70,), generator=g).tolist()
    expected = hf_logits(hf, ids)
    cache = ours.new_cache()
    with torch.inference_mode():
        first = ours(torch.tensor(ids[:40]), cache, keep=40)  # a prompt
        middle = ours(torch.tensor(ids[40:60]), cache, keep=20)  # a spliced copy after it
        steps = [ours(torch.tensor([t]), cache)[0] for t in ids[60:]]  # one token at a time
    torch.testing.assert_close(first, expected[:40], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(middle, expected[40:60], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(torch.stack(steps), expected[60:], rtol=1e-9, atol=1e-9)
    assert cache.length == 70


@pytest.mark.parametrize("keep, pieces", [(1, [16, 16, 16, 2]), (7, [16, 16, 18])])
def test_a_long_feed_goes_through_in_pieces_with_the_logits_and_cache_of_one_forward(monkeypatch, keep, pieces):
    """A prompt longer than PREFILL_CHUNK is fed a piece at a time (after what the cache holds): the
    kept logits and the steps after it are those of the whole prompt in one forward."""
    model = make_model(4).double()
    ids = torch.randint(0, model.config.vocab_size, (60,), generator=torch.Generator().manual_seed(4))
    widths = []
    layers = type(model)._layers

    def counted(self, row_ids, caches):
        widths.append(int(row_ids[0].shape[0]))
        return layers(self, row_ids, caches)

    def run(chunk: int):
        monkeypatch.setattr(qwen2, "PREFILL_CHUNK", chunk)
        cache = model.new_cache()
        with torch.inference_mode():
            head = model(ids[:5], cache)  # a prefix already in the cache
            kept = model(ids[5:55], cache, keep=keep)
            steps = torch.stack([model(ids[k : k + 1], cache)[0] for k in range(55, 60)])
        return head, kept, steps, cache.length

    monkeypatch.setattr(type(model), "_layers", counted)
    whole = run(10_000)
    assert widths == [5, 50, 1, 1, 1, 1, 1]
    widths.clear()
    chunked = run(16)
    assert widths == [5, *pieces, 1, 1, 1, 1, 1]  # the last piece holds the kept positions
    for a, b in zip(whole[:3], chunked[:3]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert whole[3] == chunked[3] == 60


def test_eager_attention_equals_the_fused_kernel():
    model = make_model(2).double()
    ids = torch.randint(0, model.config.vocab_size, (33,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        fused = model(ids, model.new_cache(), keep=33)
        model.set_eager_attention(True)
        try:
            eager = model(ids, model.new_cache(), keep=33)
            cache = model.new_cache()
            model(ids[:30], cache)
            eager_steps = torch.stack([model(ids[k : k + 1], cache)[0] for k in range(30, 33)])
        finally:
            model.set_eager_attention(False)
    torch.testing.assert_close(eager, fused, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(eager_steps, fused[30:], rtol=1e-9, atol=1e-9)


def test_a_cache_cropped_back_and_grown_past_its_buffer_gives_fresh_logits():
    model = make_model(0).double()
    ids = torch.randint(0, model.config.vocab_size, (600,), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache()
    with torch.inference_mode():
        model(ids[:250], cache)  # a 256-position buffer
        model(torch.tensor([1, 2, 3, 4, 5]), cache)  # a rejected draft
        cache.crop(250)
        grown = model(ids[250:], cache, keep=350)  # past the buffer: it doubles, keeping what it held
        fresh = model(ids, model.new_cache(), keep=350)
    torch.testing.assert_close(grown, fresh, rtol=1e-9, atol=1e-9)
    assert cache.keys[0].shape[1] == 1024 and cache.length == 600


def test_a_failed_forward_leaves_the_cache_where_it_was():
    model = make_model(0)
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([1, 2, 3]), cache)
        with pytest.raises(IndexError):
            model(torch.tensor([4, 10**6]), cache)  # an id past the vocabulary
    assert cache.length == 3


def test_a_saved_folder_loads_the_same_model_as_views_of_its_file(tmp_path):
    folder = save_model(tmp_path / "tiny")
    loaded = load_qwen2(folder, torch.float32)
    made = make_model(0)
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    with torch.inference_mode():
        assert torch.equal(loaded(ids, loaded.new_cache(), 6), made(ids, made.new_cache(), 6))
    size = (folder / "model.safetensors").stat().st_size
    storages = {p.untyped_storage().data_ptr() for p in loaded.parameters()}
    assert len(storages) == 1 and loaded.lm_head.weight.untyped_storage().nbytes() == size  # one mapping, no copies
    halves = load_qwen2(folder, torch.bfloat16)
    assert halves.lm_head.weight.dtype == torch.bfloat16 and loaded.folder == folder


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-100]), "runs past the end"),
        (lambda p: p.write_bytes(b"\xff" * 8 + b"{}"), "header longer than the file"),
        (lambda p: p.write_bytes(b""), "cannot load the weights"),
    ],
)
def test_a_damaged_weight_file_is_a_model_error_naming_it(tmp_path, damage, message):
    folder = save_model(tmp_path / "tiny")
    damage(folder / "model.safetensors")
    with pytest.raises(ModelError, match=message) as info:
        read_safetensors(folder / "model.safetensors")
    assert "model.safetensors" in str(info.value)


def test_a_folder_missing_weights_is_refused(tmp_path):
    folder = save_model(tmp_path / "tiny")
    tensors = {k: v.clone() for k, v in read_safetensors(folder / "model.safetensors").items() if "lm_head" not in k}
    from safetensors.torch import save_file

    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match="weights missing.*lm_head"):
        load_qwen2(folder, torch.float32)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "llama"}, "model_type 'llama' is not qwen2"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling 'yarn'"),
        ({"hidden_size": None}, "hidden_size is null, not a usable number"),
        ({"rope_parameters": [1, 2]}, "rope parameters \\[1, 2\\] are not an object"),
    ],
)
def test_configs_the_forward_cannot_run_are_refused(change, message):
    raw = {**make_config().to_dict(), **change}
    raw.pop("rope_parameters", None) if "rope_scaling" in change else None
    with pytest.raises(ModelError, match=message):
        Config.from_dict(raw)


def test_a_config_that_is_not_an_object_is_refused():
    with pytest.raises(ModelError, match="config.json: not a JSON object"):
        Config.from_dict([1, 2])


# -- the tokenizer -------------------------------------------------------------------------------

TEXTS = ["def f(x):\n    return x + 1\n", "  \t\n\n  x", "héllo wörld 123 <|im_end|> tail", "", "a" * 40 + " " * 35]


def test_the_tokenizer_gives_transformers_ids_specials_and_vocabulary(tmp_path):
    hf = make_tokenizer()
    hf.save_pretrained(str(tmp_path))
    ours = Tokenizer.from_folder(tmp_path)
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False)
        ids = hf.encode(text, add_special_tokens=False)
        assert ours.decode(ids) == hf.decode(ids)
    assert (ours.eos_token_id, ours.pad_token_id, ours.unk_token_id) == (
        hf.eos_token_id,
        hf.pad_token_id,
        hf.unk_token_id,
    )
    assert len(ours) == len(hf) and ours.get_vocab() == hf.get_vocab()
    assert {i: str(t) for i, t in ours.added_tokens_decoder.items()} == {
        i: str(t) for i, t in hf.added_tokens_decoder.items()
    }
    assert ours.convert_tokens_to_ids("<|im_end|>") == hf.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.parametrize("template", ["tiny", "qwen2.5"])
def test_chat_prompts_are_the_text_transformers_renders(tmp_path, template):
    hf = make_tokenizer()
    hf.save_pretrained(str(tmp_path))
    if template == "qwen2.5":
        for leftover in tmp_path.glob("chat_template.*"):
            leftover.unlink()
        config = json.loads((tmp_path / "tokenizer_config.json").read_text())
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN_TEMPLATE}))
    ours = Tokenizer.from_folder(tmp_path)
    for messages in (
        [{"role": "user", "content": "Fix it.\n```python\nx = 1\n```"}],
        [{"role": "system", "content": "You edit code."}, {"role": "user", "content": "ünïcode ok?"}],
    ):
        expected = hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, chat_template=ours.chat_template
        )
        assert ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected


def test_a_tokenizer_without_a_chat_template_or_with_a_broken_file_is_a_model_error(tmp_path):
    make_tokenizer().save_pretrained(str(tmp_path))
    for leftover in tmp_path.glob("chat_template.*"):
        leftover.unlink()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="no chat template"):
        Tokenizer.from_folder(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="tokenizer.json: cannot read the tokenizer"):
        Tokenizer.from_folder(tmp_path)


def test_config_fields_round_trip():
    config = Config.from_dict(make_config().to_dict())
    assert Config.from_dict({"model_type": "qwen2", **dataclasses.asdict(config)}) == config
    assert config.dim == 16 and config.num_key_value_heads == 2


def test_a_tensor_after_an_odd_sized_one_is_read_whole(tmp_path):
    from safetensors.torch import save_file

    tensors = {"a": torch.arange(3, dtype=torch.int8), "b": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    save_file(tensors, str(tmp_path / "odd.safetensors"))
    read = read_safetensors(tmp_path / "odd.safetensors")
    assert torch.equal(read["a"], tensors["a"]) and torch.equal(read["b"], tensors["b"])


def test_token_bytes_looked_up_one_by_one_equal_the_whole_table(tmp_path):
    from cadedit.backends.vocab import TokenBytes, vocab_from_tokenizer

    hf = make_tokenizer()
    hf.save_pretrained(str(tmp_path))
    for tokenizer in (hf, Tokenizer.from_folder(tmp_path)):
        lazy, table = TokenBytes(tokenizer, n_logits=800), vocab_from_tokenizer(tokenizer, n_logits=800).tokens
        assert len(lazy) == len(table) == 800 and list(lazy) == list(table)
        assert lazy[-1] == b"" and lazy[5:8] == list(table[5:8]) and lazy[tokenizer.eos_token_id] == b"<|im_end|>"
        with pytest.raises(IndexError):
            lazy[800]


def test_weights_of_another_shape_than_the_config_says_are_a_model_error(tmp_path):
    folder = save_model(tmp_path / "tiny")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(ModelError, match="the weights do not fit its config.json.*mlp"):
        load_qwen2(folder, torch.float32)


def test_a_config_claiming_more_layers_than_the_weights_have_is_refused_before_building(tmp_path):
    folder = save_model(tmp_path / "tiny")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1000}))
    with pytest.raises(ModelError, match="config.json says 1000 layers, the weights have 2"):
        load_qwen2(folder, torch.float32)
