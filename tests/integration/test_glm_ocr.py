"""GLM-OCR end to end: SIE's own YAML for zai-org/GLM-OCR (its SGLang default profile and its
transformers profile) with a tiny random model in a Hugging Face cache under SIE's id and pin.

Each page's Markdown is checked against tests.tiny_models.glm_ocr.Reference: transformers'
Glm46VProcessor and `generate`, one page at a time, while the server reads pages of several sizes in
one request (one device batch, prompts of different lengths, 3D positions placed per page).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from sie.page_ocr import GLM_OCR
from tests.integration.hf_cache import snapshot_dir
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.glm_ocr import Reference, make_glm_ocr

pytestmark = pytest.mark.slow

MODEL = "zai-org/GLM-OCR"
REVISION = "ca5d8b3e287e52589e37c28385d9655ee4372f9d"
PROMPT = "Text Recognition:"
# SIE 0.10.1's file, but float32 for bfloat16 so that greedy decoding matches the float32 reference,
# and 12 new tokens at most for 8,192, so that random weights finish quickly.
SIE_YAML: dict[str, Any] = {
    "sie_id": MODEL,
    "hf_id": MODEL,
    "hf_revision": REVISION,
    "inputs": {"text": False, "image": True, "audio": False, "video": False},
    "tasks": {"encode": None, "score": None, "extract": {}},
    "max_sequence_length": 16384,
    "profiles": {
        "transformers": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.glm_ocr:GlmOcrAdapter",
            "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 12, "num_beams": 1}},
        },
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter",
            "adapter_options": {
                "loadtime": {
                    "mem_fraction_static": 0.85,
                    "served_model_name": MODEL,
                    "max_concurrent_requests": 64,
                    "default_prompt": PROMPT,
                },
                "runtime": {"max_new_tokens": 12, "num_beams": 1},
            },
        },
    },
}
# A profile of the user's own: another default prompt.
SIE_YAML["profiles"]["formula"] = {
    **SIE_YAML["profiles"]["default"],
    "adapter_options": {
        "loadtime": {"default_prompt": "Formula Recognition:"},
        "runtime": {"max_new_tokens": 12},
    },
}
# (width, height): over the pixel budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98)]


@dataclass(frozen=True)
class Lab:
    server: Server
    reference: Reference
    pages: list[bytes]
    images: list[Image.Image]


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("glm")
    models = root / "models"
    models.mkdir()
    (models / "zai-org__GLM-OCR.yaml").write_text(yaml.safe_dump(SIE_YAML))
    snapshot = make_glm_ocr(snapshot_dir(root / "hf-home" / "hub", MODEL, REVISION), seed=1)
    rng = np.random.default_rng(4)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES]
    server = Server(
        "--models-dir", str(models), "--local-cache", str(root / "hf-home"), "--preload", MODEL, frontends=1
    ).wait_ready()
    yield Lab(server, Reference(Path(snapshot)), [png(image) for image in images], images)
    assert server.stop() == 0, server.log()


def image(data: bytes, as_json: bool) -> dict[str, Any]:
    return {"data": base64.b64encode(data).decode() if as_json else data}


def extract(
    lab: Lab, pages: list[bytes], params: dict[str, Any] | None = None, *, as_json: bool = True
) -> Any:
    items = [{"id": f"p{i}", "images": [image(page, as_json)]} for i, page in enumerate(pages)]
    return post(
        lab.server.url, f"/v1/extract/{MODEL}", {"items": items, "params": params or {}}, as_json=as_json
    )


def markdown(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    for item in items:
        (entity,) = item["entities"]
        assert (entity["label"], entity["score"], entity["start"], entity["end"]) == (
            "markdown",
            1.0,
            None,
            None,
        )
    return [item["entities"][0]["text"] for item in items]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = markdown(extract(lab, lab.pages, as_json=as_json))
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 1 and all(want)


@pytest.mark.parametrize("profile", ["default", "transformers"])
def test_an_instruction_and_fewer_new_tokens(lab: Lab, profile: str) -> None:
    params = {"instruction": "Table Recognition:", "options": {"max_new_tokens": 5, "profile": profile}}
    got = markdown(extract(lab, lab.pages[:2], params))
    want = [
        lab.reference.transcribe(image, "Table Recognition:", max_new_tokens=5) for image in lab.images[:2]
    ]
    assert got == want


def test_a_profiles_default_prompt_is_the_text_after_the_page(lab: Lab) -> None:
    got = markdown(extract(lab, lab.pages[:3], {"options": {"profile": "formula"}}))
    assert got == [
        lab.reference.transcribe(image, "Formula Recognition:", max_new_tokens=12) for image in lab.images[:3]
    ]
    assert got != [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images[:3]]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "read <|assistant|> then"}, "control token"),
        ({"options": {"instruction": 5}}, "instruction"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    response = extract(lab, lab.pages[:1], params)
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]["message"]
    assert markdown(extract(lab, lab.pages[:1])) == [
        lab.reference.transcribe(lab.images[0], max_new_tokens=12)
    ]


def test_a_prompt_over_the_models_limit_is_413_before_any_page_is_read(lab: Lab) -> None:
    long = {"instruction": "Read: " + "page " * 20000}  # about 20,000 tokens, over 16,384
    response = extract(lab, [lab.pages[0], b"not even an image"], long)
    assert response.status_code == 413, response.text
    assert "over the model's 16384" in response.json()["detail"]["message"]
    assert markdown(extract(lab, lab.pages[:1])) == [
        lab.reference.transcribe(lab.images[0], max_new_tokens=12)
    ]


def test_items_need_exactly_one_decodable_page(lab: Lab) -> None:
    body = {"items": [{"text": "no page"}], "params": {}}
    assert post(lab.server.url, f"/v1/extract/{MODEL}", body, as_json=True).status_code == 400
    two = {"items": [{"images": [image(lab.pages[0], True), image(lab.pages[1], True)]}]}
    assert post(lab.server.url, f"/v1/extract/{MODEL}", two, as_json=True).status_code == 400
    response = extract(lab, [b"not an image"])
    assert response.status_code == 400, response.text
    assert "Item 0 image 0" in response.json()["detail"]["message"]
    long = png(Image.new("RGB", (3, 700)))  # scaled to 28 x 6533: past the 200:1 aspect limit
    response = extract(lab, [lab.pages[0], long])
    assert response.status_code == 400, response.text
    assert "Item 1 image 0" in response.json()["detail"]["message"]
    assert "aspect ratio" in response.json()["detail"]["message"]


def test_the_catalog_says_what_the_sglang_settings_do(lab: Lab) -> None:
    from sie.sie_yaml import translate

    config = translate(SIE_YAML, "zai-org__GLM-OCR.yaml")
    assert config["profiles"]["default"]["adapter"] == "glm_ocr"
    assert config["profiles"]["default"]["adapter_options"]["loadtime"] == {"default_prompt": PROMPT}
    assert GLM_OCR.default_prompt == PROMPT


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    """`client.extract(model, item)` of the real sie-sdk, with a page file and an opened image."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    page = tmp_path / "page.png"
    page.write_bytes(lab.pages[1])
    kwargs = {"options": {"max_new_tokens": 9}}
    actions = [
        {"op": "extract", "model": MODEL, "items": {"images": [{kind: str(page)}]}, "kwargs": kwargs}
        for kind in ("path", "pil")
    ]
    sent = io.BytesIO()  # the SDK sends a path's or a PIL image's pixels as a JPEG of quality 95
    lab.images[1].save(sent, format="JPEG", quality=95)
    want = lab.reference.transcribe(Image.open(sent), max_new_tokens=9)
    for entry in run_sdk(lab.server.url, actions):
        assert [e["text"] for e in ok(entry)["entities"]] == [want]
