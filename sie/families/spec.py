"""What a model family is: the one record both sides of the rings read to serve its models.

A profile's `adapter:` names a family. The device process imports the family's adapter class, the
frontend its extract runner; both are "module:attribute" strings resolved on first use, so a server
of dense models never imports onnxruntime, GLiNER or the frontend's media code.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sie.media_config import ImageKind

InputKind = Literal["text", "image", "audio"]
EncodeOutput = Literal["dense", "sparse", "multivector"]
# "pairs": each (query, item) pair runs through one forward (cross-encoders);
# "maxsim": query and items are embedded as token matrices and compared by MaxSim (late interaction).
ScoreMethod = Literal["pairs", "maxsim"]
# How the frontend tokenizes encode items: the model's tokenizer as is, or ColBERT's markers,
# query expansion and skiplist (sie.frontend.colbert).
EncodeTokenization = Literal["plain", "colbert"]
# How the frontend turns a score request's (query, item) pairs into token ids: the tokenizer's pair
# encoding (cross-encoders), or an LLM reranker's prompt (sie.frontend.llm_prompts), which also
# carries the request's instruction.
ScoreTokenization = Literal["pairs", "llm_prompt"]


@dataclass(frozen=True, slots=True)
class Family:
    name: str  # what a profile's `adapter:` says
    adapter: str  # "module:Class" of the device adapter; the class has a `load` classmethod
    inputs: tuple[InputKind, ...] = ("text",)  # what an item may carry (/v1/models lists it)
    encodes: frozenset[EncodeOutput] = frozenset()  # encode outputs a model of it may declare
    score: ScoreMethod | None = None
    # "module:function" of the frontend's extract runner, (state, name, config, job) -> Extracted;
    # None: the family serves no extract.
    extract_runner: str | None = None
    extract_needs_labels: bool = False  # zero-shot: a request without params.labels is a 400
    # The device forward depends on `is_query`; for the others the flag is dropped before batching,
    # since it would only split batches of queries and documents that could run together.
    device_reads_is_query: bool = False
    # A model whose folder holds `idf.json` encodes queries with no forward: the frontend weighs
    # each query token by it (inference-free sparse retrieval, sie.frontend.idf).
    idf_queries: bool = False
    encode_tokenization: EncodeTokenization = "plain"
    score_tokenization: ScoreTokenization = "pairs"
    # "module:function" of the frontend's encode for every item of a request, text and images,
    # (state, name, items, texts, options) -> Embedded; None: the shared text and image paths.
    encode_runner: str | None = None
    # "module:function" of the frontend's score for a query item against items, images included,
    # (state, target, query, items, instruction, options) -> Scored; None: the shared score paths.
    score_runner: str | None = None
    # Image processing used when the model's preprocessor config names no processor type.
    media_kind: ImageKind | None = None
    # Its models have no files (no weights folder, no tokenizer.json): text is tokenized as Unicode
    # code points and the adapter computes from the ids alone (SIE's fake engine).
    weightless: bool = False
    # Each non-default profile is also served as a model of its own, `<sie_id>:<profile>`, with its
    # own loaded instance (SIE's variant expansion): its profiles differ at load time.
    profile_variants: bool = False
    # The checkpoint file whose `model_name` names the encoder whose tokenizer the family reads
    # (GLiREL's glirel_config.json): that encoder is one of the model's tokenizer repositories.
    tokenizer_from_encoder: str | None = None
    # "module:function" (config, weights_dir) -> {hub id: revision}: other checkpoints its adapter
    # loads (a union's members, a LoRA's base), copied from a cluster cache with the model's own.
    companions: str | None = None
    # An extract item may carry its input as `metadata.state` (a string, object or list) instead of
    # text; the family's own runner reads and checks it (Laya's structured states).
    state_items: bool = False
    # Its frontend reads text through the model's TextTokenizer (sie.frontend.tokenize), which the
    # frontends load before the first request. False: the frontend builds its own reading of the
    # folder on first use (a page recipe, a chat template, its own tokenizer), and that copy, which
    # for a large vocabulary is tens of MB in every frontend, is never loaded.
    text_tokenizer: bool = True

    @property
    def serves_extract(self) -> bool:
        return self.extract_runner is not None

    def adapter_class(self) -> Any:
        """The adapter class, its module imported now (torch and the family's own libraries)."""
        return resolve_target(self.adapter)

    def encode_function(self) -> Any:
        """The frontend's encode runner (None: the shared paths), its module imported now."""
        return None if self.encode_runner is None else resolve_target(self.encode_runner)

    def score_function(self) -> Any:
        """The frontend's score runner (None: the shared paths), its module imported now."""
        return None if self.score_runner is None else resolve_target(self.score_runner)

    def extract_function(self) -> Any:
        """The frontend's extract runner, its module imported now."""
        if self.extract_runner is None:
            raise ValueError(f"model family {self.name!r} serves no extract")
        return resolve_target(self.extract_runner)


@functools.cache  # a request path resolves its family's runner each time
def resolve_target(target: str) -> Any:
    """The attribute named by "module:attribute", importing the module."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{target!r} is not of the form 'module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)
