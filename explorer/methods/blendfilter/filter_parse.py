"""Reading a knowledge filter's verdict: which of the K numbered passages did the model call relevant?

BlendFilter asks the model itself to filter each passage set, so the verdict arrives as free
text, and a small model writes it in every shape: "1, 3", "[2]", "Passages 1 and 4", "#2 and
#5", "2-4", "two and three", "none", "all of them", or a number list followed by an echo of the
passages. The parser turns any of these into passage numbers in 1..K and says how sure it is
(``status``), so the trace can show a verdict that could not be read instead of silently keeping
or dropping passages. It never raises: an answer it cannot read keeps nothing.

How it reads, in order of trust:

1. The answer is cut into clauses (lines, sentences, ";", and "but"/"while"/"whereas"); a clause
   that calls passages irrelevant ("2 is not relevant", "the others are unrelated") gives no
   numbers.
2. "none" / "no passage" style clauses mean an explicit empty verdict; "all" / "every passage"
   mean all K, and "all except 3" means all K but 3.
3. Numbers that are *marked* as passage numbers ("passage 2", "#2", "[2]", "(2)", "2." at the
   start of a clause, a list continuing after such a mark) or that form a bare list ("1, 3 and
   4", "2-4") are taken first. Only when there are none are unmarked numbers in the first clause
   that has any used ("I think 2 is relevant").
4. Numbers outside 1..K (years, ages, "22 Jump Street") are ignored and listed in ``ignored``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Every status the parser reports. ``parsed``: numbers were read; ``none``: the model said no
#: passage is relevant; ``all``: it said all are; ``out_of_range``: it named only numbers outside
#: 1..K; ``unparseable``: no verdict could be read (nothing is kept).
STATUSES = ("parsed", "none", "all", "out_of_range", "unparseable")

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "6th": 6, "7th": 7, "8th": 8,
    "9th": 9, "10th": 10,
}
_UNIT = r"(?:passages?|documents?|docs?|knowledges?|paragraphs?|texts?|sources?|contexts?|items?|numbers?|ids?)"
_WORD_NUMBER = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b")
# "one" is a pronoun as often as a number ("the relevant one is 3", "one of them").
_PRONOUN_ONE = re.compile(r"\b(?:the|relevant|only|this|that|each|every|no|any|which|a|right|correct|useful|"
                          r"another|other)\s+one\b|\bone\s+of\b")
# An ordinal counts only when it names a passage ("the second passage", "first and third ones"), not
# when it orders the prose ("First, ...").
_ORDINAL = re.compile(r"\b(" + "|".join(_ORDINALS) + r")\b(?=(?:\s*(?:,|and|&|or)\s*(?:the\s+)?(?:"
                      + "|".join(_ORDINALS) + r"))*\s*(?:" + _UNIT + r"|ones?\b))")
_CLAUSE_SPLIT = re.compile(r"\n+|;|(?<=[.!?])\s+(?=[^\d\s])|,\s*(?=(?:and\s+|but\s+)?(?:(?:passages?|documents?|docs?|"
                           r"knowledge|paragraphs?)\b|#|\[))")
# "but" and its kin start a new clause ("1 is relevant but 2 is not"), except in "all but 2".
_CONTRAST_SPLIT = re.compile(r"(?<!all)\s+(?:but|while|whereas|however)\b")
_NEGATIVE = re.compile(r"\b(?:irrelevant|not\s+(?:relevant|related|useful|helpful|needed|necessary)|unrelated|"
                       r"isn'?t|aren'?t|is\s+not|are\s+not|does\s+not|do\s+not|doesn'?t|don'?t|cannot|can'?t|"
                       r"no\s+(?:relevance|relation|information)|nothing\s+to\s+do|remove|removed|discard|"
                       r"dropp?ed|excluded?|ignore)\b")
_NONE = re.compile(r"^\W*(?:none|nothing|no|n/a|na|empty|null)\W*$|"
                   r"\bnone\b(?:\s+of\s+(?:the(?:m|se)?\s*)?(?:\d+\s*)?)?(?:" + _UNIT + r")?|"
                   r"\bno\s+(?:relevant\s+)?" + _UNIT
                   + r"\b|\bno\s+relevant\b|\bnothing\s+(?:is\s+)?relevant\b|\bneither\b")
_ALL = re.compile(r"\ball\b(?:\s+(?:of\s+)?(?:the(?:m|se)?|\d+))*(?:\s+" + _UNIT + r")?|\bevery\s+(?:one|" + _UNIT
                  + r")\b|\beach\s+(?:one|" + _UNIT + r")\b")
_EXCEPT = re.compile(r"\b(?:except(?:\s+for)?|but(?:\s+not)?|other\s+than|apart\s+from|besides|excluding|save)\b(.*)$")
_RANGE = re.compile(r"(?<![\d.])(\d{1,3})\s*(?:-|–|—|to|through|thru)\s*(\d{1,3})(?!\d|\.\d)")
_INT = re.compile(r"(?<![\d.])(\d{1,6})(?!\d|\.\d)")
_SEP = r"\s*(?:,|and|&|or|/|\+|\s)\s*(?:" + _UNIT + r"\s*)?(?:#|no\.?\s*)?"
_NUM_OR_RANGE = r"\d{1,3}(?:\s*(?:-|–|—|to|through)\s*\d{1,3})?"
_MARKED = re.compile(r"(?:\b" + _UNIT + r"\s*(?:#|no\.?|number)?\s*:?\s*|#\s*|\[\s*|\(\s*)(" + _NUM_OR_RANGE
                     + r"(?:(?:" + _SEP + r"|\s*\]\s*,?\s*\[\s*|\s*\)\s*,?\s*\(\s*)" + _NUM_OR_RANGE + r")*)")
_LEADING = re.compile(r"^\s*(?:[-*•]\s*)?(\d{1,3})\s*[.):]\s*(?!\d)")
_BARE_LIST = re.compile(r"^[\s\[\]()#,.&/+:-]*" + _NUM_OR_RANGE + r"(?:(?:\s*(?:,|and|&|or|/|\+)\s*|\s+|[\s\[\](),#]+)"
                        + _NUM_OR_RANGE + r")*[\s\[\]().,#]*$")
_LEADIN = re.compile(r"^\s*(?:the\s+)?(?:relevant|useful|helpful|answer|verdict|selected|kept|keep|result|output)"
                     r"[\w\s]*?:\s*")


@dataclass
class FilterVerdict:
    """What the parser read from one filter answer.

    ``numbers`` are 1-based passage numbers in 1..K, in the order first named; ``ignored`` the
    numbers named outside that range; ``how`` a few words on which rule produced the verdict.
    """

    status: str
    numbers: list[int] = field(default_factory=list)
    ignored: list[int] = field(default_factory=list)
    how: str = ""

    @property
    def readable(self) -> bool:
        return self.status in ("parsed", "none", "all")

    def to_dict(self) -> dict:
        return {"status": self.status, "numbers": list(self.numbers), "ignored": list(self.ignored), "how": self.how}


def _words_to_digits(text: str) -> str:
    text = _ORDINAL.sub(lambda m: str(_ORDINALS[m.group(1)]), text)
    text = _PRONOUN_ONE.sub(lambda m: m.group(0).replace("one", "ONE"), text)  # shielded from conversion
    text = _WORD_NUMBER.sub(lambda m: str(_NUMBER_WORDS[m.group(1)]), text)
    return text.replace("ONE", "one")


def _expand(fragment: str) -> list[int]:
    """Numbers of a fragment in order, ranges ("2-4", "2 to 4") expanded."""
    out: list[int] = []
    pos = 0
    for m in _RANGE.finditer(fragment):
        out += [int(x) for x in _INT.findall(fragment[pos:m.start()])]
        lo, hi = int(m.group(1)), int(m.group(2))
        out += list(range(lo, hi + 1)) if lo <= hi and hi - lo <= 50 else [lo, hi]
        pos = m.end()
    out += [int(x) for x in _INT.findall(fragment[pos:])]
    return out


def _clauses(text: str) -> list[str]:
    out = []
    for clause in _CLAUSE_SPLIT.split(text):
        out += [c.strip() for c in _CONTRAST_SPLIT.split(clause or "") if c and c.strip()]
    return out


def _alone(pattern: re.Pattern[str], clause: str) -> bool:
    """The pattern matches and no other number is named in the clause ("all 5 passages", "none of the 5")."""
    m = pattern.search(clause)
    return bool(m) and not _INT.search(clause[: m.start()] + " " + clause[m.end():])


def _marked_numbers(clause: str) -> list[int]:
    """Numbers a clause names as passage numbers: after a mark, at the clause start, or as a bare list."""
    body = _LEADIN.sub("", clause)
    if _BARE_LIST.match(body):
        return _expand(body)
    out: list[int] = []
    lead = _LEADING.match(body)
    if lead:
        out.append(int(lead.group(1)))
    for m in _MARKED.finditer(body):
        out += _expand(m.group(1))
    return out


def _unique(numbers: list[int]) -> list[int]:
    return list(dict.fromkeys(numbers))


def _finish(numbers: list[int], k: int, how: str, *, minus: list[int] | None = None) -> FilterVerdict:
    minus_set = set(minus or [])
    inside = [n for n in _unique(numbers) if 1 <= n <= k and n not in minus_set]
    ignored = [n for n in _unique(numbers + list(minus_set)) if not 1 <= n <= k]
    if inside:
        return FilterVerdict("parsed", inside, ignored, how)
    if minus_set and not ignored:
        return FilterVerdict("none", [], [], how + " (every passage excepted)")
    return FilterVerdict("out_of_range", [], ignored, how + f"; no number in 1..{k}")


def parse_filter_answer(text: str | None, k: int) -> FilterVerdict:
    """The passage numbers (1..k) a filter answer calls relevant; never raises."""
    if k < 1:
        return FilterVerdict("unparseable", how="there were no passages to choose from")
    raw = (text or "").strip().lower()
    if not raw:
        return FilterVerdict("unparseable", how="the answer is empty")
    raw = raw.replace("’", "'").replace("“", '"').replace("”", '"')
    clauses = [_words_to_digits(c) for c in _clauses(raw)]
    positive = [c for c in clauses if not _NEGATIVE.search(c)]

    # "all (of them) except 3"
    for clause in positive:
        exc = _EXCEPT.search(clause)
        if exc and _ALL.search(clause[: exc.start()]):
            return _finish(list(range(1, k + 1)), k, "all except the named ones", minus=_expand(exc.group(1)))

    marked = [n for c in positive for n in _marked_numbers(c)]
    if marked:
        return _finish(marked, k, "passage numbers")

    for clause in positive:
        if _alone(_NONE, clause):
            return FilterVerdict("none", how="the answer says no passage is relevant")
        if _alone(_ALL, clause):
            return FilterVerdict("all", list(range(1, k + 1)), how="the answer says every passage is relevant")
        loose = _expand(clause)
        if loose:
            return _finish(loose, k, "numbers in the text")
    if clauses and not positive:
        # Every clause rejects something and none accepts: the model named only irrelevant passages.
        return FilterVerdict("none", how="the answer only names passages as irrelevant")
    return FilterVerdict("unparseable", how="no passage number, 'none' or 'all' in the answer")
