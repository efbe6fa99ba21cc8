"""The Mamba families in CausalLM (contracts/ops/IDENTICAL_SSM_CONTRACT.md, rules S-*):
fresh random Mamba-1 and Mamba-2 checkpoints against the independent oracle
(tests/mamba_oracle.py) bit for bit, logits and states; prefill == a prefix + steps ==
steps from the start; a row alone == the same row in a batch; thread counts; weight
formats and stored low-bit checkpoints; the family gate; saved states; against
transformers' MambaForCausalLM / Mamba2ForCausalLM; refusals by name."""
import json
import os

import numpy as np
import pytest

import mamba_oracle as SO
from bits import assert_same_bits
from mojolearn import profiles
from mojolearn.models import CausalLM

pytestmark = pytest.mark.filterwarnings("ignore::mojolearn.profiles.NumericProfileSpeedWarning")

M1 = dict(model_type="mamba", vocab_size=67, hidden_size=48, num_hidden_layers=2,
          state_size=16, expand=2, conv_kernel=4, tie_word_embeddings=False)
M1_TIED = dict(M1, hidden_size=160, tie_word_embeddings=True)  # in_proj k = 160: two leaves
M2 = dict(model_type="mamba2", vocab_size=71, hidden_size=64, num_hidden_layers=2,
          state_size=128, expand=2, conv_kernel=4, n_groups=1, head_dim=64, num_heads=2,
          chunk_size=256, tie_word_embeddings=False)
M2_LIMIT = dict(M2, hidden_size=96, num_heads=3, time_step_limit=[0.001, 0.05],
                tie_word_embeddings=True)


def _write(tmp, cfg, seed):
    w = SO.random_weights(cfg, seed=seed)
    SO.write_checkpoint(str(tmp), cfg, w)
    return str(tmp), w


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for i, (name, cfg) in enumerate({"m1": M1, "m1_tied": M1_TIED, "m2": M2,
                                     "m2_limit": M2_LIMIT}.items()):
        path, w = _write(tmp_path_factory.mktemp(name), cfg, 60 + i)
        out[name] = (path, cfg, w)
    return out


def _ids(cfg, B, L, seed=1):
    return np.random.default_rng(seed).integers(0, cfg["vocab_size"], size=(B, L))


def _same(a, b, what=""):
    assert_same_bits(np.asarray(a), np.asarray(b), what)


# ------------------------------------------------------------------ against the oracle
@pytest.mark.parametrize("name, L", [("m1", 1), ("m1", 9), ("m1_tied", 5), ("m2", 1),
                                     ("m2", 7), ("m2_limit", 6)])
def test_logits_equal_the_oracle(models, name, L):
    """S-1 S-2 S-3 S-8 S-9 S-10 S-11 S-12 S-13 S-14 S-15, Mamba-1's S-16 S-17 S-18 and
    Mamba-2's S-19 S-20 S-21 S-22 S-23 S-24 S-25 (with S-7's clamp in m2_limit):
    CausalLM's logits equal the oracle's, bit for bit."""
    path, cfg, w = models[name]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 2, L, seed=L)
    want, _ = SO.forward(w, cfg, ids)
    _same(lm.forward(ids), want)


@pytest.mark.slow
@pytest.mark.parametrize("L", [255, 256, 257, 600])
def test_mamba2_chunk_boundaries_equal_the_oracle(models, L):
    """S-20 .. S-24, S-27: sequences of 255, 256, 257 and 600 rows (across one and two
    chunk boundaries) equal the oracle; prefill 250 + steps across the boundary too."""
    path, cfg, w = models["m2"]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 1, L, seed=L)
    want, _ = SO.forward(w, cfg, ids)
    _same(lm.forward(ids), want)


@pytest.mark.parametrize("name", ["m1", "m2"])
def test_states_equal_the_oracle(models, name):
    """S-26, S-27: after a prefill of 5 and 2 steps the state's conv window and h (and
    Mamba-2's open rows) equal the oracle's state after the same tokens."""
    path, cfg, w = models[name]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 2, 7, seed=3)
    st = lm.allocate_state(2, 16)
    lm.forward(ids[:, :5], st)
    lm.step(ids[:, 5:6], st)
    lm.step(ids[:, 6:7], st)
    _, ost = SO.forward(w, cfg, ids)
    for i in range(cfg["num_hidden_layers"]):
        lay = ost[i]
        _same(st.conv[i], lay["conv"], f"conv window, layer {i}")
        _same(st.h[i], lay["h"], f"h, layer {i}")
        if name == "m2":
            assert lay["q"] == 7
            _same(st.open_x[i][:, :7], lay["xbc"][:, :7], f"open rows, layer {i}")
            _same(st.open_x[i][:, 7:], np.zeros_like(st.open_x[i][:, 7:]), "rows past q")


# ------------------------------------------------------------------ invariances (S-29)
@pytest.mark.parametrize("name", ["m1", "m1_tied", "m2", "m2_limit"])
def test_prefill_pieces_steps_and_rows(models, name):
    """S-29: prefill == a prefix + steps == steps from the start, a row alone == the same
    row in a batch of 3 (rows permuted too)."""
    path, cfg, _ = models[name]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 3, 9, seed=5)
    full = lm.forward(ids)
    st = lm.allocate_state(3, 9)
    parts = [lm.forward(ids[:, :4], st)]
    parts += [lm.step(ids[:, t:t + 1], st)[:, None, :] for t in range(4, 6)]
    parts.append(lm.forward(ids[:, 6:], st))
    _same(np.concatenate(parts, axis=1), full, "prefill + steps + prefill")
    st = lm.allocate_state(3, 9)
    steps = [lm.step(ids[:, t:t + 1], st)[:, None, :] for t in range(9)]
    _same(np.concatenate(steps, axis=1), full, "steps from the start")
    for r in range(3):
        _same(lm.forward(ids[r:r + 1]), full[r:r + 1], f"row {r} alone")
    _same(lm.forward(ids[::-1]), full[::-1], "rows permuted")


@pytest.mark.slow
def test_mamba2_decode_across_a_chunk_boundary(models):
    """S-28, S-29: prefill 250 then 12 steps (completing a chunk on the way) equals one
    prefill of 262; 100 + 197 + 3 equals 300."""
    path, cfg, _ = models["m2"]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 1, 300, seed=9)
    full = lm.forward(ids)
    st = lm.allocate_state(1, 300)
    got = [lm.forward(ids[:, :250], st)]
    got += [lm.step(ids[:, t:t + 1], st)[:, None, :] for t in range(250, 262)]
    _same(np.concatenate(got, axis=1), full[:, :262])
    st = lm.allocate_state(1, 300)
    got = [lm.forward(ids[:, :100], st), lm.forward(ids[:, 100:297], st),
           lm.forward(ids[:, 297:], st)]
    _same(np.concatenate(got, axis=1), full)


@pytest.mark.parametrize("name", ["m1", "m2"])
def test_thread_counts_give_the_same_bits(models, name):
    """S-29: 1, 2 and 3 threads give the same logits (and batch rows split differently
    over the tasks)."""
    import mojolearn

    path, cfg, _ = models[name]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 3, 11, seed=7)
    old = mojolearn.set_num_threads(1)
    try:
        one = lm.forward(ids)
        for n in (2, 3):
            mojolearn.set_num_threads(n)
            _same(lm.forward(ids), one, f"{n} threads")
    finally:
        mojolearn.set_num_threads(old)


# ------------------------------------------------------------------ formats, gate, states
@pytest.mark.parametrize("fmt", ["bfloat16", "int8"])
@pytest.mark.parametrize("name", ["m1", "m2"])
def test_weight_formats_equal_the_oracle_on_materialized_weights(models, name, fmt):
    """S-30: weight_format packs the block projections only; the logits are the
    oracle's on the materialized projections."""
    path, cfg, w = models[name]
    lm = CausalLM.load(path, weight_format=fmt)
    ids = _ids(cfg, 2, 6, seed=11)
    want, _ = SO.forward(w, cfg, ids, weight_format=fmt)
    _same(lm.forward(ids), want)
    assert fmt in lm.held() and lm.held()[fmt] > 0


def test_stored_low_bit_mamba1_checkpoint_packs_a_log(models, tmp_path):
    """S-31: lowbit.pack of a Mamba-1 dict packs every 2-D tensor, A_log (di, 16) too; the
    model loaded from it equals the model built from the unpacked dict (A from the
    materialized A_log)."""
    from mojolearn import checkpoint, lowbit
    from mojolearn.models._ssm.model import MambaConfig, MambaLM

    _, cfg, w = models["m1"]
    packed = lowbit.pack(w, "int8")
    assert type(packed["backbone.layers.0.mixer.A_log"]).__name__ == "Int8Weight"
    os.makedirs(tmp_path / "s")
    checkpoint.save(tmp_path / "s" / "model.safetensors", packed)
    with open(tmp_path / "s" / "config.json", "w") as f:
        json.dump(cfg, f)
    f32, _ = lowbit.unpack(packed)
    f32 = {k: np.asarray(v) for k, v in f32.items()}
    ids = _ids(cfg, 1, 5, seed=12)
    want = MambaLM(MambaConfig.from_dict(cfg), f32).forward(ids)
    _same(CausalLM.load(tmp_path / "s").forward(ids), want)


def test_family_gate(models):
    """S-32: with no profile named a Mamba model computes fp32_v1 even when the process
    inference default is fixed15_v1, and says so; naming fixed15_v1 is refused by name."""
    path, cfg, _ = models["m2"]
    old = profiles.set_numeric_profile("fixed15_v1")
    try:
        lm = CausalLM.load(path)
        assert lm.numeric_profile == "fp32_v1" and lm.family == "mamba2"
    finally:
        profiles.set_numeric_profile(old)
    with pytest.raises(NotImplementedError, match="does not compute family 'mamba2'"):
        CausalLM.load(path, numeric_profile="fixed15_v1")
    with pytest.raises(NotImplementedError, match="does not compute family 'mamba1'"):
        CausalLM.load(models["m1"][0], numeric_profile="fixed15_v1", weight_format="int8")


@pytest.mark.parametrize("name", ["m1", "m2"])
def test_saved_state_resumes_and_is_checked(models, tmp_path, name):
    """S-26 S-27 S-29: a saved state resumes to the bits of the state kept in memory; a state of another
    model or weight format is refused by name; generate greedy equals step-by-step
    argmax, and seeded sampling repeats."""
    path, cfg, _ = models[name]
    lm = CausalLM.load(path)
    ids = _ids(cfg, 2, 6, seed=13)
    st = lm.allocate_state(2, 12)
    lm.forward(ids, st)
    p = tmp_path / "s.safetensors"
    lm.save_state(p, st)
    st2 = lm.resume(p)
    nxt = _ids(cfg, 2, 1, seed=14)
    _same(lm.step(nxt, st2), lm.step(nxt, st))
    with pytest.raises(ValueError, match="weight_format"):
        CausalLM.load(path, weight_format="int8").resume(p)
    other = models["m1_tied" if name == "m1" else "m2_limit"][0]
    with pytest.raises(ValueError, match="another model"):
        CausalLM.load(other).resume(p)
    out = lm.generate(ids[:1], 4)
    seq = list(ids[0])
    for _ in range(4):
        seq.append(int(np.argmax(lm.forward(np.array([seq]))[0, -1])))
    assert list(np.asarray(out)[0]) == seq
    a = lm.generate(ids, 4, greedy=False, seed=5)
    assert np.array_equal(a, lm.generate(ids, 4, greedy=False, seed=5))


# ------------------------------------------------------------------ refusals (S-6, S-7, S-33)
@pytest.mark.parametrize("edit, err, match", [
    (dict(state_size=32), NotImplementedError, "state_size = 32"),
    (dict(expand=3), NotImplementedError, "expand = 3"),
    (dict(conv_kernel=3), NotImplementedError, "conv_kernel = 3"),
    (dict(layer_norm_epsilon=1e-6), NotImplementedError, "layer_norm_epsilon"),
    (dict(use_bias=True), NotImplementedError, "use_bias"),
    (dict(use_conv_bias=False), NotImplementedError, "use_conv_bias"),
    (dict(hidden_act="gelu"), NotImplementedError, "hidden_act"),
    (dict(time_step_rank=5), NotImplementedError, "time_step_rank = 5"),
])
def test_mamba1_config_refusals(tmp_path, edit, err, match):
    """S-6, S-34: a config value outside S-6 is refused by name before a tensor is read."""
    d = tmp_path / "m"
    os.makedirs(d)
    with open(d / "config.json", "w") as f:
        json.dump(dict(M1, **edit), f)
    with pytest.raises(err, match=match):
        CausalLM.load(d)


@pytest.mark.parametrize("edit, err, match", [
    (dict(n_groups=2), NotImplementedError, "n_groups = 2"),
    (dict(head_dim=32), NotImplementedError, "head_dim = 32"),
    (dict(chunk_size=128), NotImplementedError, "chunk_size = 128"),
    (dict(norm_before_gate=True), NotImplementedError, "norm_before_gate"),
    (dict(hidden_size=96, num_heads=2), NotImplementedError, "num_heads = 2"),
    (dict(hidden_size=80, num_heads=2), ValueError, "not a multiple of 32"),
    (dict(time_step_limit=[0.0, float("nan")]), ValueError, "NaN"),
])
def test_mamba2_config_refusals(tmp_path, edit, err, match):
    """S-6, S-7, S-35: Mamba-2 values outside S-6 and a NaN time_step_limit are refused."""
    d = tmp_path / "m"
    os.makedirs(d)
    with open(d / "config.json", "w") as f:
        json.dump(dict(M2, **edit), f)
    with pytest.raises(err, match=match):
        CausalLM.load(d)


@pytest.mark.parametrize("spelling", ["Infinity", {"__float__": "Infinity"}, "inf", 1e999])
def test_time_step_limit_infinity_spellings(spelling):
    """S-7: +inf is read however the config spells it."""
    from mojolearn.models._ssm.config import MambaConfig

    c = MambaConfig.from_dict(dict(M2, time_step_limit=[0.0, spelling]))
    assert c.time_step_limit == (0.0, float("inf"))


def test_bad_weights_are_refused_by_name(models, tmp_path):
    """S-33: a NaN in a weight, a missing or extra tensor, a misshapen one: ValueError."""
    from mojolearn.models._ssm.model import MambaConfig, MambaLM

    _, cfg, w = models["m1"]
    conf = MambaConfig.from_dict(cfg)
    bad = dict(w)
    a = bad["backbone.layers.1.mixer.D"].copy()
    a[3] = np.nan
    bad["backbone.layers.1.mixer.D"] = a
    with pytest.raises(ValueError, match="mixer.D.*flat index 3"):
        MambaLM(conf, bad)
    miss = dict(w)
    del miss["backbone.layers.0.mixer.A_log"]
    with pytest.raises(ValueError, match="A_log.*missing"):
        MambaLM(conf, miss)
    with pytest.raises(ValueError, match="not read"):
        MambaLM(conf, dict(w, extra=np.zeros(3, np.float32)))
    with pytest.raises(TypeError, match="float32"):
        MambaLM(conf, dict(w, **{"backbone.norm_f.weight": w["backbone.norm_f.weight"]
                                 .astype(np.float64)}))


# ------------------------------------------------------------------ against transformers
@pytest.mark.parametrize("fam", ["mamba", "mamba2"])
def test_against_transformers(tmp_path, fam):
    """S-8 .. S-25: a tiny random MambaForCausalLM / Mamba2ForCausalLM saved by
    transformers itself loads; logits within 1e-5 of the largest (Mamba-2 over 300 rows,
    across a chunk); greedy continuations equal transformers' argmax step by step."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(3)
    if fam == "mamba":
        c = transformers.MambaConfig(vocab_size=97, hidden_size=64, state_size=16,
                                     num_hidden_layers=2, tie_word_embeddings=False)
        model, L = transformers.MambaForCausalLM(c), 23
    else:
        c = transformers.Mamba2Config(vocab_size=97, hidden_size=64, state_size=128,
                                      num_hidden_layers=2, n_groups=1, head_dim=64, num_heads=2,
                                      chunk_size=256, tie_word_embeddings=False)
        model, L = transformers.Mamba2ForCausalLM(c), 300
    model = model.eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp_path)
    lm = CausalLM.load(tmp_path)
    ids = np.random.default_rng(4).integers(0, 97, size=(2, L))
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)).logits.float().numpy()
    got = lm.forward(ids)
    err = float(np.abs(got - ref).max()) / float(np.abs(ref).max())
    assert err <= 1e-5, err
    seq = [5, 17, 3]
    with torch.no_grad():
        for _ in range(6):
            seq.append(int(torch.argmax(model(torch.tensor([seq])).logits[0, -1])))
    assert list(np.asarray(lm.generate(np.array([seq[:3]]), 6))[0]) == seq


def test_a_mamba_gguf_is_refused_by_name(tmp_path):
    """S-15: llama.cpp's converter stores A = -exp(A_log) (torch's exp), not A_log, so a
    Mamba GGUF cannot compute A by S-15: refused by name, pointing at the HF folder."""
    gguf = pytest.importorskip("gguf")
    p = tmp_path / "m.gguf"
    wr = gguf.GGUFWriter(str(p), "mamba")
    wr.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    with pytest.raises(NotImplementedError, match="'mamba' is refused.*S-15.*Hugging Face folder"):
        CausalLM.load(p)


@pytest.mark.parametrize("name", ["m1", "m2_limit"])
def test_blocks_alone_equal_the_oracle(models, name):
    """S-9 S-10 S-16 S-19 S-30 S-32: Mamba1Block / Mamba2Block built from one layer's
    tensors give x + mixer(norm(x)) of the oracle from a zero state, bit for bit, under
    both weight formats; naming fixed15_v1 is refused."""
    from mojolearn.models import Mamba1Block, Mamba2Block

    _, cfg, w = models[name]
    pre = "backbone.layers.1."
    bw = {k[len(pre):]: v for k, v in w.items() if k.startswith(pre)}
    cls = Mamba1Block if name == "m1" else Mamba2Block
    kw = {"time_step_limit": cfg["time_step_limit"]} if "time_step_limit" in cfg else {}
    x = np.random.default_rng(21).standard_normal((2, 7, cfg["hidden_size"])).astype(np.float32)
    oc = SO.load_config(dict(cfg, num_hidden_layers=1))
    for fmt in ("float32", "int8"):
        blk = cls(bw, d_model=cfg["hidden_size"], weight_format=fmt, **kw)
        assert blk.numeric_profile == "fp32_v1"
        p = {k[len("mixer."):]: (SO.materialize(v, fmt) if k.endswith("proj.weight") else v)
             for k, v in bw.items() if k.startswith("mixer.")}
        xn = SO.rmsnorm_lanes(x, bw["norm.weight"])
        mixer = SO.mamba1_mixer if name == "m1" else SO.mamba2_mixer
        out, _ = mixer(p, oc, xn, SO.init_state(oc, 2)[0])
        _same(blk.forward(x), SO.add(x, out), fmt)
    with pytest.raises(NotImplementedError, match="does not compute family"):
        cls(bw, d_model=cfg["hidden_size"], numeric_profile="fixed15_v1", **kw)


_ISA_CHILD = r"""
import hashlib, sys
import numpy as np
from mojolearn.models import CausalLM
for path in sys.argv[1:]:
    lm = CausalLM.load(path)
    ids = (np.arange(21, dtype=np.int64).reshape(1, 21) * 7) % lm.config.vocab_size
    st = lm.allocate_state(1, 21)
    a = lm.forward(ids[:, :15], st)
    b = np.concatenate([lm.step(ids[:, t:t + 1], st)[:, None] for t in range(15, 21)], axis=1)
    print(hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()[:16])
"""


def test_every_cpu_build_gives_the_same_bits(models):
    """S-29: every CPU build this CPU runs (MOJOLEARN_ISA forces each, in its own process)
    gives the same Mamba-1 and Mamba-2 prefill and decode bits as this process."""
    import hashlib
    import subprocess
    import sys

    from mojolearn._core import cpu as _cpu

    paths = [models["m1_tied"][0], models["m2"][0]]
    want = []
    for path in paths:
        lm = CausalLM.load(path)
        ids = (np.arange(21, dtype=np.int64).reshape(1, 21) * 7) % lm.config.vocab_size
        st = lm.allocate_state(1, 21)
        a = lm.forward(ids[:, :15], st)
        b = np.concatenate([lm.step(ids[:, t:t + 1], st)[:, None] for t in range(15, 21)], axis=1)
        want.append(hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()[:16])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ok = _cpu.runnable()
    assert "v3" in ok
    for name in ok:
        env = dict(os.environ, MOJOLEARN_ISA=name, PYTHONPATH=os.path.join(root, "python"))
        env.pop("MOJOLEARN_NATIVE", None)
        r = subprocess.run([sys.executable, "-c", _ISA_CHILD] + paths, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == want, f"isa {name}: {r.stdout.split()} != {want}"
