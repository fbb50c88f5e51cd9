"""The scripting API: the public endpoints (``endpoints``) and optional arguments over HTTP (``call_defaults``)."""
