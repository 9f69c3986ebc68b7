"""The raw model in-process (transformers on the same weights and texts): bench.py's baseline.

What one forward computes depends on the model's family and the task, so that the baseline does
the same work as the server's device process, minus everything that is not the model:
- "dense": AutoModel, the profile's pooling, L2 normalisation;
- "sparse" (SPLADE): AutoModelForMaskedLM, max over tokens of log(1 + relu(logits)), and the
  non-zero (index, value) pairs brought to the host;
- "pairs" (score with a cross-encoder / NLI model): AutoModelForSequenceClassification on
  (query, passage) pairs;
- "tokens" (ColBERT, hybrid): AutoModel's last hidden states (their small linear heads left out).
For the score task of a bi-encoder family, each request's query and its passages are encoded.
`linear="onednn"` swaps the model's linear layers to the ones a CPU device serves with when its
probe picks oneDNN (sie.gpu_proc.cpu_linear), so that the baseline runs the same kernels.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PAIR_FAMILIES = ("cross_encoder", "nli_zero_shot")


def raw_kind(family: str, task: str) -> str:
    if task == "score" and family in PAIR_FAMILIES:
        return "pairs"
    return {"dense": "dense", "splade": "sparse"}.get(family, "tokens")


def measure_raw(
    model_id: str,
    texts: list[str],
    *,
    task: str = "encode",
    queries: list[str] | None = None,
    models_dir: str | None = None,
    batch_size: int = 64,
    singles: int = 200,
    linear: str = "torch",
) -> dict[str, Any]:
    """Items per second over `texts` in length-sorted batches, and the median single forward.

    With task "score", `texts` are the passages, `len(texts) // len(queries)` per query, and an
    item is one passage; a "single" forward is one request's worth (its query and passages).
    """
    import torch
    from tokenizers import Tokenizer

    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir
    from sie.settings import available_cores

    config = load_catalog(models_dir).get(model_id)
    folder = resolve_weights_dir(config)
    threads = available_cores()
    torch.set_num_threads(threads)
    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128 tokens
    tokenizer.enable_truncation(config.max_sequence_length or 512)
    kind = raw_kind(config.family, task)
    forward = load_forward(kind, folder, config.profile().adapter_options.runtime.pooling, linear)
    queries = queries if task == "score" else None
    groups = request_groups(tokenizer, kind, texts, queries)

    with torch.inference_mode():
        warm = [e for group in groups for e in group][:batch_size]
        for _ in range(3):
            forward(batch_tensors(warm))
        start = time.perf_counter()  # tokenizing counts, as it does in the server's items/s
        encodings = [e for group in request_groups(tokenizer, kind, texts, queries) for e in group]
        encodings.sort(key=lambda e: len(e.ids))
        for i in range(0, len(encodings), batch_size):
            forward(batch_tensors(encodings[i : i + batch_size]))
        batch_s = time.perf_counter() - start
        forward_ms = []
        for group in groups[: singles + 10]:
            t0 = time.perf_counter()
            forward(batch_tensors(group))
            forward_ms.append((time.perf_counter() - t0) * 1e3)
    tokens = sum(len(e.ids) for e in encodings)
    return {
        "raw_kind": kind,
        "raw_items_per_s": round(len(texts) / batch_s, 1),
        "raw_batch_size": batch_size,
        "raw_items": len(texts),
        "raw_mean_tokens": round(tokens / len(encodings), 1),
        "raw_single_ms": round(statistics.median(forward_ms[10:] or forward_ms), 3),
        "raw_single_tokenize_ms": single_tokenize_ms(tokenizer, texts[: singles + 10]),
        "raw_torch_threads": threads,
        "raw_linear": linear,
    }


def request_groups(tokenizer: Any, kind: str, texts: list[str], queries: list[str] | None) -> list[list[Any]]:
    """The encodings of each unit of work: one text (encode), or one score request."""
    if queries is None:
        return [[e] for e in tokenizer.encode_batch(texts)]
    per_query = len(texts) // len(queries)
    groups = []
    for i, query in enumerate(queries):
        passages = texts[i * per_query : (i + 1) * per_query]
        if kind == "pairs":
            groups.append(tokenizer.encode_batch([(query, p) for p in passages]))
        else:
            groups.append(tokenizer.encode_batch([query, *passages]))
    return groups


def single_tokenize_ms(tokenizer: Any, texts: list[str]) -> float:
    times = []
    for text in texts:
        t0 = time.perf_counter()
        tokenizer.encode(text)
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times[10:] or times), 3)


def batch_tensors(encodings: list[Any]) -> dict[str, Any]:
    import torch

    width = max(len(e.ids) for e in encodings)
    ids = torch.zeros((len(encodings), width), dtype=torch.long)
    mask = torch.zeros((len(encodings), width), dtype=torch.long)
    types = torch.zeros((len(encodings), width), dtype=torch.long)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        mask[row, : len(e.ids)] = 1
        types[row, : len(e.ids)] = torch.tensor(e.type_ids)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def load_forward(kind: str, folder: Path, pooling: str, linear: str) -> Callable[[dict[str, Any]], Any]:
    import torch
    import transformers

    from sie.gpu_proc.cpu_linear import swap_linears

    auto = {
        "sparse": transformers.AutoModelForMaskedLM,
        "pairs": transformers.AutoModelForSequenceClassification,
    }.get(kind, transformers.AutoModel)
    model = auto.from_pretrained(str(folder), local_files_only=True).eval()
    if linear == "onednn":
        swap_linears([model])
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 1

    def run(batch: dict[str, Any]) -> Any:
        if not uses_types:
            batch = {k: v for k, v in batch.items() if k != "token_type_ids"}
        return model(**batch)

    def dense(batch: dict[str, Any]) -> Any:
        hidden, mask = run(batch).last_hidden_state, batch["attention_mask"]
        if pooling == "cls":
            pooled = hidden[:, 0]
        elif pooling == "last":
            pooled = hidden[torch.arange(len(hidden)), mask.sum(1) - 1]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def sparse(batch: dict[str, Any]) -> Any:
        # max over tokens first (relu and log1p are monotone), as the device does: the same result.
        logits = run(batch).logits.masked_fill(batch["attention_mask"].unsqueeze(-1) == 0, float("-inf"))
        weights = torch.log1p(torch.relu(logits.amax(1)))
        rows, cols = weights.nonzero(as_tuple=True)
        return rows.numpy(), cols.numpy(), weights[rows, cols].numpy()

    forwards: dict[str, Callable[[dict[str, Any]], Any]] = {
        "dense": dense,
        "sparse": sparse,
        "pairs": lambda batch: run(batch).logits,
        "tokens": lambda batch: run(batch).last_hidden_state,
    }
    return forwards[kind]
