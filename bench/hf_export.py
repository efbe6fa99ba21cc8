"""Write a GGUF model as a Hugging Face directory (config.json + model.safetensors,
float32), through mojolearn's own GGUF reader, so transformers can load the same
weights. Usage: python bench/hf_export.py MODEL.gguf OUT_DIR"""
import json
import os
import sys

# bumped whenever the GGUF reader changes what it returns (2: q/k rows unpermuted right),
# so a cached export made by an older reader is made again
EXPORT_VERSION = "2"


def export_hf(gguf_path, out_dir):
    from safetensors.numpy import save_file
    from mojolearn.models.loader import read_gguf

    done = os.path.join(out_dir, "model.safetensors")
    stamp = os.path.join(out_dir, "EXPORT_VERSION")
    if os.path.isfile(done) and os.path.isfile(stamp) and open(stamp).read().strip() == EXPORT_VERSION:
        return out_dir
    cfg, weights = read_gguf(gguf_path)
    os.makedirs(out_dir, exist_ok=True)
    d = {"architectures": ["LlamaForCausalLM"], "model_type": cfg.model_type,
         "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
         "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
         "num_attention_heads": cfg.num_attention_heads,
         "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
         "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
         "max_position_embeddings": cfg.max_position_embeddings,
         "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
         "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(d, f, indent=1)
    save_file(weights, done + ".part")
    os.replace(done + ".part", done)
    with open(stamp, "w") as f:
        f.write(EXPORT_VERSION + "\n")
    return out_dir


if __name__ == "__main__":
    print(export_hf(sys.argv[1], sys.argv[2]))


def export_stored(hf_dir, fmt, out_dir):
    """The HF export stored low-bit (mojolearn.checkpoint of lowbit.pack(weights, fmt):
    every matrix, the table included, as bf16 bits or int8 codes), beside it; made once."""
    import shutil

    from mojolearn import checkpoint, lowbit
    from mojolearn.models.loader import read_safetensors

    done = os.path.join(out_dir, "model.safetensors")
    stamp = os.path.join(out_dir, "EXPORT_VERSION")
    if os.path.isfile(done) and os.path.isfile(stamp) and open(stamp).read().strip() == EXPORT_VERSION:
        return out_dir
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(hf_dir, "config.json"), os.path.join(out_dir, "config.json"))
    checkpoint.save(done, lowbit.pack(read_safetensors(os.path.join(hf_dir, "model.safetensors")),
                                      fmt))
    with open(stamp, "w") as f:
        f.write(EXPORT_VERSION + "\n")
    return out_dir
