"""SPLADE learned sparse encoders: one weight per vocabulary term."""

from sie.families.spec import Family

FAMILY = Family(
    name="splade",
    adapter="sie.gpu_proc.adapters.splade:SpladeAdapter",
    encodes=frozenset({"sparse"}),
    # Queries and documents keep separate batches, as they always have here.
    device_reads_is_query=True,
    # OpenSearch's doc-* encoders ship idf.json: their queries are IDF lookups (sie.frontend.idf).
    idf_queries=True,
)
