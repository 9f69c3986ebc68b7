"""The packed forwards replayed from CUDA graphs, launched eagerly through PyTorch's varlen attention
kernel, and launched eagerly with padded attention groups.

    python scripts/gpu/bench_varlen.py [--out FILE] [--cpu]

MiniLM-L6, bge-base and Qwen3-0.6B shapes (random weights, float16 on CUDA), sie's packed
forward (`hidden_states`) over one 27-token item and over batches of 32 and 64 items of 10-45
tokens: replayed from CUDA graphs (the encoders; sie.gpu_proc.adapters.cuda_graphs), launched
through the varlen kernel with graphs off, and with the kernel off too (the padded groups every
other device uses). Milliseconds per forward, synchronised. `--cpu` only checks the script runs:
there neither applies, so every column times the padded path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts" / "gpu"), str(REPO)]

from bench_cuda_graphs import command_line, time_ms, write_rows  # noqa: E402
from build_models import BGE_BASE, MINILM_L6, QWEN3_06B, _qwen3_config  # noqa: E402

from sie.gpu_proc.adapters import varlen  # noqa: E402
from sie.gpu_proc.adapters.cuda_graphs import Graphs  # noqa: E402
from sie.gpu_proc.adapters.packed import PackedEncoder  # noqa: E402
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder  # noqa: E402

BATCHES = (1, 32, 64)


def _batch(rows: int, vocab: int, device: torch.device) -> tuple[torch.Tensor, list[int]]:
    rng = np.random.default_rng(rows)
    lengths = [27] if rows == 1 else rng.integers(10, 46, rows).tolist()
    ids = torch.zeros((rows, max(lengths)), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.from_numpy(rng.integers(1000, vocab, n))
    return ids.to(device), lengths


def measure(name: str, model: Any, packed: Any, device: torch.device, repeats: int) -> list[dict[str, Any]]:
    rows = []
    vocab = model.config.vocab_size
    with torch.inference_mode():
        for size in BATCHES:
            ids, lengths = _batch(size, vocab, device)
            row: dict[str, Any] = {"model": name, "items": size, "tokens": sum(lengths)}
            for label, graphs, failed in (
                ("graphs_ms", True, False),
                ("varlen_ms", False, False),
                ("padded_ms", False, True),
            ):
                Graphs.enabled, varlen.Kernel.failed = graphs, failed
                step = lambda ids=ids, lengths=lengths: packed.hidden_states(ids, lengths)  # noqa: E731
                row[label] = round(time_ms(step, device, repeats), 3)
            Graphs.enabled, varlen.Kernel.failed = True, False
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> int:
    out, device, dtype, repeats = command_line(__doc__)
    rows = []
    for name, shape in (("all-MiniLM-L6-v2", MINILM_L6), ("bge-base-en-v1.5", BGE_BASE)):
        model = transformers.BertModel(transformers.BertConfig(**shape), add_pooling_layer=False)
        model = model.to(device, dtype).eval()
        rows += measure(name, model, PackedEncoder.wrap(model), device, repeats)
    qwen3 = transformers.AutoModel.from_config(_qwen3_config(QWEN3_06B)).to(device, dtype).eval()
    rows += measure("Qwen3-0.6B", qwen3, PackedDecoder.wrap(qwen3), device, repeats)
    write_rows(out, device, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
