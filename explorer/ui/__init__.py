"""The web app (Gradio) and the views it shows, all rendered from traces.

The folders follow the path of a click:

- ``page/``: the page's structure: ``app`` (the tabs assembled), ``run_tab``, ``history_tab``,
  ``evaluations``, the shared blocks (``viewblock``, ``forkblock``, ``gallery_block``), ``form`` and
  ``controls`` (each parameter's input from its config's ``describe()``), ``links``.
- ``runs/``: from a click to a stored run: ``controller`` runs methods in a worker thread and streams their
  tokens and events (Cancel, storage); ``jobs`` queues ``/run`` calls; ``forking``, ``questions``,
  ``embedders``, ``history`` (stored runs), ``gallery`` (the recorded case studies shipped in
  ``assets/gallery`` and the command that records them).
- ``views/``: ``view`` (a read-only index over one trace), ``render`` (panels composed into one run, runs
  side by side, a live run), ``html`` (escaping and chart embedding), ``report`` (exports),
  ``case_stories`` (captions); ``panels/``: one module per panel.
- ``serving/``: ``server`` (the ``app.py`` options), ``admission``, ``guard``, ``uploads``, ``forwarding``,
  ``lesson``.
- ``api/``: ``endpoints`` (the public endpoints) and ``call_defaults``.
Styles and the chart script live in ``assets/``.
"""
