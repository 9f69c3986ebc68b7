"""Image and audio bytes for the media tests, made here (no files to download or ship)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def pattern(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth colour field plus noise: resizing it is not trivially exact, as with real photos."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / max(1, width - 1), y * 255 / max(1, height - 1), (x + y) % 256], axis=-1)
    noisy = base + rng.normal(0, 25, base.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def jpeg(width: int, height: int, seed: int = 0) -> bytes:
    return encode(Image.fromarray(pattern(width, height, seed)), "JPEG", quality=90)


def png_rgba(width: int, height: int, seed: int = 0) -> bytes:
    rgb = pattern(width, height, seed)
    alpha = np.linspace(0, 255, width * height).reshape(height, width).astype(np.uint8)
    return encode(Image.fromarray(np.dstack([rgb, alpha]), "RGBA"), "PNG")


def gif(width: int, height: int, frames: int = 3) -> bytes:
    images = [Image.fromarray(pattern(width, height, seed)).convert("P") for seed in range(frames)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:])
    return buffer.getvalue()


def webp(width: int, height: int, seed: int = 0) -> bytes:
    return encode(Image.fromarray(pattern(width, height, seed)), "WEBP", lossless=True)


def rotated_jpeg(width: int, height: int, orientation: int = 6) -> bytes:
    """A JPEG stored sideways with an EXIF orientation that says how to turn it upright."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(pattern(width, height)), "JPEG", quality=90, exif=exif.tobytes())


def tone(seconds: float, rate: int, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    """A sine (per channel a different frequency) at amplitude 0.5: [samples] or [samples, channels]."""
    t = np.arange(int(seconds * rate)) / rate
    waves = [0.5 * np.sin(2 * np.pi * freq * (c + 1) * t) for c in range(channels)]
    return (waves[0] if channels == 1 else np.stack(waves, axis=1)).astype(np.float32)


def audio_bytes(samples: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()
