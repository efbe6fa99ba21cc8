"""ParallelCausalLM (torch.distributed, gloo on the CPU): the logits, steps, generated
tokens and states of CausalLM in one process, bit for bit, for every layout, both
profiles and the three weight formats, on 2, 3 and 4 ranks started by torchrun
(contract rule 6.7 and L-8 make the split products exact); the failures each rank
must name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_models import tiny_weights, write_model

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

# 8 heads of 64 over 2 key/value heads (o_proj's k = 512: 4 leaves), MLP of 384 (3 leaves)
GQA = dict(model_type="llama", vocab_size=61, hidden_size=96, intermediate_size=384,
           num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
           rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=64,
           tie_word_embeddings=False, hidden_act="silu")
# q/k/v biases, a tied head, 6 heads of 32 over 3 (o_proj's k = 192: 2 leaves)
QWEN = dict(model_type="qwen2", vocab_size=53, hidden_size=64, intermediate_size=256,
            num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=32,
            rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=64,
            tie_word_embeddings=True, hidden_act="silu")


# qwen3: per-head q/k norms (M-33), 8 heads of 64 over 2 on a hidden size of 160
# (o_proj's k = 512: 4 leaves; MLP of 384: 3)
QWEN3 = dict(GQA, model_type="qwen3", hidden_size=160, rms_norm_eps=1e-6)
# phi3: stacked qkv / gate_up split by heads and columns across ranks, rotary on 24 of 32;
# 12 heads of 32 over 3 (o_proj's k = 384: 3 leaves)
PHI3 = dict(GQA, model_type="phi3", hidden_size=384, num_attention_heads=12,
            num_key_value_heads=3, partial_rotary_factor=0.75, sliding_window=64)
PHI3.pop("head_dim")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("parallel")
    return {"gqa": write_model(d / "gqa", dict(GQA), tiny_weights(GQA, seed=3)),
            "gqa2": write_model(d / "gqa2", dict(GQA), tiny_weights(GQA, seed=5)),
            "qwen": write_model(d / "qwen", dict(QWEN), tiny_weights(QWEN, seed=4)),
            "qwen3": write_model(d / "qwen3", dict(QWEN3), tiny_weights(QWEN3, seed=6)),
            "phi3": write_model(d / "phi3", dict(PHI3), tiny_weights(PHI3, seed=7))}


def run_torchrun(nproc, spec, tmp_path, worker, timeout=900):
    """Run tests/<worker> on nproc ranks (one thread each) with spec (plus tmpdir) as its
    SPEC.json: (the torchrun CompletedProcess, the lines the ranks wrote to
    tmpdir/rank<r>.txt, in rank order)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, tmpdir=str(tmp_path))
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + str(ROOT / "tests"),
               MOJOLEARN_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={nproc}", str(ROOT / "tests" / worker),
                        str(f)], capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=tmp_path)
    out = []
    for rank in range(nproc):
        f = tmp_path / f"rank{rank}.txt"
        out += f.read_text().splitlines() if f.exists() else []
    return r, out


def torchrun(nproc, spec, tmp_path, timeout=900):
    """Run tests/parallel_worker.py on nproc ranks; its stdout lines."""
    r, out = run_torchrun(nproc, spec, tmp_path, "parallel_worker.py", timeout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    return out


def cases(path, layouts, profiles, formats, **extra):
    return [dict(path=path, layout=lay, profile=p, format=f, **extra)
            for lay in layouts for p in profiles for f in formats]


def check_bits(lines, ncases, nproc):
    got = [json.loads(x[len("RESULT "):]) for x in lines if x.startswith("RESULT ")]
    assert len(got) == ncases * nproc, lines[-20:]
    return got


def test_two_ranks(models, tmp_path):
    """6.7, L-8: on 2 ranks, pipeline and tensor layouts, fp32_v1 and fixed15_v1, float32 /
    bfloat16 / int8 weights (GQA with head groups split across ranks; qwen2 biases and a
    tied head): forward, prefill and steps, greedy and sampled generate and states saved on
    one side and resumed on the other equal CausalLM's bits on every rank."""
    cs = cases(models["gqa"], ("pipeline", "tensor"), ("fp32_v1", "fixed15_v1"),
               ("float32", "bfloat16", "int8"))
    cs += cases(models["qwen"], ("pipeline", "tensor"), ("fp32_v1", "fixed15_v1"), ("int8",))
    got = check_bits(torchrun(2, {"mode": "bits", "cases": cs}, tmp_path), len(cs), 2)
    # the tensor layout sends parts and logits, the pipeline the residual stream
    assert all(g["bytes_sent"] > 0 for g in got)


def test_three_ranks(models, tmp_path):
    """6.7, L-8: on 3 ranks (the GQA model's heads split 4 / 2 / 2: a rank holds part of
    a key/value head's group), pipeline and tensor, both profiles, the three formats:
    CausalLM's bits."""
    cs = cases(models["gqa"], ("tensor",), ("fp32_v1", "fixed15_v1"), ("float32", "bfloat16", "int8"))
    cs += cases(models["gqa"], ("pipeline",), ("fp32_v1", "fixed15_v1"), ("int8",))
    check_bits(torchrun(3, {"mode": "bits", "cases": cs}, tmp_path), len(cs), 3)


@pytest.mark.parametrize("nproc", [2, 3])
def test_qwen3_and_phi3_ranks(models, tmp_path, nproc):
    """M-33 M-34 with 6.7: qwen3 (q/k norms on every rank's heads) and phi3 (its stacked
    qkv / gate_up read as row blocks, split by heads and MLP columns; rotary on 24 of 32)
    on 2 and 3 ranks, tensor layout, both profiles; and pipeline on 2: CausalLM's bits."""
    cs = cases(models["qwen3"], ("tensor",), ("fp32_v1", "fixed15_v1"), ("float32", "int8"))
    cs += cases(models["phi3"], ("tensor",), ("fp32_v1", "fixed15_v1"), ("float32", "bfloat16"))
    if nproc == 2:
        cs += cases(models["phi3"], ("pipeline",), ("fp32_v1",), ("int8",))
        cs += cases(models["qwen3"], ("pipeline",), ("fixed15_v1",), ("float32",))
    check_bits(torchrun(nproc, {"mode": "bits", "cases": cs}, tmp_path), len(cs), nproc)


@pytest.mark.slow
def test_four_ranks_pipeline_and_tensor(models, tmp_path):
    """6.7, L-8: 4 ranks as 2 pipeline stages of 2 tensor ranks, both profiles, float32 and
    int8 weights: CausalLM's bits."""
    cs = cases(models["gqa"], ("pipeline+tensor",), ("fp32_v1", "fixed15_v1"),
               ("float32", "int8"), tensor_size=2)
    check_bits(torchrun(4, {"mode": "bits", "cases": cs}, tmp_path), len(cs), 4)


@pytest.mark.parametrize("mode, expect", [
    ("die", "another rank died, hung past the timeout"),
    ("hang", "another rank died, hung past the timeout"),
    ("mismatch", "numeric_profile: rank 0 'fp32_v1', rank 1 'fixed15_v1'"),
    ("checkpoint", "load: rank 1 differs from rank 0 (weights: rank 0"),
    ("ids", "the ids: rank 1 differs from rank 0"),
])
def test_failures_are_named(models, tmp_path, mode, expect):
    """A rank that dies or hangs ends the others with a RuntimeError naming the operation,
    the rank and the timeout (never a hang); ranks loaded with another profile or another
    checkpoint of the same shape, or given other ids, are refused by name."""
    spec = {"mode": mode, "timeout": 6, "cases": cases(models["gqa"], ("tensor",), ("fp32_v1",),
                                                     ("float32",)),
            "other_path": models["gqa2"]}
    lines = [x for x in torchrun(2, spec, tmp_path, timeout=120) if x.startswith("RAISED")]
    r0 = [x for x in lines if x.startswith("RAISED rank 0 ")]
    assert len(r0) == 1, lines
    assert expect in r0[0], r0[0]
    if mode in ("die", "hang"):
        assert "RuntimeError" in r0[0] and "mojolearn: ParallelCausalLM rank 0 of 2" in r0[0]
        assert float(r0[0].split(" after ")[1].split("s:")[0]) < 60


def test_shapes_that_cannot_split_are_refused():
    """6.7: a rank count the heads or the MLP cannot be split into on whole subtrees of
    o_proj / down_proj is refused by name with the counts that work; fixed15_v1 (L-8)
    splits anywhere; more stages than layers and a bad tensor_size are refused."""
    from mojolearn.models.config import ModelConfig
    from mojolearn.models._transformer.parallel import _Plan

    q = ModelConfig.from_dict(dict(QWEN))
    with pytest.raises(ValueError, match=r"cannot be split over 3 tensor ranks.*tensor ranks "
                                         r"that work: 1 to 2"):
        _Plan(q, "tensor", 3, None, "fp32_v1", "identical")
    p = _Plan(q, "tensor", 3, None, "fixed15_v1", "identical")
    assert p.heads == [(0, 2), (2, 4), (4, 6)] and p.kv == [(0, 1), (1, 2), (2, 3)]
    g = ModelConfig.from_dict(dict(GQA))
    p = _Plan(g, "tensor", 3, None, "fp32_v1", "identical")
    assert p.heads == [(0, 4), (4, 6), (6, 8)] and p.kv == [(0, 1), (1, 2), (1, 2)]
    assert p.ff == [(0, 128), (128, 256), (256, 384)]
    with pytest.raises(ValueError, match="at least one layer; use at most 3 stages"):
        _Plan(g, "pipeline", 4, None, "fp32_v1", "identical")
    with pytest.raises(ValueError, match="tensor_size"):
        _Plan(g, "pipeline+tensor", 4, 3, "fp32_v1", "identical")
    with pytest.raises(ValueError, match="tensor_size"):
        _Plan(g, "pipeline+tensor", 4, None, "fp32_v1", "identical")
    with pytest.raises(ValueError, match="goes with layout 'pipeline\\+tensor' only"):
        _Plan(g, "tensor", 2, 1, "fp32_v1", "identical")


@pytest.mark.parametrize("timeout", [0, 1e-7, 0.0009, -1, float("inf"), float("nan"), 10 ** 30,
                                     1e30, 365 * 86400 + 1, True, "5"])
def test_timeouts_outside_what_the_groups_keep_are_refused(models, timeout):
    """Issue 43 item 10: a timeout below a millisecond (torch.distributed would keep 0 and
    wait forever), infinite, NaN or past a year (a bare OverflowError before) is refused
    by name before any group is made."""
    from mojolearn.models import ParallelCausalLM

    with pytest.raises(ValueError, match=r"timeout must be (a finite number|a number)"):
        ParallelCausalLM.load(models["gqa"], timeout=timeout)


def test_load_needs_a_process_group(models):
    """Outside a torch.distributed process group load is refused by name (torchrun)."""
    from mojolearn.models import ParallelCausalLM

    if torch.distributed.is_initialized():  # pragma: no cover
        pytest.skip("a process group is initialized in this test process")
    with pytest.raises(RuntimeError, match="torchrun"):
        ParallelCausalLM.load(models["gqa"])
    with pytest.raises(ValueError, match="layout='rows' is not one of"):
        ParallelCausalLM.load(models["gqa"], layout="rows")
    with pytest.raises(TypeError, match="ParallelCausalLM.load"):
        ParallelCausalLM()


@pytest.mark.slow
def test_smollm2_two_and_three_ranks(tmp_path):
    """6.7, L-8 on SmolLM2-135M (9 heads of 64 over 3 key/value heads, MLP 1536, 30
    layers): 2 and 3 ranks, pipeline and tensor, fp32_v1 and fixed15_v1: CausalLM's bits
    (forward, steps, generate, states)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from fetch_model import fetch
    from hf_export import export_hf

    # the Hugging Face export (safetensors): each rank reads only its rows / columns
    path = export_hf(fetch(), str(tmp_path / "smollm2"))
    for nproc in (2, 3):
        cs = cases(str(path), ("pipeline", "tensor"), ("fp32_v1", "fixed15_v1"), ("float32",))
        check_bits(torchrun(nproc, {"mode": "bits", "cases": cs}, tmp_path / f"n{nproc}",
                            timeout=1800), len(cs), nproc)


def _raised(lines, nruns, nproc=2):
    """{(case, rank): what that rank raised} from the RAISED lines of a job of several cases."""
    got = {}
    for x in lines:
        if x.startswith("RAISED case "):
            _, _, i, _, r, rest = x.split(" ", 5)
            got[int(i), int(r)] = rest
    assert sorted(got) == [(i, r) for i in range(nruns) for r in range(nproc)], lines[-20:]
    return got


def _seconds(raised):
    return float(raised.split(" after ")[1].split("s:")[0])


@pytest.fixture(scope="module")
def mixed(models, tmp_path_factory):
    """The GQA model as a fine-tune with frozen norms (one matrix changed, config and
    final norm the same), as its int8-stored copy and as a plain copy in another folder."""
    import shutil

    from test_models_stored import write_stored

    d = tmp_path_factory.mktemp("mixed")
    w = tiny_weights(GQA, seed=3)
    ft = dict(w)
    name = "model.layers.1.mlp.down_proj.weight"
    ft[name] = (w[name] * np.float32(1.5)).astype(np.float32)
    shutil.copytree(models["gqa"], d / "copy")
    return {"finetune": write_model(d / "finetune", dict(GQA), ft),
            "int8": write_stored(d / "int8", dict(GQA), w, "int8")[0],
            "copy": str(d / "copy")}


def test_mixed_checkpoints_are_refused_by_name(models, mixed, tmp_path):
    """Issue 43 item 1: ranks that load different checkpoints with the same config and
    the same final norm (a fine-tune with one other matrix; the float32 folder and its
    int8-stored copy) are refused at load on every rank by a ValueError naming the
    weights; a byte-identical copy in another folder loads and gives the same logits."""
    gqa = models["gqa"]
    runs = [{"paths": [gqa, mixed["finetune"]]}, {"paths": [mixed["int8"], gqa]},
            {"paths": [gqa, mixed["copy"]]}]
    got = _raised(torchrun(2, {"mode": "weights", "timeout": 20, "runs": runs}, tmp_path,
                           timeout=120), len(runs))
    for i in (0, 1):
        for r in (0, 1):
            assert got[i, r].startswith("ValueError after "), got[i, r]
            assert "mojolearn: ParallelCausalLM: load: rank 1 differs from rank 0 (weights: " \
                   "rank 0 " in got[i, r], got[i, r]
    assert got[2, 0].startswith("nothing after ") and got[2, 0] == got[2, 1], got


def test_argument_mismatch_is_refused_before_any_group(models, tmp_path):
    """Issue 43 item 2: ranks loading with another layout (or max_positions) are refused
    on every rank by a ValueError naming it, within seconds (before, the subgroups made
    before the check made every rank wait the whole timeout, and the loads after it
    ended in torch's DistStoreError); a rank whose checkpoint cannot be read raises its
    own error while the others name it as unreadable, again without waiting the
    timeout; a matching load afterwards works."""
    runs = [{"kw": [{"layout": "tensor"}, {"layout": "pipeline"}]},
            {"kw": [{"max_positions": 32}, {"max_positions": 16}]},
            {"kw": [{}, {"path": str(tmp_path / "no-such-model")}]},
            {"kw": [{"layout": "pipeline"}, {"layout": "pipeline"}]}]
    spec = {"mode": "arguments", "timeout": 20, "runs": runs,
            "cases": cases(models["gqa"], ("tensor",), ("fp32_v1",), ("float32",))}
    got = _raised(torchrun(2, spec, tmp_path, timeout=300), len(runs))
    for r in (0, 1):
        assert got[0, r].startswith("ValueError after "), got[0, r]
        assert "(layout: rank 0 'tensor', rank 1 'pipeline')" in got[0, r], got[0, r]
        assert "(max_positions: rank 0 '32', rank 1 '16')" in got[1, r], got[1, r]
    assert got[2, 0].startswith("ValueError after "), got[2, 0]
    assert "load: rank 1 differs from rank 0 (model shape: rank 0 " in got[2, 0], got[2, 0]
    assert "rank 1 'unreadable (FileNotFoundError)'" in got[2, 0], got[2, 0]
    assert got[2, 1].startswith("FileNotFoundError after ") and "no-such-model" in got[2, 1]
    assert got[3, 0].startswith("nothing after ") and got[3, 0] == got[3, 1], got
    for i in range(3):
        for r in (0, 1):
            assert _seconds(got[i, r]) < 8, got[i, r]


def test_generate_arguments_are_compared(models, tmp_path):
    """Issue 43 item 3: generate called with another seed, greedy flag, eos_token_id,
    prompt or max_new_tokens on one rank is refused on every rank by a ValueError naming
    the argument (before, the ranks returned different tokens, or a rank waited out the
    timeout); a rank whose own argument is invalid raises its error while the others
    name the argument; the same arguments give the same tokens."""
    p = [[1, 2, 3]]
    runs = [{"args": [[p, 1, {"greedy": False, "seed": 7}], [p, 1, {"greedy": False, "seed": 8}]]},
            {"args": [[p, 1, {}], [p, 1, {"greedy": False}]]},
            {"args": [[p, 2, {"eos_token_id": 5}], [p, 2, {}]]},
            {"args": [[p, 2, {}], [[[1, 2, 4]], 2, {}]]},
            {"args": [[p, 3, {"greedy": False, "seed": 1}], [p, 3, {"greedy": False, "seed": 1}]]},
            {"args": [[p, 2, {}], [p, -1, {}]]},
            {"args": [[p, 1, {}], [p, 2, {}]]}]
    names = ["seed", "greedy", "eos_token_id", "ids", None, "max_new_tokens", "max_new_tokens"]
    spec = {"mode": "generate", "timeout": 20, "runs": runs,
            "cases": cases(models["gqa"], ("tensor",), ("fp32_v1",), ("float32",))}
    got = _raised(torchrun(2, spec, tmp_path, timeout=300), len(runs))
    for i, name in enumerate(names):
        if name is None:
            assert got[i, 0].startswith("nothing after ") and got[i, 0] == got[i, 1], got
            continue
        for r in (0, 1):
            if i == 5 and r == 1:  # its own refusal of max_new_tokens=-1
                assert "ValueError" in got[i, r] and "max_new_tokens must be an int >= 0" \
                    in got[i, r], got[i, r]
                continue
            assert got[i, r].startswith("ValueError after "), (i, got[i, r])
            assert "generate: rank 1 differs from rank 0 (" + name + ": rank 0 " in got[i, r], \
                (i, got[i, r])
            assert _seconds(got[i, r]) < 8, got[i, r]


def test_model_digest(models, mixed, tmp_path):
    """Issue 43 item 1: model_digest hashes every file the model is read from (names,
    sizes, bytes): a copy in another folder has the same digest, one changed matrix, the
    int8-stored copy, another config.json and a changed shard of a sharded folder do
    not; a .gguf file's own name is not part of it."""
    import shutil

    from mojolearn.models._load.loader import model_digest

    gqa = models["gqa"]
    d0 = model_digest(gqa)
    assert len(d0) == 64 and d0 == model_digest(mixed["copy"])
    assert d0 != model_digest(mixed["finetune"]) and d0 != model_digest(mixed["int8"])
    cfg = tmp_path / "cfg"
    shutil.copytree(gqa, cfg)
    (cfg / "config.json").write_text(json.dumps(dict(GQA, rope_theta=20000.0)))
    assert model_digest(cfg) != d0
    # a sharded folder: the index and every shard it names
    from safetensors.numpy import save_file

    w = tiny_weights(GQA, seed=3)
    names = sorted(w)
    sh = tmp_path / "sharded"
    sh.mkdir()
    (sh / "config.json").write_text(json.dumps(dict(GQA)))
    half = len(names) // 2
    wm = {}
    for j, part in enumerate((names[:half], names[half:])):
        f = f"model-0000{j + 1}-of-00002.safetensors"
        save_file({n: w[n] for n in part}, str(sh / f))
        wm.update({n: f for n in part})
    (sh / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    s0 = model_digest(sh)
    sh2 = tmp_path / "sharded2"
    shutil.copytree(sh, sh2)
    assert model_digest(sh2) == s0
    f2 = sh2 / "model-00002-of-00002.safetensors"
    b = bytearray(f2.read_bytes())
    b[-1] ^= 1
    f2.write_bytes(bytes(b))
    assert model_digest(sh2) != s0
    # a .gguf file: its bytes, not its name
    g1, g2 = tmp_path / "a.gguf", tmp_path / "b.gguf"
    g1.write_bytes(b"GGUF" + bytes(range(256)) * 50000)
    shutil.copy(g1, g2)
    assert model_digest(g1) == model_digest(g2)
