"""A tiny random context pruner: a cross-encoder (tests.tiny_models.cross_encoder) and a keep head
saved as its trainer saves it, plus the reference that reads them the way SIE's pruner does.

The reference is the published recipe, run on transformers and torch alone: the tokenizer's padded
pair encoding, the classifier's sigmoid, the head on the last hidden states, the passage found after
the second separator and its character spans from the passage tokenized alone, then the label
runs. Nothing of sie's is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tiny_models.cross_encoder import MAX_SEQUENCE_LENGTH, TINY, make_cross_encoder

HIDDEN = TINY["hidden_size"]
INTERMEDIATE = 16
HEAD_FILE = "best.pt"
# How a trainer may have saved the head: under "pruning_head", inside a whole model's state dict,
# under "state_dict", or bare.
HEAD_LAYOUTS = ("pruning_head", "model_state_dict", "state_dict", "bare")


def keep_head(seed: int = 1) -> Any:
    """SIE's pruning MLP with random weights, its output layer widened so probabilities spread."""
    import torch

    torch.manual_seed(seed)
    head = torch.nn.Sequential(
        torch.nn.Linear(HIDDEN, INTERMEDIATE),
        torch.nn.GELU(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(INTERMEDIATE, 1),
    )
    with torch.no_grad():
        head[3].weight.mul_(12.0)
    return head.eval()


def save_head(path: Path, layout: str = "pruning_head", seed: int = 1) -> Path:
    import torch

    weights = {f"classifier.{key}": value for key, value in keep_head(seed).state_dict().items()}
    if layout == "pruning_head":
        saved: dict[str, Any] = {"pruning_head": weights, "epoch": 3}
    elif layout == "model_state_dict":
        encoder = {"encoder.layer.0.weight": torch.zeros(2, 2)}
        saved = {"model_state_dict": {**encoder, **{f"pruning_head.{k}": v for k, v in weights.items()}}}
    elif layout == "state_dict":
        saved = {"state_dict": weights}
    else:
        saved = weights
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved, path)
    return path


def make_context_pruner(folder: Path, seed: int = 0, *, arch: str = "xlmr") -> Path:
    """The cross-encoder in `folder`, with its head as `best.pt` beside it."""
    make_cross_encoder(folder, seed, arch=arch)
    save_head(folder / HEAD_FILE)
    return folder


def model_yaml_context_pruner(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"score": {}, "extract": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {
                "adapter": "context_pruner",
                "adapter_options": {"runtime": {"activation": "sigmoid"}},
            }
        },
    }


class Reference:
    """SIE's pruner on one folder: `extract` gives an item's entities, `scores` a score request's."""

    def __init__(self, folder: Path, head_seed: int = 1) -> None:
        import transformers

        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
        self.head = keep_head(head_seed)

    def scores(self, query: str, docs: list[str]) -> list[float]:
        import torch

        inputs = self._pairs([query] * len(docs), docs)
        with torch.no_grad():
            return torch.sigmoid(self.model(**inputs).logits[:, 0]).tolist()

    def extract(
        self, query: str, docs: list[str], prune: float = 0.6, highlight: float = 0.9
    ) -> list[list[dict]]:
        import torch

        inputs = self._pairs([query] * len(docs), docs)
        with torch.no_grad():
            output = self.model(**inputs, output_hidden_states=True)
            relevance = torch.sigmoid(output.logits[:, 0])
            mask = inputs["attention_mask"]
            keep = torch.sigmoid(self.head(output.hidden_states[-1]).squeeze(-1)) * mask
        found = []
        for i, doc in enumerate(docs):
            ids = inputs["input_ids"][i].tolist()
            start = _after_second_separator(ids, self.tokenizer.sep_token_id)
            spans = self._spans(
                ids[start:], keep[i, start:].tolist(), mask[i, start:].tolist(), doc, prune, highlight
            )
            kept = sum(1 for span in spans if span["label"] != "pruned")
            compression = 1.0 - kept / max(len(spans), 1)
            score = float(relevance[i])
            head = f"rerank={score:.4f} compression={compression:.2%} kept={kept}/{len(spans)}"
            found.append(
                [{"text": head, "label": "summary", "score": score, "start": None, "end": None}, *spans]
            )
        return found

    def _pairs(self, queries: list[str], docs: list[str]) -> Any:
        return self.tokenizer(
            queries, docs, padding=True, truncation=True, max_length=MAX_SEQUENCE_LENGTH, return_tensors="pt"
        )

    def _spans(
        self, ids: list[int], keep: list[float], mask: list[int], doc: str, prune: float, highlight: float
    ) -> list[dict[str, Any]]:
        alone = self.tokenizer(doc, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        alone = list(alone) + [(0, 0)] * max(0, len(ids) - len(alone))
        tok = self.tokenizer
        specials = {tok.pad_token_id, tok.sep_token_id, tok.cls_token_id, tok.bos_token_id}
        runs: list[dict[str, Any]] = []
        for token_id, p, real, (s, e) in zip(ids, keep, mask, alone, strict=False):
            if not real or token_id in specials or (s == 0 and e == 0):
                continue
            label = "highlight" if p >= highlight else "kept" if p >= prune else "pruned"
            last = runs[-1] if runs else None
            if last is not None and last["label"] == label and s <= last["end"] + 1:
                last["end"] = max(last["end"], e)
                last["probs"].append(p)
            else:
                runs.append({"start": s, "end": e, "label": label, "probs": [p]})
        return [
            {
                "text": doc[run["start"] : run["end"]],
                "label": run["label"],
                "score": sum(run["probs"]) / len(run["probs"]),
                "start": run["start"],
                "end": run["end"],
            }
            for run in runs
        ]


def _after_second_separator(ids: list[int], sep_id: int) -> int:
    seen = 0
    for index, token_id in enumerate(ids):
        if token_id == sep_id:
            seen += 1
            if seen == 2:
                return index + 1
    raise AssertionError("a pair encoding has two separators before the passage")
