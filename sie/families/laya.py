"""Laya typed decisions: one encoder row per (state, question); the head scores each answer option."""

from sie.families.spec import Family

FAMILY = Family(
    name="laya",
    adapter="sie.gpu_proc.adapters.laya:LayaAdapter",
    extract_runner="sie.frontend.tasks.extract_laya:run_laya",
    state_items=True,
)
