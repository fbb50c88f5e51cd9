"""The project's own few-shot chain-of-thought exemplars, prompt assembly and answer extraction.

Every method builds its prompt here so the model sees one format across methods, and a
comparison between methods compares their retrieval decisions rather than their prompts. The
exemplars are written for this project (about facts outside the demo corpus, so they never leak
an answer) and end in "So the answer is X.", the convention the papers' answer extractors rely
on. A prompt is a list of labelled segments; the engine tokenizes them one by one so a method
knows which token positions are the question and which are the text generated so far (QFS
chooses its query words only there).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from explorer.retrieval.base import Hit, Passage

MULTIHOP = (
    ("In which country was the composer of the opera Rusalka born?",
     "The opera Rusalka was composed by Antonín Dvořák. Dvořák was born in Nelahozeves, a village in Bohemia "
     "that lies in today's Czech Republic. So the answer is the Czech Republic."),
    ("Who coached the team that won Super Bowl XLVIII?",
     "Super Bowl XLVIII was won by the Seattle Seahawks. The Seahawks were coached by Pete Carroll at the time. "
     "So the answer is Pete Carroll."),
    ("What is the capital of the country in which most of the Atacama Desert lies?",
     "Most of the Atacama Desert lies in northern Chile. The capital of Chile is Santiago. "
     "So the answer is Santiago."),
    ("Who wrote the novel that the film Blade Runner is based on?",
     "Blade Runner is based on the novel Do Androids Dream of Electric Sheep? That novel was written by "
     "Philip K. Dick. So the answer is Philip K. Dick."),
    ("In what year was the architect of the Sydney Opera House born?",
     "The Sydney Opera House was designed by the Danish architect Jørn Utzon. Jørn Utzon was born in 1918. "
     "So the answer is 1918."),
    ("Which was founded first, the University of Oxford or the University of Cambridge?",
     "Teaching at the University of Oxford had begun by 1096. The University of Cambridge was founded in 1209. "
     "Thus Oxford is the older of the two. So the answer is the University of Oxford."),
    ("Who was born earlier, Marie Curie or Albert Einstein?",
     "Marie Curie was born on 7 November 1867. Albert Einstein was born on 14 March 1879. Thus Marie Curie was "
     "born earlier. So the answer is Marie Curie."),
    ("What instrument did the composer of the Moonlight Sonata perform on?",
     "The Moonlight Sonata was composed by Ludwig van Beethoven. Beethoven was celebrated as a virtuoso "
     "pianist. So the answer is the piano."),
)

YESNO = (
    ("Are the Amazon and the Nile on the same continent?",
     "The Amazon flows through South America. The Nile flows through Africa. Thus they are on different "
     "continents. So the answer is no."),
    ("Is the Eiffel Tower taller than the Great Pyramid of Giza?",
     "The Eiffel Tower is about 300 metres tall. The Great Pyramid of Giza is about 139 metres tall. Thus the "
     "tower is taller. So the answer is yes."),
    ("Were Johann Sebastian Bach and George Frideric Handel born in the same year?",
     "Johann Sebastian Bach was born in 1685. George Frideric Handel was also born in 1685. Thus they were born "
     "in the same year. So the answer is yes."),
    ("Would a penguin be found living in the wild at the North Pole?",
     "Wild penguins live almost only in the Southern Hemisphere. The North Pole is in the far north. Thus no "
     "wild penguins live there. So the answer is no."),
    ("Is Mount Kilimanjaro in Kenya?",
     "Mount Kilimanjaro stands in northeastern Tanzania, close to the border with Kenya. Thus it is not in "
     "Kenya. So the answer is no."),
    ("Were Leonardo da Vinci and Michelangelo alive at the same time?",
     "Leonardo da Vinci lived from 1452 to 1519. Michelangelo lived from 1475 to 1564. Thus both were alive "
     "between 1475 and 1519. So the answer is yes."),
)

SIMPLE = (
    ("Who painted the Mona Lisa?",
     "The Mona Lisa was painted by Leonardo da Vinci. So the answer is Leonardo da Vinci."),
    ("What is the chemical symbol for gold?",
     "The chemical symbol for gold is Au, from the Latin word aurum. So the answer is Au."),
    ("In which city does the Colosseum stand?",
     "The Colosseum is an ancient amphitheatre in the centre of Rome. So the answer is Rome."),
    ("Who wrote Pride and Prejudice?",
     "Pride and Prejudice is a novel by Jane Austen, published in 1813. So the answer is Jane Austen."),
    ("How many legs does a spider have?",
     "Spiders are arachnids, and every arachnid has eight legs. So the answer is 8."),
    ("What is the largest planet in the Solar System?",
     "Jupiter is the largest planet of the Solar System. So the answer is Jupiter."),
)

EXEMPLAR_SETS = {"multihop": MULTIHOP, "yesno": YESNO, "simple": SIMPLE}
EXEMPLAR_CHOICES = ("auto", *EXEMPLAR_SETS)
ANSWER_PHRASE = "So the answer is"
CONTEXT_INSTRUCTION = "Answer in the same format as before."
#: Strings that mean the model has begun a new exemplar of its own: generation stops there.
STOP_STRINGS = ("\nQuestion:", "\n\n")

_YESNO_START = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had|would|will|should|shall|may|might)\b",
                          re.IGNORECASE)

Segments = list[tuple[str, str]]


def question_kind(question: str) -> str:
    """``yesno`` for questions that open with an auxiliary verb, else ``multihop``."""
    return "yesno" if _YESNO_START.match(question.strip()) else "multihop"


def exemplars(question: str, which: str = "auto", count: int = 6, *, separator: str = "\n\n") -> str:
    """The few-shot block: ``count`` exemplars of the chosen (or guessed) kind.

    Each exemplar ends with ``separator``: a blank line by default; the reference variants use a
    single newline, the layout of the authors' prompts (``"".join(case + "\n" for case in demo)``).
    """
    kind = question_kind(question) if which == "auto" else which
    chosen = EXEMPLAR_SETS[kind][:count]
    return "".join(f"Question: {q}\nAnswer: {a}{separator}" for q, a in chosen)


def passage_text(passage: Passage) -> str:
    return passage.as_context()


def context_block(hits: Sequence[Hit]) -> str:
    """Numbered passages the way the DRAGIN family writes them: ``[1] title: text``."""
    lines = "".join(f"[{i}] {passage_text(h.passage)}\n" for i, h in enumerate(hits, start=1))
    return f"Context:\n{lines}{CONTEXT_INSTRUCTION}\n"


def build_prompt(question: str, *, shots: str, hits: Sequence[Hit] = (), answer_so_far: str = "",
                 answer_raw: str | None = None, after_search: bool = False) -> Segments:
    """Exemplars, optional context, the question and the answer written so far, as labelled segments.

    The answer so far follows ``Answer:`` after one space, stripped. ``answer_raw`` instead appends
    that exact text (spaces included), for the reference variants, whose prompts keep the spacing
    the authors' string joins produce. ``after_search`` keeps the ``Context:`` line and its
    instruction when a search found nothing, as the authors' code does after every search (it
    fills the list with empty passages, which are left out here); otherwise no passages, no block.
    """
    segments: Segments = [("exemplars", shots)] if shots else []
    if hits or after_search:
        segments.append(("context", context_block(hits)))
    segments.append(("question_label", "Question: "))
    segments.append(("question", question.strip()))
    segments.append(("answer_label", "\nAnswer:"))
    if answer_raw is not None:
        if answer_raw:
            segments.append(("answer", answer_raw))
    elif answer_so_far.strip():
        segments.append(("answer", " " + answer_so_far.strip()))
    return segments


def join_text(*parts: str) -> str:
    """Join answer pieces with single spaces, skipping empty ones (how continuations are appended)."""
    return " ".join(p.strip() for p in parts if p and p.strip())


_ANSWER_RE = re.compile(r"the answer is[:\s]*(.+)", re.IGNORECASE | re.DOTALL)


def has_answer(text: str) -> bool:
    """Whether the text already states its final answer."""
    return "the answer is" in text.lower()


def extract_answer(text: str) -> str | None:
    """The short answer after the last "the answer is", up to the end of its line and sentence."""
    matches = list(_ANSWER_RE.finditer(text))
    if not matches:
        return None
    tail = matches[-1].group(1).strip().split("\n", 1)[0].strip()
    # Stop at the end of the sentence, but not inside numbers or initials ("3.5", "J. R. R.").
    end = re.search(r"(?<!\b[A-Z])(?<!\d)\.(\s|$)", tail)
    if end:
        tail = tail[: end.start()]
    tail = tail.strip().strip("\"'“”").strip().rstrip(".").strip()
    # "So the answer is:" with nothing after it leaves only punctuation: that is no answer.
    return tail if any(ch.isalnum() for ch in tail) else None
