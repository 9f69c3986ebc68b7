"""Fuzzing each image and audio family's own request handling on one server of tiny media models:
items whose `images` and `audio` carry valid small files, random bytes, truncated files or values
of the wrong type, random `format`s and sample rates, and labels, instructions and options
(tasks, beams, token budgets, thresholds, languages, granularities, temperatures, MUVERA...) of
every JSON type, in JSON (bytes as base64) and msgpack (raw bytes), on every media route, and
random multipart forms on /v1/audio/transcriptions. Never a 5xx, every error in the contract's
shape, and every family still serves afterwards. Twelve bodies per route; `SIE_FUZZ_PER_ROUTE=40`
runs a longer search.
"""

from __future__ import annotations

import base64
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests import media_samples as samples
from tests.integration.media_models import (
    BUILDERS,
    CLIP,
    COLPALI,
    GROUNDING_DINO,
    OWLV2,
    PARAKEET,
    SIGLIP,
    TEXT_ONLY,
    WHISPER,
    media_server_args,
)
from tests.integration.server import Server, shm_names
from tests.integration.test_fuzz import FUZZ, MSGPACK, check_response, header
from tests.integration.test_fuzz_families import values
from tests.tiny_models.colqwen2 import make_colqwen2, model_yaml_colqwen2
from tests.tiny_models.colsmol import make_colsmol, model_yaml_colsmol
from tests.tiny_models.donut import make_donut, model_yaml_donut
from tests.tiny_models.florence2 import make_florence2, model_yaml_florence2
from tests.tiny_models.qwen3_vl import (
    make_qwen3_vl,
    model_yaml_qwen3_vl_embedding,
    model_yaml_qwen3_vl_reranker,
)

pytestmark = pytest.mark.slow

FLORENCE2, CORD, DOCVQA = "tiny/florence2", "tiny/donut-cord", "tiny/donut-docvqa"
QWEN_EMBED, QWEN_RERANK = "tiny/qwen3-vl-embedding", "tiny/qwen3-vl-reranker"
COLQWEN, COLSMOL = "tiny/colqwen2", "tiny/colsmol"
IMAGE_EXTRACT = [OWLV2, GROUNDING_DINO, FLORENCE2, CORD, DOCVQA]
AUDIO_EXTRACT = [WHISPER, PARAKEET]
IMAGE_ENCODE = [CLIP, SIGLIP, COLPALI, QWEN_EMBED, COLQWEN, COLSMOL]
IMAGE_SCORE = [COLPALI, COLQWEN, COLSMOL, QWEN_RERANK]
ROUTES = [
    *(f"/v1/extract/{model}" for model in IMAGE_EXTRACT + AUDIO_EXTRACT),
    *(f"/v1/encode/{model}" for model in IMAGE_ENCODE),
    *(f"/v1/score/{model}" for model in IMAGE_SCORE),
]
PER_ROUTE = int(os.environ.get("SIE_FUZZ_PER_ROUTE", "12"))

Media = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def media_all(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Media]:
    """One server preloading a tiny model of every image and audio family (test_media's models, plus
    Florence-2, Donut, Qwen3-VL, ColQwen2 and ColSmol), with test_media's small media limits."""
    root = tmp_path_factory.mktemp("fuzz_media")
    models_dir = root / "models"
    models_dir.mkdir()
    florence = make_florence2(root / "weights" / "florence2")
    donut = make_donut(root / "weights" / "donut")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qwen_embed = make_qwen3_vl(root / "weights" / "qwen-embed", seed=0)
        qwen_rerank = make_qwen3_vl(root / "weights" / "qwen-rerank", seed=1, tied=False)
    described: dict[str, tuple[Path, dict[str, Any]]] = {
        FLORENCE2: (florence, model_yaml_florence2(FLORENCE2, florence)),
        CORD: (donut, model_yaml_donut(CORD, donut, "<s_cord-v2>")),
        DOCVQA: (donut, model_yaml_donut(DOCVQA, donut, "<s_docvqa>")),
        QWEN_EMBED: (qwen_embed, model_yaml_qwen3_vl_embedding(QWEN_EMBED, qwen_embed)),
        QWEN_RERANK: (qwen_rerank, model_yaml_qwen3_vl_reranker(QWEN_RERANK, qwen_rerank)),
    }
    for sie_id, (make, describe) in {
        **{k: v for k, v in BUILDERS.items() if k != TEXT_ONLY},
        COLQWEN: (make_colqwen2, model_yaml_colqwen2),
        COLSMOL: (make_colsmol, model_yaml_colsmol),
    }.items():
        folder = make(root / "weights" / sie_id.replace("/", "__"))
        described[sie_id] = (folder, describe(sie_id, folder))
    for sie_id, (_, document) in described.items():
        (models_dir / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(document))
    folders = {sie_id: folder for sie_id, (folder, _) in described.items()}
    args = media_server_args(models_dir, folders)
    ring = args.index("--request-ring-bytes")
    del args[ring : ring + 2]  # the default ring: Qwen3-VL upscales a small page to 200k pixels, 3-6 MB
    server = Server(*args, frontends=1).wait_ready(180)
    yield server, folders
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []
    assert "Traceback" not in server.log_path.read_text(errors="replace"), server.log()  # none even logged


RATE = 16000
JPEG = samples.jpeg(48, 32)
PNG = samples.png_rgba(20, 30)
WAV = samples.audio_bytes(samples.tone(0.5, RATE), RATE)
IMAGES = [
    JPEG,
    PNG,
    samples.webp(16, 16),
    samples.gif(12, 10),
    samples.rotated_jpeg(20, 12),
    samples.encode(Image.new("L", (1, 1)), "PNG"),
    samples.encode(Image.new("RGB", (1100, 1000)), "PNG"),  # over --max-image-pixels, a few KB
    JPEG[: len(JPEG) // 2],  # truncated
    b"\x89PNG\r\n\x1a\n" + b"\x00" * 20,  # a PNG signature and nothing valid after it
]
AUDIO = [
    WAV,
    samples.audio_bytes(samples.tone(0.3, 8000, channels=2), 8000),
    samples.audio_bytes(samples.tone(0.3, 22050), 22050, "FLAC"),
    samples.audio_bytes(np.zeros(RATE // 100, np.float32), RATE),  # 10 ms of silence
    samples.audio_bytes(np.zeros(8000 * 41, np.float32), 8000, subtype="PCM_U8"),  # over --max-audio-seconds
    WAV[:44],  # a header and no samples
    WAV[: len(WAV) // 3],
    b"RIFF\xff\xff\xff\xffWAVEfmt ",
]
IMAGE_FORMATS = ["jpeg", "JPEG", "png", "webp", "gif", "bmp", "tiff", "heic", "", "svg"]
AUDIO_FORMATS = ["wav", "WAV", "flac", "ogg", "mp3", "pcm", "m4a", ""]
TASKS = [
    "<OD>", "<OCR>", "<OCR_WITH_REGION>", "<CAPTION>", "<DETAILED_CAPTION>", "<DocVQA>",
    "<CAPTION_TO_PHRASE_GROUNDING>", "<REGION_PROPOSAL>", "<REFERRING_EXPRESSION_SEGMENTATION>",
    "<REGION_TO_DESCRIPTION>", "<OPEN_VOCABULARY_DETECTION>", "<s_cord-v2>", "<s_docvqa>",
    "<s_rvlcdip>", "transcribe", "translate", "<", "",
]  # fmt: skip
# Option names the media families read, each with values of every type and some near-valid ones.
OPTIONS: dict[str, Any] = {
    "task": st.sampled_from(TASKS),
    "max_new_tokens": st.integers(-2, 40),
    "num_beams": st.integers(-1, 5),
    "threshold": st.floats(-1, 2),
    "box_threshold": st.floats(-1, 2),
    "text_threshold": st.floats(-1, 2),
    "language": st.sampled_from(["en", "de", "english", "xx", "", "EN", "zh"]),
    "timestamp_granularities": st.lists(st.sampled_from(["segment", "word", "char", ""]), max_size=3),
    "temperature": st.floats(-1, 2),
    "instruction": st.text(max_size=20),
    "profile": st.sampled_from(["default", "nope", ""]),
    "is_query": st.booleans(),
    "normalize": st.booleans(),
    "muvera": st.fixed_dictionaries(
        {},
        optional={
            "num_repetitions": st.integers(-1, 3),
            "num_simhash_projections": st.integers(-1, 70),
            "projection_dim": st.integers(-1, 40) | st.none(),
            "final_projection_dim": st.integers(-1, 64) | st.none(),
        },
    ),
    "smve": st.just({}),
    "lora": st.text(max_size=6),
    "output_types": st.lists(st.sampled_from(["dense", "multivector", "sparse", "json"]), max_size=3),
    "top_k": st.integers(-1, 5),
    "pooling": st.sampled_from(["last", "mean", "cls"]),
}
# The options each family reads (the rest it refuses by name).
OWN_OPTIONS = {
    FLORENCE2: ["task", "max_new_tokens", "num_beams", "instruction", "profile"],
    CORD: ["task", "max_new_tokens", "num_beams", "instruction", "profile"],
    DOCVQA: ["task", "max_new_tokens", "num_beams", "instruction", "profile"],
    WHISPER: ["language", "temperature", "timestamp_granularities", "profile"],
    PARAKEET: ["language", "temperature", "timestamp_granularities", "profile"],
    OWLV2: ["threshold", "profile"],
    GROUNDING_DINO: ["threshold", "box_threshold", "text_threshold", "profile"],
}


def options_of(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """A few of these option names, each mostly a near-valid value, else a value of any type."""
    return st.sets(st.sampled_from(names), max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries(
            {name: OPTIONS[name] | OPTIONS[name] | values for name in chosen}
        )
    )


options = options_of(list(OPTIONS))
smve = st.fixed_dictionaries(
    {},
    optional={
        "width": st.integers(-1, 70000),
        "k": st.integers(-1, 64),
        "num_repetitions": st.integers(-1, 3),
        "max_nonzeros": st.integers(-1, 64) | st.none(),
    },
)
# What /v1/encode's typed options hold; muvera and smve are dicts the families parse themselves.
encode_options = st.fixed_dictionaries(
    {},
    optional={
        "is_query": st.booleans(),
        "profile": OPTIONS["profile"],
        "normalize": st.booleans(),
        "muvera": OPTIONS["muvera"] | st.dictionaries(st.text(max_size=8), values, max_size=3),
        "smve": smve | st.dictionaries(st.text(max_size=8), values, max_size=3),
        "lora": OPTIONS["lora"],
    },
)

# Well-typed bodies: the wire shape decodes, so each family's own parsing and media decoding run.
image = st.fixed_dictionaries(
    {"data": st.sampled_from(IMAGES) | st.sampled_from(IMAGES[:6]) | st.binary(max_size=64)},
    optional={"format": st.sampled_from(IMAGE_FORMATS)},
)
audio = st.fixed_dictionaries(
    {"data": st.sampled_from(AUDIO) | st.sampled_from(AUDIO[:4]) | st.binary(max_size=64)},
    optional={"format": st.sampled_from(AUDIO_FORMATS), "sample_rate": st.integers(-1, 10**6)},
)
metadata = st.dictionaries(st.text(max_size=8), values, max_size=3)
item = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=40),
        "images": st.lists(image, min_size=1, max_size=4),  # 4: one over --max-images-per-item
        "audio": audio,
        "metadata": metadata,
        "id": st.text(max_size=6),
    },
)
# Mostly one image: all but CLIP's families read one per item.
image_item = st.fixed_dictionaries(
    {
        "images": st.sampled_from([1, 1, 1, 2, 3, 4]).flatmap(
            lambda n: st.lists(image, min_size=n, max_size=n)
        )
    },
    optional={"text": st.text(max_size=40)},
)
audio_item = st.fixed_dictionaries({"audio": audio}, optional={"text": st.text(max_size=10)})
labels = st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4)
text = st.text(max_size=20)
output_types = (
    st.sampled_from([["dense"], ["multivector"], ["dense", "multivector"]]) | OPTIONS["output_types"]
)
output_dtype = st.sampled_from(["float32", "float16", "int8", "binary", "ubinary", "bf16"])


def well_typed(path: str) -> st.SearchStrategy[dict[str, Any]]:
    """A body whose wire shape decodes, mostly of the model's own input kind and outputs, so that
    each family's own parsing and the media decoding run."""
    kind, model = path.split("/")[2], path.split("/", 3)[3]
    own = audio_item if model in AUDIO_EXTRACT else image_item
    items = st.lists(own, min_size=1, max_size=3) | st.lists(own | item, min_size=1, max_size=3)
    if kind == "encode":
        own_output = ["multivector"] if model in (COLPALI, COLQWEN, COLSMOL) else ["dense"]
        params = st.fixed_dictionaries(
            {"output_types": st.just(own_output) | st.just(own_output) | output_types},
            optional={"output_dtype": output_dtype, "instruction": text, "options": encode_options},
        )
        if own_output == ["dense"]:  # the default
            return st.fixed_dictionaries({"items": items}, optional={"params": params})
        return st.fixed_dictionaries({"items": items, "params": params})
    if kind == "score":
        query = item | image_item | st.fixed_dictionaries({"text": text})
        return st.fixed_dictionaries(
            {"query": query, "items": items}, optional={"instruction": text, "options": options}
        )
    own_options = options_of(OWN_OPTIONS[model]) | options
    params = {"instruction": text, "options": own_options, "output_schema": metadata}
    if model == FLORENCE2:  # the phrases of its grounding task; Donut and speech models refuse labels
        params["labels"] = labels
    required = {"labels": labels} if model in (OWLV2, GROUNDING_DINO) else {}  # zero-shot
    return st.fixed_dictionaries({"items": items, "params": st.fixed_dictionaries(required, optional=params)})


# Ill-typed bodies: any field may hold a value of any JSON type.
loose_image = st.fixed_dictionaries(
    {"data": image.map(lambda entry: entry["data"]) | values},
    optional={"format": st.sampled_from(IMAGE_FORMATS) | values},
)
loose_audio = st.fixed_dictionaries(
    {"data": audio.map(lambda entry: entry["data"]) | values},
    optional={"format": st.sampled_from(AUDIO_FORMATS) | values, "sample_rate": values},
)
loose_item = st.fixed_dictionaries(
    {},
    optional={
        "text": text | values,
        "images": st.lists(loose_image | values, max_size=4) | values,
        "audio": loose_audio | values,
        "metadata": metadata | values,
        "id": values,
    },
)
loose_params = st.fixed_dictionaries(
    {},
    optional={
        "labels": labels | values,
        "instruction": text | values,
        "options": options | encode_options | values,
        "output_types": output_types | values,
        "output_dtype": output_dtype | values,
        "output_schema": values,
    },
)
ill_typed = st.fixed_dictionaries(
    {"items": st.lists(loose_item, min_size=1, max_size=3) | values},
    optional={
        "params": loose_params,
        "query": loose_item,
        "instruction": values,
        "options": options | values,
    },
)


def as_json(value: Any) -> Any:
    """The JSON wire form: bytes become base64 strings, as the API takes them."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def send(url: str, path: str, body: dict[str, Any], use_json: bool) -> httpx.Response:
    if use_json:
        content, kind = json.dumps(as_json(body)).encode(), "application/json"
    else:
        content, kind = msgpack.packb(body, use_bin_type=True), MSGPACK
    headers = {"content-type": kind, "accept": kind}
    return httpx.post(url + path, content=content, headers=headers, timeout=120)


def test_media_parameters_are_4xx_or_served_never_5xx(media_all: Media) -> None:
    server, _ = media_all

    @settings(FUZZ, max_examples=len(ROUTES) * PER_ROUTE)
    @given(path=st.sampled_from(ROUTES), use_json=st.booleans(), data=st.data())
    def run(path: str, use_json: bool, data: st.DataObject) -> None:
        # Four well-typed bodies to one ill-typed: most requests get past the wire's decoding.
        body = data.draw(well_typed(path) if data.draw(st.sampled_from([1, 1, 1, 1, 0])) else ill_typed)
        check_response(path, send(server.url, path, body, use_json))

    run()
    still_serves(server)


form_text = st.text(max_size=12) | st.sampled_from(["", "0", "-1", "nan", "1e999", "true"])
form = st.fixed_dictionaries(
    {"model": st.sampled_from([WHISPER] * 4 + [PARAKEET, CLIP, "no/such-model", ""])},
    optional={
        "language": st.sampled_from(["en", "de", "xx", "english", ""]) | form_text,
        "response_format": st.sampled_from(["json", "text", "verbose_json", "srt", "vtt", "xml"]) | form_text,
        "temperature": st.sampled_from(["0", "0.5", "1", "2", "-0.1"]) | form_text,
        "timestamp_granularities[]": st.lists(
            st.sampled_from(["segment", "word", "char"]) | form_text, max_size=3
        ),
    },
)
# Fields that are mostly refused, sent now and then.
rare_fields = st.dictionaries(
    st.sampled_from(["prompt", "stream", "user", "timestamp_granularities"]),
    st.sampled_from(["", "false", "true"]) | form_text,
    max_size=2,
)
upload = st.tuples(
    st.sampled_from(["a.wav", "a.wav", "a.flac", "a.mp3", "", "a", "a.xyz"]),
    st.sampled_from(AUDIO) | st.sampled_from(AUDIO[:3]) | st.sampled_from(AUDIO[:3]) | st.binary(max_size=64),
    st.sampled_from(["audio/wav", "application/octet-stream", "text/plain"]),
)


def test_transcription_forms_are_4xx_or_served_never_5xx(media_all: Media) -> None:
    server, _ = media_all

    @settings(FUZZ, max_examples=PER_ROUTE * 2)
    @given(fields=form, file=upload, rare=rare_fields, data=st.data())
    def run(
        fields: dict[str, str], file: tuple[str, bytes, str], rare: dict[str, str], data: st.DataObject
    ) -> None:
        if data.draw(st.sampled_from([0, 0, 0, 0, 1])):
            fields = {**fields, **rare}
        # Now and then no upload: `file` as a text field instead.
        files = {"file": file} if data.draw(st.sampled_from([1, 1, 1, 1, 0])) else {"file": (None, "x")}
        response = httpx.post(f"{server.url}/v1/audio/transcriptions", data=fields, files=files, timeout=120)
        status = response.status_code
        assert status < 500 or status == 503, (fields, status, response.content[:500])
        if status >= 400:  # OpenAI's error shape
            assert header(response, "content-type").startswith("application/json"), response.headers
            error = response.json()["error"]
            assert {"message", "type", "param", "code"} <= set(error), error

    run()
    still_serves(server)


def still_serves(server: Server) -> None:
    """One valid request per family is a 200; and the OpenAI transcription route answers."""

    def images(*extra: str) -> dict[str, Any]:
        return {"images": [{"data": JPEG}], **({"text": extra[0]} if extra else {})}

    multi = {"output_types": ["multivector"]}
    labelled = {"labels": ["a cat"]}
    valid: dict[str, dict[str, Any]] = {
        **{f"/v1/encode/{model}": {"items": [images()]} for model in (CLIP, SIGLIP, QWEN_EMBED)},
        **{f"/v1/encode/{m}": {"items": [images()], "params": multi} for m in (COLPALI, COLQWEN, COLSMOL)},
        **{f"/v1/score/{model}": {"query": {"text": "a cat"}, "items": [images()]} for model in IMAGE_SCORE},
        **{f"/v1/extract/{model}": {"items": [images()]} for model in (FLORENCE2, CORD)},
        f"/v1/extract/{DOCVQA}": {"items": [images("what is the total?")]},
        **{f"/v1/extract/{m}": {"items": [images()], "params": labelled} for m in (OWLV2, GROUNDING_DINO)},
        **{f"/v1/extract/{model}": {"items": [{"audio": {"data": WAV}}]} for model in AUDIO_EXTRACT},
    }
    assert set(valid) == set(ROUTES)
    for path, body in valid.items():
        for use_json in (True, False):
            response = send(server.url, path, body, use_json)
            assert response.status_code == 200, (path, use_json, response.content[:500])
    response = httpx.post(
        f"{server.url}/v1/audio/transcriptions",
        data={"model": WHISPER},
        files={"file": ("a.wav", WAV, "audio/wav")},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["text"], str)
    assert httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200
