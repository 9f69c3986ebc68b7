"""Whisper speech recognition: a transcript per audio item, with timestamps on request."""

from sie.families.spec import Family

FAMILY = Family(
    name="whisper",
    adapter="sie.gpu_proc.adapters.whisper:WhisperAdapter",
    inputs=("audio",),
    extract_runner="sie.frontend.tasks.transcribe:transcribe",
)
