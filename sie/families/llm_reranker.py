"""LLM rerankers: each (query, item) pair as one prompt to a causal LM, scored by its yes/no logits."""

from sie.families.spec import Family

FAMILY = Family(
    name="llm_reranker",
    adapter="sie.gpu_proc.adapters.llm_reranker:LlmRerankerAdapter",
    score="pairs",
    score_tokenization="llm_prompt",
)

# The "native" input format (zerank-2): the publisher's chat template, query as the system turn and
# document as the user turn. The frontend builds it; the device checks the checkpoint renders it.
NATIVE_TEMPLATE = (
    "<|im_start|>system\n{query}<|im_end|>\n<|im_start|>user\n{document}<|im_end|>\n<|im_start|>assistant\n"
)
