"""The supervisor: owns names, the listening socket and the child processes."""
