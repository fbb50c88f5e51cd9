"""Streaming every run the app stores to an OTLP/HTTP collector (Phoenix, an OpenTelemetry collector) as it ends.

A :class:`LiveExport` listens on a :class:`~explorer.store.RunStore` (``store.on_saved``) and sends
each finished run's OpenInference spans (:mod:`explorer.otel`) from a background thread, so a slow
or absent collector never slows or breaks a run: the run is stored first, the export follows. A
collector that cannot be reached is logged once (and once more when it answers again); runs it
missed stay in the store and can be sent later with ``explorer export --otlp URL``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any

from explorer.otel import build_spans, otlp_endpoint, send
from explorer.trace import Trace

log = logging.getLogger("explorer.otel")

#: The environment setting naming the collector when ``--otlp`` is not given.
ENV = "EXPLORER_OTLP_ENDPOINT"


def configured_endpoint(given: str | None = None) -> str:
    """The collector's traces address from ``--otlp`` or the environment, checked; '' when none is set."""
    text = (given if given is not None else os.environ.get(ENV, "")).strip()
    return otlp_endpoint(text) if text else ""


class LiveExport:
    """Sends stored runs to ``url`` in order, one background thread, never raising into the caller."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.endpoint = otlp_endpoint(url)
        self.timeout = timeout
        self.sent = 0
        self.failed = 0
        self._unreachable = False
        self._queue: queue.Queue[list[Trace] | threading.Event | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="otlp-live-export", daemon=True)
        self._thread.start()

    def __call__(self, traces: list[Trace]) -> None:
        """Queue finished runs (the store's listener signature); returns at once."""
        self._queue.put(list(traces))

    def attach(self, store: Any) -> LiveExport:
        """Listen on ``store``: every finished run it saves from now on is exported."""
        store.on_saved.append(self)
        return self

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued run was sent or given up on; False if that took longer than ``timeout``."""
        done = threading.Event()
        self._queue.put(done)  # a marker: everything queued before it has been handled when it is reached
        return done.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=self.timeout + 1)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
            elif item:
                self._export(item)

    def _export(self, traces: list[Trace]) -> None:
        try:
            spans = build_spans(traces)
            send(spans, self.endpoint, timeout=self.timeout)
        except Exception as exc:  # an unreachable or refusing collector: the runs are stored regardless
            self.failed += len(traces)
            if not self._unreachable:
                self._unreachable = True
                log.warning("runs are not reaching the OTLP collector at %s (%s); they stay stored, and "
                            "`explorer export --all --otlp %s` sends them later", self.endpoint,
                            getattr(exc, "message", None) or exc, self.endpoint)
            return
        self.sent += len(traces)
        if self._unreachable:
            self._unreachable = False
            log.warning("the OTLP collector at %s is reachable again", self.endpoint)
