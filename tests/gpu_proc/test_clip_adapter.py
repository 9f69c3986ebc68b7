"""ClipAdapter (CLIP and SigLIP) through the device path against transformers on the same weights.

Images go as the frontend sends them (decoded, resized and cropped to uint8 pixels), texts as its
tokenizer flattens them; the reference is the model's own processor + get_*_features, normalized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.frontend.media.images import decode_image, preprocess
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.clip import ClipAdapter
from sie.gpu_proc.adapters.patches import FoldedPatchEmbedding
from sie.media_config import image_spec
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, TokenBatch
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.clip import (
    SIGLIP_TEXT_LENGTH,
    make_clip,
    model_yaml_clip,
    reference_image_features,
    reference_text_features,
)

ARCHS = ("clip", "siglip")
TEXTS = ["a photo of the cat", "hi", "A dog running on the beach at sunset, photographed from far away.", "x"]
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.jpeg(64, 64, seed=3), samples.gif(30, 20)]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {arch: make_clip(tmp_path_factory.mktemp(arch), arch=arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def adapters(folders: dict[str, Path]) -> dict[str, ClipAdapter]:
    out = {}
    for arch, folder in folders.items():
        adapter = load_adapter(
            parse_model_config(model_yaml_clip(f"tiny/{arch}", folder, arch)), folder, "cpu"
        )
        assert isinstance(adapter, ClipAdapter)
        out[arch] = adapter
    return out


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def assert_cosine(got: np.ndarray, want: np.ndarray) -> None:
    cosines = np.sum(unit(got) * unit(want), axis=-1)
    assert cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(unit(got), unit(want), atol=1e-5)


def image_request(folder: Path, images: list[bytes]) -> TokenBatch:
    spec = image_spec(folder, "clip")
    pixels = np.stack([preprocess(decode_image(data, None, 10**8, "x").pixels, spec) for data in images])
    n = len(images)
    return TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.zeros(n + 1, np.int32),
        input_ids=np.zeros(0, np.int32),
        output_mask=OutputMask.DENSE,
        pixels=pixels,
    )


def text_request(folder: Path, texts: list[str], arch: str) -> TokenBatch:
    max_length = SIGLIP_TEXT_LENGTH if arch == "siglip" else 77
    encoded = TextTokenizer(folder / "tokenizer.json", max_length).encode(texts)
    return TokenBatch(
        req_id=2,
        op=Op.ENCODE,
        model_slot=0,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        output_mask=OutputMask.DENSE,
    )


def dense(adapter: ClipAdapter, request: TokenBatch) -> np.ndarray:
    return next(iter(device_run(adapter, request).values())).values


@pytest.mark.parametrize("arch", ARCHS)
def test_image_embeddings_match_transformers(
    folders: dict[str, Path], adapters: dict[str, Any], arch: str
) -> None:
    got = dense(adapters[arch], image_request(folders[arch], IMAGES))
    assert_cosine(got, reference_image_features(folders[arch], IMAGES))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_float32_image_tower_folds_the_normalization(adapters: dict[str, Any], arch: str) -> None:
    # So the comparison above covers the folded path, which CPU models take.
    embeddings = adapters[arch]._live().vision_model.embeddings
    assert isinstance(embeddings.patch_embedding, FoldedPatchEmbedding)


def test_clip_runs_its_lean_image_tower_and_siglip_transformers(adapters: dict[str, Any]) -> None:
    # So the comparison with transformers above covers both forwards.
    assert adapters["clip"].lean_vision
    assert not adapters["siglip"].lean_vision


@pytest.mark.parametrize("arch", ARCHS)
def test_text_embeddings_match_transformers(
    folders: dict[str, Path], adapters: dict[str, Any], arch: str
) -> None:
    got = dense(adapters[arch], text_request(folders[arch], TEXTS, arch))
    assert_cosine(got, reference_text_features(folders[arch], TEXTS, arch))


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_equals_single_in_any_order(
    folders: dict[str, Path], adapters: dict[str, Any], arch: str
) -> None:
    adapter, folder = adapters[arch], folders[arch]
    singles = np.concatenate([dense(adapter, image_request(folder, [data])) for data in IMAGES])
    order = [2, 0, 3, 2, 1]  # shuffled, with a duplicate
    batch = dense(adapter, image_request(folder, [IMAGES[i] for i in order]))
    np.testing.assert_allclose(batch, singles[order], atol=1e-5)
    texts = dense(adapter, text_request(folder, TEXTS, arch))
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(dense(adapter, text_request(folder, [text], arch))[0], texts[i], atol=1e-5)


def test_text_and_images_share_the_projection_width(
    adapters: dict[str, Any], folders: dict[str, Path]
) -> None:
    for arch, adapter in adapters.items():
        image_rows = dense(adapter, image_request(folders[arch], IMAGES[:1]))
        text_rows = dense(adapter, text_request(folders[arch], TEXTS[:1], arch))
        assert image_rows.shape[1] == text_rows.shape[1] == (16 if arch == "clip" else 32)
