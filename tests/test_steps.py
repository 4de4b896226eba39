"""One-token steps through int8 and int4 weight copies (cadedit.backends.torch.steps): numbers, the GGUF's own 4-bit
blocks, the on-disk copy, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import cadedit.backends.hardware as M
from cadedit.text.document import Document
from cadedit.backends.llama.gguf_file import FOUR_BIT, decode_four_bit, four_bit_layers, four_bit_tensors
from cadedit.errors import ModelError
from cadedit.backends.torch.steps import (
    EXACT_TOP,
    StepLinear,
    pack_int4,
    quantize,
    quantize_int4,
    unpack_int4,
    use_step_weights,
)
from tests.conftest import console_script
from tests.test_rewrite import BEFORE as COLORS
from tests.test_rewrite import editing_model
from tests.test_tries_cli import GOOD, _models, fix, load_once, scripted, start_cadedit, work  # noqa: F401 - fixtures
from tests.tinygguf import save_gguf
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
    assert use_step_weights(stepped, "tiny", root=tmp_path) == "int8, made now"
    assert sum(isinstance(m, StepLinear) for m in stepped.modules()) == 2 * 7 + 1  # 7 per layer + the LM head
    ids = torch.tensor([5, 17, 40, 2, 99, 7])
    with torch.inference_mode():
        assert torch.equal(plain(ids, plain.new_cache(), 6), stepped(ids, stepped.new_cache(), 6))
        one = torch.tensor([33])
        a, b = plain(one, plain.new_cache()).float(), stepped(one, stepped.new_cache()).float()
    assert (a - b).abs().max() < 0.1 * a.abs().max()
    again = make_model().to(torch.bfloat16).eval()
    assert use_step_weights(again, "tiny", root=tmp_path) == "int8, from the cache"
    with torch.inference_mode():
        assert torch.equal(again(one, again.new_cache()), stepped(one, stepped.new_cache()))


def test_a_damaged_int8_copy_is_made_again(tmp_path):
    use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path)
    (path,) = tmp_path.glob("*.safetensors")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert (
        use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path)
        == "int8, made again (the cached copy was damaged)"
    )
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def _kernels(**times):
    return lambda dtype, rows, reps=9, step="", shape=None: times[step or "bf16"]


def test_auto_uses_a_step_kernel_only_where_measured_faster(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(M, "_time_linear", _kernels(bf16=1.0, int8=0.3, int4=0.2))
    assert M.cpu_steps(2)[0] == "int4"
    monkeypatch.setattr(M, "_time_linear", lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured again")))
    assert M.cpu_steps(2)[0] == "int4" and "earlier" in M.cpu_steps(2)[1]
    monkeypatch.setattr(M, "_time_linear", _kernels(bf16=1.0, int8=0.5, int4=0.48))
    assert M.cpu_steps(1)[0] == "int8"  # another thread count: its own measurement; int4 not 0.9x int8's
    monkeypatch.setattr(M, "_time_linear", _kernels(bf16=1.0, int8=0.9, int4=0.1))
    assert M.cpu_steps(3)[0] == "bf16"


def test_the_step_kernels_measure_for_real():
    assert M._time_linear(torch.bfloat16, 1, reps=1, step="int4", shape=(64, 64)) > 0
    assert M._time_linear(torch.bfloat16, 1, reps=1, step="int8", shape=(64, 64)) > 0


# -- the GGUF's own 4-bit weights --------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(FOUR_BIT))
def test_four_bit_blocks_decode_to_what_the_gguf_package_dequantises(kind):
    size, per = FOUR_BIT[kind]
    rows, cols = 16, 512
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (rows, cols // per * size), dtype=np.uint8)
    blocks = raw.reshape(-1, size)
    for start in (0, 2) if kind != "Q4_0" else (0,):  # finite fp16 scales (and mins)
        blocks[:, start : start + 2] = rng.uniform(-0.05, 0.05, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    want = gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, kind)).reshape(rows, cols)
    q, scale, low = decode_four_bit(raw, kind, rows, cols)
    assert q.dtype == np.uint8 and q.max() <= 15 and scale.shape == low.shape == (rows, cols // 32)
    assert np.array_equal((q.reshape(rows, -1, 32) * scale[..., None] + low[..., None]).reshape(rows, cols), want)


def test_an_int4_step_computes_with_the_4_bit_weight_itself():
    rng = np.random.default_rng(1)
    q = rng.integers(0, 16, (48, 128), dtype=np.uint8)
    scale, low = (
        rng.uniform(0.001, 0.02, (48, 4)).astype(np.float32),
        rng.uniform(-0.1, 0.0, (48, 4)).astype(np.float32),
    )
    weight = unpack_int4(q, scale, low)
    linear = torch.nn.Linear(128, 48, bias=True).to(torch.bfloat16)
    linear.weight.data = weight.to(torch.bfloat16)
    step = StepLinear(linear, *pack_int4(q, scale, low))
    assert step.int4
    one = torch.randn(1, 1, 128, dtype=torch.bfloat16)
    want = one.float() @ weight.t() + linear.bias.float()
    assert (step(one).float() - want).abs().max() < 0.02 * want.abs().max()
    many = torch.randn(1, 3, 128, dtype=torch.bfloat16)
    assert torch.equal(step(many), linear(many))


def test_quantize_int4_rounds_each_weight_to_within_half_a_step():
    weight = torch.randn(48, 96)
    q, scale, low = quantize_int4(weight)
    assert q.dtype == torch.uint8 and int(q.max()) <= 15 and scale.shape == low.shape == (48, 3)
    error = (q.float().reshape(48, 3, 32) * scale[..., None] + low[..., None]).reshape(48, 96) - weight
    assert (error.abs().reshape(48, 3, 32).amax(-1) <= scale / 2 + 1e-6).all()


def test_an_int4_lm_head_computes_its_highest_logits_from_its_own_weight():
    torch.manual_seed(3)
    head = torch.nn.Linear(64, 768, bias=False).to(torch.bfloat16)
    step = StepLinear(head, *pack_int4(*quantize_int4(head.weight)), exact_top=EXACT_TOP)
    for _ in range(5):
        x = torch.randn(1, 1, 64, dtype=torch.bfloat16)
        got, want = step(x)[0, 0], head(x)[0, 0]
        best = want.topk(8).indices  # the logits that decide: exact, so the argmax is the layer's own
        assert torch.equal(got[best], want[best]) and int(got.argmax()) == int(want.argmax())
        assert not torch.equal(got, want)  # the rest came from the 4-bit copy


def test_int4_steps_on_a_model_folder_give_the_lm_head_alone_an_int4_copy(tmp_path):
    model = make_model().to(torch.bfloat16).eval()
    assert (
        use_step_weights(model, "tiny", {}, root=tmp_path, int4_head=True)
        == "int4 for 1 of 15 layers (the rest int8), made now"
    )
    assert model.lm_head.int4 and model.lm_head.exact_top == EXACT_TOP and not model.model.layers[0].mlp.up_proj.int4


@pytest.fixture(scope="module")
def q4_gguf(tmp_path_factory):
    """test_rewrite's teal -> green model with its linear layers stored as Q4_0."""
    model = editing_model(Document.from_text(COLORS, "colors.txt")).model
    return save_gguf(tmp_path_factory.mktemp("q4") / "teal-q4_0.gguf", model=model, quant="Q4_0")


def test_the_ggufs_4_bit_tensors_are_found_by_layer_name(q4_gguf):
    layers = four_bit_layers(q4_gguf)
    assert len(layers) == 2 * 7 + 1 and "model.layers.1.mlp.down_proj" in layers and "lm_head" in layers
    q, scale, _ = layers["model.layers.0.self_attn.k_proj"]()
    assert q.shape == (32, 64) and scale.shape == (32, 2)


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_1"])
def test_the_4_bit_tensors_read_from_the_mapped_file_are_what_the_gguf_package_reads(tmp_path, quant):
    """The tensor infos cadedit reads itself (no gguf package at load) place every 4-bit tensor's
    blocks where the gguf package's reader finds them."""
    model = editing_model(Document.from_text(COLORS, "colors.txt")).model
    path = save_gguf(tmp_path / f"teal-{quant}.gguf", model=model, quant=quant)
    found, names = four_bit_tensors(path)
    reader = gguf.GGUFReader(str(path))
    assert names == {tensor.name for tensor in reader.tensors}
    four_bit = [t for t in reader.tensors if t.tensor_type.name == quant]
    assert sorted(found) == sorted(t.name for t in four_bit) and len(found) == 2 * 7 + 1
    for tensor in four_bit:
        cols, rows = (int(n) for n in tensor.shape)
        want = decode_four_bit(np.asarray(tensor.data), quant, rows, cols)
        assert all(np.array_equal(a, b) for a, b in zip(found[tensor.name](), want))


def test_a_gguf_cut_inside_its_4_bit_tensors_is_a_one_line_error(q4_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(q4_gguf.read_bytes()[:-1000])
    with pytest.raises(ModelError, match=r"cut\.gguf: not a whole GGUF file \(tensor '.*' runs past its end\)"):
        four_bit_tensors(cut)


def test_a_4_bit_layer_that_is_not_the_models_own_weight_gets_int8(tmp_path):
    model = make_model().to(torch.bfloat16).eval()
    rng = np.random.default_rng(2)
    wrong = (
        rng.integers(0, 16, (64, 64), dtype=np.uint8),
        np.full((64, 2), 1e-3, np.float32),
        np.zeros((64, 2), np.float32),
    )
    said = use_step_weights(model, "tiny", {"model.layers.0.self_attn.q_proj": lambda: wrong}, root=tmp_path)
    assert said == "int8, made now"


def _cli(*args: str, cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script(), *args], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_fix_with_int4_steps_uses_the_ggufs_own_4_bit_weights_and_edits_as_bf16_does(q4_gguf, tmp_path):
    (tmp_path / "colors.txt").write_bytes(b"red:\r\nteal;\r\nblue)\r\n")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = (
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(q4_gguf),
        "--backend",
        "torch",
        "--threads",
        "1",
        "--tries",
        "1",
        "--json",
    )
    plain = _cli(*args, "--dtype", "bf16", cwd=tmp_path, env=env)
    assert plain.returncode == 0, plain.stderr
    stepped = _cli(*args, "--dtype", "bf16-int4", "--verbose", cwd=tmp_path, env=env)
    assert stepped.returncode == 0, stepped.stderr
    assert "step weights int4 for 15 of 15 layers (the rest int8), made now" in stepped.stderr
    assert json.loads(stepped.stdout)["diff"] == json.loads(plain.stdout)["diff"]
    assert "+green;" in json.loads(stepped.stdout)["diff"]
    again = _cli(*args, "--dtype", "bf16-int4", "--verbose", cwd=tmp_path, env=env)
    assert "int4 for 15 of 15 layers (the rest int8), from the cache" in again.stderr


def test_fix_with_dtype_bf16_int8_edits_and_says_so(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--dtype", "bf16-int8", "--verbose")
    assert result.exit_code == 0, result.output
    assert "step weights int8, made now" in result.stderr
    assert "+    return a + b" in result.stdout


@pytest.mark.parametrize("part", ["scale", "q"])
def test_fix_with_a_damaged_int8_cache_entry_makes_it_again_and_edits(work, tiny_dir, part):
    """An entry whose tensors load but do not fit the model (half-written, damaged): never run, made again."""

    def run() -> tuple[int, str, str]:
        proc = start_cadedit(work, tiny_dir, "--dtype", "bf16-int8", "--tries", "1", "--verbose")
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out.decode(), err.decode()

    assert run()[0] == 0
    (path,) = (Path(os.environ["XDG_CACHE_HOME"]) / "cadedit" / "int8").glob("*.safetensors")
    tensors = load_file(str(path))
    save_file({k: v[:3].contiguous() if k.endswith(f".{part}") else v for k, v in tensors.items()}, str(path))
    code, out, err = run()
    assert code == 0 and "internal error" not in err, err
    assert "+    return a + b" in out
    assert f"{path}: a damaged copy of the one-token step weights; making it again" in err
    assert "step weights int8, made again (the cached copy was damaged)" in err
    assert "step weights int8, from the cache" in run()[2]


# -- tools/as-avx2.sh: cadedit as on an AVX2-only CPU ---------------------------------------------


def test_as_avx2_caps_torchs_kernels_and_puts_the_avx2_llama_build_first(tmp_path):
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "tools" / "as-avx2.sh"
    build = tmp_path / "build"
    (build / "llama_cpp").mkdir(parents=True)
    (build / "llama_cpp" / "__init__.py").write_text("BUILD = 'avx2'\n")
    probe = (
        "import os, llama_cpp, torch; print(os.environ['ONEDNN_MAX_CPU_ISA'], llama_cpp.BUILD, "
        "torch.backends.cpu.get_cpu_capability())"
    )
    done = subprocess.run(
        [str(script), sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CADEDIT_AVX2_LLAMA": str(build)},
    )
    assert done.returncode == 0, done.stderr
    isa, build_name, capability = done.stdout.split()
    assert (isa, build_name) == ("AVX2", "avx2") and capability in ("AVX2", "DEFAULT")  # never AVX512
    missing = subprocess.run(
        [str(script), "true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CADEDIT_AVX2_LLAMA": str(tmp_path / "none")},
    )
    assert missing.returncode == 1 and "no AVX2 llama.cpp build" in missing.stderr


def test_making_the_step_weights_is_announced_and_loading_them_is_not(tmp_path):
    """A first run says it is making the copies (it took minutes, silently); a later one loads them quietly."""
    told = []
    use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path, announce=told.append)
    assert len(told) == 1 and "making the compact one-token step weights" in told[0]
    use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path, announce=told.append)
    assert len(told) == 1


@pytest.mark.parametrize("how", ["folder others may write", "copy of another user"])
def test_int8_copies_another_user_could_plant_are_neither_read_nor_written(tmp_path, how):
    use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path)
    (path,) = tmp_path.glob("*.safetensors")
    if how == "folder others may write":
        tmp_path.chmod(0o777)
    else:
        os.chown(path, 12345, 12345)
    said = use_step_weights(make_model().to(torch.bfloat16).eval(), "tiny", root=tmp_path)
    assert said.startswith("int8, made now, not cached (") and "not this user's own" in said
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
