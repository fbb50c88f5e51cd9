"""The web app (Gradio) and the views it shows, all rendered from traces.

- ``app``: layout and wiring of the Run, History and help tabs; ``server``: the ``app.py`` options.
- ``controller``: runs methods in a worker thread and streams their tokens and events; Cancel.
- ``controls``: parameter controls from each config's ``describe()``; ``questions``: question sources.
- ``view``: a read-only index over one trace; ``panels/``: one module per panel; ``render``: panels
  composed into one run, runs side by side, a live run; ``html``: escaping and chart embedding.
- ``viewblock``: a stored-run view with its what-if controls; ``history``/``history_tab``: stored runs.
- ``gallery``: the recorded case-study runs shipped in ``assets/gallery`` (and the command that
  records them); ``gallery_block``: their links in the Run tab, opened without a model call;
  ``case_stories``: each one's caption (the paper's figure, what the model did, what to look at).
- ``report``: the offline HTML report (and slides) and the other exports; ``api``: the public endpoints.
- ``form``: each parameter's input; ``links``: ``?run=``, ``?compare=``, ``?case=`` opened on page load.
Styles and the chart script live in ``assets/``.
"""
