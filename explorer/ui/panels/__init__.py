"""One module per panel of a run's view; each reads a TraceView and returns escaped HTML (or "" if it does not apply)."""
