"""A models directory of tiny image and audio models (and one text-only model), for test_media.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.tiny_models.clip import make_clip, make_siglip, model_yaml_clip, model_yaml_siglip
from tests.tiny_models.colpali import make_colpali, model_yaml_colpali
from tests.tiny_models.grounding_dino import make_grounding_dino, model_yaml_grounding_dino
from tests.tiny_models.owlv2 import make_owlv2, model_yaml_owlv2
from tests.tiny_models.parakeet import make_parakeet, model_yaml_parakeet
from tests.tiny_models.splade import make_splade, model_yaml_splade
from tests.tiny_models.whisper import make_whisper, model_yaml_whisper

CLIP = "tiny/clip"
SIGLIP = "tiny/siglip"
TEXT_ONLY = "tiny/splade"
OWLV2 = "tiny/owlv2"
WHISPER = "tiny/whisper"
PARAKEET = "tiny/parakeet"
COLPALI = "tiny/colpali"
GROUNDING_DINO = "tiny/grounding-dino"
MAX_IMAGES = 3
MAX_PIXELS = 1_000_000
MAX_AUDIO_S = 40
RING_BYTES = 5 << 19  # 2.5 MiB: one 30 s audio window (1.92 MB) fits, 26 small images a message

Builder = tuple[Callable[[Path], Path], Callable[[str, Path], dict[str, Any]]]
BUILDERS: dict[str, Builder] = {
    CLIP: (make_clip, model_yaml_clip),
    SIGLIP: (make_siglip, model_yaml_siglip),
    TEXT_ONLY: (make_splade, model_yaml_splade),
    OWLV2: (make_owlv2, model_yaml_owlv2),
    WHISPER: (make_whisper, model_yaml_whisper),
    PARAKEET: (make_parakeet, model_yaml_parakeet),
    COLPALI: (make_colpali, model_yaml_colpali),
    GROUNDING_DINO: (make_grounding_dino, model_yaml_grounding_dino),
}


def build_media_models(root: Path) -> tuple[Path, dict[str, Path]]:
    """Weights under root/weights, one YAML per model under root/models."""
    models_dir = root / "models"
    models_dir.mkdir(parents=True)
    folders: dict[str, Path] = {}
    for sie_id, (make, describe) in BUILDERS.items():
        slug = sie_id.replace("/", "__")
        folders[sie_id] = make(root / "weights" / slug)
        (models_dir / f"{slug}.yaml").write_text(yaml.safe_dump(describe(sie_id, folders[sie_id])))
    return models_dir, folders


def media_server_args(models_dir: Path, folders: dict[str, Path]) -> list[str]:
    return [
        "--models-dir",
        str(models_dir),
        "--preload",
        ",".join(folders),
        "--max-images-per-item",
        str(MAX_IMAGES),
        "--max-image-pixels",
        str(MAX_PIXELS),
        "--max-audio-seconds",
        str(MAX_AUDIO_S),
        "--request-ring-bytes",
        str(RING_BYTES),
    ]
