"""Tests for mojolearn.profiles: the numeric-profile table and its rules.

Each test names the part of the spec it checks: "profiles table" for the facts
of the table, "profiles rule N" for the numbered rules. No native extension and
no NumPy are needed; measurements come from temporary result files only.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest

from mojolearn._core import device as _device
from mojolearn import profiles as P
from mojolearn._table import profiles as PT  # the private reload / reset hooks

REGISTERED = "Registered names: fp32_v1, fixed15_v1"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    """Each test starts with ENV unset, no defaults read, nothing measured."""
    monkeypatch.delenv(P.ENV, raising=False)
    PT._reset_for_tests([])
    yield
    monkeypatch.delenv(P.ENV, raising=False)
    PT._reset_for_tests()


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _results(vendor="cpu", box="Test CPU 9000", over=(1.5, 1.8), profile="fixed15_v1"):
    return {
        "vendor": vendor,
        "box": box,
        "profiles": {
            profile: {
                "over": list(over),
                "what": "transformer forward, 4x512 tokens",
                "source": "bench/results/x.json, make bench, 2025-01-01",
            }
        },
    }


def _no_warnings(fn, *args, **kw):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = fn(*args, **kw)
    assert [w for w in got if issubclass(w.category, P.NumericProfileSpeedWarning)] == []
    return out


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------


def test_constants():
    """profiles table: BASELINE, DEFAULT, TRAINING_DEFAULT, FAMILIES, ENV, STATE_KEY, USES."""
    assert P.BASELINE == "fp32_v1"
    assert P.DEFAULT == "fp32_v1"
    assert P.TRAINING_DEFAULT == "fp32_v1"
    assert P.FAMILIES == ("transformer", "mamba1", "mamba2", "transformer_block")
    assert P.ENV == "MOJOLEARN_NUMERIC_PROFILE"
    assert P.STATE_KEY == "numeric_profile"
    assert P.USES == ("inference", "training")


def test_table_names_baseline_first():
    """profiles table: PROFILES holds fp32_v1 then fixed15_v1, baseline first."""
    assert list(P.PROFILES) == ["fp32_v1", "fixed15_v1"]
    assert next(iter(P.PROFILES)) == P.BASELINE


def test_fp32_v1_row():
    """profiles table: fp32_v1 row (baseline, all products on fp32.v1, every family)."""
    row = P.PROFILES["fp32_v1"]
    assert row["status"] == "baseline"
    assert row["products"] == {
        "projections": "mojolearn.identical.gemm.fp32.v1",
        "attention": "mojolearn.identical.gemm.fp32.v1",
    }
    assert row["inference"] is True and row["training"] is True
    assert row["computes"] is None
    assert row["default_for"] is None
    assert row["quality"] == {}
    assert isinstance(row["note"], str) and row["note"]


def test_fixed15_v1_row():
    """profiles table: fixed15_v1 row (experimental, int15i64 projections and Q.K^T, P.V on fp32.v1)."""
    row = P.PROFILES["fixed15_v1"]
    assert row["status"] == "experimental"
    assert row["products"]["projections"] == "mojolearn.identical.gemm.int15i64.v1"
    att = row["products"]["attention"]
    assert "mojolearn.identical.gemm.int15i64.v1" in att and "Q.K^T" in att
    assert "P.V" in att and "mojolearn.identical.gemm.fp32.v1" in att
    assert "P.V" in row["note"] and "fp32.v1" in row["note"]
    assert row["inference"] is True and row["training"] is False
    assert row["computes"] == ("transformer", "transformer_block")
    assert row["default_for"] == ("transformer",)


def test_fixed15_v1_quality_published_figures():
    """profiles table: fixed15_v1 quality is the published SmolLM2-360M measurement, labelled with its source."""
    q = P.PROFILES["fixed15_v1"]["quality"]
    assert q["model"] == "SmolLM2-360M"
    assert "perplexity" in q["metric"] and "fp32_v1" in q["metric"]
    assert "whole model" in q["metric"]
    assert "published" in q["source"] and "SmolLM2-360M" in q["source"]
    r = q["results"]
    assert set(r) == {"enwik8 last 1 MB", "pile_github"}
    assert r["enwik8 last 1 MB"]["change"] == pytest.approx(0.000006, abs=1e-12)
    assert r["enwik8 last 1 MB"]["interval"] == pytest.approx((-0.000044, 0.000055), abs=1e-12)
    assert r["pile_github"]["change"] == pytest.approx(0.000033, abs=1e-12)
    assert r["pile_github"]["interval"] == pytest.approx((-0.000010, 0.000076), abs=1e-12)
    # a row never carries an estimate
    assert not any("estimate" in str(k).lower() for k in q)


def test_rejected_table():
    """profiles table: REJECTED holds int8_v1 and fixed15_int8_attention_v1 with their measured reasons."""
    assert set(P.REJECTED) == {"int8_v1", "fixed15_int8_attention_v1"}
    r = P.REJECTED["int8_v1"]
    for part in ("32.2%", "enwik8", "28.9%", "pile_github", "1%", "activation"):
        assert part in r
    r = P.REJECTED["fixed15_int8_attention_v1"]
    for part in ("+0.6%", "enwik8", "attention"):
        assert part in r
    assert not set(P.REJECTED) & set(P.PROFILES)


@pytest.mark.parametrize("name", ["int8_v1", "fixed15_int8_attention_v1"])
def test_rejected_name_refused_with_reason_and_registered(name):
    """profiles table: asking for a REJECTED name raises ValueError with its reason and the registered names."""
    with pytest.raises(ValueError) as e:
        P.resolve(name)
    msg = str(e.value)
    assert msg.startswith("mojolearn:")
    assert f"numeric_profile={name!r}" in msg
    assert P.REJECTED[name] in msg
    assert REGISTERED in msg
    with pytest.raises(ValueError, match="rejected"):
        P.set_numeric_profile(name)


def test_vendor_is_cpu():
    """profiles table: MEASURED is keyed by vendor; this build's vendor() is "cpu"."""
    assert _device.vendor() == "cpu"


def test_no_numpy_or_native_import():
    """profiles table: the table is plain data; the module needs neither NumPy nor the extension."""
    import subprocess
    from pathlib import Path

    pkg_dir = str(Path(P.__file__).parent)
    # Load profiles (and _device) without running the package __init__, so
    # only this module's own imports are seen.
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('mojolearn'); pkg.__path__ = [%r]\n"
        "sys.modules['mojolearn'] = pkg\n"
        "import mojolearn.profiles as p\n"
        "assert p.resolve() == 'fp32_v1'\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "assert not [m for m in sys.modules if m.startswith('mojolearn._native')], '_native imported'\n"
    ) % pkg_dir
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------
# Rule 1: names
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["fixed15", "fp32", "int15", "FP32_V1", "fixed15_v2", ""])
def test_unknown_name_refused_listing_registered(bad):
    """profiles rule 1: no unversioned alias; an unknown name is refused listing the registered names."""
    with pytest.raises(ValueError) as e:
        P.resolve(bad)
    msg = str(e.value)
    assert msg.startswith("mojolearn:")
    assert f"numeric_profile={bad!r}" in msg
    assert "not a registered numeric profile" in msg
    assert REGISTERED in msg


def test_whitespace_stripped():
    """profiles rule 1: whitespace around a name is stripped."""
    assert P.resolve("  fp32_v1\n") == "fp32_v1"
    assert P.resolve("\tfixed15_v1 ", family="transformer") == "fixed15_v1"
    assert P.set_numeric_profile(" fixed15_v1 ") == "fp32_v1"
    assert P.numeric_profile() == "fixed15_v1"


@pytest.mark.parametrize("bad", [1, 1.0, b"fp32_v1", ["fp32_v1"], object()])
def test_non_str_name_is_type_error(bad):
    """profiles rule 1: a non-str name is a TypeError naming the argument and the registered names."""
    with pytest.raises(TypeError) as e:
        P.resolve(bad, what="Model numeric_profile")
    msg = str(e.value)
    assert msg.startswith("mojolearn: Model numeric_profile must be a str")
    assert type(bad).__name__ in msg
    assert "registered names: fp32_v1, fixed15_v1" in msg
    with pytest.raises(TypeError):
        P.set_numeric_profile(bad)


def test_error_names_callers_argument():
    """profiles rule 1: the refusal names the caller's argument label (`what`)."""
    with pytest.raises(ValueError, match=r"^mojolearn: CausalLM\(numeric_profile\)='fixed15' "):
        P.resolve("fixed15", what="CausalLM(numeric_profile)")


# --------------------------------------------------------------------------
# Rule 2: unnamed calls
# --------------------------------------------------------------------------


@pytest.mark.parametrize("family", [None, *P.FAMILIES])
def test_unnamed_gets_fp32_by_default(family):
    """profiles rule 2: with the shipped default, an unnamed call gets fp32_v1 in every family."""
    assert P.resolve(family=family) == "fp32_v1"
    assert P.resolve(None, use="training", family=family) == "fp32_v1"


def test_unnamed_inference_follows_default_only_where_it_reaches():
    """profiles rule 2: the inference default applies only in families it reaches; elsewhere BASELINE, never refused."""
    P.set_numeric_profile("fixed15_v1")
    assert P.resolve(family="transformer") == "fixed15_v1"
    # computes transformer_block but is not its default
    assert P.resolve(family="transformer_block") == "fp32_v1"
    # not computed at all: BASELINE, no refusal
    assert P.resolve(family="mamba1") == "fp32_v1"
    assert P.resolve(family="mamba2") == "fp32_v1"
    # a caller outside the families
    assert P.resolve() == "fp32_v1"


def test_unnamed_training_ignores_inference_default():
    """profiles rule 2: in training an unnamed call gets TRAINING_DEFAULT whatever the inference default is."""
    P.set_numeric_profile("fixed15_v1")
    for family in (None, *P.FAMILIES):
        assert P.resolve(use="training", family=family) == P.TRAINING_DEFAULT
    assert P.require_training("Trainer numeric_profile") == "fp32_v1"


# --------------------------------------------------------------------------
# Rule 3: named calls
# --------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["mamba1", "mamba2"])
def test_named_family_outside_computes_refused(family):
    """profiles rule 3: a named profile in a family outside its computes raises NotImplementedError naming the family."""
    with pytest.raises(NotImplementedError) as e:
        P.resolve("fixed15_v1", family=family)
    msg = str(e.value)
    assert msg.startswith("mojolearn: numeric_profile='fixed15_v1'")
    assert f"family {family!r}" in msg
    assert "computes transformer, transformer_block" in msg
    assert "numeric_profile='fp32_v1'" in msg


def test_named_profile_given_as_asked():
    """profiles rule 3: a named profile is given as asked in every family it computes (never widened or relabelled)."""
    assert P.resolve("fixed15_v1", family="transformer") == "fixed15_v1"
    assert P.resolve("fixed15_v1", family="transformer_block") == "fixed15_v1"
    assert P.resolve("fixed15_v1") == "fixed15_v1"
    for family in P.FAMILIES:
        assert P.resolve("fp32_v1", family=family) == "fp32_v1"
        assert P.resolve("fp32_v1", use="training", family=family) == "fp32_v1"


@pytest.mark.parametrize("family", [None, "transformer", "transformer_block"])
def test_named_training_refused_never_replaced(family):
    """profiles rule 3: training with fixed15_v1 is refused; never replaced by fp32_v1 silently; says how to ask for fp32_v1."""
    with pytest.raises(NotImplementedError) as e:
        P.resolve("fixed15_v1", use="training", family=family)
    msg = str(e.value)
    assert msg.startswith("mojolearn: numeric_profile='fixed15_v1' is not available for training")
    assert "never replaced by fp32_v1 silently" in msg
    assert "pass numeric_profile='fp32_v1'" in msg


def test_require_training():
    """profiles rule 5: require_training(what, name) is the trainer's one line."""
    assert P.require_training("Trainer numeric_profile") == "fp32_v1"
    assert P.require_training("Trainer numeric_profile", "fp32_v1") == "fp32_v1"
    assert P.require_training("Trainer numeric_profile", " fp32_v1 ") == "fp32_v1"
    with pytest.raises(NotImplementedError) as e:
        P.require_training("Trainer numeric_profile", "fixed15_v1")
    msg = str(e.value)
    assert msg.startswith("mojolearn: Trainer numeric_profile='fixed15_v1'")
    assert "never replaced by fp32_v1 silently" in msg
    assert "Trainer numeric_profile='fp32_v1'" in msg
    with pytest.raises(ValueError, match=REGISTERED):
        P.require_training("Trainer numeric_profile", "fixed15")


# --------------------------------------------------------------------------
# Rule 4: set_numeric_profile
# --------------------------------------------------------------------------


def test_set_returns_previous_default():
    """profiles rule 4: set_numeric_profile returns the previous default."""
    assert P.numeric_profile() == "fp32_v1"
    assert P.set_numeric_profile("fixed15_v1") == "fp32_v1"
    assert P.numeric_profile() == "fixed15_v1"
    assert P.set_numeric_profile("fp32_v1") == "fixed15_v1"
    assert P.numeric_profile() == "fp32_v1"
    assert P.numeric_profile("training") == "fp32_v1"


def test_set_checks_at_once():
    """profiles rule 4: set_numeric_profile checks the name at once and leaves the default unchanged on refusal."""
    P.set_numeric_profile("fixed15_v1")
    with pytest.raises(ValueError) as e:
        P.set_numeric_profile("fixed15")
    assert str(e.value).startswith("mojolearn: numeric_profile='fixed15'")
    assert REGISTERED in str(e.value)
    with pytest.raises(ValueError, match="allowed: inference, training"):
        P.set_numeric_profile("fp32_v1", use="serving")
    assert P.numeric_profile() == "fixed15_v1"


def test_set_training_only_fp32():
    """profiles rule 4: only fp32_v1 is available for training."""
    assert P.set_numeric_profile("fp32_v1", use="training") == "fp32_v1"
    with pytest.raises(NotImplementedError) as e:
        P.set_numeric_profile("fixed15_v1", use="training")
    assert "never replaced by fp32_v1 silently" in str(e.value)
    assert P.numeric_profile("training") == "fp32_v1"
    assert P.numeric_profile("inference") == "fp32_v1"


# --------------------------------------------------------------------------
# Rule 5: computes / default_reaches, and the use / family arguments
# --------------------------------------------------------------------------


def test_computes_matrix():
    """profiles rule 5: computes(profile, family) follows the row's computes (None = every family)."""
    for family in P.FAMILIES:
        assert P.computes("fp32_v1", family) is True
    assert P.computes("fixed15_v1", "transformer") is True
    assert P.computes("fixed15_v1", "transformer_block") is True
    assert P.computes("fixed15_v1", "mamba1") is False
    assert P.computes("fixed15_v1", "mamba2") is False


def test_default_reaches_matrix():
    """profiles rule 2/5: default_reaches needs both computes and default_for to include the family."""
    for family in P.FAMILIES:
        assert P.default_reaches("fp32_v1", family) is True
    assert P.default_reaches("fixed15_v1", "transformer") is True
    assert P.default_reaches("fixed15_v1", "transformer_block") is False
    assert P.default_reaches("fixed15_v1", "mamba1") is False
    assert P.default_reaches("fixed15_v1", "mamba2") is False


def test_unknown_use_and_family_refused():
    """profiles rule 5/9: an unknown use or family is a ValueError listing the allowed ones."""
    with pytest.raises(ValueError) as e:
        P.resolve(use="serving")
    assert str(e.value) == (
        "mojolearn: use='serving' is not a known use; allowed: inference, training"
    )
    with pytest.raises(ValueError) as e:
        P.resolve("fp32_v1", family="gpt2")
    assert str(e.value) == (
        "mojolearn: family='gpt2' is not a known model family; allowed: "
        "transformer, mamba1, mamba2, transformer_block"
    )
    with pytest.raises(ValueError, match="family='mamba3'"):
        P.computes("fp32_v1", "mamba3")
    with pytest.raises(ValueError, match="family='Transformer'"):
        P.default_reaches("fp32_v1", "Transformer")
    with pytest.raises(ValueError, match=REGISTERED):
        P.computes("fixed15", "transformer")
    with pytest.raises(TypeError, match="^mojolearn: family must be a str"):
        P.resolve(family=3)
    with pytest.raises(ValueError, match="use='train'"):
        P.numeric_profile("train")


# --------------------------------------------------------------------------
# ENV: the process inference default
# --------------------------------------------------------------------------


def test_env_sets_inference_default(monkeypatch):
    """profiles table (ENV): MOJOLEARN_NUMERIC_PROFILE sets the process inference default."""
    monkeypatch.setenv(P.ENV, "fixed15_v1")
    assert P.numeric_profile() == "fixed15_v1"
    assert P.resolve(family="transformer") == "fixed15_v1"
    assert P.resolve(family="mamba2") == "fp32_v1"
    assert P.resolve(use="training", family="transformer") == "fp32_v1"
    assert P.numeric_profile("training") == "fp32_v1"


def test_env_whitespace_stripped(monkeypatch):
    """profiles table (ENV) / rule 1: whitespace around the ENV value is stripped."""
    monkeypatch.setenv(P.ENV, "  fixed15_v1 \n")
    assert P.numeric_profile() == "fixed15_v1"


def test_env_empty_means_unset(monkeypatch):
    """profiles table (ENV): an empty variable means not set (DEFAULT)."""
    monkeypatch.setenv(P.ENV, "")
    assert P.numeric_profile() == P.DEFAULT


@pytest.mark.parametrize("bad", ["fixed15", "int8_v1", "fp32"])
def test_env_bad_value_same_message_as_bad_name(monkeypatch, bad):
    """profiles table (ENV): a bad value is refused with the same message as a bad name."""
    with pytest.raises(ValueError) as named:
        P.resolve(bad, what=P.ENV)
    monkeypatch.setenv(P.ENV, bad)
    with pytest.raises(ValueError) as from_env:
        P.resolve(family="transformer")
    assert str(from_env.value) == str(named.value)
    msg = str(from_env.value)
    assert msg.startswith(f"mojolearn: MOJOLEARN_NUMERIC_PROFILE={bad!r}")
    assert REGISTERED in msg
    # still refused on the next use: never silently replaced
    with pytest.raises(ValueError):
        P.numeric_profile()


def test_env_read_once(monkeypatch):
    """profiles table (ENV): the variable is read once, on first use."""
    monkeypatch.setenv(P.ENV, "fixed15_v1")
    assert P.numeric_profile() == "fixed15_v1"
    monkeypatch.setenv(P.ENV, "fp32_v1")
    assert P.numeric_profile() == "fixed15_v1"
    monkeypatch.setenv(P.ENV, "fixed15")  # a later bad value is never read
    assert P.resolve(family="transformer") == "fixed15_v1"
    monkeypatch.delenv(P.ENV)
    assert P.numeric_profile() == "fixed15_v1"


def test_env_then_set_returns_env_value(monkeypatch):
    """profiles rule 4 / ENV: set_numeric_profile returns the default ENV gave."""
    monkeypatch.setenv(P.ENV, "fixed15_v1")
    assert P.set_numeric_profile("fp32_v1") == "fixed15_v1"
    assert P.numeric_profile() == "fp32_v1"


# --------------------------------------------------------------------------
# MEASURED: only this project's own result files
# --------------------------------------------------------------------------


def test_measured_has_no_typed_in_numbers():
    """profiles table (MEASURED): with no result files MEASURED is empty; nothing is typed in."""
    assert P.MEASURED == {}
    assert P.measured("fixed15_v1") is None
    assert P.measured("fp32_v1", "cpu") is None


def test_default_results_location():
    """profiles table (MEASURED): results come from package _results, else the checkout's bench/results."""
    from pathlib import Path

    dirs = PT._results_dirs()
    assert len(dirs) == 1
    pkg = Path(P.__file__).parent / "_results"
    if pkg.is_dir():
        assert dirs[0] == pkg
    else:
        assert dirs[0] == Path(P.__file__).resolve().parents[2] / "bench" / "results"


def test_load_measured_from_files(tmp_path):
    """profiles table (MEASURED): profile -> vendor -> {over, box, what, source} from result files."""
    a = _write(tmp_path, "a.json", _results("cpu", "Test CPU 9000", (1.5, 1.8)))
    b = _write(tmp_path, "b.json", _results("nvidia", "Test GPU H0", (0.7, 0.9)))
    c = _write(tmp_path, "c.json", {"vendor": "cpu", "box": "x", "cases": []})  # no profiles key
    PT._load_measured([a, b, c])
    assert set(P.MEASURED) == {"fixed15_v1"}
    assert set(P.MEASURED["fixed15_v1"]) == {"cpu", "nvidia"}
    row = P.measured("fixed15_v1", "cpu")
    assert row == {
        "over": (1.5, 1.8),
        "box": "Test CPU 9000",
        "what": "transformer forward, 4x512 tokens",
        "source": "bench/results/x.json, make bench, 2025-01-01",
    }
    assert P.measured("fixed15_v1", "nvidia")["over"] == (0.7, 0.9)


def test_load_measured_directory(tmp_path):
    """profiles table (MEASURED): every *.json in a results folder is loaded."""
    _write(tmp_path, "1.json", _results("cpu", over=(1.2, 1.3)))
    _write(tmp_path, "2.json", _results("amd", over=(2.0, 2.5)))
    _write(tmp_path, "notes.txt", "not json")
    PT._load_measured([tmp_path])
    assert P.measured("fixed15_v1", "cpu")["over"] == (1.2, 1.3)
    assert P.measured("fixed15_v1", "amd")["over"] == (2.0, 2.5)


def test_load_measured_prefers_this_build_then_this_box(tmp_path, monkeypatch):
    """profiles table (MEASURED): of several CPU rows, the one measured with the build
    this process runs wins, and among those the one measured on this machine, whatever
    the order of the files; otherwise the later file."""
    from mojolearn._table import measured as M

    monkeypatch.setattr(M, "_this_isa", lambda: "v4")
    monkeypatch.setattr(M, "_this_box", lambda: "Box A (Zen 5)")

    def res(name, box, isa, over):
        return _write(tmp_path, name, {**_results("cpu", box, over), "isa": isa})

    here = res("1.json", "Box A (Zen 5)", "v4", (1.1, 1.2))
    other_box = res("2.json", "Box B", "v4", (1.3, 1.4))
    other_isa_here = res("3.json", "Box A (Zen 5)", "v3", (1.5, 1.6))
    for order in ([here, other_box, other_isa_here], [other_isa_here, other_box, here],
                  [other_box, here, other_isa_here]):
        PT._load_measured(order)
        assert P.measured("fixed15_v1", "cpu")["over"] == (1.1, 1.2), order
    PT._load_measured([other_isa_here, other_box])  # no row of this box and build
    assert P.measured("fixed15_v1", "cpu")["over"] == (1.3, 1.4)
    later = res("4.json", "Box C", "v4", (1.7, 1.8))
    PT._load_measured([other_box, later])  # equal standing: the later file
    assert P.measured("fixed15_v1", "cpu")["over"] == (1.7, 1.8)
    PT._load_measured([])


def test_measured_none_for_vendor_without_row(tmp_path, monkeypatch):
    """profiles table (MEASURED): a vendor with no row reads None (never another box's number)."""
    PT._load_measured([_write(tmp_path, "a.json", _results("nvidia", over=(1.5, 1.8)))])
    assert P.measured("fixed15_v1", "amd") is None
    assert P.measured("fixed15_v1", "cpu") is None
    assert P.measured("fixed15_v1") is None  # the vendor in use is cpu
    assert P.measured("fp32_v1", "nvidia") is None  # never another profile's row
    monkeypatch.setattr(_device, "vendor", lambda: "nvidia")
    assert P.measured("fixed15_v1")["over"] == (1.5, 1.8)
    with pytest.raises(ValueError, match=REGISTERED):
        P.measured("fixed15")


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"vendor": "cpu", "box": "b", "profiles": []}),
        json.dumps(_results(over=(1.5,))),
        json.dumps(_results(over=(2.0, 1.0))),
        json.dumps(_results(over=("a", "b"))),
        json.dumps(_results(profile="fixed15")),
        json.dumps(_results(profile="int8_v1")),
        json.dumps({**_results(), "box": ""}),
        json.dumps({k: v for k, v in _results().items() if k != "vendor"}),
    ],
)
def test_malformed_results_file_skipped_with_warning(tmp_path, content):
    """profiles table (MEASURED): a malformed result file is skipped with a warning, not a crash."""
    good = _write(tmp_path, "good.json", _results("amd", over=(1.1, 1.2)))
    bad = _write(tmp_path, "bad.json", content)
    with pytest.warns(UserWarning, match=r"^mojolearn: benchmark results file .*bad\.json.* skipped"):
        PT._load_measured([bad, good])
    assert P.measured("fixed15_v1", "amd")["over"] == (1.1, 1.2)
    assert P.measured("fixed15_v1", "cpu") is None


def test_reset_rereads_results(tmp_path):
    """profiles table (MEASURED): _reset_for_tests re-reads the result files."""
    PT._reset_for_tests([_write(tmp_path, "a.json", _results())])
    assert P.measured("fixed15_v1", "cpu")["over"] == (1.5, 1.8)
    PT._reset_for_tests([])
    assert P.measured("fixed15_v1", "cpu") is None


# --------------------------------------------------------------------------
# Rule 6: speed warning
# --------------------------------------------------------------------------


def test_speed_warning_class():
    """profiles rule 6: NumericProfileSpeedWarning is a UserWarning."""
    assert issubclass(P.NumericProfileSpeedWarning, UserWarning)


def test_speed_warning_once_per_profile_vendor(tmp_path, monkeypatch):
    """profiles rule 6: a profile measured slower warns once per (profile, vendor), then runs as asked."""
    PT._load_measured([
        _write(tmp_path, "cpu.json", _results("cpu", "Test CPU 9000", (1.5, 1.8))),
        _write(tmp_path, "gpu.json", _results("nvidia", "Test GPU H0", (2.0, 2.25))),
    ])
    with pytest.warns(P.NumericProfileSpeedWarning) as got:
        assert P.resolve("fixed15_v1", family="transformer") == "fixed15_v1"
    assert len(got) == 1
    msg = str(got[0].message)
    assert msg.startswith("mojolearn: numeric_profile='fixed15_v1'")
    assert "Test CPU 9000" in msg  # the box
    assert "1.5x to 1.8x" in msg  # the ratio
    assert "transformer forward, 4x512 tokens" in msg  # the operation timed
    assert "bench/results/x.json, make bench, 2025-01-01" in msg  # the source
    assert "numeric_profile='fp32_v1'" in msg  # how to get fp32_v1
    # once per (profile, vendor)
    assert _no_warnings(P.resolve, "fixed15_v1") == "fixed15_v1"
    # another vendor warns once more, with its own row
    monkeypatch.setattr(_device, "vendor", lambda: "nvidia")
    with pytest.warns(P.NumericProfileSpeedWarning, match=r"2x to 2\.25x.*box: Test GPU H0"):
        assert P.resolve("fixed15_v1") == "fixed15_v1"
    _no_warnings(P.resolve, "fixed15_v1")


def test_speed_warning_from_default(tmp_path, monkeypatch):
    """profiles rule 6: an unnamed call that resolves to a slower default also warns (once)."""
    PT._load_measured([_write(tmp_path, "a.json", _results("cpu", over=(1.5, 1.8)))])
    monkeypatch.setenv(P.ENV, "fixed15_v1")
    _no_warnings(P.resolve, family="mamba1")  # resolves to fp32_v1: no warning
    with pytest.warns(P.NumericProfileSpeedWarning, match="Model numeric_profile='fp32_v1'"):
        assert P.resolve(what="Model numeric_profile", family="transformer") == "fixed15_v1"
    _no_warnings(P.resolve, family="transformer")


def test_no_speed_warning_without_slower_measurement(tmp_path, monkeypatch):
    """profiles rule 6: no warning when there is no row for the vendor or it was not measured slower."""
    PT._load_measured([
        _write(tmp_path, "a.json", _results("cpu", over=(0.6, 0.9))),
        _write(tmp_path, "b.json", _results("amd", over=(2.0, 3.0))),
    ])
    _no_warnings(P.resolve, "fixed15_v1")  # cpu: faster
    monkeypatch.setattr(_device, "vendor", lambda: "intel")  # no row at all
    _no_warnings(P.resolve, "fixed15_v1")
    _no_warnings(P.resolve, "fp32_v1")


def test_speed_warning_refusal_comes_first(tmp_path):
    """profiles rule 3/6: a refused call does not warn and does not use up the once-per warning."""
    PT._load_measured([_write(tmp_path, "a.json", _results("cpu", over=(1.5, 1.8)))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NotImplementedError):
            P.resolve("fixed15_v1", family="mamba1")
    with pytest.warns(P.NumericProfileSpeedWarning):
        P.resolve("fixed15_v1", family="transformer")


# --------------------------------------------------------------------------
# Rule 7: records
# --------------------------------------------------------------------------


def test_profiles_records(tmp_path):
    """profiles rule 7: one record per profile with name, flags, the row's fields, quality and measured rows."""
    PT._load_measured([_write(tmp_path, "a.json", _results("cpu", over=(1.5, 1.8)))])
    recs = P.profiles()
    assert isinstance(recs, tuple)
    assert [r["name"] for r in recs] == ["fp32_v1", "fixed15_v1"]
    fp32, fx = recs
    assert fp32["default"] is True and fp32["training_default"] is True
    assert fx["default"] is False and fx["training_default"] is False
    for rec in recs:
        row = P.PROFILES[rec["name"]]
        for key in ("status", "products", "inference", "training", "computes",
                    "default_for", "quality", "note"):
            assert rec[key] == row[key]
    assert fx["computes"] == ("transformer", "transformer_block")
    assert isinstance(fx["computes"], tuple) and isinstance(fx["default_for"], tuple)
    assert fx["measured"] == {"cpu": P.measured("fixed15_v1", "cpu")}
    assert fp32["measured"] == {}


def test_profiles_default_flag_follows_default():
    """profiles rule 7: the default flag follows the process inference default; training stays fp32_v1."""
    P.set_numeric_profile("fixed15_v1")
    fp32, fx = P.profiles()
    assert fx["default"] is True and fp32["default"] is False
    assert fp32["training_default"] is True and fx["training_default"] is False


def test_profiles_records_are_copies(tmp_path):
    """profiles rule 7: records are copies; mutating one does not change the table."""
    PT._load_measured([_write(tmp_path, "a.json", _results("cpu", over=(1.5, 1.8)))])
    before = json.dumps(P.PROFILES, sort_keys=True)
    fx = P.profiles()[1]
    fx["status"] = "stable"
    fx["products"]["projections"] = "x"
    fx["quality"]["results"]["pile_github"]["change"] = 1.0
    fx["measured"]["cpu"]["box"] = "other"
    fx["measured"]["nvidia"] = {}
    assert json.dumps(P.PROFILES, sort_keys=True) == before
    assert P.measured("fixed15_v1", "cpu")["box"] == "Test CPU 9000"
    assert set(P.MEASURED["fixed15_v1"]) == {"cpu"}
    m = P.measured("fixed15_v1", "cpu")
    m["box"] = "changed"
    assert P.measured("fixed15_v1", "cpu")["box"] == "Test CPU 9000"


# --------------------------------------------------------------------------
# Rule 8: checkpoints
# --------------------------------------------------------------------------


def test_state_field():
    """profiles rule 8: state_field is {} for fp32_v1 and {"numeric_profile": name} otherwise."""
    assert P.state_field("fp32_v1") == {}
    assert P.state_field(" fp32_v1 ") == {}
    assert P.state_field("fixed15_v1") == {"numeric_profile": "fixed15_v1"}
    with pytest.raises(ValueError, match=REGISTERED):
        P.state_field("fixed15")


def test_adopt_saved_unnamed_takes_states_profile():
    """profiles rule 8: naming nothing adopts the state's own profile, whatever the process default is."""
    assert P.adopt_saved({"w": 1}) == "fp32_v1"  # no field: written under fp32_v1
    assert P.adopt_saved({"numeric_profile": "fixed15_v1"}) == "fixed15_v1"
    P.set_numeric_profile("fixed15_v1")
    assert P.adopt_saved({}) == "fp32_v1"
    P.set_numeric_profile("fp32_v1")
    assert P.adopt_saved(P.state_field("fixed15_v1")) == "fixed15_v1"
    assert P.adopt_saved({}, use="training") == "fp32_v1"


def test_adopt_saved_named_must_match():
    """profiles rule 8: naming a different profile is a ValueError saying which profile wrote the state."""
    assert P.adopt_saved({"numeric_profile": "fixed15_v1"}, "fixed15_v1") == "fixed15_v1"
    assert P.adopt_saved({}, " fp32_v1") == "fp32_v1"
    with pytest.raises(ValueError) as e:
        P.adopt_saved({}, "fixed15_v1", what="checkpoint 'run1.bin'")
    msg = str(e.value)
    assert msg.startswith("mojolearn: numeric_profile='fixed15_v1' does not match checkpoint 'run1.bin'")
    assert "written under numeric profile 'fp32_v1'" in msg
    assert "Build the object with numeric_profile='fp32_v1'" in msg
    with pytest.raises(ValueError) as e:
        P.adopt_saved({"numeric_profile": "fixed15_v1"}, "fp32_v1")
    assert "written under numeric profile 'fixed15_v1'" in str(e.value)
    assert "numeric_profile='fixed15_v1'" in str(e.value)


def test_adopt_saved_use_must_be_available():
    """profiles rule 8: the adopted profile must still be available for the use (no silent fp32_v1)."""
    with pytest.raises(NotImplementedError) as e:
        P.adopt_saved({"numeric_profile": "fixed15_v1"}, use="training", what="trainer state")
    msg = str(e.value)
    assert msg.startswith("mojolearn: trainer state was written under numeric profile 'fixed15_v1'")
    assert "not available for training" in msg
    assert "never replaced by fp32_v1 silently" in msg


def test_adopt_saved_bad_state():
    """profiles rule 8/9: a state whose field is not a registered profile, or that is no mapping, is refused."""
    with pytest.raises(ValueError) as e:
        P.adopt_saved({"numeric_profile": "fixed15"})
    assert str(e.value).startswith("mojolearn: state['numeric_profile']='fixed15'")
    assert REGISTERED in str(e.value)
    with pytest.raises(ValueError, match="rejected"):
        P.adopt_saved({"numeric_profile": "int8_v1"})
    with pytest.raises(TypeError, match="^mojolearn: state must be a mapping"):
        P.adopt_saved(["fp32_v1"])


def test_check_saved():
    """profiles rule 8: check_saved refuses a state written under another profile; no field means fp32_v1."""
    assert P.check_saved({}, "fp32_v1", "weights") == "fp32_v1"
    assert P.check_saved(P.state_field("fixed15_v1"), "fixed15_v1", "cache") == "fixed15_v1"
    with pytest.raises(ValueError) as e:
        P.check_saved({}, "fixed15_v1", "KV cache")
    msg = str(e.value)
    assert msg.startswith("mojolearn: KV cache was written under numeric profile 'fp32_v1'")
    assert "computes in 'fixed15_v1'" in msg
    assert "numeric_profile='fp32_v1'" in msg
    with pytest.raises(ValueError, match="written under numeric profile 'fixed15_v1'"):
        P.check_saved({"numeric_profile": "fixed15_v1"}, "fp32_v1", "state")


# --------------------------------------------------------------------------
# Rule 9: every error text
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: P.resolve("fixed15"),
        lambda: P.resolve("int8_v1"),
        lambda: P.resolve(7),
        lambda: P.resolve(use="x"),
        lambda: P.resolve(family="x"),
        lambda: P.resolve("fixed15_v1", family="mamba1"),
        lambda: P.resolve("fixed15_v1", use="training"),
        lambda: P.require_training("t", "fixed15_v1"),
        lambda: P.set_numeric_profile("fixed15_v1", use="training"),
        lambda: P.set_numeric_profile(None),
        lambda: P.computes("fp32_v1", None),
        lambda: P.default_reaches("nope", "transformer"),
        lambda: P.measured("nope"),
        lambda: P.measured("fp32_v1", 3),
        lambda: P.state_field(None),
        lambda: P.adopt_saved(None),
        lambda: P.adopt_saved({}, "fixed15_v1"),
        lambda: P.check_saved({}, "fixed15_v1", "s"),
        lambda: P.numeric_profile("x"),
    ],
)
def test_every_error_starts_with_mojolearn(call):
    """profiles rule 9: every error text starts with 'mojolearn:'."""
    with pytest.raises((TypeError, ValueError, NotImplementedError)) as e:
        call()
    assert str(e.value).startswith("mojolearn:")


def test_measured_rows_are_read_on_first_use_not_at_import():
    """profiles table (MEASURED): importing mojolearn (and mojolearn.profiles) reads no
    result file; the first read of MEASURED loads them."""
    import subprocess
    import sys

    code = ("import mojolearn, mojolearn.profiles as P; from mojolearn._table import measured as M; "
            "a = M._loaded[0]; n = len(P.MEASURED); print(a, M._loaded[0])")
    env = dict(os.environ, PYTHONPATH=str(Path(P.__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_table_is_plain_data():
    """profiles table: the table module holds data only (no functions or classes), and
    profiles re-exports it and the checkpoint rules."""
    import types

    from mojolearn._table import checkpoint_rules as _checkpoint_profile, table as _profile_table

    for name, value in vars(_profile_table).items():
        if not name.startswith("__") and name != "annotations":
            assert not isinstance(value, (types.FunctionType, type)), name
    assert P.PROFILES is _profile_table.PROFILES
    assert P.check_saved is _checkpoint_profile.check_saved
