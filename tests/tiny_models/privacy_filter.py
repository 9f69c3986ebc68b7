"""A tiny random OpenAI privacy filter (transformers' OpenAIPrivacyFilterForTokenClassification) with
a byte-level BPE tokenizer and a Viterbi calibration file, plus the reference that reads it as the
model card describes: one forward over the whole text, log-softmax per token, the best path among
those whose BIOES tags form whole spans under the calibrated transition biases, and each span's
characters from the tokenizer's offsets, edge whitespace trimmed.

The reference's Viterbi is written plainly (label by label, in Python floats) from the rules of OPF's
decoder; nothing of sie's is imported.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from tests.tiny_models.bpe import byte_level_bpe

CATEGORIES = (
    "account_number",
    "private_address",
    "private_date",
    "private_email",
    "private_person",
    "private_phone",
    "private_url",
    "secret",
)
LABELS = ("O", *(f"{tag}-{category}" for category in CATEGORIES for tag in ("B", "I", "E", "S")))
LAYERS = 2
SLIDING_WINDOW = 3  # each side, per layer: a token's output reaches 6 tokens each way
PAD = "<|endoftext|>"
CALIBRATION = {
    "transition_bias_background_stay": 0.25,
    "transition_bias_background_to_start": -0.5,
    "transition_bias_inside_to_continue": 0.75,
    "transition_bias_inside_to_end": 0.1,
    "transition_bias_end_to_background": 0.2,
    "transition_bias_end_to_start": -0.3,
}
_CORPUS = [
    "Contact Jane Doe at jane.doe@example.com or call +1 555 0100 before 12 March 2024.",
    "My account number is 4921-3344-1234 and the password is hunter2, sent from 10 Downing Street.",
    "Visit https://example.org/profile/jdoe for the record of Dr. Alice Martin, born 1980-02-29.",
    "Nothing private here: the weather was mild and the train ran on time.",
    "Ship to Carlos Díaz, Calle Mayor 5, Madrid; phone 0034 600 123 456.",
]


def write_tokenizer(folder: Path) -> Any:
    tokenizer = byte_level_bpe(_CORPUS, [PAD], vocab_size=400)
    tokenizer.save(str(folder / "tokenizer.json"))
    settings = {
        "tokenizer_class": "TokenizersBackend",
        "pad_token": PAD,
        "eos_token": PAD,
        "model_max_length": 128000,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return tokenizer


def make_privacy_filter(
    folder: Path, seed: int = 0, *, calibration: dict[str, float] | None = CALIBRATION
) -> Path:
    """The model's transformers files in `folder`, its calibration in `original/` as the Hub repo has it."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    pad = tokenizer.token_to_id(PAD)
    config = transformers.OpenAIPrivacyFilterConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        intermediate_size=32,
        head_dim=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=LAYERS,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=SLIDING_WINDOW,
        pad_token_id=pad,
        eos_token_id=pad,
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    torch.manual_seed(seed)
    model = transformers.OpenAIPrivacyFilterForTokenClassification(config).eval()
    with torch.no_grad():  # peaked label distributions, background favoured, so paths mix spans and gaps
        model.score.weight.mul_(40.0)
        model.score.bias.zero_()
        model.score.bias[0] = 5.0
    model.save_pretrained(folder)
    if calibration is not None:
        original = folder / "original"
        original.mkdir(exist_ok=True)
        artifact = {"operating_points": {"default": {"biases": calibration}}}
        (original / "viterbi_calibration.json").write_text(json.dumps(artifact))
    return folder


class Reference:
    """The model card's recipe on transformers alone, for texts read in one forward each."""

    def __init__(self, folder: Path, *, calibration: dict[str, float] | None = CALIBRATION) -> None:
        import transformers

        self.model = transformers.AutoModelForTokenClassification.from_pretrained(folder).eval()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.labels = [self.model.config.id2label[i] for i in range(len(self.model.config.id2label))]
        self.biases = dict(calibration or dict.fromkeys(CALIBRATION, 0.0))

    def logprobs(self, text: str) -> list[list[float]]:
        import torch

        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            return []
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0].double()
        result: list[list[float]] = torch.log_softmax(logits, dim=-1).tolist()
        return result

    def extract(
        self, text: str, *, entry_bias: float = 0.0, labels: list[str] | None = None, trim: bool = True
    ) -> list[dict[str, Any]]:
        logprobs = self.logprobs(text)
        if not logprobs:
            return []
        biases = dict(self.biases)
        biases["transition_bias_background_to_start"] += entry_bias
        path = best_path(logprobs, self.labels, biases)
        offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
        found = []
        first = 0
        for t, label in enumerate(path):
            tag, _, category = self.labels[label].partition("-")
            if tag in ("B", "S"):
                first = t
            if tag not in ("E", "S") or (labels is not None and category not in labels):
                continue
            start, end = offsets[first][0], offsets[t][1]
            if trim:
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
            if start < end:
                score = sum(math.exp(logprobs[k][path[k]]) for k in range(first, t + 1)) / (t + 1 - first)
                found.append(
                    {"text": text[start:end], "label": category, "score": score, "start": start, "end": end}
                )
        return found


def transition_bias(previous: str, following: str, biases: dict[str, float]) -> float | None:
    """OPF's rule for one step between two labels: its bias, or None where the step breaks a span."""
    tag, _, category = previous.partition("-")
    next_tag, _, next_category = following.partition("-")
    if tag in ("B", "I"):
        if next_category != category:
            return None
        return {
            "I": biases["transition_bias_inside_to_continue"],
            "E": biases["transition_bias_inside_to_end"],
        }.get(next_tag)
    key = "background" if previous == "O" else "end"
    if following == "O":
        return biases[f"transition_bias_{key}_{'stay' if key == 'background' else 'to_background'}"]
    if next_tag in ("B", "S"):
        return biases[f"transition_bias_{key}_to_start"]
    return None


def path_score(
    path: list[int], logprobs: list[list[float]], labels: list[str], biases: dict[str, float]
) -> float:
    """A label path's total score, -inf if its tags do not form whole spans."""
    if labels[path[0]].split("-")[0] not in ("O", "B", "S") or labels[path[-1]].split("-")[0] not in (
        "O",
        "E",
        "S",
    ):
        return -math.inf
    total = sum(logprobs[t][label] for t, label in enumerate(path))
    for previous, following in itertools.pairwise(path):
        bias = transition_bias(labels[previous], labels[following], biases)
        if bias is None:
            return -math.inf
        total += bias
    return total


def best_path(logprobs: list[list[float]], labels: list[str], biases: dict[str, float]) -> list[int]:
    """Viterbi over Python lists: best[t][label] with a back pointer, label by label."""
    n_labels = len(labels)
    starts = {"O", "B", "S"}
    best = [logprobs[0][c] if labels[c].split("-")[0] in starts else -math.inf for c in range(n_labels)]
    pointers: list[list[int]] = []
    for row in logprobs[1:]:
        new_best, back = [], []
        for c in range(n_labels):
            top, arg = -math.inf, 0
            for p in range(n_labels):
                bias = transition_bias(labels[p], labels[c], biases)
                if bias is not None and best[p] + bias > top:
                    top, arg = best[p] + bias, p
            new_best.append(top + row[c])
            back.append(arg)
        best = new_best
        pointers.append(back)
    ends = {"O", "E", "S"}
    final = [b if labels[c].split("-")[0] in ends else -math.inf for c, b in enumerate(best)]
    label = max(range(n_labels), key=lambda c: (final[c], -c))
    path = [label]
    for back in reversed(pointers):
        label = back[label]
        path.append(label)
    return path[::-1]


def model_yaml_privacy_filter(sie_id: str, folder: Path, **loadtime: Any) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": 128000,
        "profiles": {
            "default": {
                "adapter": "privacy_filter",
                "compute_precision": "float32",
                "adapter_options": {"loadtime": loadtime, "runtime": {}},
            }
        },
    }
