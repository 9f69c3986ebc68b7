"""What the page OCR families' end-to-end tests share: a real server reading SIE's own YAML for the
model, with a tiny random model in a Hugging Face cache under SIE's id and pin; pages of several
sizes; requests; and the checks every family passes (bad requests refused while the model keeps
serving, one decodable page per item, the real sie-sdk).

A family's reference (tests.tiny_models.*.Reference) transcribes one page per call:
`transcribe(image, max_new_tokens=N)` reads it as the family's default request does.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from tests.integration.hf_cache import snapshot_dir
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post


@dataclass(frozen=True)
class Lab:
    server: Server
    model: str
    reference: Any
    pages: list[bytes]  # PNG files of `images`
    images: list[Image.Image]
    label: str  # the default task's entity label
    max_new_tokens: int  # the default profile's ceiling in the test's YAML

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return post(self.server.url, f"/v1/extract/{self.model}", body, as_json=True)

    def extract(
        self, pages: list[bytes], params: dict[str, Any] | None = None, *, as_json: bool = True
    ) -> httpx.Response:
        items = [{"id": f"p{i}", "images": [image(page, as_json)]} for i, page in enumerate(pages)]
        body = {"items": items, "params": params or {}}
        return post(self.server.url, f"/v1/extract/{self.model}", body, as_json=as_json)


def png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def image(data: bytes, as_json: bool) -> dict[str, Any]:
    return {"data": base64.b64encode(data).decode() if as_json else data}


@contextmanager
def running_lab(
    served: WatchedServer,
    sie_yaml: dict[str, Any],
    make: Callable[[Path, int], Path],
    reference: Callable[[Path], Any],
    sizes: list[tuple[int, int]],
    *,
    label: str = "markdown",
    max_new_tokens: int = 12,
) -> Iterator[Lab]:
    """The shared server with SIE's YAML for `sie_yaml`'s model added, its tiny model built by
    `make` into the server's cache, and random pages of `sizes` (width, height)."""
    model, revision = sie_yaml["sie_id"], sie_yaml["hf_revision"]
    snapshot = make(snapshot_dir(served.hub, model, revision), 1)
    served.add(sie_yaml)
    rng = np.random.default_rng(4)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]
    page_files = [png(picture) for picture in images]
    lab = Lab(served.server, model, reference(Path(snapshot)), page_files, images, label, max_new_tokens)
    served.wait_serving(f"/v1/extract/{model}", {"items": [{"images": [image(page_files[0], True)]}]})
    yield lab


def transcripts(response: httpx.Response, label: str = "markdown") -> list[str]:
    """Each item's one entity's text, checked to be a whole-page transcript labelled `label`."""
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    for item in items:
        (entity,) = item["entities"]
        assert (entity["label"], entity["score"], entity["start"], entity["end"]) == (label, 1.0, None, None)
    return [item["entities"][0]["text"] for item in items]


def check_refused(
    lab: Lab, params: dict[str, Any], message: str, *, status: int = 400, greedy: dict[str, Any] | None = None
) -> None:
    """The request is refused with `status` naming `message`, and the next one is answered as the
    reference answers it (`greedy`: options that make a sampling family read greedily)."""
    response = lab.extract(lab.pages[:1], params)
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]["message"]
    after = transcripts(lab.extract(lab.pages[:1], {"options": greedy or {}}), lab.label)
    assert after == [lab.reference.transcribe(lab.images[0], max_new_tokens=lab.max_new_tokens)]


def check_one_decodable_page_per_item(lab: Lab) -> None:
    assert lab.post({"items": [{"text": "no page"}], "params": {}}).status_code == 400
    two = {"items": [{"images": [image(lab.pages[0], True), image(lab.pages[1], True)]}]}
    assert lab.post(two).status_code == 400
    response = lab.extract([b"not an image"])
    assert response.status_code == 400, response.text
    assert "Item 0 image 0" in response.json()["detail"]["message"]
    sliver = png(Image.new("RGB", (3, 700)))  # past 200:1, or scaled to no pixels across
    response = lab.extract([lab.pages[0], sliver])
    assert response.status_code == 400, response.text
    assert "Item 1 image 0" in response.json()["detail"]["message"]


def check_sdk(lab: Lab, tmp_path: Path, options: dict[str, Any], want: Callable[[Image.Image], str]) -> None:
    """`client.extract(model, item)` of the real sie-sdk, with a page file and an opened image, gives
    `want` of the page the SDK sends (a path's or a PIL image's pixels as a JPEG of quality 95)."""
    import pytest

    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    page = tmp_path / "page.png"
    page.write_bytes(lab.pages[1])
    kwargs = {"options": options}
    actions = [
        {"op": "extract", "model": lab.model, "items": {"images": [{kind: str(page)}]}, "kwargs": kwargs}
        for kind in ("path", "pil")
    ]
    sent = io.BytesIO()
    lab.images[1].save(sent, format="JPEG", quality=95)
    expected = want(Image.open(sent))
    for entry in run_sdk(lab.server.url, actions):
        assert [e["text"] for e in ok(entry)["entities"]] == [expected]
