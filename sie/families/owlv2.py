"""OWLv2 open-vocabulary detection: boxes in an image for the request's labels."""

from sie.families.spec import Family

FAMILY = Family(
    name="owlv2",
    adapter="sie.gpu_proc.adapters.owlv2:Owlv2Adapter",
    inputs=("image",),
    extract_runner="sie.frontend.tasks.detect:detect",
    extract_needs_labels=True,
    media_kind="owlv2",
)
