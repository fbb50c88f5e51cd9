"""Serving the page: what stands between a browser and the model.

``server`` (the ``app.py`` options), ``admission`` (who uses the model when), ``guard`` (what the server
refuses before Gradio sees it), ``uploads``, ``forwarding`` (clients behind a proxy) and ``lesson`` (the
presenter's channel to followers' pages).
"""
