"""Dynamic RAG Explorer: see why a language model retrieves when it does.

The package is split by responsibility: ``engine`` owns the model and every signal,
``methods`` holds one small strategy per dynamic-RAG method, ``retrieval`` loads corpora and
searches them, ``trace`` is the one record every run produces, and ``store``, ``ui`` and
``eval`` only read traces.
"""

from explorer import extensions as _extensions

__version__ = "0.1.0"

# The modules whose import registers event kinds and per-token signals: the registries low in the
# package load them by name when they meet a name they do not know (explorer.extensions).
_extensions.declare("explorer.methods")
_extensions.declare("explorer.forks.replay")
