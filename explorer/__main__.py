"""Entry point for ``python -m explorer``."""

from explorer.cli import main

raise SystemExit(main())
