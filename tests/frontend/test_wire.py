from __future__ import annotations

import base64
import json
import subprocess
import sys

import msgpack  # type: ignore[import-untyped]
import msgspec
import pytest

from sie.errors import InvalidInput
from sie.frontend.wire import (
    MAX_TEXT_BYTES,
    EmbeddingsRequest,
    EncodeRequest,
    decode_body,
    is_msgpack,
    modality_of,
    validate_encode,
    validate_items,
    wants_json,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (None, False),
        ("", False),
        ("application/json", False),
        ("text/plain", False),
        ("application/msgpack", True),
        ("application/x-msgpack", True),
        ("Application/MsgPack; charset=binary", True),
    ],
)
def test_is_msgpack(content_type: str | None, expected: bool) -> None:
    assert is_msgpack(content_type) is expected


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("text/html", False),
        ("application/msgpack", False),
        ("application/json", True),
        ("application/json, text/plain, */*", True),
        ("Application/JSON", True),
        ("application/json, application/msgpack", False),
        ("application/x-msgpack;q=0.9, application/json", False),
    ],
)
def test_wants_json(accept: str | None, expected: bool) -> None:
    assert wants_json(accept) is expected


def _decode(body: object, content_type: str | None = "application/json") -> EncodeRequest:
    raw = json.dumps(body).encode() if content_type == "application/json" else body
    assert isinstance(raw, bytes)
    return decode_body(raw, content_type, EncodeRequest)


def _message(exc_info: pytest.ExceptionInfo[InvalidInput]) -> str:
    return exc_info.value.message


def test_decode_json_full_request() -> None:
    req = _decode(
        {
            "items": [{"id": "a", "text": "hi", "unknown": 1}, {"text": "there", "metadata": {"k": 1}}],
            "params": {
                "output_types": ["dense"],
                "output_dtype": "int8",
                "instruction": "Represent",
                "options": {"is_query": True, "profile": "default", "muvera": None, "pooling": "cls"},
            },
        }
    )
    assert [i.text for i in req.items] == ["hi", "there"]
    assert req.items[0].id == "a" and req.items[1].id is None
    assert req.params is not None and req.params.options is not None
    assert req.params.options.is_query is True
    assert req.params.output_dtype == "int8"


def test_decode_without_content_type_is_json() -> None:
    req = decode_body(b'{"items": [{"text": "x"}]}', None, EncodeRequest)
    assert req.items[0].text == "x"


def test_decode_msgpack_body_with_image_bytes() -> None:
    body = {"items": [{"text": "x", "images": [{"data": b"\x89PNG", "format": "png"}]}]}
    raw = msgpack.packb(body, use_bin_type=True)
    req = decode_body(raw, "application/msgpack", EncodeRequest)
    assert req.items[0].images is not None
    assert req.items[0].images[0].data == b"\x89PNG"


def test_wrong_type_at_path_uses_msgspec_message() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        _decode({"items": [{"text": 5}]})
    assert _message(exc_info) == "Expected `str | null`, got `int` - at `$.items[0].text`"


def test_wrong_type_in_msgpack_body() -> None:
    raw = msgpack.packb({"items": [{"text": "a"}, {"text": 5}]}, use_bin_type=True)
    with pytest.raises(InvalidInput) as exc_info:
        decode_body(raw, "application/x-msgpack", EncodeRequest)
    assert _message(exc_info) == "Expected `str | null`, got `int` - at `$.items[1].text`"


def test_truncated_json() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        decode_body(b'{"items": [{"text": "a"}', "application/json", EncodeRequest)
    assert _message(exc_info) == "Input data was truncated"


def test_malformed_json_and_msgpack_are_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        decode_body(b"{nope}", "application/json", EncodeRequest)
    with pytest.raises(InvalidInput):
        decode_body(b"\xc1", "application/msgpack", EncodeRequest)


def test_missing_items() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        _decode({"params": {}})
    assert _message(exc_info) == "Object missing required field `items`"


def test_empty_body() -> None:
    with pytest.raises(InvalidInput):
        decode_body(b"", "application/json", EncodeRequest)


def test_openai_body() -> None:
    req = decode_body(b'{"model": "m", "input": ["a", "b"]}', None, EmbeddingsRequest)
    assert req.input == ["a", "b"] and req.encoding_format == "float"
    single = decode_body(
        b'{"model": "m", "input": "a", "encoding_format": "base64"}', None, EmbeddingsRequest
    )
    assert single.input == "a" and single.encoding_format == "base64"
    with pytest.raises(InvalidInput):
        decode_body(b'{"model": "m", "input": "a", "encoding_format": "hex"}', None, EmbeddingsRequest)


def _validate(body: dict[str, object], supported: tuple[str, ...] = ("dense",)) -> None:
    validate_encode(_decode(body), model=MODEL, supported=supported)


def test_validate_accepts_defaults() -> None:
    _validate({"items": [{"text": "a"}, {"text": ""}]})


def test_validate_empty_items() -> None:
    with pytest.raises(InvalidInput, match="items must not be empty"):
        _validate({"items": []})


def test_validate_missing_text_names_the_item() -> None:
    with pytest.raises(InvalidInput, match="Item 1 has no text"):
        _validate({"items": [{"text": "a"}, {"id": "b"}]})


def test_validate_image_items_for_an_image_model() -> None:
    image = {"data": base64.b64encode(b"\xff\xd8\xff").decode(), "format": "jpeg"}
    req = _decode({"items": [{"images": [image]}, {"text": "a", "images": [image]}, {"text": "b"}]})
    validate_encode(req, model=MODEL, supported=["dense"], inputs=("text", "image"))
    assert [modality_of(item) for item in req.items] == ["image", "image", "text"]


def test_validate_rejects_a_modality_the_model_lacks() -> None:
    image = {"data": base64.b64encode(b"\xff\xd8\xff").decode()}
    with pytest.raises(
        InvalidInput, match=r"Item 0 has images, which model .* does not accept \(its inputs: text\)"
    ):
        _validate({"items": [{"text": "a caption", "images": [image]}]})
    audio = {"data": base64.b64encode(b"RIFF").decode(), "format": "wav"}
    with pytest.raises(InvalidInput, match="Item 1 has audio"):
        validate_encode(
            _decode({"items": [{"text": "a"}, {"audio": audio}]}),
            model=MODEL,
            supported=["dense"],
            inputs=("text", "image"),
        )
    with pytest.raises(InvalidInput, match=r"Item 0 has no text or images; .* requires text or image input"):
        validate_encode(
            _decode({"items": [{"id": "x"}]}), model=MODEL, supported=["dense"], inputs=("text", "image")
        )


def test_image_bytes_arrive_as_base64_in_json_and_bin_in_msgpack() -> None:
    raw = bytes(range(256))
    as_json = msgspec.json.encode({"items": [{"images": [{"data": base64.b64encode(raw).decode()}]}]})
    as_msgpack = msgspec.msgpack.encode({"items": [{"images": [{"data": raw}], "audio": {"data": raw}}]})
    from_json = decode_body(as_json, "application/json", EncodeRequest)
    from_msgpack = decode_body(as_msgpack, "application/msgpack", EncodeRequest)
    images = from_json.items[0].images
    assert images is not None and images[0].data == raw
    assert from_msgpack.items[0].audio is not None and from_msgpack.items[0].audio.data == raw
    with pytest.raises(InvalidInput, match=r"\$.items\[0\].images\[0\].data"):
        decode_body(b'{"items": [{"images": [{"data": "not base64!"}]}]}', None, EncodeRequest)


def test_validate_text_limit_is_2_mib_of_utf8() -> None:
    _validate({"items": [{"text": "a" * MAX_TEXT_BYTES}]})
    with pytest.raises(InvalidInput, match="Item 0 text is too long"):
        _validate({"items": [{"text": "a" * (MAX_TEXT_BYTES + 1)}]})
    # 3 bytes per char: under the limit in chars, over it in bytes.
    n_chars = MAX_TEXT_BYTES // 3 + 1
    with pytest.raises(InvalidInput, match="Item 1 text is too long"):
        _validate({"items": [{"text": "ok"}, {"text": "€" * n_chars}]})
    _validate({"items": [{"text": "€" * (n_chars - 1)}]})


def test_validate_custom_text_limit() -> None:
    req = _decode({"items": [{"text": "ééé"}]})
    validate_encode(req, model=MODEL, supported=["dense"], max_text_bytes=6)
    with pytest.raises(InvalidInput):
        validate_encode(req, model=MODEL, supported=["dense"], max_text_bytes=5)


def test_validate_unknown_output_dtype() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        _validate({"items": [{"text": "a"}], "params": {"output_dtype": "float64"}})
    assert _message(exc_info) == "Unsupported output_dtype: float64"


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "binary", "ubinary"])
def test_validate_known_output_dtypes(dtype: str) -> None:
    _validate({"items": [{"text": "a"}], "params": {"output_dtype": dtype}})


def test_validate_unsupported_output_type_message() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        _validate({"items": [{"text": "a"}], "params": {"output_types": ["dense", "sparse"]}})
    assert _message(exc_info) == (
        f"Model '{MODEL}' does not support output types: {{'sparse'}}. Supported: {{'dense'}}"
    )


def test_validate_unknown_output_type_and_sorted_sets() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        _validate(
            {"items": [{"text": "a"}], "params": {"output_types": ["vector", "multivector"]}},
            supported=("sparse", "dense"),
        )
    assert _message(exc_info) == (
        f"Model '{MODEL}' does not support output types: {{'multivector', 'vector'}}. "
        "Supported: {'dense', 'sparse'}"
    )


def test_frontend_modules_never_import_torch() -> None:
    code = (
        "import sys\n"
        "import sie.frontend.wire, sie.frontend.tokenize, sie.frontend.postprocess, sie.frontend.render\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_state_item_passes_only_where_the_family_reads_states() -> None:
    items = _decode({"items": [{"text": "a"}, {"metadata": {"state": {"turns": 2}}}]}).items
    validate_items(items, model=MODEL, state_items=True)
    with pytest.raises(InvalidInput, match="Item 1 has no text"):
        validate_items(items, model=MODEL)
    image = {"data": base64.b64encode(b"\xff\xd8\xff").decode()}
    with_image = _decode({"items": [{"images": [image], "metadata": {"state": "s"}}]}).items
    with pytest.raises(InvalidInput, match="Item 0 has images"):
        validate_items(with_image, model=MODEL, state_items=True)
