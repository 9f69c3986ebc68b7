"""Florence-2's text side: which task a request asks, its prompt and tokens, and tokens back to text.

A task is a leading token (`<OD>`, `<OCR_WITH_REGION>`, `<DocVQA>`, ...). As SIE resolves it: the
profile's `task` (a request's `options.task` overrides it); a request `instruction` wins over both,
as its own task when it starts with a task token (`<CAPTION_TO_PHRASE_GROUNDING>a cat`), else as a
DocVQA question; grounding takes `params.labels` as its phrases. Here an item's own text is also
the input of a task that takes one (a DocVQA question, phrases), when the request gives none.
The prompt the model reads is the processor's: a task without input becomes its fixed question,
one with input its template; `<DocVQA>question` stays as written. Its tokens are `<s> prompt </s>`;
the image's features come before them on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InvalidInput
from sie.frontend.detokenize import clean_up_tokenization
from sie.frontend.florence2_parse import (
    BARE_BOXES,
    DESCRIBED_BOXES,
    GROUNDING,
    OCR_REGIONS,
    ORIGINAL_BANNED,
    TEXT_LABELS,
    ParseRules,
)
from sie.frontend.model_files import read_json_object
from sie.media_config import ImageSpec
from sie.model_config import RuntimeOptions

TASKS_WITHOUT_INPUT = {
    "<OCR>": "What is the text in the image?",
    "<OCR_WITH_REGION>": "What is the text in the image, with regions?",
    "<CAPTION>": "What does the image describe?",
    "<DETAILED_CAPTION>": "Describe in detail what is shown in the image.",
    "<MORE_DETAILED_CAPTION>": "Describe with a paragraph what is shown in the image.",
    "<OD>": "Locate the objects with category name in the image.",
    "<DENSE_REGION_CAPTION>": "Locate the objects in the image, with their descriptions.",
    "<REGION_PROPOSAL>": "Locate the region proposals in the image.",
}
TASKS_WITH_INPUT = {
    "<CAPTION_TO_PHRASE_GROUNDING>": "Locate the phrases in the caption: {input}",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "Locate {input} in the image with mask",
    "<REGION_TO_SEGMENTATION>": "What is the polygon mask of region {input}",
    "<OPEN_VOCABULARY_DETECTION>": "Locate {input} in the image.",
    "<REGION_TO_CATEGORY>": "What is the region {input}?",
    "<REGION_TO_DESCRIPTION>": "What does the region {input} describe?",
    "<REGION_TO_OCR>": "What text is in the region {input}?",
}
DOCVQA = "<DocVQA>"
KNOWN_TASKS = frozenset({*TASKS_WITHOUT_INPUT, *TASKS_WITH_INPUT, DOCVQA})
# Those with an answer in the response's shape (sie.frontend.florence2_parse); segmentation
# (polygons) and region tasks (a region as input) are not served.
SERVED = frozenset({*TEXT_LABELS, OCR_REGIONS, *DESCRIBED_BOXES, BARE_BOXES, GROUNDING})
TAKES_INPUT = frozenset({DOCVQA, GROUNDING})
OPTIONS = frozenset({"task", "max_new_tokens", "num_beams", "instruction", "profile"})
DEFAULT_TASK = "<OCR_WITH_REGION>"  # SIE's adapter default, for a profile that names none
DEFAULT_MAX_NEW_TOKENS = 1024
MAX_BEAMS = 8
_STAGES = ((7, 3, 3, 3), (4, 2, 2, 2), (3, 1, 1, 1))  # DaViT's default patch sizes, strides, paddings


@dataclass(frozen=True, slots=True)
class Generation:
    """What a request asks: its task (before any instruction) and the decoding budget."""

    task: str
    max_new_tokens: int
    num_beams: int


@dataclass(frozen=True, slots=True)
class ItemPrompt:
    task: str  # the task the answer is parsed as
    prompt: str  # the text the model reads (after the processor's task templates)


def served_task(task: Any, where: str) -> str:
    """`task` if this server answers it; else a 400 naming `where` it came from."""
    if not isinstance(task, str) or task not in KNOWN_TASKS:
        known = ", ".join(sorted(SERVED))
        raise InvalidInput(f"{where} {task!r} is not a Florence-2 task (served: {known})")
    if task not in SERVED:
        raise InvalidInput(f"{where} {task}: its answer (regions or polygons) is not served here")
    return task


def generation_of(options: dict[str, Any], runtime: RuntimeOptions, max_positions: int) -> Generation:
    """The request's options over the profile's; every problem is a 400. A profile's token budget
    is held to the decoder's positions; a request's beyond them is refused."""
    unknown = set(options) - OPTIONS
    if unknown:
        raise InvalidInput(f"Unsupported options for Florence-2: {', '.join(sorted(unknown))}")
    limit = max_positions - 1  # the decoder's start token takes a position
    if options.get("task") is not None:
        task = served_task(options["task"], "options.task")
    else:
        task = served_task(runtime.task or DEFAULT_TASK, "the profile's task")
    if options.get("max_new_tokens") is not None:
        budget = _count(options["max_new_tokens"], "options.max_new_tokens", limit)
    else:
        profile_budget = runtime.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        budget = min(_count(profile_budget, "the profile's max_new_tokens", profile_budget), limit)
    if options.get("num_beams") is not None:
        beams = _count(options["num_beams"], "options.num_beams", MAX_BEAMS)
    else:
        beams = _count(runtime.num_beams or 1, "the profile's num_beams", MAX_BEAMS)
    return Generation(task, budget, beams)


def _count(value: Any, name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidInput(f"{name} must be an integer from 1 to {most}")
    return value


def item_prompt(task: str, instruction: str | None, labels: list[str] | None, text: str | None) -> ItemPrompt:
    """The prompt one item is asked with, as SIE resolves it (module docstring)."""
    body = ""
    if instruction and instruction.strip():
        asked = instruction.strip()
        token = _leading_task(asked)
        if token is None:
            task, body = DOCVQA, asked
        else:
            task, body = served_task(token, "the instruction's task"), asked[len(token) :].strip()
    if labels and task != GROUNDING:
        raise InvalidInput(f"params.labels are the phrases of {GROUNDING}; task {task} takes none")
    if task in TAKES_INPUT and not body:
        body = ", ".join(labels) if labels else (text or "").strip()
        if not body:
            what = "question" if task == DOCVQA else "phrases"
            raise InvalidInput(f"{task} needs its {what}: params.instruction, or the item's text")
    return ItemPrompt(task, model_prompt(f"{task}{body}"))


def _leading_task(text: str) -> str | None:
    end = text.find(">")
    token = text[: end + 1] if text.startswith("<") and end != -1 else ""
    return token if token in KNOWN_TASKS else None


def model_prompt(text: str) -> str:
    """The processor's task templates: a task token without input must stand alone and becomes its
    question; one with input takes the rest of the text as it."""
    for token, question in TASKS_WITHOUT_INPUT.items():
        if token in text:
            if text != token:
                raise InvalidInput(f"Task {token} takes no input; nothing may follow it")
            text = question
            break
    for token, template in TASKS_WITH_INPUT.items():
        if token in text:
            text = template.format(input=text.replace(token, "").strip())
            break
    return text


@dataclass(frozen=True, slots=True)
class Florence2Text:
    """One model's tokenizer, prompt bounds and answer rules."""

    tokenizer: Tokenizer  # no truncation, no padding: a prompt too long is refused, not cut
    bos: int
    eos: int
    clean_up: bool  # tokenizer_config's clean_up_tokenization_spaces, applied by decode
    max_positions: int  # the BART encoder's and decoder's positions
    image_tokens: int  # the image's positions in the encoder, before the prompt
    rules: ParseRules

    @classmethod
    def for_model(cls, folder: Path, tokenizer_json: Path, spec: ImageSpec) -> Florence2Text:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        if tokenizer.token_to_id("<loc_0>") is None:
            # microsoft's folders: the remote processor adds these at load, in this order.
            tokenizer.add_special_tokens(FLORENCE_TOKENS)
        config = read_json_object(folder / "config.json")
        text_config = config.get("text_config") or {}
        tokenizer_config = read_json_object(tokenizer_json.parent / "tokenizer_config.json")
        return cls(
            tokenizer=tokenizer,
            bos=_id(tokenizer, "<s>"),
            eos=_id(tokenizer, "</s>"),
            clean_up=bool(tokenizer_config.get("clean_up_tokenization_spaces", False)),
            max_positions=int(text_config.get("max_position_embeddings") or 1024),
            image_tokens=image_tokens(config.get("vision_config") or {}, spec),
            rules=parse_rules(config, read_json_object(folder / "processor_config.json")),
        )

    def prompt_ids(self, prompt: str, where: str) -> np.ndarray:
        """`<s> prompt </s>`; a prompt the encoder cannot hold beside the image is a 400."""
        ids = [self.bos, *self.tokenizer.encode(prompt, add_special_tokens=False).ids, self.eos]
        room = self.max_positions - self.image_tokens
        if len(ids) > room:
            raise InvalidInput(f"{where}: the prompt has {len(ids)} tokens; the model reads at most {room}")
        return np.asarray(ids, np.int32)

    def text(self, ids: list[int]) -> str:
        """The tokenizer's decode, special tokens kept (the answer parsers read them)."""
        decoded: str = self.tokenizer.decode(ids, skip_special_tokens=False)
        return clean_up_tokenization(decoded) if self.clean_up else decoded


FLORENCE_TOKENS = [
    "<od>", "</od>", "<ocr>", "</ocr>", *(f"<loc_{i}>" for i in range(1000)),
    "<cap>", "</cap>", "<ncap>", "</ncap>", "<dcap>", "</dcap>", "<grounding>", "</grounding>",
    "<seg>", "</seg>", "<sep>", "<region_cap>", "</region_cap>", "<region_to_desciption>",
    "</region_to_desciption>", "<proposal>", "</proposal>", "<poly>", "</poly>", "<and>",
]  # fmt: skip


def _id(tokenizer: Tokenizer, token: str) -> int:
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"the Florence-2 tokenizer has no {token}")
    return int(found)


def image_tokens(vision: dict[str, Any], spec: ImageSpec) -> int:
    """Encoder positions of one image: DaViT's last feature map, plus its pooled token."""
    sizes, strides, paddings = (
        vision.get(k) or d
        for k, d in zip(("patch_size", "patch_stride", "patch_padding"), _STAGES, strict=True)
    )
    height, width = spec.height, spec.width
    for kernel, stride, padding in zip(sizes, strides, paddings, strict=True):
        height = (height + 2 * padding - kernel) // stride + 1
        width = (width + 2 * padding - kernel) // stride + 1
    return height * width + 1


def parse_rules(config: dict[str, Any], processor_config: dict[str, Any]) -> ParseRules:
    """microsoft's folders: their remote processor's rules (OCR lines under 1% of the image dropped,
    its pronoun list kept out of grounding); transformers' folders: their processor config's."""
    vision = config.get("vision_config") or {}
    if isinstance(vision, dict) and vision.get("model_type") == "davit":
        return ParseRules(ocr_area_threshold=0.01, banned_phrases=ORIGINAL_BANNED)
    rules = processor_config.get("post_processor_config") or {}
    ocr = rules.get("ocr") or {}
    grounding = rules.get("phrase_grounding") or {}
    return ParseRules(
        ocr_area_threshold=float(ocr.get("AREA_THRESHOLD", 0.0)),
        ocr_pattern=ocr.get("PATTERN"),
        banned_phrases=frozenset(grounding.get("banned_grounding_tokens") or ()),
    )
