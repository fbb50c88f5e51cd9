"""One module per panel of a run's view: each reads a TraceView and returns escaped HTML ("" if it does not apply)."""
