"""Checkpoints: weights (float32, bf16 bits, int8 codes) in safetensors files.

THE FILE
    A plain safetensors file, written and read by the ``safetensors`` package
    (its framework-free ``serialize_file`` / ``deserialize``; NumPy is not
    needed). Tensors are stored as they are held, so other tools read them:

    - a float32 tensor (any rank)  -> an ``F32`` tensor under its own name;
    - a ``BF16Weight``             -> a ``BF16`` tensor (other tools see bf16);
    - an ``Int8Weight``            -> an ``I8`` tensor of codes under its own
      name plus an ``I32`` tensor of per-row exponents named
      ``<name>.int8_exponents`` (``EXPONENTS_SUFFIX``). Names ending in that
      suffix are reserved: ``save`` refuses them as weight names.

    Nothing is converted on the way in or out, so a round trip is exact, bit
    for bit (NaN payloads, -0.0, subnormals and all).

THE NUMERIC PROFILE
    ``save(path, weights, numeric_profile=name)`` writes
    ``profiles.state_field(name)`` into the file's metadata: nothing for
    fp32_v1 (an fp32_v1 checkpoint's bytes never change), and
    ``{"numeric_profile": name}`` for any other profile. ``numeric_profile=None``
    writes no field either: a plain weight file, read back as fp32_v1.
    ``load(path)`` adopts the profile that wrote the file
    (``profiles.adopt_saved``); ``load(path, numeric_profile=name)`` refuses a
    file written under another profile (``profiles.check_saved``). An unknown
    profile in the file is refused by name.

WHAT LOAD RETURNS
    ``Checkpoint(weights, numeric_profile)``, a named tuple: ``weights`` is a
    dict (sorted by name) of ``mojolearn.Array`` (float32) / ``BF16Weight`` /
    ``Int8Weight``, ``numeric_profile`` the profile name (str). A ``BF16``
    tensor that is not 2-D (a bias or norm from another tool) is widened
    exactly to a float32 Array, since ``BF16Weight`` holds matrices only. A
    dtype other than F32, BF16, I8 and its I32 exponents is refused.

SAFE WRITES
    ``save`` writes a temporary file in the target's directory, flushes it to
    disk and renames it over the target in one step (``os.replace``). A crash
    or error mid-write leaves the old file intact, and the temporary file is
    removed. A truncated or corrupt file is refused by ``load`` with ValueError.

WHAT THE PATH MAY BE
    ``path`` is a str or an ``os.PathLike`` giving a str; bytes, None, numbers,
    an empty path and a path holding a NUL byte are refused by name before
    anything is written.

    - A regular file, or nothing yet: replaced (or created) atomically, as
      above; the file keeps its permission bits.
    - A symbolic link (also a chain of them): FOLLOWED. The file it finally
      names is replaced atomically, in that file's own directory, and the link
      itself is left as it was, so it names the new checkpoint (a rename over
      the link would have turned the link into a regular file and left its
      target stale). A dangling link creates its target, if that directory
      exists. A link loop is refused.
    - A directory: refused (IsADirectoryError); name a file inside it.
    - Anything else - a character or block device such as /dev/null, a FIFO,
      a socket: refused by name (ValueError). ``save`` never writes into or
      renames over a special file (run as root, a rename would have replaced
      the device node with a regular file).
    - A missing directory, or a parent that is not a directory: refused
      (FileNotFoundError / NotADirectoryError) naming the directory.

    Every refusal and every failure (no permission, disk full, a safetensors
    error) happens before the rename, so the old file is never touched.
    ``load`` takes the same kinds of path; it reads regular files (through
    links) only: a directory, device or FIFO is refused by name rather than
    read (reading /dev/zero or a FIFO would never end).

READING THE METADATA
    The framework-free ``deserialize`` returns tensors but not the metadata,
    and ``safe_open`` imports NumPy. So, after ``deserialize`` has validated
    the whole file, ``load`` reads the ``__metadata__`` entry of the JSON
    header that the format documents (8-byte little-endian length, then the
    JSON). No other part of the format is handled here.

ERRORS
    Every message starts with ``mojolearn:`` and names the function, the
    argument or file, the refused value, the reason and the way out.
"""
from ._io.checkpoint import save, load, Checkpoint, EXPONENTS_SUFFIX

__all__ = ["save", "load", "Checkpoint", "EXPONENTS_SUFFIX"]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)
