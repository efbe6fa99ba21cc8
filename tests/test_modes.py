"""numeric_mode (mojolearn.modes): the promise, independent of the profile.

identical stays the contracts' bits exactly; deterministic and fast run the CPU's
fp32.v1 / bf16f32.v1 kernels with leaves of max(leaf_size(k), FAST_KC) k-steps (the
same chains, flushes and tree: tests/oracle.gemm_fp32_leaves), and the integer profiles
(exact sums) give the identical bits under every mode. Names are refused by name,
profiles given as modes and modes given as profiles included.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mojolearn
from mojolearn import linalg, lowbit, modes, profiles
from mojolearn._core.loader import blocking
from tests import oracle as O
from tests.bits import assert_same_bits

ROOT = Path(__file__).resolve().parents[1]
F32 = np.float32
B = blocking()
FAST_KC, SMALL_M, ROWS_MAX = B["FAST_KC"], B["SMALL_M"], B["ROWS_MAX"]


@pytest.fixture
def mode():
    old = mojolearn.numeric_mode()

    def use(m):
        mojolearn.set_numeric_mode(m)
    yield use
    mojolearn.set_numeric_mode(old)


def rnd(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def fast_oracle(a, w_nk):
    k = a.shape[1]
    with np.errstate(all="ignore"):
        return O.gemm_fp32_leaves(a, np.ascontiguousarray(w_nk.T), max(O.leaf_size(k), FAST_KC))


# ---------------------------------------------------------------- the switch


def test_default_set_returns_previous_and_refusals(mode):
    assert modes.MODES == ("identical", "deterministic", "fast")
    assert mojolearn.numeric_mode() == "identical" or os.environ.get(modes.ENV)
    mode("identical")
    assert mojolearn.set_numeric_mode(" fast ") == "identical"
    assert mojolearn.numeric_mode() == "fast"
    assert mojolearn.set_numeric_mode("deterministic") == "fast"
    with pytest.raises(ValueError, match="not a numeric mode; the modes are identical, "
                                         "deterministic, fast"):
        mojolearn.set_numeric_mode("fastest")
    with pytest.raises(ValueError, match="names a numeric profile .* numeric_profile='fp32_v1'"):
        mojolearn.set_numeric_mode("fp32_v1")
    with pytest.raises(ValueError, match="names a numeric profile"):
        modes.resolve("int8_v1")  # a rejected profile is still a profile name
    with pytest.raises(TypeError, match="must be a str naming a numeric mode"):
        mojolearn.set_numeric_mode(2)
    with pytest.raises(ValueError, match="names a numeric mode .* numeric_mode='fast'"):
        mojolearn.set_numeric_profile("fast")
    with pytest.raises(ValueError, match="names a numeric mode"):
        profiles.resolve("identical")
    assert mojolearn.numeric_mode() == "deterministic"  # refusals changed nothing


def test_modes_and_profiles_are_independent(mode):
    """Setting one never changes the other; every mode takes every profile."""
    p0 = mojolearn.numeric_profile()
    for m in modes.MODES:
        mode(m)
        assert mojolearn.numeric_profile() == p0
        for p in profiles.PROFILES:
            assert profiles.resolve(p) == p
    old = mojolearn.set_numeric_profile("fixed15_v1")
    try:
        assert mojolearn.numeric_mode() == "fast"
    finally:
        mojolearn.set_numeric_profile(old)


def test_environment_variable(tmp_path):
    code = "import mojolearn; print(mojolearn.numeric_mode())"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    for val, want in (("fast", "fast"), ("", "identical"), (" deterministic", "deterministic")):
        env[modes.ENV] = val
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and r.stdout.strip() == want, r.stderr
    env[modes.ENV] = "fp32_v1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "MOJOLEARN_NUMERIC_MODE='fp32_v1' names a numeric profile" in r.stderr


def test_resume_rules():
    modes.check_resume("identical", "fast")
    modes.check_resume("deterministic", "fast")
    modes.check_resume("fast", "fast")
    for saved, now in (("fast", "identical"), ("deterministic", "identical"),
                       ("fast", "deterministic")):
        with pytest.raises(ValueError, match=f"produced under numeric_mode='{saved}'"):
            modes.check_resume(saved, now)


# ---------------------------------------------------------------- what the modes compute


SHAPES = [(1, 513, 9), (3, 1500, 40), (7, 1025, 33), (SMALL_M + 2, 2049, 20), (5, 300, 17)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_looser_modes_run_longer_leaves(m, k, n, mode):
    """deterministic / fast: fp32.v1's chains and tree over leaves of
    max(leaf_size(k), FAST_KC), on every path (decode rows, few rows, blocked; raw and
    prepared float32 / bf16 / int8 panels); identical is unchanged."""
    a, w = rnd(m + k, m, k), rnd(n + k, n, k)
    a[0, :3] = (np.float32(1e-39), -0.0, np.float32(3e38))
    ident = O.gemm_fp32_v1_nt(a, w)
    want = fast_oracle(a, w)
    bits = np.asarray(linalg.to_bf16(w))
    codes, e = linalg.quantize_int8(w)
    w8 = np.asarray(linalg.dequantize_int8(codes, e))
    p32 = linalg.prepare(w, transpose_b=True)
    pb = linalg.prepare(bits, transpose_b=True)
    p8 = linalg.prepare(lowbit.Int8Weight(codes, e), transpose_b=True)
    for md in modes.MODES:
        mode(md)
        exp = ident if md == "identical" else want
        assert_same_bits(linalg.matmul(a, w, transpose_b=True), exp, f"{md} raw")
        assert_same_bits(linalg.matmul(a, np.ascontiguousarray(w.T)), exp, f"{md} NN")
        assert_same_bits(linalg.matmul(a, p32, transpose_b=True), exp, f"{md} prepared")
        wb = O.from_bf16(bits)
        expb = O.gemm_fp32_v1_nt(a, wb) if md == "identical" else fast_oracle(a, wb)
        assert_same_bits(linalg.matmul_bf16(a, pb, transpose_b=True), expb, f"{md} bf16 panels")
        exp8 = O.gemm_fp32_v1_nt(a, w8) if md == "identical" else fast_oracle(a, w8)
        assert_same_bits(linalg.matmul(a, p8, transpose_b=True), exp8, f"{md} int8 panels")


def test_short_k_and_integer_profiles_are_identical_in_every_mode(mode):
    """Where nothing differs the looser modes give the identical bits: k within one
    FAST_KC leaf and the same leaf count, and the integer profiles (exact sums)."""
    a, w = rnd(1, 9, 128), rnd(2, 30, 128)
    qa, qw = linalg.quantize_int8(a), linalg.quantize_int8(w)
    ha, hw = linalg.quantize_int15(rnd(3, 9, 2000)), linalg.quantize_int15(rnd(4, 30, 2000))
    mode("identical")
    ref = [np.asarray(x) for x in (linalg.matmul(a, w, transpose_b=True),
                                   linalg.matmul_int8(qa, qw), linalg.matmul_int15(ha, hw))]
    for md in ("deterministic", "fast"):
        mode(md)
        got = [linalg.matmul(a, w, transpose_b=True), linalg.matmul_int8(qa, qw),
               linalg.matmul_int15(ha, hw)]
        for g, r in zip(got, ref):
            assert_same_bits(g, r, md)


CHILD = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    import mojolearn
    from mojolearn import linalg
    mojolearn.set_numeric_mode(sys.argv[1])
    mojolearn.set_num_threads(int(sys.argv[2]))
    rng = np.random.default_rng(9)
    h = hashlib.sha256()
    for m, k, n in ((1, 3000, 70), (4, 1500, 300), (50, 2049, 90), (300, 1200, 40)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)
        h.update(np.asarray(linalg.matmul(a, b, transpose_b=True)).tobytes())
    print(h.hexdigest())
""")


@pytest.mark.parametrize("md", ["deterministic", "fast"])
def test_deterministic_in_two_processes(md):
    """deterministic: the same bits in two processes at the same thread count (the CPU's
    fast kernels are fixed orders, so fast gives them too on this backend)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    outs = set()
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CHILD, md, "2"], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.add(r.stdout.strip())
    assert len(outs) == 1


def test_backends_table_names_every_mode():
    """The table the README reads: every backend says what each mode runs."""
    for backend, row in modes.BACKENDS.items():
        assert set(row) == set(modes.MODES), backend
        assert all(isinstance(v, str) and v for v in row.values())
    assert json.loads(json.dumps(modes.BACKENDS)) == modes.BACKENDS


def test_using_is_per_thread_and_nests(mode):
    import threading

    mode("identical")
    seen = {}
    with modes.using("fast"):
        assert mojolearn.numeric_mode() == "fast"
        with modes.using("deterministic"):
            assert mojolearn.numeric_mode() == "deterministic"
        assert mojolearn.numeric_mode() == "fast"
        t = threading.Thread(target=lambda: seen.setdefault("other", mojolearn.numeric_mode()))
        t.start()
        t.join()
    assert seen["other"] == "identical" and mojolearn.numeric_mode() == "identical"
    with pytest.raises(ValueError, match="names a numeric profile"):
        with modes.using("fixed15_v1"):
            pass


def test_torch_mode_takes_a_numeric_mode(mode):
    """The torch mode's products run under the mode it was given (else the process
    mode), the same bits as linalg under that mode."""
    torch = pytest.importorskip("torch")
    import mojolearn.torch as mt

    a, w = rnd(5, 3, 700), rnd(6, 20, 700)
    ta, tw = torch.from_numpy(a), torch.from_numpy(w)
    mode("identical")
    ident = np.asarray(linalg.matmul(a, w, transpose_b=True))
    with modes.using("fast"):
        fast = np.asarray(linalg.matmul(a, w, transpose_b=True))
    assert not np.array_equal(ident.view(np.uint32), fast.view(np.uint32))
    with mt.identical(numeric_mode="fast"):
        assert mt.numeric_mode() == "fast"
        assert_same_bits((ta @ tw.t()).numpy(), fast, "torch fast")
    with mt.identical():
        assert mt.numeric_mode() == "identical"
        assert_same_bits((ta @ tw.t()).numpy(), ident, "torch identical")
    with pytest.raises(ValueError, match="not a numeric mode"):
        mt.enable(numeric_mode="quick")
    assert not mt.is_enabled()


# ---------------------------------------------------------------- the models


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny checkpoint with a k past FAST_KC (the MLP's down projection: 700 inputs), so
    the looser modes change bits."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_models import TINY, tiny_weights, write_model

    cfg = dict(TINY, intermediate_size=700)
    w = tiny_weights(cfg, seed=31)
    return write_model(tmp_path_factory.mktemp("modes"), cfg, w), cfg


def test_models_report_and_run_their_mode(model_dir, mode):
    from mojolearn.models import CausalLM, TransformerBlock

    path, cfg = model_dir
    mode("identical")
    ids = np.random.default_rng(3).integers(0, cfg["vocab_size"], size=(2, 6))
    ident = CausalLM.load(path)
    fast = CausalLM.load(path, numeric_mode="fast")
    det = CausalLM.load(path, numeric_mode="deterministic", numeric_profile="fixed15_v1")
    assert (ident.numeric_mode, ident.numeric_profile) == ("identical", "fp32_v1")
    assert (fast.numeric_mode, fast.numeric_profile) == ("fast", "fp32_v1")
    assert (det.numeric_mode, det.numeric_profile) == ("deterministic", "fixed15_v1")
    a, b = np.asarray(ident.forward(ids)), np.asarray(fast.forward(ids))
    assert not np.array_equal(a.view(np.uint32), b.view(np.uint32))  # k = 700 > FAST_KC
    assert_same_bits(fast.forward(ids), b, "fast twice")
    # the process mode does not reach a model that was made under another
    mode("fast")
    assert_same_bits(ident.forward(ids), a, "identical model under a fast process mode")
    assert CausalLM.load(path).numeric_mode == "fast"  # naming nothing: the process mode
    mode("identical")
    # fixed15_v1's products are exact integer sums: the looser mode changes no bit there
    # but in P.V and the elementwise ops, which run the identical kernels in every mode
    assert_same_bits(det.forward(ids), CausalLM.load(path, numeric_profile="fixed15_v1").forward(ids),
                     "fixed15 deterministic")
    with pytest.raises(ValueError, match="names a numeric profile"):
        CausalLM.load(path, numeric_mode="fp32_v1")
    with pytest.raises(ValueError, match="names a numeric mode"):
        CausalLM.load(path, numeric_profile="fast")
    import safetensors.numpy as stn
    w = stn.load_file(os.path.join(path, "model.safetensors"))
    blk = {k[len("model.layers.0."):]: v for k, v in w.items() if k.startswith("model.layers.0.")}
    tb = TransformerBlock(blk, n_heads=cfg["num_attention_heads"],
                          n_kv_heads=cfg["num_key_value_heads"], numeric_mode="fast")
    assert tb.numeric_mode == "fast"


def test_states_carry_their_mode(model_dir, tmp_path, mode):
    """A state computed under fast is refused by an identical model (in memory and saved);
    an identical state continues under fast, and becomes a fast one."""
    from mojolearn.models import CausalLM

    path, cfg = model_dir
    mode("identical")
    ident, fast = CausalLM.load(path), CausalLM.load(path, numeric_mode="fast")
    ids = np.random.default_rng(4).integers(0, cfg["vocab_size"], size=(1, 6))
    st = ident.allocate_state(1, 8)
    ident.forward(ids[:, :3], st)
    assert st.numeric_mode == "identical"
    fast.forward(ids[:, 3:4], st)  # allowed: identical bits continued under fast
    assert st.numeric_mode == "fast"
    with pytest.raises(ValueError, match="produced under numeric_mode='fast'"):
        ident.step(ids[:, 4:5], st)
    fast.save_state(tmp_path / "s.safetensors", st)
    with pytest.raises(ValueError, match="produced under numeric_mode='fast'"):
        ident.resume(tmp_path / "s.safetensors")
    back = fast.resume(tmp_path / "s.safetensors")
    assert back.numeric_mode == "fast" and back.length == 4
    st2 = ident.allocate_state(1, 8)
    ident.forward(ids[:, :3], st2)
    ident.save_state(tmp_path / "i.safetensors", st2)
    assert fast.resume(tmp_path / "i.safetensors").numeric_mode == "identical"


def test_drift_measures_the_mode(model_dir):
    """The drift tool: identical against identical drifts by nothing; fast on a model with
    k past FAST_KC moves logits by a measured, nonzero amount; the ulp distance reads the
    bit patterns in float order (-0 beside +0)."""
    from mojolearn import drift

    path, cfg = model_dir
    ids = np.random.default_rng(7).integers(0, cfg["vocab_size"], size=200)
    same = drift.measure(path, "identical", ids=ids, windows=3, window_tokens=40, prompts=2,
                         new_tokens=5, bootstrap=50)
    assert same["logits"] == {"max_abs": 0.0, "max_ulps": 0.0, "median_ulps": 0.0, "p99_ulps": 0.0,
                              "identical_fraction": 1.0}
    assert same["perplexity"]["change"] == 0.0 and same["greedy"]["agreement"] == 1.0
    fast = drift.measure(path, "fast", ids=ids, windows=3, window_tokens=40, prompts=2,
                         new_tokens=5, bootstrap=50)
    assert fast["logits"]["max_ulps"] > 0 and 0 < fast["logits"]["max_abs"] < 1e-2
    assert 0 <= fast["logits"]["identical_fraction"] < 1
    lo, hi = fast["perplexity"]["interval"]
    assert lo <= fast["perplexity"]["change"] <= hi
    z = drift.logit_drift(np.array([0.0, 1.0, 4.0], F32),
                          np.array([-0.0, np.nextafter(F32(1), F32(2)), 4.0], F32))
    assert z["max_ulps"] == 1.0 and z["identical_fraction"] == 1 / 3  # -0 is not +0's bits
    with pytest.raises(ValueError, match="names a numeric profile"):
        drift.measure(path, "fixed15_v1", ids=ids, window_tokens=40)


def test_docs_table_is_the_backends_table():
    """docs/modes.md's table says what mojolearn.modes.BACKENDS says, cell for cell."""
    text = (ROOT / "docs" / "modes.md").read_text()
    for backend, row in modes.BACKENDS.items():
        line = "| " + " | ".join([backend.upper()] + [row[m] for m in modes.MODES]) + " |"
        assert line in text, line


# ---------------------------------------------------------------- fast on a GPU build


def test_backends_are_keyed_like_vendor():
    """BACKENDS has a row for every backend mojolearn.vendor() can name, and the GPU
    rows say which vendor library fast runs (none on Apple)."""
    from mojolearn._core import device as _device

    assert set(modes.BACKENDS) == {"cpu", "metal"} | set(_device.VENDOR_BLAS)
    for api, lib in _device.VENDOR_BLAS.items():
        assert f"on {lib} sgemm" in modes.BACKENDS[api]["fast"]
        assert modes.BACKENDS[api]["deterministic"].startswith("the identical kernels")
    assert "TF32 off" in modes.BACKENDS["cuda"]["fast"]
    assert modes.BACKENDS["metal"]["fast"].startswith("the identical kernels")


def test_allow_tf32_and_kernel_codes():
    assert [modes.kernel_code(m) for m in modes.MODES] == [0, 1, 2]
    assert [modes.kernel_code(m, tf32=True) for m in modes.MODES] == [0, 1, modes.FAST_TF32_CODE]
    assert modes.FAST_TF32_CODE == 3
    assert modes.tf32_allowed() is False  # off unless asked for
    try:
        assert modes.allow_tf32(True) is False and modes.tf32_allowed() is True
        assert modes.allow_tf32(False) is True
    finally:
        modes.allow_tf32(False)
    with pytest.raises(TypeError, match=r"allow_tf32\(on\) takes True or False, got int"):
        modes.allow_tf32(1)
    assert modes.tf32_allowed() is False


class _FakeGpu:
    """Stands in for the GPU build (mojolearn._native_gpu): records the gemm_f32 tuples
    it is handed and answers vendor_blas() as told; computes nothing."""

    def __init__(self, blas):
        self.blas, self.calls, self.asked = blas, [], 0

    def vendor_blas(self, args):
        self.asked += 1
        return self.blas

    def gemm_f32(self, args):
        self.calls.append(args)
        return 0


@pytest.fixture
def fake_gpu(mode):
    """Installs a fake GPU build as the backend of host operands (MOJOLEARN_DEVICE=gpu with
    a working GPU): fake_gpu(api, (library, file, reason)) -> the fake."""
    from mojolearn._core import device as _device

    def use(api, blas):
        _device._reset_for_tests()
        fake = _FakeGpu(blas)
        _device._choice, _device._gpu = "gpu", (fake, api, "fake device")
        return fake
    yield use
    _device._reset_for_tests()
    modes.allow_tf32(False)


def test_gpu_build_gets_each_modes_code_and_fast_asks_for_the_library(fake_gpu, mode):
    """A GPU build receives the mode code at index 10 of gemm_f32 (0 / 1 / 2, 3 only with
    allow_tf32(True) under fast); fast asks once whether the vendor BLAS loads."""
    fake = fake_gpu("cuda", ("cuBLAS", "libcublas.so.12", ""))
    a, w = rnd(1, 3, 40), rnd(2, 40, 5)
    for m, code in (("identical", 0), ("deterministic", 1)):
        mode(m)
        linalg.matmul(a, w)
        assert fake.calls[-1][10] == code
    assert fake.asked == 0  # only fast needs the library
    mode("fast")
    assert modes.fast_route() == "cuBLAS"
    linalg.matmul(a, w)
    linalg.matmul_bf16(a, np.zeros((40, 5), np.uint16))
    linalg.matmul(rnd(3, 2, 3, 40), w)  # batched: the same entry, the same code
    assert [c[10] for c in fake.calls[-3:]] == [2, 2, 2]
    assert fake.asked == 1  # a loadable library is remembered
    modes.allow_tf32(True)
    assert modes.fast_route() == "cuBLAS TF32"
    linalg.matmul(a, w)
    assert fake.calls[-1][10] == 3
    mode("identical")
    linalg.matmul(a, w)
    assert fake.calls[-1][10] == 0  # the permission only touches fast


def test_fast_refuses_by_name_when_the_vendor_library_cannot_load(fake_gpu, mode):
    """A GPU build whose vendor BLAS does not load refuses fast products by name, with the
    way out, and computes nothing; a library that loads later is then used."""
    why = "none of libcublas.so.13, libcublas.so.12 could be opened (first: dlopen failed)"
    fake = fake_gpu("cuda", ("cuBLAS", "", why))
    mode("fast")
    a, w = rnd(1, 3, 40), rnd(2, 40, 5)
    for call in (lambda: linalg.matmul(a, w), lambda: linalg.matmul_bf16(a, np.zeros((40, 5), np.uint16)),
                 lambda: linalg.matmul(rnd(3, 2, 3, 40), w)):
        with pytest.raises(RuntimeError, match=(
                r"^mojolearn: matmul(_bf16)?: numeric_mode='fast' runs cuBLAS on this GPU build, "
                r"and cuBLAS cannot be loaded here \(none of libcublas\.so\.13.*\); set "
                r"numeric_mode='identical' .*to run the identical kernels")):
            call()
    assert fake.calls == [] and fake.asked == 3
    mode("identical")
    linalg.matmul(a, w)  # the identical kernels need no vendor library
    assert fake.calls[-1][10] == 0
    fake.blas = ("cuBLAS", "libcublas.so.12", "")  # e.g. torch loaded it since
    mode("fast")
    linalg.matmul(a, w)
    assert fake.calls[-1][10] == 2


def test_fast_on_builds_without_a_vendor_blas_and_on_amd(fake_gpu, mode):
    """Apple: no library to ask for, fast's code goes to the build (which runs the
    identical kernels); AMD: rocBLAS, and TF32 is never asked of it by name."""
    mode("fast")
    a, w = rnd(1, 3, 40), rnd(2, 40, 5)
    fake = fake_gpu("metal", ("", "", "this build's GPU has no vendor BLAS route"))
    assert modes.fast_route() == "identical"
    linalg.matmul(a, w)
    assert fake.calls[-1][10] == 2 and fake.asked == 1
    fake = fake_gpu("hip", ("rocBLAS", "librocblas.so.4", ""))
    modes.allow_tf32(True)
    assert modes.fast_route() == "rocBLAS"
    linalg.matmul(a, w)
    assert fake.calls[-1][10] == 3  # the build's rocBLAS route ignores the permission


def test_tf32_never_reaches_the_cpu(mode):
    """On the CPU build fast with allow_tf32(True) is plain fast: code 2, the same bits."""
    from mojolearn._ops import calls as _calls

    a, w = rnd(1, 3, 700), rnd(2, 20, 700)
    mode("fast")
    plain = np.asarray(linalg.matmul(a, w, transpose_b=True))
    old = modes.allow_tf32(True)
    try:
        assert modes.fast_route() == "cpu" and _calls.f32_mode_code("matmul") == 2
        assert_same_bits(np.asarray(linalg.matmul(a, w, transpose_b=True)), plain, "tf32 on cpu")
    finally:
        modes.allow_tf32(old)


def test_one_mode_per_batched_prepared_call_while_another_thread_switches():
    """Issue 43 item 6: a batched linalg.matmul with a prepared weight (one kernel call
    per batch element: transpose_a) read the numeric mode once per element, so with
    another thread switching the process mode up to 298 of 400 calls mixed identical and
    fast elements. Now the mode is read once per call: every result is wholly the
    identical one or wholly the fast one."""
    import threading

    from mojolearn import linalg, modes

    rng = np.random.default_rng(5)
    k, m, n, nb = 1024, 4, 8, 8
    a = rng.standard_normal((nb, k, m)).astype(np.float32)  # (batch, k, m): transpose_a
    w = rng.standard_normal((k, n)).astype(np.float32)
    p = linalg.prepare(w)
    with modes.using("identical"):
        ident = np.asarray(linalg.matmul(a, p, transpose_a=True))
    with modes.using("fast"):
        fast = np.asarray(linalg.matmul(a, p, transpose_a=True))
    differ = [not np.array_equal(ident[t].view(np.uint32), fast[t].view(np.uint32))
              for t in range(nb)]
    assert all(differ), "fast and identical must differ in every element for this test"
    old = modes.set_numeric_mode("identical")
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            modes.set_numeric_mode("fast")
            modes.set_numeric_mode("identical")

    th = threading.Thread(target=flip)
    th.start()
    mixed = 0
    try:
        for _ in range(400):
            got = np.asarray(linalg.matmul(a, p, transpose_a=True)).view(np.uint32)
            whole = (np.array_equal(got, ident.view(np.uint32))
                     or np.array_equal(got, fast.view(np.uint32)))
            mixed += not whole
    finally:
        stop.set()
        th.join()
        modes.set_numeric_mode(old)
    assert mixed == 0, f"{mixed} of 400 calls mixed the two modes"
