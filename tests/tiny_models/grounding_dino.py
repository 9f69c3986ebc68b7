"""A tiny random-weight Grounding DINO (Swin backbone, BERT text encoder), built offline.

The WordPiece vocabulary is made here, small, but with bert-base-uncased's ids for the tokens the
model treats specially ([CLS] 101, [SEP] 102, "." 1012, "?" 1029: Grounding DINO splits its prompt
into phrases at those ids), and the image processor resizes to a small shortest/longest edge so a
forward on CPU takes milliseconds.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from tests.boxes import bbox_matches

SHORTEST_EDGE = 96
LONGEST_EDGE = 160
NUM_QUERIES = 30
LOGIT_SCALE = 0.15
SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103, ".": 1012, "?": 1029}
WORDS = (
    "a", "an", "the", "of", "and", "photo", "picture", "cat", "cats", "dog", "car", "red", "blue",
    "green", "big", "small", "leather", "handbag", "remote", "control", "person", "man", "woman",
    "tree", "sky", "house", "bird", "on", "in", "with",
)  # fmt: skip
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def vocabulary() -> list[str]:
    """1,100 tokens: BERT's special ids in place, words, letters and `##` pieces, fillers between."""
    size = 1100
    vocab: list[str | None] = [None] * size
    for token, index in SPECIAL_IDS.items():
        vocab[index] = token
    free = iter(i for i in range(size) if vocab[i] is None)
    pieces = [*WORDS, *LETTERS, *(f"##{c}" for c in LETTERS), ",", "!", "'", "-"]
    for token in dict.fromkeys(pieces):  # in order, once each ("a" is a word and a letter)
        vocab[next(free)] = token
    return [token if token is not None else f"[unused{i}]" for i, token in enumerate(vocab)]


def write_tokenizer(folder: Path) -> int:
    """tokenizer.json, vocab.txt and tokenizer_config.json of a lower-casing BERT WordPiece."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = vocabulary()
    tokenizer = Tokenizer(WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 102), ("[CLS]", 101))
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": True,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("pad", "unk", "cls", "sep", "mask")},
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return len(vocab)


def make_grounding_dino(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights, tokenizer and image processor config into `folder`."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(folder)
    config = transformers.GroundingDinoConfig(
        backbone_config=transformers.SwinConfig(
            embed_dim=16,
            depths=[1, 1, 1, 1],
            num_heads=[1, 2, 2, 4],
            window_size=4,
            out_indices=[2, 3, 4],
        ),
        text_config=transformers.BertConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=260,
        ),
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_n_points=2,
        decoder_n_points=2,
        num_queries=NUM_QUERIES,
    )
    torch.manual_seed(seed)
    model = transformers.GroundingDinoForObjectDetection(config).eval()
    with torch.no_grad():  # random logits reach +-15 (every score ~1): scaled to spread scores
        model.model.decoder.layer_norm.weight.mul_(LOGIT_SCALE)
        model.model.decoder.layer_norm.bias.mul_(LOGIT_SCALE)
    model.save_pretrained(folder)
    size = {"shortest_edge": SHORTEST_EDGE, "longest_edge": LONGEST_EDGE}
    transformers.GroundingDinoImageProcessorPil(size=size).save_pretrained(folder)
    return folder


def model_yaml_grounding_dino(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "image": True},
        "tasks": {"extract": {}},
        "max_sequence_length": 256,
        "adapter": "grounding_dino",
    }


def reference(folder: Path) -> tuple[Any, Any]:
    """transformers' own processor and model for the folder (float32, eval)."""
    import transformers

    processor = transformers.GroundingDinoProcessor(
        image_processor=transformers.GroundingDinoImageProcessorPil.from_pretrained(folder),
        tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
    )
    model = transformers.GroundingDinoForObjectDetection.from_pretrained(folder).eval()
    return processor, model


def reference_detections(
    folder: Path, images: list[bytes], labels: list[str], box_threshold: float, text_threshold: float
) -> list[dict[str, Any]]:
    """Processor, model and post_process_grounded_object_detection, one image per call (as a
    single request's image is seen: no padding from other images)."""
    import torch
    from PIL import Image

    processor, model = reference(folder)
    found = []
    for data in images:
        picture = Image.open(io.BytesIO(data)).convert("RGB")
        inputs = processor(images=picture, text=labels, return_tensors="pt")
        with torch.no_grad():
            outputs = model(**inputs)
        found.append(
            processor.post_process_grounded_object_detection(
                outputs,
                inputs.input_ids,
                threshold=box_threshold,
                text_threshold=text_threshold,
                target_sizes=[(picture.height, picture.width)],
            )[0]
        )
    return found


def canonical(phrase: str, labels: list[str]) -> str:
    """SIE's naming of a transformers phrase: the label it covers best, else the phrase."""
    words = set(re.findall(r"\w+", phrase.lower()))
    keys = [
        (len(ws & words) / len(ws), len(ws & words), -i)
        for i, ws in enumerate(set(re.findall(r"\w+", label.lower())) for label in labels)
    ]
    best = max(range(len(labels)), key=lambda i: keys[i])
    return labels[best] if keys[best][1] > 0 else phrase


def assert_same_detections(got: list[dict[str, Any]], want: dict[str, Any], labels: list[str]) -> None:
    """The same objects (label, score atol 1e-4, box atol 1e-4), each matched to one reference
    object (near-equal scores may swap places)."""
    assert len(got) == len(want["scores"])
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(got))  # best first
    unmatched = [
        (canonical(phrase, labels), float(score), np.asarray(box))
        for phrase, score, box in zip(want["text_labels"], want["scores"], want["boxes"], strict=True)
    ]
    for found in got:
        at = next(
            (
                i
                for i, (label, score, box) in enumerate(unmatched)
                if label == found["label"]
                and abs(score - found["score"]) <= 1e-4
                and (
                    bbox_matches(found["bbox"], box)  # over HTTP
                    if "bbox" in found
                    else np.abs(np.asarray(found["corners"]) - box).max() <= 1e-4
                )
            ),
            None,
        )
        assert at is not None, (found, unmatched)
        del unmatched[at]
