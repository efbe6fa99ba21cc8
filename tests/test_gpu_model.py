"""The models on the GPU, checked without a GPU: the GPU model driver
(python/mojolearn/models/_gpu.py) runs whole tiny models through the reference backend
(models/_gpu_backend.ReferenceBackend: host buffers, every op through the gpu_ref_*
entries, i.e. the device kernels' own per-thread bodies under IEEE mode), and every
logit, cached key and value, and chosen token must be the CPU CausalLM's, bit for bit:
fp32_v1 and fixed15_v1, float32 / bfloat16 / int8 weights, tied and untied heads,
GQA, qkv bias, qwen3's q/k norms, phi3's partial rotary, head_dim 16 / 24 / 32, batch 1 and 3, prompts of different lengths,
prefill then steps, greedy and sampled generation, states saved on one side and
resumed on the other. The new bodies (gather, value-cache append, sampling, argmax)
are checked against numpy oracles on edge values; the refusals by name; the program
ops against the declared native interface. What runs on a real GPU is checked by
bench/device_check.sh (its model step) on a GPU machine.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from bits import assert_same_bits
from mojolearn._core import device as _device, api
from mojolearn._core.loader import cpu_native
from mojolearn.models import CausalLM
from mojolearn.models._exec.device import DeviceTensor, ReferenceBackend
from test_models import TINY, tiny_weights, write_model, ids_for
from test_sampling import oracle as sample_oracle

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {
    # GQA (4 query heads on 2 key/value heads), head_dim 16, untied head
    "gqa_hd16": dict(TINY, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=96),
    # head_dim 24 (the attention scale one ulp below torch's), 3 heads on 1, tied head
    "hd24_tied": dict(TINY, hidden_size=72, num_attention_heads=3, num_key_value_heads=1,
                      intermediate_size=80, tie_word_embeddings=True),
    # qwen2's q/k/v bias, head_dim 32
    "qwen2_hd32": dict(TINY, model_type="qwen2", hidden_size=64, num_attention_heads=2,
                       num_key_value_heads=2, intermediate_size=72),
    # qwen3's per-head q/k RMSNorm (M-33), head_dim 16 apart from hidden / heads
    "qwen3_hd16": dict(TINY, model_type="qwen3", hidden_size=48, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=72),
    # phi3's stacked weights and rotary on 12 of 16 (M-34)
    "phi3_rot12": dict(TINY, model_type="phi3", hidden_size=64, num_attention_heads=4,
                       num_key_value_heads=2, partial_rotary_factor=0.75, intermediate_size=72),
}
FORMATS = ["float32", "bfloat16", "int8"]
PROFILES = ["fp32_v1", "fixed15_v1"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for name, cfg in SHAPES.items():
        w = tiny_weights(cfg, seed=len(name))
        out[name] = (write_model(tmp_path_factory.mktemp(name), cfg, w), cfg)
    return out


def pair(path, profile, fmt, **kw):
    """(the CPU model, the same model on the GPU path run by the reference backend)."""
    cpu = CausalLM.load(path, numeric_profile=profile, weight_format=fmt, device="cpu", **kw)
    gpu = CausalLM.load(path, numeric_profile=profile, weight_format=fmt,
                        _device_backend=ReferenceBackend(), **kw)
    assert cpu.device == "cpu" and gpu.device == "gpu"
    return cpu, gpu


def same_state(cpu, gpu, st_c, st_g, what):
    kt, v = gpu._gpu.state_to_host(st_g)
    assert st_g.length == st_c.length and st_g.numeric_mode == st_c.numeric_mode
    assert_same_bits(kt, st_c.kt, f"{what}: key cache")
    assert_same_bits(v, st_c.v, f"{what}: value cache")


@pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gpu_path_equals_cpu_model(models, shape, profile, fmt):
    """M-1 .. M-27 on the GPU bodies: a batch of 3 (prefill), then prefill of 5 and 3
    steps of 1 (the KV cache appended on the device, positions continuing), and three
    prompts of different lengths one sequence at a time (CausalLM takes a batch of
    equal lengths: ragged ids are refused alike): logits and the cache, bit for bit."""
    path, cfg = models[shape]
    cpu, gpu = pair(path, profile, fmt)
    ids = ids_for(cfg, 3, 8, seed=31)
    assert_same_bits(gpu.forward(ids), cpu.forward(ids), "prefill B=3")
    st_c, st_g = cpu.allocate_state(3, 8), gpu.allocate_state(3, 8)
    assert_same_bits(gpu.forward(ids[:, :5], st_g), cpu.forward(ids[:, :5], st_c), "prefill 5")
    for t in range(5, 8):
        assert_same_bits(gpu.step(ids[:, t:t + 1], st_g), cpu.step(ids[:, t:t + 1], st_c),
                         f"step {t}")
    same_state(cpu, gpu, st_c, st_g, "after 3 steps")
    prompts = [ids[0, :2], ids[1, :5], ids[2, :7]]
    for p in prompts:
        assert_same_bits(gpu.forward(p), cpu.forward(p), f"prompt of {p.size}")
    ragged = [p.tolist() for p in prompts]
    for lm in (cpu, gpu):
        with pytest.raises(ValueError, match="not a rectangle of ints"):
            lm.forward(ragged)


@pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")
@pytest.mark.parametrize("profile", PROFILES)
def test_generation_same_tokens(models, profile):
    """M-32 and greedy choice on the device: greedy and sampled generation (seeded) give
    the CPU model's tokens, batch 1 and 3, with an end token; step with several new
    tokens; generate_text through a tokenizer-like object."""
    path, cfg = models["gqa_hd16"]
    cpu, gpu = pair(path, profile, "float32")
    for B in (1, 3):
        ids = ids_for(cfg, B, 4, seed=40 + B)
        assert np.array_equal(gpu.generate(ids, 6), cpu.generate(ids, 6))
        for seed in (0, 7):
            a = gpu.generate(ids, 6, greedy=False, seed=seed)
            assert np.array_equal(a, cpu.generate(ids, 6, greedy=False, seed=seed))
        eos = int(cpu.generate(ids, 3)[0, -1])
        assert np.array_equal(gpu.generate(ids, 6, eos_token_id=eos),
                              cpu.generate(ids, 6, eos_token_id=eos))
    st_c, st_g = cpu.allocate_state(2, 9), gpu.allocate_state(2, 9)
    ids = ids_for(cfg, 2, 9, seed=44)
    cpu.forward(ids[:, :4], st_c)
    gpu.forward(ids[:, :4], st_g)
    assert_same_bits(gpu.step(ids[:, 4:9], st_g), cpu.step(ids[:, 4:9], st_c), "step of 5")

    class MetalLike(ReferenceBackend):
        api = "metal"  # no float64 on the device: sampled on the host

    on_metal = CausalLM.load(path, numeric_profile=profile, _device_backend=MetalLike())
    ids = ids_for(cfg, 3, 4, seed=45)
    assert np.array_equal(on_metal.generate(ids, 5, greedy=False, seed=3),
                          cpu.generate(ids, 5, greedy=False, seed=3))

    class Tok:
        def encode(self, text):
            return [ord(ch) % cfg["vocab_size"] for ch in text]

        def decode(self, ids):
            return " ".join(map(str, ids))

    assert gpu.generate_text("hello", 4, tokenizer=Tok()) == \
        cpu.generate_text("hello", 4, tokenizer=Tok())


@pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")
@pytest.mark.parametrize("profile,fmt", [("fp32_v1", "int8"), ("fixed15_v1", "bfloat16")])
def test_state_saved_on_one_side_resumes_on_the_other(models, tmp_path, profile, fmt):
    """M-18: a state saved by the CPU model resumes on the GPU path and the other way
    round; the files hold the same tensors and the next steps the same bits."""
    path, cfg = models["hd24_tied"]
    cpu, gpu = pair(path, profile, fmt)
    states_move_between_devices(cpu, gpu, ids_for(cfg, 2, 9, seed=50), tmp_path)


def states_move_between_devices(cpu, gpu, ids, tmp_path):
    """ids (2, 9): 6 tokens prefilled on each side, each side's state saved; the two files
    hold the same tensors; each resumes on the other side and 3 more steps give the CPU's
    bits (also used by tests/test_gpu_mamba.py)."""
    from mojolearn import checkpoint

    st_c, st_g = cpu.allocate_state(2, 9), gpu.allocate_state(2, 9)
    cpu.forward(ids[:, :6], st_c)
    gpu.forward(ids[:, :6], st_g)
    cpu.save_state(tmp_path / "c.safetensors", st_c)
    gpu.save_state(tmp_path / "g.safetensors", st_g)
    a = checkpoint.load(tmp_path / "c.safetensors").weights
    b = checkpoint.load(tmp_path / "g.safetensors").weights
    assert sorted(a) == sorted(b)
    for k in a:
        assert_same_bits(np.asarray(b[k]), np.asarray(a[k]), k)
    on_gpu = gpu.resume(tmp_path / "c.safetensors")
    on_cpu = cpu.resume(tmp_path / "g.safetensors")
    assert on_gpu.device == "gpu" and on_cpu.device == "cpu" and "device='gpu'" in repr(on_gpu)
    for t in range(6, 9):
        want = cpu.step(ids[:, t:t + 1], st_c)
        assert_same_bits(gpu.step(ids[:, t:t + 1], on_gpu), want, f"cpu -> gpu, step {t}")
        assert_same_bits(cpu.step(ids[:, t:t + 1], on_cpu), want, f"gpu -> cpu, step {t}")


def test_device_output_is_a_dlpack_tensor_without_copy(models):
    """forward / step with output='device': a DLPack producer over the device buffer
    itself (here the reference backend's host memory, so numpy reads it); the same
    bits as output='host'."""
    path, cfg = models["gqa_hd16"]
    cpu, gpu = pair(path, "fp32_v1", "float32")
    ids = ids_for(cfg, 2, 5, seed=60)
    t = gpu.forward(ids, output="device")
    assert isinstance(t, DeviceTensor) and t.shape == (2, 5, cfg["vocab_size"])
    a = np.from_dlpack(t)
    assert a.ctypes.data == t._buf.addr  # no copy
    assert_same_bits(a, cpu.forward(ids), "device output")
    assert_same_bits(t.numpy(), a, "numpy()")
    st = gpu.allocate_state(2, 6)
    gpu.forward(ids, st)
    s = gpu.step(ids[:, :1], st, output="device")
    assert s.shape == (2, cfg["vocab_size"])
    st_c = cpu.allocate_state(2, 6)
    cpu.forward(ids, st_c)
    assert_same_bits(np.from_dlpack(s), cpu.step(ids[:, :1], st_c), "step device output")
    del t
    assert a.sum() == a.sum()  # the consumer keeps the buffer alive
    with pytest.raises(ValueError, match="this model runs on the CPU"):
        cpu.forward(ids, output="device")
    with pytest.raises(ValueError, match="output='gpu'"):
        gpu.forward(ids, output="gpu")


def test_driver_emits_only_declared_program_ops(models):
    """Every op the driver writes is a gpu_ref_* entry of the CPU extension (the
    reference backend runs it) and an op the GPU build's program runner knows, with
    the same argument tuple: the runner's comment in model_launch.mojo names the
    gpu_ref entry's arguments (_native_api.py) item for item."""
    launch = (ROOT / "mojo/transformer/gpu/model_launch.mojo").read_text()
    entry = (ROOT / "mojo/transformer/gpu/model_entry.mojo").read_text()
    names = dict(re.findall(r'if name == "(\w+)":\n\s+return M\.(OP_\w+)', entry))
    commented = dict(re.findall(r"op == (OP_\w+):\s*#\s*\(([^)]*)\)", launch))
    assert names and len(commented) == len(names), (names, commented)
    for name, code in names.items():
        e = api.BY_NAME.get("gpu_ref_" + name)
        assert e is not None, f"program op {name} has no gpu_ref_{name} entry"
        got = tuple(a.strip() for a in commented[code].split(","))
        want = tuple(re.sub(r"_(f32|i8|i32|i64|u16)$", "", a) for a in e.args)
        assert got == want, (name, got, want)
    path, cfg = models["qwen2_hd32"]
    used = set()
    for profile, fmt in (("fp32_v1", "int8"), ("fixed15_v1", "float32"), ("fp32_v1", "bfloat16")):
        be = ReferenceBackend()
        lm = CausalLM.load(path, numeric_profile=profile, weight_format=fmt, _device_backend=be)
        lm.generate(ids_for(cfg, 2, 3), 2)
        lm.generate(ids_for(cfg, 1, 3), 2, greedy=False, seed=1)
        used |= set(be.ops_run)
    assert used <= set(names), sorted(used - set(names))
    # the ssm_* ops are the Mamba driver's (tests/test_gpu_mamba.py checks their use)
    mine = {n for n in names if not n.startswith("ssm_")}
    assert used == mine, f"ops never used by the driver: {sorted(mine - used)}"


# ---------------------------------------------------------------- the new bodies
def _edge_rows(rng, rows, n):
    x = rng.standard_normal((rows, n)).astype(np.float32) * np.float32(3)
    bits = x.view(np.uint32)
    bits[0, :4] = [0x00000001, 0x80000003, 0x7FC12345, 0xFFA00001]  # subnormals, NaN payloads
    bits[1, :3] = [0x80000000, 0x00000000, 0x7F800000]
    return x


def test_gather_and_kv_append_bodies_copy_bits():
    """M-2 and M-18: the gather and the value-cache append move bits (subnormals and
    NaN payloads kept, nothing flushed), as numpy's indexing does."""
    rng = np.random.default_rng(70)
    table = _edge_rows(rng, 9, 13)
    ids = np.array([3, 0, 1, 8, 1], dtype=np.int64)
    out = np.full((5, 13), np.nan, np.float32)
    cpu_native().gpu_ref_nn_gather((table.ctypes.data, ids.ctypes.data, out.ctypes.data, 5, 13))
    assert np.array_equal(out.view(np.uint32), table[ids].view(np.uint32))
    B, L, kvh, hd, tmax, pos0 = 2, 3, 2, 4, 7, 2
    lds = 3 * kvh * hd
    src = _edge_rows(rng, B * L, lds)
    cache = np.zeros((B, kvh, tmax, hd), np.float32)
    off = kvh * hd  # the values start one head group into each row
    cpu_native().gpu_ref_nn_kv_append((src.ctypes.data + 4 * off, lds, cache.ctypes.data, kvh, hd,
                                       pos0, L, B * L, tmax))
    want = np.zeros_like(cache)
    want[:, :, pos0:pos0 + L, :] = src[:, off:off + kvh * hd].reshape(B, L, kvh, hd).transpose(
        0, 2, 1, 3)
    assert np.array_equal(cache.view(np.uint32), want.view(np.uint32))


def test_sample_body_equals_the_oracle_and_the_cpu_kernel():
    """M-32: the GPU sampling body on random rows and edges (ties, a zero-weight head, a
    NaN, +inf, rows of -inf, subnormal logits, draws 0 and just below 1) against the
    numpy oracle of tests/test_sampling.py and the CPU kernel."""
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(71)
    rows = []
    for n in (1, 2, 7, 33, 300):
        rows += [(rng.standard_normal(n) * s).astype(np.float32) for s in (1e-3, 1.0, 40.0)]
    rows += [np.zeros(8, np.float32), np.array([-1e4, -1e4, 0.0, -1e4, 0.5], np.float32),
             np.array([1.0, np.nan, 2.0], np.float32), np.array([0.0, np.inf, 1.0], np.float32),
             np.full(4, -np.inf, np.float32), np.array([1e-40, -1e-40, 0.0, -0.0], np.float32),
             np.array([3e38, -3e38, 3e38], np.float32)]
    for row in rows:
        n = row.size
        for r in (0.0, 0.25, 0.5, float(rng.random()), float(np.nextafter(1.0, 0.0))):
            x = np.ascontiguousarray(row[None, :])
            rr = np.array([r], np.float64)
            got = np.empty(1, np.int64)
            cpu_native().gpu_ref_nn_sample((x.ctypes.data, 1, n, rr.ctypes.data, got.ctypes.data))
            assert got[0] == sample_oracle(row, r), (row, r, got[0])
            assert got[0] == K.sample_rows(x, rr)[0]


def test_argmax_body_is_numpys_argmax():
    """Greedy choice: the first largest logit (ties to the first; +0 and -0 equal;
    subnormals by value; the first NaN when there is one; a row of -inf: 0)."""
    rng = np.random.default_rng(72)
    rows = [rng.standard_normal(n).astype(np.float32) for n in (1, 2, 5, 64, 1000)]
    rows += [np.array(v, np.float32) for v in (
        [1.0, 3.0, 3.0, 2.0], [-0.0, 0.0], [0.0, -0.0], [1e-45, 2e-45, 1e-45], [-1e-40, -2e-40],
        [1.0, np.nan, 5.0, np.nan], [np.nan, 1.0], [-np.inf, -np.inf], [np.inf, 1.0, np.inf],
        [-3.0, -1.0, -2.0])]
    for row in rows:
        x = np.ascontiguousarray(row[None, :])
        got = np.empty(1, np.int64)
        cpu_native().gpu_ref_nn_argmax((x.ctypes.data, 1, row.size, got.ctypes.data))
        assert got[0] == np.argmax(row), (row, got[0])


# ---------------------------------------------------------------- refusals by name
def test_no_gpu_is_refused_by_name_before_reading(tmp_path, monkeypatch, models):
    """device='gpu' (or the process device 'gpu') with no GPU build or no device:
    RuntimeError naming the reason and device='cpu', raised before the file is read
    (a path that does not exist is not even looked at); never a CPU model instead."""
    if _device.gpu_status()[0] is not None:
        pytest.skip("a GPU build runs here: the refusal of a missing GPU cannot be seen")
    missing = tmp_path / "no-such-model"
    for dev in ("gpu", "gpu:0", " GPU "):
        with pytest.raises(RuntimeError, match=r"asks for the GPU, but no GPU backend works "
                                               r"here: .*pass device='cpu'"):
            CausalLM.load(missing, device=dev)
    path, cfg = models["gqa_hd16"]
    monkeypatch.setattr(_device, "_choice", "gpu")
    with pytest.raises(RuntimeError, match="the process device"):
        CausalLM.load(path)
    monkeypatch.setattr(_device, "_choice", "auto")
    assert CausalLM.load(path).device == "cpu"  # auto: no GPU here, the CPU (as linalg)
    monkeypatch.setattr(_device, "_choice", "cpu")
    assert CausalLM.load(path).device == "cpu"


@pytest.mark.parametrize("device,err,match", [
    ("gpu:1", ValueError, r"device 0 only; .*CUDA_VISIBLE_DEVICES=1"),
    ("cuda", ValueError, "is not a device; use 'cpu', 'gpu'"),
    ("gpu-reference", ValueError, "is not a device"),
    ("", ValueError, "is not a device"),
    (0, TypeError, "device must be a str"),
])
def test_bad_device_names(models, device, err, match):
    path, _ = models["gqa_hd16"]
    with pytest.raises(err, match=match):
        CausalLM.load(path, device=device)


@pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")
def test_states_of_another_device_model_or_profile_are_refused(models):
    """A GPU model refuses a host state (a CPU model's), a state of another model and a
    state of the other profile; a CPU model refuses a GPU state; by name, with the
    way out (save_state / resume, allocate_state). Nothing is changed by a refusal."""
    path, cfg = models["gqa_hd16"]
    cpu, gpu = pair(path, "fp32_v1", "float32")
    gpu15 = CausalLM.load(path, numeric_profile="fixed15_v1", _device_backend=ReferenceBackend())
    other = CausalLM.load(models["qwen2_hd32"][0], _device_backend=ReferenceBackend())
    ids = ids_for(cfg, 1, 3)
    host = cpu.allocate_state(1, 4)
    with pytest.raises(ValueError, match=r"state lives in host memory .* runs on 'gpu'.*"
                                         r"save_state it with its model and resume it"):
        gpu.forward(ids, host)
    dev = gpu.allocate_state(1, 4)
    with pytest.raises(ValueError, match=r"state lives in GPU memory, but this model runs on 'cpu'"):
        cpu.step(ids[:, :1], dev)
    with pytest.raises(ValueError, match=r"another numeric profile \(fp32_v1\)"):
        gpu15.forward(ids, dev)
    with pytest.raises(ValueError, match="another model"):
        other.forward(ids, dev)
    assert dev.length == 0 and host.length == 0
    dev.kt = host.kt  # a field changed from outside
    with pytest.raises(ValueError, match="changed from outside"):
        gpu.forward(ids, dev)


def test_model_too_large_for_the_device_is_refused_before_upload(models):
    """A model whose weights do not fit the device's free memory is refused by name
    (MemoryError naming the bytes, the parts and the ways out) before anything is
    uploaded; a state too large for what is left, likewise."""
    path, cfg = models["gqa_hd16"]
    be = ReferenceBackend(memory_bytes=10_000)
    with pytest.raises(MemoryError, match=r"needs \d+ bytes of GPU memory .* nothing was "
                                          r"uploaded: use weight_format='int8'"):
        CausalLM.load(path, _device_backend=be)
    assert be.used == 0
    be = ReferenceBackend(memory_bytes=400_000)
    lm = CausalLM.load(path, _device_backend=be)
    with pytest.raises(MemoryError, match=r"allocate_state: a state of batch_size 64 .* bytes "
                                          r"of GPU memory"):
        lm.allocate_state(64, 64)


def test_held_bytes_on_the_device(models):
    """held(): the device bytes by stored format (projections as stored, head float32
    rows or int15 codes, a tied fp32_v1 head shares the embedding)."""
    path, cfg = models["hd24_tied"]
    for profile, fmt, kind, per in (("fp32_v1", "bfloat16", "bfloat16", lambda n, k: 2 * n * k),
                                    ("fp32_v1", "int8", "int8", lambda n, k: n * k + 4 * n),
                                    ("fixed15_v1", "float32", "int15",
                                     lambda n, k: 2 * n * k + 4 * n)):
        lm = CausalLM.load(path, numeric_profile=profile, weight_format=fmt,
                           _device_backend=ReferenceBackend())
        d, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
        hd = d // cfg["num_attention_heads"]
        nq, nk, ff = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, \
            cfg["intermediate_size"]
        projs = [(nq + 2 * nk, d), (d, nq), (2 * ff, d), (d, ff)]
        want = {"float32": 4 * d * (2 * L + 1) + 4 * V * d}
        want[kind] = L * sum(per(n, k) for n, k in projs)
        if profile == "fixed15_v1":
            want["int15"] += 2 * V * d + 4 * V
        assert lm.held() == want and lm.nbytes() == sum(want.values())


# ---------------------------------------------------------------- the GPU build itself
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_gpu_module_builds_as_a_shared_library(tmp_path, arch):
    """The GPU build with the model's program runner links for NVIDIA and AMD (the
    offline compile of make gpu-compile compiles each kernel alone; a shared library
    compiles the launches too: the AMD backend refused the attention scale and the
    RoPE table's logf of a uniform value there until the host side computed them)."""
    import os
    import subprocess

    mojo = ROOT / ".venv" / "bin" / "mojo"
    if not mojo.exists():
        pytest.skip("no Mojo toolchain in .venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(mojo), "build", "mojo/_native_gpu.mojo", "-I", "mojo", "--emit",
                        "shared-lib", "--target-accelerator", arch, "-o",
                        str(tmp_path / "_native_gpu.so")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and (tmp_path / "_native_gpu.so").exists(), r.stderr[-3000:]


# ---------------------------------------------------------------- the device check's model step
def _model_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_model_check",
                                                  ROOT / "bench" / "device_model_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.BAD.clear()
    return mod


@pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")
def test_device_model_check_runs_every_arm_on_the_reference_backend(tmp_path, capsys):
    """bench/device_model_check.py (device_check's step 8) on the CPU run of the GPU
    bodies: the tiny arms (transformer and Mamba), the sabotage arm seen failing, and with a small checkpoint
    as the model the prefill / decode bits and the timing code; no result file."""
    dmc = _model_check()
    path, _ = dmc.tiny_checkpoint(str(tmp_path / "m"), True, 1)
    assert dmc.main(["--reference", "--model", path, "--prefill", "16", "--steps", "2",
                     "--reps", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("same bits") == 12 + 6 + 2 + 4 + 1 and out.count("DIFFER") == 3, out
    assert "reference run of every arm ok" in out and not list(tmp_path.glob("*.json"))


def test_device_model_check_writes_the_measured_row(tmp_path, monkeypatch):
    """The step's result file is a MEASURED row of the GPU's vendor (cuda / hip): box
    the GPU's name, what was timed, its source file under bench/results/."""
    from mojolearn._table import measured as PM

    dmc = _model_check()
    monkeypatch.setattr(_device, "gpu_status", lambda: (object(), "cuda", "NVIDIA H200"))
    rows = {"prefill": {}, "decode_per_token": {}, "torch": None,
            "fixed15_over_fp32_prefill": {"lo": 0.9, "hi": 1.2, "median": 1.0}}

    class A:
        out, arch, prefill, steps, reps = str(tmp_path), "sm_90", 512, 16, 5

    dmc.write_results(rows, "/x/SmolLM2-135M-Instruct.Q4_1.gguf", A)
    (f,) = tmp_path.glob("model-gpu-*.json")
    assert f.name == "model-gpu-nvidia-h200-sm_90.json"
    ((prof, vendor, row),) = PM._parse_file(f)
    assert (prof, vendor, row["over"], row["box"]) == ("fixed15_v1", "cuda", (0.9, 1.2),
                                                        "NVIDIA H200")
    assert "prefill of 512 tokens" in row["what"] and row["source"].startswith(
        "bench/results/model-gpu-nvidia-h200-sm_90.json")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("profile", PROFILES)
def test_transformer_block_on_the_gpu_path(models, profile, fmt):
    """M-4 .. M-17, M-27 for the block alone: TransformerBlock(device='gpu') through the
    CPU run of the GPU bodies equals the CPU block, bit for bit (GQA with a qkv bias,
    batch 2 of 5 tokens; an empty batch gives an empty result)."""
    from mojolearn.models import TransformerBlock

    cfg = SHAPES["qwen2_hd32"]
    w = tiny_weights(dict(cfg, num_attention_heads=4, num_key_value_heads=2, hidden_size=64),
                     seed=80)
    bw = {k[len("model.layers.0."):]: v for k, v in w.items() if k.startswith("model.layers.0.")}
    kw = dict(n_heads=4, n_kv_heads=2, rms_norm_eps=1e-5, max_positions=16, qkv_bias=True,
              numeric_profile=profile, weight_format=fmt)
    cpu = TransformerBlock(bw, device="cpu", **kw)
    gpu = TransformerBlock(bw, _device_backend=ReferenceBackend(), **kw)
    assert (cpu.device, gpu.device) == ("cpu", "gpu")
    x = np.random.default_rng(81).standard_normal((2, 5, 64)).astype(np.float32)
    assert_same_bits(gpu(x), cpu(x), "block")
    assert gpu(np.zeros((0, 5, 64), np.float32)).shape == (0, 5, 64)
