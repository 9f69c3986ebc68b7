"""transformers' multimodal processors without their video processor, which needs torchvision (not
installed here): the image and text halves are what the page references use."""

from __future__ import annotations

from typing import Any


def images_only(processor_class: Any) -> Any:
    """A subclass of `processor_class` built from an image processor and a tokenizer alone."""

    class ImagesOnly(processor_class):  # type: ignore[misc, valid-type]
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    return ImagesOnly
