"""One vocabulary for what a trace holds, shared by the web app, its exports and the command line.

Every number is the trace's own, counting from 0, so what a reader sees on the page is what
``explorer fork --at SPAN:TOKEN`` and ``--retrieval ID`` take and what the trace JSON holds:

* a generated span is named by its generation event: ``span 7``;
* a token by its position in its span: ``token 3 of span 7``;
* a retrieval, a check, a query... by their event: ``retrieval 12``, ``check 8``, ``query 10``;
* a step is the method's round as recorded: ``step 0``.

Decisions a fork changed are named as such (:func:`decision_kind`): a forced retrieval is not
"fired", a suppressed one is not "kept". The signals have plain-words names (:data:`PLAIN`) for
people who have not read the papers.
"""

from __future__ import annotations

from typing import Any

#: What each event kind is called when it is named.
EVENT_NAMES = {"generation": "span", "retrieval": "retrieval", "check": "check", "query": "query",
               "trigger": "trigger", "truncation": "cut", "filter": "filter", "selection": "selection",
               "rerank": "re-ranking", "uncertainty": "estimate", "classifier": "classifier call",
               "continuation": "continuation", "answer": "answer", "note": "note", "choice": "choice"}

#: Signals in plain words (what a teacher says), by the name a check or trigger records.
PLAIN = {
    "prober_p": "Probing-RAG's prober: how likely, read from the model's hidden states at one layer while it wrote "
                "its answer, that the answer is wrong and a search is needed (high = search)",
    "prob": "probability: how likely the model found the token it wrote (low = unsure)",
    "entropy": "entropy: how spread out the model's guesses for the next token were (high = unsure)",
    "amax": "amax: the most attention a token received from the text written after it (high = it mattered)",
    "rind": "RIND: unsureness (entropy) times importance (attention received), DRAGIN's trigger score",
    "rind-reference": "RIND as the DRAGIN authors' code computes it, per sentence",
    "mean(1-p)": "how unsure the model was on average over a sentence (1 − probability)",
    "u": "U: how much several sampled continuations disagree (SEAKR's uncertainty)",
    "entropy trend (attention x smoothed δ²h)": "ETC's trend: how sharply the model's unsureness (entropy) began to "
                                                "rise at this word, smoothed and weighted by attention (high = "
                                                "uncertainty is starting to climb, before a wrong word is written)",
    "mean margin": "TARG's margin: how close, on average over a short draft written without passages, the model's "
                   "second choice came to its first (near 1 = torn between two tokens, near 0 = sure)",
    "mean entropy": "TARG's entropy: how spread out the model's guesses were, on average over a short draft written "
                    "without passages (high = unsure)",
    "prefix variance": "TARG's variance: how much a few drafts sampled without passages differ in how likely the "
                       "model found their words (the variance of each draft's mean log-probability; high = its "
                       "possible openings disagree)",
}


def span(event_id: Any) -> str:
    return f"span {event_id}"


def token(span_id: Any, index: Any) -> str:
    return f"token {index} of span {span_id}"


def step(number: Any) -> str:
    return f"step {number}"


def event(kind: str, event_id: Any) -> str:
    """An event as named on the page: ``span 7``, ``retrieval 12``, ``check 8``; other kinds ``event N``."""
    name = EVENT_NAMES.get(kind)
    return f"{name} {event_id}" if name else f"event {event_id}"


def plain(signal: Any) -> str:
    """A signal in plain words (``U(gram)`` is SEAKR's U); the name itself when there is none."""
    text = str(signal or "")
    key = "u" if text.lower().startswith("u(") else text.lower()
    return PLAIN.get(key, text)


def symbol(signal: Any) -> str:
    """The threshold's symbol for a signal, as its paper writes it: δ for SEAKR's U, θ for every other."""
    text = str(signal or "").lower()
    return "δ" if text == "u" or text.startswith("u(") else "θ"


def decision_kind(check: dict[str, Any]) -> str:
    """How a check's decision came about: ``fired``, ``kept`` (no retrieval), ``forced`` or ``suppressed``.

    A fork that overrode the check records what the method itself decided (``fork_override``):
    forced means the method would not have retrieved there, suppressed that it would have."""
    override = check.get("fork_override")
    if isinstance(override, dict):
        if override.get("fired") is not None:
            return "forced"
        if override.get("method_fired") is not None:
            return "suppressed"
    return "kept" if check.get("fired") is None else "fired"
