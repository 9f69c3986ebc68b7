"""Server-wide statistics: counters in one shared-memory segment, written lock-free, read by `/metrics`."""
