"""The Mamba models on the GPU, checked without a GPU (rules S-* of
contracts/ops/IDENTICAL_SSM_CONTRACT.md): the GPU Mamba driver
(python/mojolearn/models/_ssm/gpu.py) runs whole tiny Mamba-1 and Mamba-2 checkpoints
through the reference backend (models/_exec/device.ReferenceBackend: host buffers
filled with NaN bytes, every op through the gpu_ref_* entries, i.e. the device
kernels' own per-thread bodies under IEEE mode), and every logit, every part of the
decode state and every chosen token must be the CPU MambaLM's, bit for bit: forward,
prefill then steps, generate (greedy and sampled), float32 / bfloat16 / int8
projections, tied and untied heads, S-7's clamp, states saved on one side and resumed
on the other, logits left on the device. The refusals by name; the program ops
against the declared native interface. Nothing here has run on a GPU: what a device
computes is checked by a device run, which has not happened yet."""
import re
from pathlib import Path

import numpy as np
import pytest

import mamba_oracle as SO
from bits import assert_same_bits
from mojolearn._core import api, device as _device
from mojolearn.models import CausalLM
from mojolearn.models._exec.device import DeviceTensor, ReferenceBackend
from mojolearn.models._ssm import gpu as G
from test_gpu_model import states_move_between_devices
from test_models_mamba import M1, M1_TIED, M2, M2_LIMIT

pytestmark = pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"m1": M1, "m1_tied": M1_TIED, "m2": M2, "m2_limit": M2_LIMIT}
FORMATS = ["float32", "bfloat16", "int8"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for i, (name, cfg) in enumerate(CONFIGS.items()):
        path = tmp_path_factory.mktemp(name)
        SO.write_checkpoint(str(path), cfg, SO.random_weights(cfg, seed=80 + i))
        out[name] = (str(path), cfg)
    return out


def _ids(cfg, B, L, seed=1):
    return np.random.default_rng(seed).integers(0, cfg["vocab_size"], size=(B, L))


def pair(path, fmt="float32", backend=None):
    """(the CPU model, the same model on the GPU path run by the reference backend)."""
    cpu = CausalLM.load(path, weight_format=fmt, device="cpu")
    gpu = CausalLM.load(path, weight_format=fmt, _device_backend=backend or ReferenceBackend())
    assert cpu.device == "cpu" and gpu.device == "gpu" and gpu._gpu is not None
    return cpu, gpu


def same_state(gpu, st_c, st_g, what):
    got = gpu._gpu.state_to_host(st_g)
    want = st_c.arrays()
    assert st_g.length == st_c.length and sorted(got) == sorted(want)
    for nm in want:
        assert_same_bits(got[nm], want[nm], f"{what}: {nm}")


# ---------------------------------------------------------------- the bits
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_gpu_path_equals_cpu_model(models, name, fmt):
    """S-1 .. S-25 on the GPU bodies (S-10 norm lanes, S-13 conv, S-14 / S-19 softplus
    and S-7's clamp, S-15 A, Mamba-1's S-16 .. S-18 scan, Mamba-2's S-20 .. S-25 SSD,
    S-30's weight formats): a batch of 3 (prefill), then prefill of 4, steps of 1 and a
    prefill of 2 more (S-26 .. S-29: the state advanced on the device), each row alone:
    logits and every part of the state, bit for bit."""
    path, cfg = models[name]
    cpu, gpu = pair(path, fmt)
    ids = _ids(cfg, 3, 9, seed=31)
    assert_same_bits(gpu.forward(ids), cpu.forward(ids), "prefill B=3")
    st_c, st_g = cpu.allocate_state(3, 9), gpu.allocate_state(3, 9)
    assert_same_bits(gpu.forward(ids[:, :4], st_g), cpu.forward(ids[:, :4], st_c), "prefill 4")
    same_state(gpu, st_c, st_g, "after prefill")
    for t in range(4, 7):
        assert_same_bits(gpu.step(ids[:, t:t + 1], st_g), cpu.step(ids[:, t:t + 1], st_c),
                         f"step {t}")
    assert_same_bits(gpu.forward(ids[:, 7:], st_g), cpu.forward(ids[:, 7:], st_c), "prefill 2")
    same_state(gpu, st_c, st_g, "after steps")
    for r in range(3):
        assert_same_bits(gpu.forward(ids[r:r + 1, :5]), cpu.forward(ids[r:r + 1, :5]), f"row {r}")


@pytest.mark.parametrize("name", ["m1", "m2"])
def test_gpu_path_equals_the_oracle(models, name):
    """S-1 .. S-25: the GPU path's logits equal the independent oracle's
    (tests/mamba_oracle.py), not only the CPU model's."""
    path, cfg = models[name]
    w = SO.random_weights(cfg, seed=80 + list(CONFIGS).index(name))
    _, gpu = pair(path)
    ids = _ids(cfg, 2, 6, seed=3)
    want, _ = SO.forward(w, cfg, ids)
    assert_same_bits(gpu.forward(ids), want, "oracle")


def test_mamba2_decode_across_a_chunk_boundary(models):
    """S-20 .. S-24, S-27, S-28: Mamba-2 prefill of 250 then steps that complete the
    open chunk of 256 rows and open the next one, then a prefill across no boundary:
    the GPU path's logits and state equal the CPU model's (the SSD's Gram and scratch
    buffers regrown by the driver between calls)."""
    path, cfg = models["m2"]
    cpu, gpu = pair(path)
    ids = _ids(cfg, 2, 262, seed=9)
    st_c, st_g = cpu.allocate_state(2, 262), gpu.allocate_state(2, 262)
    assert_same_bits(gpu.forward(ids[:, :250], st_g), cpu.forward(ids[:, :250], st_c), "250")
    for t in range(250, 259):
        assert_same_bits(gpu.step(ids[:, t:t + 1], st_g), cpu.step(ids[:, t:t + 1], st_c),
                         f"step {t}")
    assert_same_bits(gpu.forward(ids[:, 259:], st_g), cpu.forward(ids[:, 259:], st_c), "3 more")
    same_state(gpu, st_c, st_g, "past the boundary")


@pytest.mark.parametrize("name", ["m1_tied", "m2_limit"])
def test_generation_same_tokens(models, name):
    """S-29 and M-32 on the device: greedy and sampled generation (seeded) give the CPU
    model's tokens, batch 1 and 3, with an end token; step with several new tokens."""
    path, cfg = models[name]
    cpu, gpu = pair(path)
    for B in (1, 3):
        ids = _ids(cfg, B, 4, seed=40 + B)
        assert np.array_equal(gpu.generate(ids, 5), cpu.generate(ids, 5))
        for seed in (0, 7):
            assert np.array_equal(gpu.generate(ids, 5, greedy=False, seed=seed),
                                  cpu.generate(ids, 5, greedy=False, seed=seed))
        eos = int(cpu.generate(ids, 3)[0, -1])
        assert np.array_equal(gpu.generate(ids, 5, eos_token_id=eos),
                              cpu.generate(ids, 5, eos_token_id=eos))
    st_c, st_g = cpu.allocate_state(2, 9), gpu.allocate_state(2, 9)
    ids = _ids(cfg, 2, 9, seed=44)
    cpu.forward(ids[:, :4], st_c)
    gpu.forward(ids[:, :4], st_g)
    assert_same_bits(gpu.step(ids[:, 4:9], st_g), cpu.step(ids[:, 4:9], st_c), "step of 5")


@pytest.mark.parametrize("name,fmt", [("m1", "int8"), ("m2", "bfloat16")])
def test_state_saved_on_one_side_resumes_on_the_other(models, tmp_path, name, fmt):
    """S-26, S-27, S-29: a state saved by the CPU model resumes on the GPU path and the
    other way round; the two files hold the same tensors and the next steps give the
    same bits."""
    path, cfg = models[name]
    cpu, gpu = pair(path, fmt)
    states_move_between_devices(cpu, gpu, _ids(cfg, 2, 9, seed=50), tmp_path)


def test_device_output_is_a_dlpack_tensor_without_copy(models):
    """S-29 with forward / step output='device': a DLPack producer over the device buffer
    itself (here the reference backend's host memory, so numpy reads it); the same
    bits as output='host'."""
    path, cfg = models["m2"]
    cpu, gpu = pair(path)
    ids = _ids(cfg, 2, 5, seed=60)
    t = gpu.forward(ids, output="device")
    assert isinstance(t, DeviceTensor) and t.shape == (2, 5, cfg["vocab_size"])
    a = np.from_dlpack(t)
    assert a.ctypes.data == t._buf.addr  # no copy
    assert_same_bits(a, cpu.forward(ids), "device output")
    st, st_c = gpu.allocate_state(2, 6), cpu.allocate_state(2, 6)
    gpu.forward(ids, st)
    cpu.forward(ids, st_c)
    s = gpu.step(ids[:, :1], st, output="device")
    assert s.shape == (2, cfg["vocab_size"])
    assert_same_bits(np.from_dlpack(s), cpu.step(ids[:, :1], st_c), "step device output")
    with pytest.raises(ValueError, match="this model runs on the CPU"):
        cpu.forward(ids, output="device")


# ---------------------------------------------------------------- the program
def test_driver_emits_the_declared_ssm_program_ops(models):
    """S-10, S-13, S-14, S-15, S-17, S-19 .. S-25 as program ops: every op the Mamba
    driver writes is a gpu_ref_* entry (the reference backend runs it) and an op the GPU
    build's program runner knows (model_entry.mojo's names; test_gpu_model checks each
    runner comment against the entry's arguments); every ssm_* op of the runner is used
    by the Mamba driver. The SSD scratch the driver allocates per (batch row, head)
    is threads.mojo's SSD_WS_FLOATS."""
    entry = (ROOT / "mojo/transformer/gpu/model_entry.mojo").read_text()
    names = set(re.findall(r'if name == "(\w+)":\n\s+return M\.OP_\w+', entry))
    used = set()
    for name in ("m1", "m2_limit"):
        for fmt in ("float32", "int8"):
            be = ReferenceBackend()
            lm = CausalLM.load(models[name][0], weight_format=fmt, _device_backend=be)
            cfg = models[name][1]
            lm.generate(_ids(cfg, 2, 3), 2)
            lm.generate(_ids(cfg, 1, 3), 2, greedy=False, seed=1)
            used |= set(be.ops_run)
    assert used <= names, sorted(used - names)
    assert all(api.BY_NAME.get("gpu_ref_" + n) is not None for n in used)
    ssm = {n for n in names if n.startswith("ssm_")}
    assert ssm and ssm <= used, f"ssm ops never used by the Mamba driver: {sorted(ssm - used)}"
    threads = (ROOT / "mojo/ssm/gpu/threads.mojo").read_text()
    consts = {"Q": 256, "P2": 64}
    for nm, expr in re.findall(r"^comptime (SSD_WS_\w+|Q|P2) = ([^#\n]+)", threads, re.M):
        consts[nm] = eval(expr.strip(), {}, dict(consts))  # noqa: S307 - our own source
    assert consts["SSD_WS_FLOATS"] == G.SSD_WS_FLOATS


def test_gpu_ssd_ws_entry_equals_the_allocating_entry():
    """S-19 .. S-28: gpu_ref_ssm_mamba2_ssd_ws (the caller's Gram and scratch, NaN-filled
    here so a read of unwritten scratch shows) gives gpu_ref_ssm_mamba2_ssd's bits, the
    output and every part of the state, with open rows held (q0 > 0)."""
    from mojolearn._core.loader import cpu_native

    mod = cpu_native()
    rng = np.random.default_rng(5)
    B, L, H, q0 = 2, 7, 2, 5
    di = 64 * H
    cd = di + 256
    W = di + cd + H
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    xbc, zx = f(B * L, cd), f(B * L, W)
    dt = np.abs(f(B * L, H)) * np.float32(0.1)
    a, d = -np.abs(f(H)), f(H)
    state = [f(B, H, 64, 128), f(B, 256, cd), np.abs(f(B, 256, H)) * np.float32(0.1),
             f(B, H, 256), f(B, H)]
    outs = []
    for with_ws in (False, True):
        st = [s.copy() for s in state]
        out = np.full((B * L, di), np.nan, np.float32)
        args = (xbc.ctypes.data, cd, dt.ctypes.data, a.ctypes.data, d.ctypes.data, zx.ctypes.data,
                W, *[s.ctypes.data for s in st], out.ctypes.data, di, B, L, H, di, q0)
        if with_ws:
            nch = (q0 + L + 255) // 256
            gm = np.full(B * nch * 256 * 256, np.nan, np.float32)
            ws = np.full(B * H * G.SSD_WS_FLOATS, np.nan, np.float32)
            mod.gpu_ref_ssm_mamba2_ssd_ws(args + (gm.ctypes.data, ws.ctypes.data))
        else:
            mod.gpu_ref_ssm_mamba2_ssd(args)
        outs.append([out] + st)
    for i, (x, y) in enumerate(zip(*outs)):
        assert_same_bits(y, x, f"part {i}")


# ---------------------------------------------------------------- refusals by name
def test_no_gpu_is_refused_by_name_before_reading(tmp_path, models):
    """S-34's refusal by name: device='gpu' for a Mamba model with no GPU build or no
    device is a RuntimeError naming the reason and device='cpu', raised before the
    folder is read (a path that does not exist is not looked at); never a CPU model
    instead. The constructor refuses alike."""
    if _device.gpu_status()[0] is not None:
        pytest.skip("a GPU build runs here: the refusal of a missing GPU cannot be seen")
    from mojolearn.models._ssm.model import MambaConfig, MambaLM

    missing = tmp_path / "no-such-model"
    for load in (MambaLM.load, CausalLM.load):
        with pytest.raises(RuntimeError, match=r"asks for the GPU, but no GPU backend works "
                                               r"here"):
            load(missing, device="gpu")
    path, cfg = models["m1"]
    with pytest.raises(RuntimeError, match=r"asks for the GPU.*pass device='cpu'"):
        CausalLM.load(path, device="gpu")
    with pytest.raises(RuntimeError, match="asks for the GPU"):
        MambaLM(MambaConfig.from_dict(cfg), SO.random_weights(cfg, seed=1), device="gpu")
    with pytest.raises(ValueError, match="is not a device"):
        CausalLM.load(path, device="cuda")
    assert CausalLM.load(path, device="cpu").device == "cpu"


def test_states_of_another_device_or_model_are_refused(models):
    """S-26, S-34: a GPU Mamba model refuses a host state (a CPU model's), a CPU model a
    device state, each by name with the way out (save_state / resume); a state of
    another model and a state changed from outside are refused; nothing is changed by a
    refusal."""
    path, cfg = models["m2"]
    cpu, gpu = pair(path)
    other = CausalLM.load(models["m2_limit"][0], _device_backend=ReferenceBackend())
    ids = _ids(cfg, 1, 3)
    host = cpu.allocate_state(1, 4)
    with pytest.raises(ValueError, match=r"state lives in host memory .* runs on 'gpu'.*"
                                         r"save_state it with its model and resume it"):
        gpu.forward(ids, host)
    dev = gpu.allocate_state(1, 4)
    with pytest.raises(ValueError, match=r"state lives in GPU memory, but this model runs on 'cpu'"):
        cpu.step(ids[:, :1], dev)
    with pytest.raises(ValueError, match="another model"):
        other.forward(ids, dev)
    assert dev.length == 0 and host.length == 0
    dev.conv = host.conv  # a part changed from outside
    with pytest.raises(ValueError, match="changed from outside"):
        gpu.forward(ids, dev)


def test_model_too_large_for_the_device_is_refused_before_upload(models):
    """S-34: a Mamba model whose weights do not fit the device's free memory is refused
    by name (MemoryError naming the bytes and the ways out) before anything is
    uploaded; a state too large for what is left, likewise. held() counts the device
    bytes by format."""
    path, cfg = models["m1"]
    be = ReferenceBackend(memory_bytes=10_000)
    with pytest.raises(MemoryError, match=r"needs \d+ bytes of GPU memory .* nothing was "
                                          r"uploaded: use weight_format='int8'"):
        CausalLM.load(path, _device_backend=be)
    assert be.used == 0
    be = ReferenceBackend()
    lm = CausalLM.load(path, weight_format="int8", _device_backend=be)
    held = lm.held()
    assert held["int8"] > 0 and held["float32"] > 0 and lm.nbytes() == sum(held.values())
    be.memory_bytes = be.used + 1000
    with pytest.raises(MemoryError, match=r"allocate_state: a state of batch_size 64 needs \d+ "
                                          r"bytes of GPU memory"):
        lm.allocate_state(64, 8)
