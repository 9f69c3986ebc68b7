"""Parakeet-TDT speech recognition: a transcript per audio item, with timestamps on request."""

from sie.families.spec import Family

FAMILY = Family(
    name="parakeet",
    adapter="sie.gpu_proc.adapters.parakeet:ParakeetAdapter",
    inputs=("audio",),
    extract_runner="sie.frontend.tasks.parakeet:transcribe_parakeet",
)
