"""The raw batched forward, in-process: transformers on the same weights, dtype and device as sie.

Text: the tokenizer's ids sorted by length, padded batches of `batch_size`, the model's forward,
the YAML's pooling and L2 normalisation, the vectors brought to the host. Images: the model's
image processor once (not timed), then `get_image_features` on batches. Tokenizing and image
decoding are left out: this is the forward's ceiling, which sie's device should approach while
its frontends tokenize and decode on other cores. A "single" is one item's forward, synchronised.
"""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path
from typing import Any

WARMUP_BATCHES = 3
SINGLES = 30


def _kernels_as_sie() -> None:
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)  # as sie's device does: no per-shape cuDNN graphs


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dtype(precision: str, device: Any) -> Any:
    import torch

    if device.type == "cpu" and precision == "float16":
        return torch.float32  # as sie's adapters do: float16 matmuls on CPU are slow or missing
    return getattr(torch, precision)


def measure_text(spec: dict[str, Any], texts: list[str], device_name: str, batch_size: int) -> dict[str, Any]:
    import torch
    import transformers
    from tokenizers import Tokenizer

    model, device, _, folder = _load(transformers.AutoModel, spec, device_name)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(spec["max_length"])
    encodings = sorted(tokenizer.encode_batch(texts), key=lambda e: len(e.ids))
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 1

    def forward(batch: list[Any]) -> Any:
        width = max(len(e.ids) for e in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, e in enumerate(batch):
            ids[row, : len(e.ids)] = torch.tensor(e.ids)
            mask[row, : len(e.ids)] = 1
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        extra = {"token_type_ids": torch.zeros_like(ids)} if uses_types else {}
        hidden = model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
        if spec["pooling"] == "cls":
            pooled = hidden[:, 0]
        elif spec["pooling"] == "last":
            pooled = hidden[torch.arange(len(hidden), device=device), mask.sum(1) - 1]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), dim=-1).cpu()

    result = _time(forward, encodings, batch_size, device)
    result["raw_mean_tokens"] = round(sum(len(e.ids) for e in encodings) / len(encodings), 1)
    return result  # the model goes with `forward`; the caller releases the cache (release_memory)


def measure_score(
    spec: dict[str, Any], pairs: list[tuple[str, str]], device_name: str, batch_size: int
) -> dict[str, Any]:
    """An LLM reranker as its model card runs it: each pair in Qwen3-Reranker's prompt, left-padded
    batches through AutoModelForCausalLM keeping the last position's logits, log-softmax of no/yes."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    from sie.frontend.llm_prompts import QWEN3_DEFAULT_INSTRUCTION, QWEN3_PREFIX, QWEN3_SUFFIX

    model, device, _, folder = _load(transformers.AutoModelForCausalLM, spec, device_name)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    head = f"{QWEN3_PREFIX}<Instruct>: {QWEN3_DEFAULT_INSTRUCTION}\n"
    prompts = [f"{head}<Query>: {query}\n<Document>: {doc}{QWEN3_SUFFIX}" for query, doc in pairs]
    rows = sorted((e.ids for e in tokenizer.encode_batch(prompts, add_special_tokens=False)), key=len)
    yes, no = (tokenizer.encode(word, add_special_tokens=False).ids[0] for word in ("yes", "no"))

    def forward(batch: list[list[int]]) -> Any:
        width = max(len(row) for row in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for index, row in enumerate(batch):  # left padding: every row's last token is the last position
            ids[index, width - len(row) :] = torch.tensor(row)
            mask[index, width - len(row) :] = 1
        ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        return torch.log_softmax(logits[:, -1, [no, yes]].float(), dim=-1)[:, 1].cpu()

    result = _time(forward, rows, batch_size, device)
    result["raw_mean_tokens"] = round(sum(len(row) for row in rows) / len(rows), 1)
    return result


def measure_images(
    spec: dict[str, Any], images: list[bytes], device_name: str, batch_size: int
) -> dict[str, Any]:
    import torch
    import transformers
    from PIL import Image

    model, device, dtype, folder = _load(transformers.AutoModel, spec, device_name)
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    pixels = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt").pixel_values

    def forward(batch: Any) -> Any:
        out = model.get_image_features(pixel_values=batch.to(device, dtype=dtype, non_blocking=True))
        features = out if isinstance(out, torch.Tensor) else out.pooler_output
        return torch.nn.functional.normalize(features.float(), dim=-1).cpu()

    return _time(forward, list(pixels.split(1)), batch_size, device, join=torch.cat)


def _load(auto: Any, spec: dict[str, Any], device_name: str) -> tuple[Any, Any, Any, Path]:
    """The spec's model in its precision on the device, with the kernels sie's device uses."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # a bar per load is noise in the kit's log
    _kernels_as_sie()
    device = torch.device(device_name)
    folder = Path(spec["folder"])
    dtype = _dtype(spec["precision"], device)
    return auto.from_pretrained(folder, dtype=dtype).to(device).eval(), device, dtype, folder


def _time(forward: Any, items: list[Any], batch_size: int, device: Any, join: Any = None) -> dict[str, Any]:
    import torch

    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    prepared = [join(b) for b in batches] if join else batches
    with torch.inference_mode():
        for batch in prepared[:WARMUP_BATCHES]:
            forward(batch)
        _sync(device)
        started = time.perf_counter()
        for batch in prepared:
            forward(batch)
        _sync(device)
        batch_s = time.perf_counter() - started
        singles = []
        for item in items[:SINGLES]:
            t0 = time.perf_counter()
            forward(join([item]) if join else [item])
            _sync(device)
            singles.append((time.perf_counter() - t0) * 1e3)
    return {
        "raw_items_per_s": round(len(items) / batch_s, 1),
        "raw_batch_size": batch_size,
        "raw_items": len(items),
        "raw_single_ms": round(statistics.median(singles[5:] or singles), 3),
    }


def release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
