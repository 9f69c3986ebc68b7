"""transformers' `clean_up_tokenization`: the spaces decode removes before punctuation and
English contractions when a tokenizer's config sets `clean_up_tokenization_spaces`."""

_CLEAN_UP = (
    *((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'")),
    *((" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")),
)


def clean_up_tokenization(text: str) -> str:
    for before, after in _CLEAN_UP:
        text = text.replace(before, after)
    return text
