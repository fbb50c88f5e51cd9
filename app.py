"""Serve the Dynamic RAG Explorer: ``python app.py [--host H] [--port P] [--db FILE] [--model M] [--corpus C]``.

Every option is also an environment variable (EXPLORER_HOST, EXPLORER_PORT, EXPLORER_DB,
EXPLORER_MODEL, EXPLORER_CORPUS); see ``python app.py --help``.
"""

import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from explorer.ui.serving.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
