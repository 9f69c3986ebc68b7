"""Images (and audio) end to end: one real server with tiny CLIP / SigLIP (and a text-only model),
over HTTP in msgpack and JSON and through the real sie-sdk, against transformers on the same bytes.

The server runs with small media limits and a 2.5 MiB request ring, so the limits are reachable with
small inputs and a request of many images is cut into several ring messages.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests import media_samples as samples
from tests.integration.media_models import CLIP, MAX_IMAGES, SIGLIP, TEXT_ONLY
from tests.integration.server import Server
from tests.integration.test_sdk import SDK_PYTHON, array, ok, run_sdk
from tests.integration.wire import decode, dense_matrix, encode, sie_quantized
from tests.tiny_models.clip import reference_image_features, reference_text_features

pytestmark = pytest.mark.slow

IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.webp(64, 64), samples.gif(30, 20)]
TEXTS = ["a photo of the cat", "two dogs on the beach"]

Media = tuple[Server, dict[str, Path]]


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def assert_same_vectors(got: np.ndarray, want: np.ndarray) -> None:
    cosines = np.sum(unit(got) * unit(want), axis=-1)
    assert cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)


def image_item(*images: bytes, as_json: bool, **extra: Any) -> dict[str, Any]:
    wire = [{"data": base64.b64encode(data).decode() if as_json else data} for data in images]
    return {"images": wire, **extra}


def encode_ok(url: str, model: str, items: list[dict[str, Any]], *, as_json: bool) -> np.ndarray:
    response = encode(url, model, {"items": items}, as_json=as_json)
    assert response.status_code == 200, response.text
    return dense_matrix(decode(response))


def error_of(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail["code"] == ("INVALID_INPUT" if status == 400 else detail["code"])
    return str(detail["message"])


def test_models_list_their_inputs(media: Media) -> None:
    server, _ = media
    models = {m["name"]: m for m in httpx.get(f"{server.url}/v1/models").json()["models"]}
    assert models[CLIP]["inputs"] == models[SIGLIP]["inputs"] == ["text", "image"]
    assert models[TEXT_ONLY]["inputs"] == ["text"]
    assert models[CLIP]["outputs"] == ["dense"]


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_images_and_texts_match_transformers(media: Media, model: str, as_json: bool) -> None:
    server, folders = media
    items = [
        image_item(IMAGES[0], as_json=as_json, id="photo"),
        {"id": "caption", "text": TEXTS[0]},
        image_item(IMAGES[1], as_json=as_json, text="ignored: an item with images is an image"),
        image_item(IMAGES[2], as_json=as_json),
        {"text": TEXTS[1]},
        image_item(IMAGES[3], as_json=as_json),
    ]
    got = encode_ok(server.url, model, items, as_json=as_json)
    arch = "siglip" if model == SIGLIP else "clip"
    images = reference_image_features(folders[model], IMAGES)
    texts = reference_text_features(folders[model], TEXTS, arch)
    assert_same_vectors(got, np.stack([images[0], texts[0], images[1], images[2], texts[1], images[3]]))


def test_batch_equals_single_and_many_images_span_several_messages(media: Media) -> None:
    server, _ = media
    singles = np.concatenate(
        [encode_ok(server.url, CLIP, [image_item(d, as_json=False)], as_json=False) for d in IMAGES]
    )
    # 40 images of 320x240 -> 64x64 uint8 each; the 2.5 MiB ring takes 26 a message, so 2 messages.
    many = [samples.jpeg(320, 240, seed=s) for s in range(40)]
    order = [*many, *IMAGES[::-1], IMAGES[0]]
    got = encode_ok(server.url, CLIP, [image_item(d, as_json=False) for d in order], as_json=False)
    np.testing.assert_allclose(got[40:], singles[[3, 2, 1, 0, 0]], atol=1e-5)
    alone = encode_ok(server.url, CLIP, [image_item(many[5], as_json=False)], as_json=False)
    np.testing.assert_allclose(got[5], alone[0], atol=1e-5)


def test_an_item_with_several_images_gets_their_normalized_mean(media: Media) -> None:
    server, folders = media
    got = encode_ok(server.url, CLIP, [image_item(*IMAGES[:3], as_json=False)], as_json=False)[0]
    mean = unit(reference_image_features(folders[CLIP], IMAGES[:3])).mean(axis=0)
    assert_same_vectors(got[None], mean[None])


def test_output_dtypes_apply_to_image_vectors(media: Media) -> None:
    server, _ = media
    plain = encode_ok(server.url, CLIP, [image_item(IMAGES[0], as_json=False)], as_json=False)
    for dtype in ("int8", "uint8", "binary"):
        body = {"items": [image_item(IMAGES[0], as_json=False)], "params": {"output_dtype": dtype}}
        response = encode(server.url, CLIP, body, as_json=False)
        assert response.status_code == 200, response.text
        values = decode(response)["items"][0]["dense"]["values"]
        np.testing.assert_array_equal(values[None], sie_quantized(plain, dtype))


@pytest.mark.parametrize(
    ("model", "item", "message"),
    [
        (TEXT_ONLY, {"text": "x", "images": [{"data": IMAGES[0]}]}, "Item 0 has images, which model"),
        (CLIP, {"id": "nothing"}, "Item 0 has no text or images"),
        (
            CLIP,
            {"images": [{"data": b"not an image"}]},
            "Item 0 image 0: the bytes are not a decodable image",
        ),
        (CLIP, {"images": [{"data": IMAGES[0], "format": "heic"}]}, "unsupported image format 'heic'"),
        (CLIP, {"images": [{"data": samples.jpeg(1001, 1000)}]}, "1001x1000 pixels is over the limit"),
        (CLIP, {"images": [{"data": IMAGES[2]}] * (MAX_IMAGES + 1)}, f"at most {MAX_IMAGES} per item"),
        (CLIP, {"audio": {"data": b"RIFF", "format": "wav"}}, "Item 0 has audio, which model"),
    ],
    ids=[
        "text-model-image",
        "neither",
        "undecodable",
        "unsupported",
        "too-many-pixels",
        "too-many-images",
        "audio",
    ],
)
def test_bad_media_is_a_400(media: Media, model: str, item: dict[str, Any], message: str) -> None:
    server, _ = media
    params = {"output_types": ["sparse"]} if model == TEXT_ONLY else {}
    response = encode(server.url, model, {"items": [{"text": "fine"}, item], "params": params}, as_json=False)
    assert message.replace("Item 0", "Item 1") in error_of(response)


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason="the sie-sdk venv is missing (scripts/install.sh --test)")
def test_the_sdk_sends_pil_images_bytes_and_paths(media: Media, tmp_path: Path) -> None:
    server, folders = media
    paths = []
    for i, data in enumerate(IMAGES[:3]):
        path = tmp_path / f"image{i}.{['jpg', 'png', 'webp'][i]}"
        path.write_bytes(data)
        paths.append(str(path))
    actions = [
        {"op": "encode", "model": CLIP, "items": [{"images": [{kind: p}]} for p in paths]}
        for kind in ("pil", "bytes", "path")
    ]
    results = [[array(r["dense"]) for r in ok(entry)] for entry in run_sdk(server.url, actions)]
    # The SDK re-encodes PIL images and paths as JPEG (quality 95); raw bytes travel unchanged.
    reference = reference_image_features(folders[CLIP], IMAGES[:3])
    assert_same_vectors(np.stack(results[1]), reference)
    np.testing.assert_allclose(np.stack(results[0]), np.stack(results[2]), atol=1e-6)
    assert_same_vectors(np.stack(results[0]), reference_image_features(folders[CLIP], _as_sdk_jpegs(paths)))


def _as_sdk_jpegs(paths: list[str]) -> list[bytes]:
    """What sie-sdk sends for a PIL image or a path: RGB (alpha dropped by convert) JPEG at quality 95."""
    from PIL import Image

    out = []
    for path in paths:
        image = Image.open(path)
        image = image.convert("RGB") if image.mode != "RGB" else image
        out.append(samples.encode(image, "JPEG", quality=95))
    return out
