"""The implementation of ``mojolearn.models.tokenizer``: what it computes and promises is
that public module's docstring (python/mojolearn/models/tokenizer.py), which re-exports
this module's public names."""
from __future__ import annotations

import os


class Tokenizer:
    """A model's tokenizer (the ``tokenizers`` package), from tokenizer.json or the
    tokenizer stored in a .gguf file, with its BOS / EOS ids. Text in and out only:
    no arithmetic of any profile.
    """
    def __init__(self, tk, *, bos_token_id=None, eos_token_id=None, add_bos=False, source=""):
        self._tk = tk
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.add_bos = add_bos
        self.source = source

    @property
    def vocab_size(self) -> int:
        """The number of tokens, added tokens included."""
        return self._tk.get_vocab_size(with_added_tokens=True)

    @classmethod
    def load(cls, path):
        """A directory or file holding tokenizer.json, or a .gguf file."""
        try:
            from tokenizers import Tokenizer as _T
        except ImportError:
            raise ImportError("mojolearn: Tokenizer needs the 'tokenizers' package") from None
        if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
            raise TypeError(f"mojolearn: Tokenizer.load: path must be a str or os.PathLike "
                            f"giving a str, got {type(path).__name__}")
        p = os.fspath(path)
        if "\0" in p:
            raise ValueError(f"mojolearn: Tokenizer.load: path {p!r} holds a NUL byte, which no "
                             f"file name can contain")
        if os.path.isdir(p):
            p = os.path.join(p, "tokenizer.json")
        if p.endswith(".gguf"):
            return cls._from_gguf(p)
        if not os.path.isfile(p):
            raise FileNotFoundError(f"mojolearn: Tokenizer.load: no tokenizer at {p!r}; pass a tokenizer.json, "
                                    f"a directory holding one, or a .gguf file")
        try:
            tk = _T.from_file(p)
        except Exception as e:
            raise ValueError(f"mojolearn: Tokenizer.load: {p!r} is not a readable tokenizer.json ({e})") from None
        return cls(tk, source=p)

    @classmethod
    def _from_gguf(cls, path):
        import gguf
        from tokenizers import Tokenizer as _T, decoders, models, pre_tokenizers

        try:
            r = gguf.GGUFReader(path)
        except Exception as e:
            raise ValueError(f"mojolearn: {path!r} is not a readable GGUF file ({e})") from None

        def field(k, default=None):
            f = r.fields.get(k)
            return default if f is None else f.contents()

        kind = field("tokenizer.ggml.model")
        if kind != "gpt2":
            raise NotImplementedError(f"mojolearn: GGUF tokenizer.ggml.model {kind!r} is not "
                                      f"supported; byte-level BPE ('gpt2') is")
        tokens = field("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges", [])]
        vocab = {t: i for i, t in enumerate(tokens)}
        tk = _T(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        pre = field("tokenizer.ggml.pre", "default")
        steps = [pre_tokenizers.Digits(individual_digits=True)] if pre == "smollm" else []
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        tk.pre_tokenizer = pre_tokenizers.Sequence(steps)
        tk.decoder = decoders.ByteLevel()
        types = field("tokenizer.ggml.token_type", [])
        special = [t for t, ty in zip(tokens, types) if ty == 3]  # control tokens
        if special:
            from tokenizers import AddedToken
            tk.add_special_tokens([AddedToken(t, special=True) for t in special])
        return cls(tk, bos_token_id=field("tokenizer.ggml.bos_token_id"),
                   eos_token_id=field("tokenizer.ggml.eos_token_id"),
                   add_bos=bool(field("tokenizer.ggml.add_bos_token", False)), source=path)

    def encode(self, text: str) -> list:
        """Token ids of ``text`` (a str), with the BOS id first where the tokenizer adds it."""
        if not isinstance(text, str):
            raise TypeError(f"mojolearn: Tokenizer.encode: text must be a str, got {type(text).__name__}")
        ids = self._tk.encode(text, add_special_tokens=False).ids
        if self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids) -> str:
        """The text of a sequence of token ids (ints inside this tokenizer's vocabulary;
        the rules of CausalLM's ids: no float, bool or other value is cast)."""
        from .._base.inputs import token_ids

        a, ndim = token_ids(ids, "Tokenizer.decode: ids", self.vocab_size, want_ndim=True)
        if ndim != 1:
            raise ValueError(f"mojolearn: Tokenizer.decode: ids must be one sequence (1-D), got "
                             f"shape {a.shape}")
        return self._tk.decode(a[0].tolist(), skip_special_tokens=False)

    def check_model(self, model):
        """Refuse a tokenizer whose vocabulary does not match the model's."""
        from .._transformer.causal_lm import CausalLM
        from .._transformer.parallel import ParallelCausalLM

        if not isinstance(model, (CausalLM, ParallelCausalLM)):
            raise TypeError(f"mojolearn: Tokenizer.check_model: model must be a CausalLM or a "
                            f"ParallelCausalLM, got {type(model).__name__}")
        v = model.config.vocab_size
        if self.vocab_size > v:
            raise ValueError(f"mojolearn: the tokenizer {self.source!r} has {self.vocab_size} "
                             f"tokens but the model's vocabulary has {v}: they do not belong "
                             f"together")

__all__ = ["Tokenizer"]
