"""The padding-free forward against transformers' padded one, in process, on models of a real layer
shape with fewer layers, random weights, mixed text lengths: a decoder embedder (Qwen3-Embedding-
0.6B's layers: hidden 1024, 16 heads over 8 key/value heads of 128, MLP 3072) or ModernBERT-base's.

    python scripts/bench_packed.py [--arch qwen3|modernbert] [--layers 4] [--items 32] [--rounds 5]

Each way runs through the device's Runner: transformers' padded forward in the length runs the
runner forms for models that pad, the packed forward in those runs, and the packed forward over the
whole batch (how a padding-free adapter is served).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", choices=("qwen3", "modernbert"), default="qwen3")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-len", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = _model_config(args.arch, args.layers)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        transformers.AutoModel.from_config(config).save_pretrained(folder)
        adapter = load_adapter(_config(), Path(folder), "cpu")
    rng = np.random.default_rng(0)
    items = [
        rng.integers(1, 4096, rng.integers(args.min_len, args.max_len + 1)).astype(np.int32)
        for _ in range(args.items)
    ]
    batch = encode_batch(items)
    runner = Runner(torch.device("cpu"))
    encoder = adapter._encoder
    packed = encoder._packed
    modes = {  # (the packed forward, the whole batch at once)
        "padded, in length runs": (None, False),
        "packed, in length runs": (packed, False),
        "packed, whole batch": (packed, True),
    }
    timings: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, (forward, whole) in modes.items():
            encoder._packed, adapter.is_padding_free = forward, whole
            started = time.perf_counter()
            runner.run_dense(adapter, batch)
            timings[name].append(time.perf_counter() - started)
    tokens = sum(len(ids) for ids in items)
    print(f"{args.items} items, {tokens} tokens, lengths {args.min_len}-{args.max_len}, {args.layers} layers")
    for name, times in timings.items():
        median = statistics.median(times)
        print(
            f"{name}: {median * 1000:.0f} ms per batch (median of {args.rounds}), "
            f"{tokens / median:.0f} tokens/s"
        )


def _model_config(arch: str, layers: int) -> transformers.PretrainedConfig:
    if arch == "modernbert":  # ModernBERT-base: every third layer global, the others a 128-token window
        return transformers.ModernBertConfig(
            vocab_size=4096,
            hidden_size=768,
            intermediate_size=1152,
            num_hidden_layers=layers,
            num_attention_heads=12,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
        )
    return transformers.Qwen3Config(
        vocab_size=4096,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    )


def _config():  # type: ignore[no-untyped-def]
    profile = {"adapter": "dense", "adapter_options": {"runtime": {"pooling": "last"}}}
    return parse_model_config({"sie_id": "bench/qwen3", "profiles": {"default": profile}})


def encode_batch(items: list[np.ndarray]) -> Batch:
    """One encode batch of token-id items, as the device's batcher hands it to the Runner."""
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, ids in enumerate(items)]
    lengths = [len(ids) for ids in items]
    return Batch(GroupKey(0, int(Op.ENCODE), 1, 0, 0), pending, sum(lengths), max(lengths), 0.0)


if __name__ == "__main__":
    main()
