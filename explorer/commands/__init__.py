"""Sub-commands of ``python -m explorer``: each module here defines ``register(subparsers)``."""
