"""A tiny random-weight OWLv2 detector with the byte-level CLIP tokenizer (padding with "!", id 0,
as OWL's own tokenizer pads label queries) and transformers' OWLv2 image processor."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tests.tiny_models.clip import write_clip_tokenizer

IMAGE_SIZE = 96
PATCH_SIZE = 16
TEXT_LENGTH = 16


def make_owlv2(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_clip_tokenizer(folder, pad_token="!")
    tower = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    config = transformers.Owlv2Config(
        text_config={
            **tower,
            "vocab_size": vocab_size,
            "max_position_embeddings": TEXT_LENGTH,
            "eos_token_id": vocab_size - 1,
            "bos_token_id": vocab_size - 2,
            "pad_token_id": 0,
        },
        vision_config={**tower, "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
        projection_dim=32,  # the class head compares queries in the text tower's width
    )
    torch.manual_seed(seed)
    model = transformers.Owlv2ForObjectDetection(config).eval()
    model.save_pretrained(folder)
    transformers.Owlv2ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(
        folder
    )
    return folder


def model_yaml_owlv2(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "image": True},
        "tasks": {"extract": {}},
        "max_sequence_length": TEXT_LENGTH,
        "adapter": "owlv2",
    }


def reference_detections(folder: Path, image: bytes, labels: list[str], threshold: float) -> dict[str, Any]:
    """transformers end to end: processor, Owlv2ForObjectDetection, post_process_object_detection."""
    import torch
    import transformers
    from PIL import Image

    processor = transformers.Owlv2ImageProcessorPil.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model: Any = transformers.Owlv2ForObjectDetection.from_pretrained(folder).eval()
    picture = Image.open(io.BytesIO(image))
    pixels = processor(picture, return_tensors="pt").pixel_values
    ids = tokenizer(
        labels, padding="max_length", max_length=TEXT_LENGTH, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        outputs = model(input_ids=ids.input_ids, attention_mask=ids.attention_mask, pixel_values=pixels)
    target = [(picture.height, picture.width)]
    found = processor.post_process_object_detection(outputs, threshold=threshold, target_sizes=target)[0]
    return {key: value.numpy() for key, value in found.items()}
