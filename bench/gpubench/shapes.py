"""The model shapes the bench builds: Qwen3's, as config fields, and their parameter counts."""

from __future__ import annotations

VOCAB = 151936  # Qwen3's vocabulary (the `tiny` shape keeps the tokenizer's own)
SIZES = {  # Qwen3 shapes (hidden, MLP, layers, query heads, key-value heads, head dim)
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16},
    "0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128},
    "1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128},
    "4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128},
}  # fmt: skip


def parameters(size: str, vocab: int = VOCAB) -> int:
    """The shape's parameters with tied embeddings: the embedding, then per layer the attention's
    projections, its query and key norms, the MLP's three matrices and two norms; the final norm."""
    s = SIZES[size]
    hidden, heads, kv, dim = (
        s["hidden_size"],
        s["num_attention_heads"],
        s["num_key_value_heads"],
        s["head_dim"],
    )
    attention = 2 * hidden * heads * dim + 2 * hidden * kv * dim + 2 * dim
    layer = attention + 3 * hidden * s["intermediate_size"] + 2 * hidden
    return vocab * hidden + s["num_hidden_layers"] * layer + hidden
