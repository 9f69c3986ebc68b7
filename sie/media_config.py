"""How a model wants its images and audio, read from its own `preprocessor_config.json`.

Both sides need it: the frontend resizes, crops and resamples (where the cost scales with the
number of frontends), the device normalizes pixels and computes log-mel features. So it lives at
the top level, next to the model config, importing neither torch nor Pillow.

The defaults per processor type are `transformers`' own, so a config that only names its type
(or a folder without the file) behaves as `AutoImageProcessor` would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sie.families import family_of

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BILINEAR, BICUBIC = 2, 3  # PIL's resampling filter numbers, as preprocessor configs store them

# "own": the family sizes its images itself (Qwen-VL's patch grids, Idefics3's tiles, Donut's
# pages), so no fixed ImageSpec describes them.
ImageKind = Literal["crop", "square", "owlv2", "detr", "own"]

# Per processor type: how it resizes and its defaults (transformers' class attributes).
_IMAGE_DEFAULTS: dict[str, dict[str, Any]] = {
    "crop": {  # CLIPImageProcessor: shortest edge, then centre crop
        "size": {"shortest_edge": 224},
        "crop_size": {"height": 224, "width": 224},
        "resample": BICUBIC,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "do_center_crop": True,
    },
    "square": {  # SiglipImageProcessor: straight to a fixed size, no crop
        "size": {"height": 224, "width": 224},
        "resample": BICUBIC,
        "image_mean": HALF,
        "image_std": HALF,
        "do_center_crop": False,
    },
    "owlv2": {  # Owlv2ImageProcessor: pad to a square, then an anti-aliased float resize
        "size": {"height": 960, "width": 960},
        "resample": BILINEAR,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "do_center_crop": False,
    },
    "detr": {  # GroundingDinoImageProcessor: shortest edge within a longest edge, aspect kept, no crop
        "size": {"shortest_edge": 800, "longest_edge": 1333},
        "resample": BILINEAR,
        "image_mean": IMAGENET_MEAN,
        "image_std": IMAGENET_STD,
        "do_center_crop": False,
    },
}
_KIND_OF_TYPE = {
    "CLIPImageProcessor": "crop",
    "CLIPFeatureExtractor": "crop",
    "SiglipImageProcessor": "square",
    "Owlv2ImageProcessor": "owlv2",
    "GroundingDinoImageProcessor": "detr",
}


class MediaConfigError(ValueError):
    """A preprocessor config this server cannot follow."""


@dataclass(frozen=True, slots=True)
class ImageSpec:
    kind: ImageKind
    height: int  # the pixels the device gets: after resize and crop
    width: int
    shortest_edge: int | None  # "crop": resize so the short side is this, keeping the aspect
    resample: int
    do_resize: bool
    do_center_crop: bool
    rescale_factor: float  # applied on the device to uint8 pixels (owlv2 sends them rescaled)
    do_normalize: bool
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    longest_edge: int | None = None  # "detr": the resized longer side is at most this

    @property
    def float_pixels(self) -> bool:
        """OWLv2 resizes in float after rescaling, so its pixels cannot travel as uint8 unchanged."""
        return self.kind == "owlv2"

    @property
    def device_scale(self) -> float:
        """What the device multiplies received pixels by before normalizing."""
        return 1.0 if self.float_pixels else self.rescale_factor


@dataclass(frozen=True, slots=True)
class AudioSpec:
    sampling_rate: int
    n_samples: int  # one window of the model (Whisper: 30 s)

    @property
    def window_s(self) -> float:
        return self.n_samples / self.sampling_rate


def read_preprocessor_config(folder: Path) -> dict[str, Any]:
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise MediaConfigError(f"{path}: expected a JSON object")
    return raw


def image_spec(folder: Path, family: str) -> ImageSpec:
    raw = read_preprocessor_config(folder)
    kind = _image_kind(raw, family)
    if kind == "own":
        raise MediaConfigError(f"{folder}: family {family} sizes its images itself; no fixed size fits them")
    conf = {**_IMAGE_DEFAULTS[kind], **{k: v for k, v in raw.items() if v is not None}}
    size = _detr_size(conf) if kind == "detr" else _size(conf["size"], kind)
    do_crop = bool(conf.get("do_center_crop")) and kind == "crop"
    if do_crop:
        height, width = _hw(conf["crop_size"])
    elif kind == "detr":  # each image keeps its aspect: height and width only bound its pixels
        height, width = size["shortest_edge"], size["longest_edge"]
    elif "shortest_edge" in size:
        raise MediaConfigError(f"{folder}: a shortest-edge resize needs a centre crop for fixed-size pixels")
    else:
        height, width = size["height"], size["width"]
    return ImageSpec(
        kind=kind,
        height=height,
        width=width,
        shortest_edge=size.get("shortest_edge"),
        resample=int(conf["resample"]),
        do_resize=bool(conf.get("do_resize", True)),
        do_center_crop=do_crop,
        rescale_factor=float(conf.get("rescale_factor", 1 / 255)) if conf.get("do_rescale", True) else 1.0,
        do_normalize=bool(conf.get("do_normalize", True)),
        mean=channel_triple(conf["image_mean"]),
        std=channel_triple(conf["image_std"]),
        longest_edge=size.get("longest_edge"),
    )


def audio_spec(folder: Path) -> AudioSpec:
    raw = read_preprocessor_config(folder)
    rate = int(raw.get("sampling_rate", 16000))
    n_samples = int(raw.get("n_samples") or rate * int(raw.get("chunk_length", 30)))
    return AudioSpec(sampling_rate=rate, n_samples=n_samples)


def _image_kind(raw: dict[str, Any], family: str) -> ImageKind:
    named = str(raw.get("image_processor_type") or raw.get("feature_extractor_type") or "")
    named = named.removesuffix("Fast").removesuffix("Pil")
    if named in _KIND_OF_TYPE:
        return _KIND_OF_TYPE[named]  # type: ignore[return-value]  # values are ImageKind literals
    # A config that names no known processor gets its family's (sie.families).
    media_kind = family_of(family).media_kind
    if media_kind is not None:
        return media_kind
    raise MediaConfigError(f"unsupported image processor {named or '(none)'} for family {family}")


def _size(value: Any, kind: ImageKind) -> dict[str, int]:
    if isinstance(value, int):  # legacy configs: an int is the short side (CLIP) or the square
        return {"shortest_edge": value} if kind == "crop" else {"height": value, "width": value}
    if isinstance(value, dict) and "shortest_edge" in value:
        return {"shortest_edge": int(value["shortest_edge"])}
    height, width = _hw(value)
    return {"height": height, "width": width}


def _detr_size(conf: dict[str, Any]) -> dict[str, int]:
    """{"shortest_edge", "longest_edge"}; older DETR configs give an int size and `max_size`."""
    value = conf["size"]
    if isinstance(value, int):
        return {"shortest_edge": value, "longest_edge": int(conf.get("max_size") or 1333)}
    if isinstance(value, dict) and "shortest_edge" in value and "longest_edge" in value:
        return {"shortest_edge": int(value["shortest_edge"]), "longest_edge": int(value["longest_edge"])}
    raise MediaConfigError(f"unsupported detection image size {value!r}")


def _hw(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, dict) and "height" in value and "width" in value:
        return int(value["height"]), int(value["width"])
    raise MediaConfigError(f"unsupported image size {value!r}")


def channel_triple(value: Any) -> tuple[float, float, float]:
    """A per-channel setting (image_mean, image_std) as three floats; one number stands for all three."""
    values = [float(v) for v in value] if isinstance(value, list | tuple) else [float(value)] * 3
    if len(values) != 3:
        raise MediaConfigError(f"expected 3 channel values, got {value!r}")
    return values[0], values[1], values[2]
