"""Dynamic RAG Explorer: see why a language model retrieves when it does.

The package is split by responsibility: ``engine`` owns the model and every signal,
``methods`` holds one small strategy per dynamic-RAG method, ``retrieval`` loads corpora and
searches them, ``trace`` is the one record every run produces, and ``store``, ``ui`` and
``eval`` only read traces.
"""

__version__ = "0.1.0"
