"""Request bodies (msgspec Structs), content negotiation, and the checks that need no model state.

Decoding goes straight into Structs so that a wrong type anywhere in a body is rejected with
msgspec's own message (``Expected `str | null`, got `int` - at `$.items[0].text` ``), which is the
text the spec's error table asks for. Unknown fields are ignored, as SIE ignores them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeVar, cast

import msgspec

from sie.errors import InvalidInput

T = TypeVar("T")

MAX_TEXT_BYTES = 2 * 1024 * 1024
OUTPUT_DTYPES = frozenset({"float32", "float16", "int8", "uint8", "binary", "ubinary"})
DEFAULT_OUTPUT_TYPES = ("dense",)
DEFAULT_OUTPUT_DTYPE = "float32"
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack")


class ImageInput(msgspec.Struct):
    """Encoded image bytes: msgpack bin, or in JSON a base64 string (msgspec decodes it)."""

    data: bytes
    format: str | None = None


class AudioInput(msgspec.Struct):
    """Encoded audio bytes (WAV, FLAC, OGG, MP3); the rate comes from the file itself."""

    data: bytes
    format: str | None = None
    sample_rate: int | None = None


class Item(msgspec.Struct):
    id: str | None = None
    text: str | None = None
    images: list[ImageInput] | None = None
    audio: AudioInput | None = None
    # Shapes vary and no model reads them yet; kept raw until an adapter needs them.
    video: Any = None
    document: Any = None
    metadata: dict[str, Any] | None = None


class EncodeOptions(msgspec.Struct):
    """`params.options`; adapter runtime options beyond these are accepted and ignored."""

    is_query: bool | None = None
    profile: str | None = None
    normalize: bool | None = None
    muvera: dict[str, Any] | None = None
    smve: dict[str, Any] | None = None  # SMVE settings (sie.frontend.smve); null: none
    lora: str | None = None  # a LoRA adapter named in the model's YAML
    lora_id: str | None = None  # the same, under its older name


class EncodeParams(msgspec.Struct):
    output_types: list[str] | None = None
    output_dtype: str | None = None
    instruction: str | None = None
    options: EncodeOptions | None = None


class EncodeRequest(msgspec.Struct):
    items: list[Item]
    params: EncodeParams | None = None


class ScoreRequest(msgspec.Struct):
    """`/v1/score` has no `params` wrapper: instruction and options sit at the top level."""

    query: Item
    items: list[Item]
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractParams(msgspec.Struct):
    labels: list[str] | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None


class ExtractRequest(msgspec.Struct):
    items: list[Item]
    params: ExtractParams | None = None


class RerankRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The Cohere-style `/v1/rerank` body (JSON)."""

    model: str
    query: str
    documents: list[str]
    top_n: int | None = None
    return_documents: bool = False
    options: dict[str, Any] | None = None


class RerankDocument(msgspec.Struct):
    text: str


class RerankV2Request(msgspec.Struct):
    """Cohere's v2 `/v2/rerank` body (what `cohere.ClientV2.rerank` posts): documents are strings
    or `{"text": ...}`. Unknown fields are accepted, as newer clients add them."""

    model: str
    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = None
    return_documents: bool = False
    max_tokens_per_doc: int | None = None
    relevant_spans: Any = None
    priority: int | None = None  # a scheduling hint; every request here is served in arrival order
    options: dict[str, Any] | None = None


class EmbeddingsRequest(msgspec.Struct):
    """The OpenAI `/v1/embeddings` body."""

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def option_fraction(name: str, value: Any) -> float:
    """`options.<name>` checked to be a number from 0 to 1 (NaN and booleans are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidInput(f"options.{name} must be a number between 0 and 1")
    return float(value)


def is_msgpack(content_type: str | None) -> bool:
    """Whether a request body is msgpack; anything else (or no header) is JSON."""
    if not content_type:
        return False
    lowered = content_type.lower()
    return any(t in lowered for t in _MSGPACK_TYPES)


def wants_json(accept: str | None) -> bool:
    """Whether to answer in JSON: msgpack is the default, as the SDK never sends an Accept for it."""
    if not accept:
        return False
    lowered = accept.lower()
    return "application/json" in lowered and not any(t in lowered for t in _MSGPACK_TYPES)


@functools.cache
def _decoders(type_: Any) -> tuple[msgspec.json.Decoder[Any], msgspec.msgpack.Decoder[Any]]:
    # Building a decoder compiles the type once; per-request construction would redo that work.
    return msgspec.json.Decoder(type_), msgspec.msgpack.Decoder(type_)


def decode_body(body: bytes, content_type: str | None, type_: type[T]) -> T:
    """Decode a request body into `type_`; every failure is an `InvalidInput` (400)."""
    if not body:
        raise InvalidInput("Request body is empty")
    json_decoder, msgpack_decoder = _decoders(cast(Any, type_))  # mypy: type[T] is not Hashable
    decoder = msgpack_decoder if is_msgpack(content_type) else json_decoder
    try:
        decoded: T = decoder.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise InvalidInput(str(exc)) from None
    except UnicodeDecodeError as exc:  # msgspec raises it as is for invalid UTF-8 inside a string
        raise InvalidInput(f"Request body is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise InvalidInput("Request body is nested too deeply") from None
    return decoded


def output_types_of(req: EncodeRequest, profile_default: Sequence[str] | None = None) -> list[str]:
    """The request's output types, else the profile's, else dense."""
    params = req.params
    if params is None or params.output_types is None:
        return list(profile_default or DEFAULT_OUTPUT_TYPES)
    return params.output_types


def output_dtype_of(req: EncodeRequest) -> str:
    params = req.params
    if params is None or params.output_dtype is None:
        return DEFAULT_OUTPUT_DTYPE
    return params.output_dtype


def validate_encode(
    req: EncodeRequest,
    *,
    model: str,
    supported: Iterable[str],
    inputs: tuple[str, ...] = ("text",),
    max_text_bytes: int = MAX_TEXT_BYTES,
) -> None:
    """Reject, before any queueing, what no device could serve: each check is a 400."""
    if not req.items:
        raise InvalidInput("items must not be empty")
    _check_output_types(output_types_of(req), model, set(supported))
    dtype = output_dtype_of(req)
    if dtype not in OUTPUT_DTYPES:
        raise InvalidInput(f"Unsupported output_dtype: {dtype}")
    for index, item in enumerate(req.items):
        _check_item(index, item, model, inputs, max_text_bytes)


def validate_items(
    items: list[Item],
    *,
    model: str,
    inputs: tuple[str, ...] = ("text",),
    max_text_bytes: int = MAX_TEXT_BYTES,
    state_items: bool = False,
) -> None:
    """Every item carries an input the model takes (text, within the size limit, for the text
    families; or `metadata.state` where the family reads one); at least one item."""
    if not items:
        raise InvalidInput("items must not be empty")
    for index, item in enumerate(items):
        if (
            state_items
            and modality_of(item) is None
            and item.video is None
            and "state" in (item.metadata or {})
        ):
            continue  # the family's runner reads and checks the state
        _check_item(index, item, model, inputs, max_text_bytes)


def modality_of(item: Item) -> str | None:
    """What an item is embedded or read from: its images, else its audio, else its text (an item
    with text and images is an image, as in SIE)."""
    if item.images:
        return "image"
    if item.audio is not None:
        return "audio"
    return "text" if item.text is not None else None


_NOUNS = {"text": "text", "image": "images", "audio": "audio"}


def _check_item(index: int, item: Item, model: str, inputs: tuple[str, ...], max_bytes: int) -> None:
    if item.video is not None:  # a model whose YAML allows video is served for its other inputs
        raise InvalidInput(
            f"Item {index} has video, which model '{model}' does not accept: this server reads no video "
            f"(its inputs: {', '.join(inputs)})"
        )
    kind = modality_of(item)
    if kind is None:
        wanted = " or ".join(_NOUNS[k] for k in inputs)
        raise InvalidInput(
            f"Item {index} has no {wanted}; model '{model}' requires {' or '.join(inputs)} input"
        )
    if kind not in inputs:
        raise InvalidInput(
            f"Item {index} has {_NOUNS[kind]}, which model '{model}' does not accept "
            f"(its inputs: {', '.join(inputs)})"
        )
    _check_item_text(index, item, model, False, max_bytes)


def _check_output_types(requested: list[str], model: str, supported: set[str]) -> None:
    if not requested:
        raise InvalidInput("output_types must not be empty")
    unsupported = set(requested) - supported
    if unsupported:
        raise InvalidInput(
            f"Model '{model}' does not support output types: {_set_repr(unsupported)}. "
            f"Supported: {_set_repr(supported)}"
        )


def _set_repr(names: set[str]) -> str:
    # Python's own set repr (what SIE prints), but sorted so the message is deterministic.
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}" if names else "set()"


def _check_item_text(index: int, item: Item, model: str, needs_text: bool, max_bytes: int) -> None:
    text = item.text
    if text is None:
        if needs_text:
            raise InvalidInput(f"Item {index} has no text; model '{model}' requires text input")
        return
    # A str of n chars is n..4n bytes of UTF-8, so most texts are decided without encoding them.
    n_chars = len(text)
    if n_chars * 4 <= max_bytes:
        return
    n_bytes = n_chars if n_chars > max_bytes else len(text.encode("utf-8", "surrogatepass"))
    if n_bytes > max_bytes:
        raise InvalidInput(f"Item {index} text is too long: over {max_bytes} bytes of UTF-8")
