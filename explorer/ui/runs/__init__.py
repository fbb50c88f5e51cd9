"""From a click to a stored run: the part of the web app that talks to the engine and the store.

A click on Run reaches ``controller`` (a worker thread per request that runs the methods and streams their
tokens and events, then stores the trace); a ``/run`` call becomes a queued job in ``jobs``; ``forking``
turns a fork request into a plan. ``questions`` lists where a question can come from, ``embedders`` the
embedders a visitor may pick, ``history`` lists and exports stored runs, ``gallery`` the recorded runs.
"""
