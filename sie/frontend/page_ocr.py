"""Page OCR prompts as device items (no torch): the folder's chat template rendered, the page
resized (the family's sie.page_config.PageLayout), the image token expanded to one per merged patch.

The conversation is SIE's: the family's system prompt if it has one, then a user turn holding the
page and the instruction, or the family's default prompt when the request gives none. It is
rendered with transformers' own chat-template renderer and the folder's template, as the processor's
apply_chat_template renders it, then tokenized whole; its one image token becomes one copy per
merged patch, which is what the processor's text expansion gives, since the image token is a
special token that tokenizes alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InputTooLong, InvalidInput
from sie.frontend.detokenize import clean_up_tokenization
from sie.frontend.media.images import resize_pixels
from sie.frontend.model_files import read_json_object, token_content
from sie.frontend.qwen3_vl import check_text
from sie.model_config import ModelConfig
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir
from sie.page_config import PageLayout
from sie.page_ocr import OcrFamily, image_token_id
from sie.tokenizer_files import chat_template

DEFAULT_LIMIT = 32768  # tokens of a prompt, page included, when the YAML sets no max_sequence_length
_SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True, slots=True)
class PageTokens:
    """One page's prompt as the device reads it."""

    input_ids: np.ndarray  # int32, the image token expanded
    aux: np.ndarray  # int32, on each image token the page's width in pixels, else 0
    pixels: np.ndarray  # [H, W, 3] uint8, resized
    text_tokens: int


@dataclass(frozen=True, slots=True)
class OcrProfile:
    """A profile's prompts and decoding: the family's, as its loadtime options amend them."""

    system: str | None
    default: str | None  # the text after the page when a request gives no instruction or task
    tasks: Mapping[str, str]  # task -> its prompt (empty: the family has no tasks)
    labels: Mapping[str, str]  # task -> its entities' label, when not "markdown"
    default_task: str | None
    instructions: frozenset[str] | None  # the only instructions the model takes (None: any)
    template_kwargs: Mapping[str, Any]  # passed to the chat template (enable_thinking)
    temperature: float  # the profile's sampling (0: greedy), which a request may change
    top_p: float
    max_new_tokens: int | None  # the loadtime ceiling, when the profile's runtime sets none

    @classmethod
    def of(cls, family: OcrFamily, loadtime: Mapping[str, Any]) -> OcrProfile:
        allowed = loadtime.get("allowed_instructions")
        return cls(
            system=loadtime.get("system_prompt", family.system_prompt),
            default=loadtime.get("default_prompt", family.default_prompt),
            tasks={**family.task_prompts, **loadtime.get("task_prompts", {})},
            labels={**family.task_labels, **loadtime.get("task_labels", {})},
            default_task=loadtime.get("default_task", family.default_task),
            instructions=family.instructions if allowed is None else frozenset(allowed),
            template_kwargs={**family.template_kwargs, **loadtime.get("chat_template_kwargs", {})},
            temperature=float(loadtime.get("temperature", family.temperature)),
            top_p=float(loadtime.get("top_p", family.top_p)),
            max_new_tokens=loadtime.get("max_new_tokens"),
        )

    def check_instruction(self, instruction: str | None, family: str) -> None:
        if instruction and self.instructions is not None and instruction not in self.instructions:
            named = ", ".join(repr(i) for i in sorted(self.instructions))
            raise InvalidInput(
                f"params.instruction: {family} reads a page alone or with {named}, nothing else"
            )

    def task(self, requested: object, where: str) -> str | None:
        """The request's task (None for a family without tasks); a 400 for one it does not have."""
        if not self.tasks:
            return None
        chosen = self.default_task if requested is None else requested
        if not isinstance(chosen, str) or chosen not in self.tasks:
            raise InvalidInput(f"{where} must be one of {', '.join(self.tasks)}")
        return chosen

    def label(self, task: str | None) -> str:
        return self.labels.get(task, "markdown") if task is not None else "markdown"


class PageOcrRecipe:
    """One checkpoint's tokenizer, chat template, page settings, and each profile's prompts."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: str,
        pages: PageLayout,
        image_token_id: int,
        specials: dict[str, str],
        profiles: Mapping[str, OcrProfile],
        default_profile: str,
        *,
        limit: int = DEFAULT_LIMIT,
        clean_up: bool = False,
    ) -> None:
        from transformers.utils.chat_template_utils import render_jinja_template  # deferred: slow import

        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._render = render_jinja_template
        self._tokenizer = tokenizer
        self._template = template
        self._specials = specials
        self.pages = pages
        self.image_token_id = image_token_id
        self._profiles = profiles
        self._default_profile = default_profile
        self.limit = limit
        self.clean_up = clean_up
        added = tokenizer.get_added_tokens_decoder().values()
        # What an instruction may not hold: the tokens that steer the template or stand for images.
        self.reserved = frozenset(t.content for t in added if t.special)

    @classmethod
    def for_model(cls, config: ModelConfig, family: OcrFamily) -> PageOcrRecipe:
        """The model's recipe; each profile has its own prompts and decoding (OcrProfile)."""
        folder = resolve_weights_dir(config)
        template = chat_template(Path(folder))
        if template is None:
            raise ValueError(f"{folder} has no chat template")
        settings = read_json_object(folder / "tokenizer_config.json")
        specials = {role: token_content(settings.get(role)) for role in _SPECIAL_ROLES}
        names = list(config.profiles) or [config.default_profile_name]
        profiles = {
            name: OcrProfile.of(family, config.profile(name).adapter_options.loadtime) for name in names
        }
        tokenizer = Tokenizer.from_file(str(resolve_tokenizer_file(config)))
        present = {role: token for role, token in specials.items() if token is not None}
        clean_up = bool(settings.get("clean_up_tokenization_spaces", False))
        return cls(
            tokenizer,
            template,
            family.pages(folder),
            image_token_id(folder),
            present,
            profiles,
            config.default_profile_name,
            limit=config.max_sequence_length or DEFAULT_LIMIT,
            clean_up=clean_up,
        )

    def profile(self, name: str | None = None) -> OcrProfile:
        """The named profile's prompts and decoding (the default profile's for None)."""
        return self._profiles[name or self._default_profile]

    def conversation(
        self, instruction: str | None, task: str | None = None, *, profile: str | None = None
    ) -> list[dict[str, Any]]:
        """SIE's: the system turn if any, then the page and the instruction, else the task's prompt,
        else the default prompt."""
        chosen = self.profile(profile)
        content: list[dict[str, str]] = [{"type": "image"}]
        text = instruction or (chosen.tasks[task] if task is not None else chosen.default)
        if text:
            content.append({"type": "text", "text": text})
        system = [{"role": "system", "content": chosen.system}] if chosen.system else []
        return [*system, {"role": "user", "content": content}]

    def prompt(
        self, instruction: str | None, where: str, task: str | None = None, *, profile: str | None = None
    ) -> str:
        """The rendered conversation (checked: an instruction cannot write control tokens)."""
        check_text(instruction, where, self.reserved)
        rendered, _ = self._render(
            [self.conversation(instruction, task, profile=profile)],
            chat_template=self._template,
            add_generation_prompt=True,
            **self._specials,
            **self.profile(profile).template_kwargs,
        )
        return str(rendered[0])

    def resized(self, pixels: np.ndarray, where: str) -> np.ndarray:
        """Pillow's resize (the processor's filter, bicubic) to the processor's size for this page."""
        height, width = pixels.shape[:2]
        try:
            new_h, new_w = self.pages.resized(height, width)
        except ValueError as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        if self.pages.image_tokens(new_h, new_w) < 1:
            raise InvalidInput(
                f"{where}: a {width}x{height} page, resized to {new_w}x{new_h}, is under one image token"
            )
        if (new_h, new_w) == (height, width):
            return pixels
        return resize_pixels(pixels, new_w, new_h, self.pages.pixels.resample)

    def prompt_ids(self, prompt: str, where: str) -> np.ndarray:
        """The rendered prompt's ids, its one image token not yet expanded; a 413 when its text
        alone is over the model's limit."""
        ids = np.asarray(self._tokenizer.encode(prompt, add_special_tokens=False).ids, np.int32)
        slots = int(np.count_nonzero(ids == self.image_token_id))
        if slots != 1:
            raise InvalidInput(f"{where}: the chat template wrote {slots} image tokens for one page")
        if len(ids) > self.limit:
            raise InputTooLong(f"{where}: the prompt takes {len(ids)} tokens, over the model's {self.limit}")
        return ids

    def tokens(self, prompt_ids: np.ndarray, pixels: np.ndarray, where: str) -> PageTokens:
        """The prompt with its image token expanded for this page; a 413 when the whole is over the
        model's limit."""
        slot = int(np.flatnonzero(prompt_ids == self.image_token_id)[0])
        image_tokens = self.pages.image_tokens(pixels.shape[0], pixels.shape[1])
        total = len(prompt_ids) - 1 + image_tokens
        if total > self.limit:
            raise InputTooLong(
                f"{where}: the page and prompt take {total} tokens, over the model's {self.limit}"
            )
        repeats = np.ones(len(prompt_ids), np.int64)
        repeats[slot] = image_tokens
        widths = np.zeros(len(prompt_ids), np.int32)
        widths[slot] = pixels.shape[1]
        return PageTokens(
            np.repeat(prompt_ids, repeats), np.repeat(widths, repeats), pixels, len(prompt_ids) - 1
        )

    def text(self, ids: list[int]) -> str:
        """Generated ids as text, special tokens left out (the processor's batch_decode)."""
        text = str(self._tokenizer.decode(ids, skip_special_tokens=True))
        return clean_up_tokenization(text) if self.clean_up else text
