"""The page's words in plain language: one entry per term, shown where the word appears and in the glossary.

Each :class:`Term` holds the one sentence a teacher would say about a word (RIND, θ, a method's name),
where it is explained at length (its glossary anchor, ``help-<key>`` in the "How to read" tab) and
how to find it in running text. The same entries feed three places, so they cannot drift apart:

* :func:`term` wraps one word in markup that shows its sentence on hover, on keyboard focus and on a
  tap (focus follows a tap on a focusable element), with a link to its glossary entry;
* :func:`mark_terms` escapes a plain text (a caption, a decision in words) and wraps the first
  occurrence of each term in it, leaving quoted model and corpus text alone;
* :func:`glossary_markdown` writes the glossary of the help tab.

Everything that becomes HTML goes through :func:`~explorer.ui.views.html.esc`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from explorer.ui.views.html import esc


@dataclass(frozen=True)
class Term:
    """One word of the page: its name, a plain sentence, and (for the glossary) a longer explanation."""

    key: str
    name: str
    plain: str
    #: How the word is written in running text (a regular expression, case-sensitive).
    pattern: str
    #: More words for the glossary entry, after the plain sentence.
    more: str = ""

    @property
    def anchor(self) -> str:
        return f"help-{self.key}"


def _word(*forms: str) -> str:
    """Any of ``forms`` as a whole word (not part of a longer word or hyphenated name)."""
    return r"(?<![\w-])(?:" + "|".join(forms) + r")(?![\w-])"


#: The signals, thresholds and things of a run.
SIGNAL_TERMS: tuple[Term, ...] = (
    Term("entropy", "Entropy", "How unsure the model was about the next token: low when it backed one token, "
         "high when it spread its guesses over many.", _word("[Ee]ntropy"),
         more="Measured in nats on the model's next-token distribution."),
    Term("amax", "amax (attention received)", "The most attention a token got from the text written after it: "
         "high when the rest of the text leaned on it.", _word("amax"),
         more="Read from the model's last layer, averaged over its heads."),
    Term("rind", "RIND", "DRAGIN's trigger score for a token: how unsure the model was (entropy) times how much "
         "the text after it depended on it (amax).", _word("RIND", "rind"),
         more="A content-word mask keeps stopwords from firing. A token the model was unsure about *and* that "
              "the rest of the text depended on is where DRAGIN retrieves."),
    Term("qfs", "QFS (query formation)", "How DRAGIN writes its search query: the words of the question and the "
         "text so far that the triggering token attended to most, in their order.", _word("QFS")),
    Term("u", "U (uncertainty)", "SEAKR's uncertainty: how much several sampled continuations disagree inside "
         "the model (high U: the model does not know, so it searches).", _word(r"U\(gram\)", r"U(?!\.\w)"),
         more="SEAKR reads the hidden states of each sample; U is the log-determinant of their Gram matrix, "
              "written U(gram) on the page. It keeps the passage that lowers U most."),
    Term("theta", "θ (threshold)", "The line a signal must cross for DRAGIN, FLARE and the other methods to "
         "retrieve; θ′ is the what-if value you set with the slider.", "θ′|θ'|θ",
         more="The papers' values were tuned on other models; the explorer uses a per-model preset where one "
              "was measured. The what-if θ′ replays the recorded decisions at another threshold."),
    Term("delta", "δ (SEAKR's threshold)", "The line SEAKR's uncertainty U must cross for it to retrieve: "
         "SEAKR's paper writes δ where the others write θ.", "δ′|δ",
         more="It works like θ: the what-if slider moves δ for a SEAKR run."),
    Term("tau", "τ (TARG's threshold)", "The line TARG's draft score must cross for it to search at all: "
         "TARG's paper writes τ where the others write θ.", "τ",
         more="TARG scores one short draft written without passages (its mean margin or entropy, or how much a "
              "few sampled drafts differ); over τ it searches once, otherwise it answers from the draft."),
    Term("qdc", "QDC (question joined to a passage)", "DR-RAG's second search: the question joined to each "
         "passage found first, to find a passage the question alone misses.", _word("QDC")),
    Term("cfs", "CFS (forward selection)", "DR-RAG's pick of the second-stage passages: for each first-stage "
         "passage, the first candidate its classifier accepts as a pair.", _word("CFS")),
    Term("cis", "CIS (inverse selection)", "DR-RAG's other pick: it drops a passage whose every pair the "
         "classifier rejects.", _word("CIS")),
    Term("span", "Span", "A piece of text the model wrote in one go, between two decisions; named by its event "
         "number (span 7).", _word("spans?"),
         more="Tokens are counted inside their span from 0 (token 3 of span 7)."),
    Term("gold", "Gold", "The benchmark's own right answer, or the passages known to hold it, that a run is "
         "scored against.", _word("gold"),
         more="The answer is scored by exact match and token F1 after the same normalisation the evaluation "
              "uses; gold passages are marked in the retrievals."),
    Term("trace", "Trace", "The record of a run: every token with its signals and every decision, in order; "
         "every panel is drawn from it.", _word("traces?"),
         more="Runs are stored with their trace; replays, forks and exports read it and never run the model "
              "again."),
    Term("rerank", "Re-rank", "SEAKR's second look at the passages found: it keeps the one that makes the model "
         "least unsure (lowest U), not the search's first.", _word("re-rank(?:s|ed|ing)?", "reranking")),
    Term("verdict", "Filter verdict", "BlendFilter's check of each passage: the model itself says whether the "
         "passage helps answer the question; passages it drops are not used.",
         _word("(?:[Ff]ilter(?:\'s)? )?verdicts?", "[Ff]ilter"),
         more="The page names each check by its event (filter 10); the verdicts are kept or dropped."),
)


def _method(registry: str, name: str, plain: str) -> Term:
    """A method's entry: keyed by its registry name, found in running text by the name the page shows."""
    return Term(f"method-{registry}", name, plain, _word(name))


#: The methods, by the names the page shows (the method's registry name is the key's tail).
METHOD_TERMS: tuple[Term, ...] = (
    _method("wo", "wo-RAG", "Answers from what the model knows, never searches."),
    _method("sr", "SR-RAG", "Searches once with the question, then writes the answer."),
    _method("fl", "FL-RAG", "Searches again every few tokens, whatever the model writes."),
    _method("fs", "FS-RAG", "Searches again before every sentence."),
    _method("flare", "FLARE", "Searches when a word of the next sentence is improbable, with that sentence "
            "minus those words."),
    _method("dragin", "DRAGIN", "Searches when an unsure token matters to what follows (RIND), with the words "
            "it attends to (QFS)."),
    _method("seakr", "SEAKR", "Searches when sampled continuations disagree (U over δ), keeps the passage "
            "that lowers U most."),
    _method("blendfilter", "BlendFilter", "Searches with three blended queries and lets the model drop the "
            "passages that do not help."),
    _method("drrag", "DR-RAG", "Searches with the question, then with the question joined to each passage; a "
            "classifier picks pairs."),
    _method("etc", "ETC", "Searches when the model's unsureness starts to rise, before a wrong word is written."),
    _method("targ", "TARG", "Writes one quick draft without passages and searches only if that draft was unsure."),
    _method("probing_rag", "Probing-RAG", "A small prober reads the model's hidden states and says whether "
            "a search is needed."),
)

TERMS: dict[str, Term] = {t.key: t for t in (*SIGNAL_TERMS, *METHOD_TERMS)}


def method_sentence(method: str) -> str | None:
    """The plain sentence for a method by its registry name (``dragin``), or None for one without an entry."""
    found = TERMS.get(f"method-{method}")
    return found.plain if found is not None else None


def term(key: str, shown: str | None = None) -> str:
    """One word wrapped so that hover, keyboard focus and a tap show its plain sentence and a glossary link.

    The word is focusable (``tabindex=0``) and carries the sentence as its accessible description; the
    sentence and the link sit in a box that the stylesheet shows on ``:hover`` and ``:focus-within``
    (and ``assets/explorer.js`` keeps inside the screen)."""
    t = TERMS[key]
    word = esc(t.name if shown is None else shown)
    return (f'<span class="dre-term" data-term="{esc(t.key)}">'
            f'<span class="dre-term-word" tabindex="0" aria-description="{esc(t.plain)}">{word}</span>'
            f'<span class="dre-term-tip"><b>{esc(t.name)}</b>: {esc(t.plain)} '
            f'<a class="dre-term-link" href="#{esc(t.anchor)}" data-help="{esc(t.anchor)}">'
            f"{esc(t.name)} in the glossary</a></span></span>")


#: Quoted text (a token, a query, a passage title) is the model's or the corpus's: never marked.
_QUOTED = r"(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\"|“[^”\n]*”|‘[^’\n]*’"


@lru_cache(maxsize=1)
def _finder() -> re.Pattern[str]:
    groups = "|".join(f"(?P<t{i}>{t.pattern})" for i, t in enumerate(TERMS.values()))
    return re.compile(f"(?P<quoted>{_QUOTED})|{groups}")


def find_terms(text: str) -> list[tuple[int, int, Term]]:
    """Where terms occur in a plain text (start, end, term), outside quoted text, every occurrence."""
    keys = list(TERMS.values())
    out = []
    for match in _finder().finditer(text):
        if match.lastgroup and match.lastgroup != "quoted":
            out.append((match.start(), match.end(), keys[int(match.lastgroup[1:])]))
    return out


def mark_terms(text: str, seen: set[str] | None = None) -> str:
    """``text`` escaped, with the first occurrence of each term wrapped by :func:`term`.

    ``seen`` carries the terms already marked in the same block of text (a caption marks each once)."""
    seen = set() if seen is None else seen
    out, at = [], 0
    for start, end, found in find_terms(text):
        if found.key in seen:
            continue
        seen.add(found.key)
        out.append(esc(text[at:start]))
        out.append(term(found.key, text[start:end]))
        at = end
    out.append(esc(text[at:]))
    return "".join(out)


#: The line of assets/help.md that the glossary replaces.
GLOSSARY_MARK = "<!-- glossary -->"


def glossary_markdown() -> str:
    """The glossary of the help tab: every term with its plain sentence, each under its own anchor."""
    lines = []
    for t in TERMS.values():
        more = f" {t.more}" if t.more else ""
        lines.append(f'- <span id="{t.anchor}"></span>**{t.name}.** {t.plain}{more}')
    return "\n".join(lines)


def help_markdown(text: str) -> str:
    """The help tab's text with its glossary filled in from :data:`TERMS`."""
    return text.replace(GLOSSARY_MARK, glossary_markdown())
