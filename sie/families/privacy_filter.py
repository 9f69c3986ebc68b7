"""OpenAI's privacy filter: per-token labels of eight privacy categories, decoded by the frontend
into character spans with a constrained, calibrated Viterbi (sie.frontend.privacy_filter)."""

from sie.families.spec import Family

FAMILY = Family(
    name="privacy_filter",
    adapter="sie.gpu_proc.adapters.privacy_filter:PrivacyFilterAdapter",
    extract_runner="sie.frontend.tasks.extract_privacy_filter:run_privacy_filter",
    text_tokenizer=False,
)
