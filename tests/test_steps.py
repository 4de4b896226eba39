"""One-token steps through int8 weight copies (cadedit.steps): numbers, the on-disk copy, the CLI."""

from __future__ import annotations

import torch

import cadedit.hardware as M
from cadedit.steps import StepLinear, quantize, use_int8_steps
from tests.test_tries_cli import GOOD, _models, fix, load_once, scripted, work  # noqa: F401 - fixtures
from tests.tinymodel import make_model


def test_a_one_token_input_goes_through_int8_and_a_longer_one_through_the_weight_itself():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96, bias=True).to(torch.bfloat16)
    q, scale = quantize(linear.weight)
    step = StepLinear(linear, q, scale.to(torch.bfloat16))
    many = torch.randn(1, 5, 64, dtype=torch.bfloat16)
    assert torch.equal(step(many), linear(many))  # prefill: the layer's own numbers, bit for bit
    one = torch.randn(1, 1, 64, dtype=torch.bfloat16)
    got, want = step(one).float(), linear(one).float()
    assert got.shape == want.shape == (1, 1, 96)
    assert not torch.equal(got, want)  # it did take the int8 path
    assert (got - want).abs().max() < 0.05 * want.abs().max()


def test_quantize_maps_each_rows_largest_magnitude_to_127():
    weight = torch.tensor([[0.5, -1.0, 0.25], [2.0, 1.0, 0.0]])
    q, scale = quantize(weight)
    assert q.dtype == torch.int8 and q.tolist() == [[64, -127, 32], [127, 64, 0]]
    assert torch.allclose(q.float() * scale[:, None], weight, atol=0.01)


def test_a_model_with_int8_steps_prefills_as_before_and_steps_close_to_it(tmp_path):
    plain = make_model().to(torch.bfloat16).eval()
    stepped = make_model().to(torch.bfloat16).eval()
    assert use_int8_steps(stepped, "tiny", tmp_path) == "made now"
    assert sum(isinstance(m, StepLinear) for m in stepped.modules()) == 2 * 7 + 1  # 7 per layer + the LM head
    ids = torch.tensor([5, 17, 40, 2, 99, 7])
    with torch.inference_mode():
        assert torch.equal(plain(ids, plain.new_cache(), 6), stepped(ids, stepped.new_cache(), 6))
        one = torch.tensor([33])
        a, b = plain(one, plain.new_cache()).float(), stepped(one, stepped.new_cache()).float()
    assert (a - b).abs().max() < 0.1 * a.abs().max()
    again = make_model().to(torch.bfloat16).eval()
    assert use_int8_steps(again, "tiny", tmp_path) == "from the cache"
    with torch.inference_mode():
        assert torch.equal(again(one, again.new_cache()), stepped(one, stepped.new_cache()))


def test_a_damaged_int8_copy_is_made_again(tmp_path):
    use_int8_steps(make_model().to(torch.bfloat16).eval(), "tiny", tmp_path)
    (path,) = tmp_path.glob("*.safetensors")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert use_int8_steps(make_model().to(torch.bfloat16).eval(), "tiny", tmp_path) == "made now"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_auto_uses_int8_steps_only_where_measured_faster(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(M, "_time_linear", lambda dtype, rows, reps=9, int8=False: 0.3 if int8 else 1.0)
    assert M.cpu_int8_steps(2)[0] is True
    monkeypatch.setattr(M, "_time_linear", lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert M.cpu_int8_steps(2) == (True, M.cpu_int8_steps(2)[1]) and "earlier" in M.cpu_int8_steps(2)[1]
    monkeypatch.setattr(M, "_time_linear", lambda dtype, rows, reps=9, int8=False: 0.9 if int8 else 1.0)
    assert M.cpu_int8_steps(1)[0] is False  # another thread count: its own measurement


def test_fix_with_dtype_bf16_int8_edits_and_says_so(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--dtype", "bf16-int8", "--verbose")
    assert result.exit_code == 0, result.output
    assert "int8 step weights made now" in result.stderr
    assert "+    return a + b" in result.stdout
