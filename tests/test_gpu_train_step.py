"""The training step on the GPU path, checked without a GPU: a Trainer made with
``_device_backend=ReferenceBackend()`` runs each step as the device programs of
python/mojolearn/_train/device.py, every op through the gpu_ref_* entries (the device
kernels' own per-thread bodies under IEEE mode), and its losses, weights and optimizer
state must be the CPU Trainer's bit for bit (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md:
the forward M-1 .. M-18 and T-47; the loss T-14 .. T-18; the backward T-48 .. T-57 and
T-9 .. T-13; the clip T-23 .. T-25; the optimizers T-29 .. T-34; the schedule's lr per
step). Sabotaged programs (the clip dropped, the RoPE backward's sine not negated) are
seen failing; what the GPU path does not cover is refused by name. What runs on a real
GPU is checked by bench/device_train_check.py (bench/device_check.sh) on a GPU machine.
"""
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mojolearn import training
from mojolearn._core import api
from mojolearn._core.loader import cpu_native
from mojolearn.models._exec.device import ReferenceBackend
from test_training_model import SHAPES, write_model

ROOT = Path(__file__).resolve().parents[1]
A = lambda x: x.ctypes.data  # noqa: E731


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for arch in ("llama", "qwen2", "mistral", "phi3"):
        out[arch] = write_model(str(tmp_path_factory.mktemp(arch)), arch, seed=3)
    return out


def _batch(arch, seed, B=3, L=50):
    """B * L = 150 tokens: the weight gradients' k crosses a 128 leaf; qwen2's 4 query
    heads on one key/value head stack 200 rows in T-51's sums."""
    V = SHAPES[arch]["vocab_size"]
    return np.random.default_rng(seed).integers(0, V, size=(B, L))


def _sched():
    return training.WarmupCosineLR(3e-3, warmup_steps=3, total_steps=10, min_lr=1e-4)


def _pair(path, **kw):
    cpu = training.Trainer(path, **kw)
    kw = dict(kw)
    if "lr_schedule" in kw:
        kw["lr_schedule"] = _sched()
    be = ReferenceBackend()
    dev = training.Trainer(path, _device_backend=be, **kw)
    return cpu, dev, be


def _same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    if a.dtype == np.float32:
        bad = np.flatnonzero(a.reshape(-1).view(np.uint32) != b.reshape(-1).view(np.uint32))
        assert bad.size == 0, f"{what}: {bad.size} elements differ, first at {bad[0]}: " \
                              f"{a.reshape(-1)[bad[0]]!r} vs {b.reshape(-1)[bad[0]]!r}"
    else:
        assert np.array_equal(a, b), what


def _same_state(cpu, dev):
    wc, wd = cpu.weights(), dev.weights()
    assert list(wc) == list(wd)
    for n in wc:
        _same(wc[n], wd[n], f"weight {n}")
    sc, sd = cpu.optimizer.state_dict(), dev.optimizer.state_dict()
    assert sc["t"] == sd["t"]
    for k in ("exp_avg", "exp_avg_sq", "buf_initialized"):
        _same(sc[k], sd[k], k)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_one_adamw_step_bits(models, arch):
    """T-47 .. T-57, T-14 .. T-18, T-23 .. T-25, T-29 .. T-32: one AdamW step with the
    clip firing (max_norm 0.05): the loss, every weight and both moments are the CPU
    Trainer's bits (llama: GQA 4:2, untied head; qwen2: q/k/v biases, GQA 4:1, tied)."""
    cpu, dev, be = _pair(models[arch], lr=2e-3, max_norm=0.05)
    ids = _batch(arch, 1)
    lc, ld = cpu.step(ids), dev.step(ids)
    _same(np.float32(lc), np.float32(ld), "loss")
    _same_state(cpu, dev)
    for op in ("train_attn_probs", "train_ce_rows", "train_fold_div_into", "train_softmax_bwd",
               "train_silu_mul_bwd", "train_rms_norm_backward", "train_embedding_backward",
               "train_clip", "train_adam", "train_neg", "gemm_f32"):
        assert op in be.ops_run, op
    assert ("train_fold_rows" in be.ops_run) == (arch == "qwen2")  # T-56: the biases


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_adamw_cosine_clip_steps_bits(models, arch):
    """T-29 (the schedule's lr at each t), T-23 .. T-25 with the coefficient below 1 and
    exactly 1, T-31 / T-32 over 8 steps on changing batches: losses, weights and the
    optimizer state equal the CPU Trainer's after every step."""
    cpu, dev, _ = _pair(models[arch], max_norm=0.5, lr_schedule=_sched(), weight_decay=0.05)
    for s in range(8):
        ids = _batch(arch, 10 + s, B=2, L=40)
        lc, ld = cpu.step(ids), dev.step(ids)
        _same(np.float32(lc), np.float32(ld), f"loss of step {s}")
        _same_state(cpu, dev)
    assert dev.t == 8


def test_mistral_tied_mha_labels_bits(models):
    """T-16 (ignored targets through labels), T-57 (a tied head without GQA): 3 steps."""
    cpu, dev, _ = _pair(models["mistral"], lr=1e-3, max_norm=1.0)
    ids = _batch("mistral", 5, B=2, L=33)
    labels = ids.copy()
    labels[0, :7] = -100
    for _ in range(3):
        _same(np.float32(cpu.step(ids, labels)), np.float32(dev.step(ids, labels)), "loss")
    _same_state(cpu, dev)


@pytest.mark.parametrize("opt,kw", [("adam", dict(weight_decay=0.01)),
                                    ("sgd", dict(momentum=0.9, weight_decay=0.01))])
def test_adam_and_sgd_bits(models, opt, kw):
    """T-31 / T-32 coupled (Adam with weight decay), T-33 (SGD with momentum: the first
    step's buffer, then the momentum chain): 3 steps, the CPU Trainer's bits."""
    cpu, dev, _ = _pair(models["llama"], optimizer=opt, lr=1e-2, max_norm=1.0, **kw)
    for s in range(3):
        ids = _batch("llama", 20 + s, B=2, L=20)
        _same(np.float32(cpu.step(ids)), np.float32(dev.step(ids)), "loss")
        _same_state(cpu, dev)


def test_resume_on_the_cpu_continues_the_device_run(models, tmp_path):
    """T-58 .. T-60: a device run saved after 2 steps and resumed by the CPU trainer gives
    the straight CPU run's bits at step 4."""
    cpu, dev, _ = _pair(models["qwen2"], max_norm=0.5, lr_schedule=_sched())
    batches = [_batch("qwen2", 30 + s, B=2, L=17) for s in range(4)]
    for ids in batches[:2]:
        cpu.step(ids)
        dev.step(ids)
    dev.save(tmp_path / "dev.safetensors")
    back = training.Trainer.resume(tmp_path / "dev.safetensors")
    for ids in batches[2:]:
        _same(np.float32(cpu.step(ids)), np.float32(back.step(ids)), "loss")
    _same_state(cpu, back)


def _no_clip(ops):
    """The clip's max_norm raised to the largest float32: the coefficient is 1 and the
    rescale (T-24, T-25) never happens."""
    return [op[:5] + (0x7F7FFFFF,) if op[0] == "train_clip" else op for op in ops]


def _no_neg_sine(ops):
    """The RoPE backward given the forward's sine instead of its negation (T-53 broken)."""
    sin = next(op for op in ops if op[0] == "nn_rope")[9]
    nsin = [op for op in ops if op[0] == "nn_rope"][-1][9]
    return [op[:9] + (sin,) + op[10:] if op[0] == "nn_rope" and op[9] == nsin else op for op in ops]


@pytest.mark.parametrize("edit,what", [(_no_clip, "the clip's coefficient (T-24) skipped"),
                                       (_no_neg_sine, "the RoPE backward's sine (T-53)")])
def test_sabotage_is_seen(models, edit, what):
    """A program with one op dropped or fed the wrong table must NOT give the CPU's bits
    (the comparison is seen failing), and the same trainer unsabotaged does."""
    cpu, dev, _ = _pair(models["llama"], lr=2e-3, max_norm=0.05)
    ids = _batch("llama", 1, B=2, L=20)
    dev._dev.sabotage = edit
    cpu.step(ids)
    dev.step(ids)
    with pytest.raises(AssertionError):
        _same_state(cpu, dev)
    cpu2, dev2, _ = _pair(models["llama"], lr=2e-3, max_norm=0.05)
    cpu2.step(ids)
    dev2.step(ids)
    _same_state(cpu2, dev2)


def test_nonfinite_total_refused_untouched(models, tmp_path):
    """T-41: a batch whose gradients overflow is refused by name on the GPU path, the
    weights and the moments left as they were (the CPU trainer refuses it too)."""
    w = load_file(str(Path(models["llama"]) / "model.safetensors"))
    w["lm_head.weight"] = (w["lm_head.weight"] * np.float32(3e37)).astype(np.float32)
    d = tmp_path / "big"
    d.mkdir()
    (d / "config.json").write_text((Path(models["llama"]) / "config.json").read_text())
    save_file(w, str(d / "model.safetensors"))
    cpu, dev, _ = _pair(str(d), lr=1e-3, max_norm=1.0)
    before = dev.weights()
    ids = _batch("llama", 2, B=1, L=12)
    with pytest.raises(ValueError, match="not finite"):
        cpu.step(ids)
    with pytest.raises(ValueError, match=r"mojolearn: Trainer.step: the total gradient norm is "
                                         r"not finite .*\(T-41\)"):
        dev.step(ids)
    after = dev.weights()
    for n in before:
        _same(before[n], after[n], n)
    assert dev.t == 0 and not dev.optimizer.state_dict()["exp_avg"].any()


def test_refusals_by_name(models):
    """What the GPU path does not cover is refused by name, never run on the CPU."""
    be = ReferenceBackend()
    with pytest.raises(NotImplementedError, match=r"mojolearn: Trainer: model_type 'phi3' is "
                                                  r"not trained on the GPU path"):
        training.Trainer(models["phi3"], max_norm=1.0, _device_backend=be)
    with pytest.raises(NotImplementedError, match=r"group= \(data-parallel ranks, T-61\)"):
        training.Trainer(models["llama"], max_norm=1.0, group=object(), _device_backend=be)
    with pytest.raises(ValueError, match=r"the GPU path needs max_norm"):
        training.Trainer(models["llama"], _device_backend=be)
    with pytest.raises(ValueError, match=r"device='cpu' contradicts it"):
        training.Trainer(models["llama"], max_norm=1.0, device="cpu", _device_backend=be)
    tr = training.Trainer(models["llama"], max_norm=1.0, _device_backend=be)
    ids = _batch("llama", 0, B=4, L=64)  # 2 micro-batches of 128 tokens split on a leaf
    with pytest.raises(NotImplementedError, match=r"accumulation=2 is not run on the GPU path"):
        tr.step(ids, accumulation=2)
    for fn in ("loss", "gradients"):
        with pytest.raises(NotImplementedError, match=rf"Trainer.{fn}: the GPU path runs step\(\) "
                                                      rf"only"):
            getattr(tr, fn)(ids)
    assert tr.t == 0


def test_new_bodies_equal_the_cpu_kernels():
    """T-1's neg (train_neg: every sign bit flipped, zeros, subnormals, inf and NaN kept
    exactly) and T-17 (train_fold_div_into: the bits train_fold_div returns)."""
    nat = cpu_native()
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 2 ** 32, size=1000, dtype=np.uint32)
    bits[:6] = [0, 0x80000000, 1, 0x80000001, 0x7F800000, 0x7FC00001]
    x = bits.view(np.float32)
    got, want = np.empty_like(x), np.empty_like(x)
    nat.gpu_ref_train_neg((A(x), A(got), x.size))
    nat.train_neg((A(x), A(want), x.size, 1))
    _same(got.view(np.uint32), want.view(np.uint32), "neg")
    for n in (1, 128, 129, 1000):
        v = (rng.standard_normal(n) * 3).astype(np.float32)
        out = np.full(1, np.nan, dtype=np.float32)
        nat.gpu_ref_train_fold_div_into((A(v), n, 0x40400000, A(out)))
        assert int(out.view(np.uint32)[0]) == nat.train_fold_div((A(v), n, 0x40400000))


def test_program_ops_are_registered_on_the_gpu_build(models):
    """Every op a training program names is an entry of the CPU run (api.py) and a name
    the GPU build's program entry parses (transformer/gpu/model_entry.mojo or
    train/gpu/launch.mojo), so the real GPU runs the same program."""
    be = ReferenceBackend()
    tr = training.Trainer(models["qwen2"], max_norm=1.0, _device_backend=be)
    tr.step(_batch("qwen2", 0, B=1, L=9))
    sgd = training.Trainer(models["llama"], optimizer="sgd", max_norm=1.0, _device_backend=be)
    sgd.step(_batch("llama", 0, B=1, L=9))
    names = set(be.ops_run)
    src = (ROOT / "mojo/transformer/gpu/model_entry.mojo").read_text() + \
        (ROOT / "mojo/train/gpu/launch.mojo").read_text()
    parsed = set(re.findall(r'name == "([a-z0-9_]+)"', src))
    for n in sorted(names):
        assert "gpu_ref_" + n in api.BY_NAME, n
        assert n in parsed, f"{n} is not parsed by the GPU build's nn_program_dev"
    launch = (ROOT / "mojo/train/gpu/launch.mojo").read_text()
    for n in sorted(x for x in names if x.startswith("train_")):
        code = re.search(rf'name == "{n}":\n\s+return (OP_[A-Z_0-9]+)', launch).group(1)
        assert re.search(rf"op == {code}:", launch), f"{n}: {code} has no launch"
