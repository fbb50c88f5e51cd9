"""Hostile strings and a trace that carries them in every field a panel shows (shared by UI tests)."""

from __future__ import annotations

from html.parser import HTMLParser

from explorer.trace import TokenSignal, Trace, TraceRecorder

SCRIPT = "<script>window.__pwned = 'script'; alert('script')</script>"
IMG = "<img src=x onerror=\"window.__pwned = 'img'; alert('img')\">"
LINK = "<a href=\"javascript:window.__pwned = 'link'\">click me</a>"
TEMPLATE = "${alert('template')} {{constructor.constructor('alert(1)')()}}"
PAYLOAD = f"{SCRIPT} {IMG} {LINK} {TEMPLATE}"


def hostile_trace(run_id: str = "hostile0000000000") -> Trace:
    """A trace of every event kind with PAYLOAD in each string a reader might render."""
    trace = Trace(question="Q " + PAYLOAD, method="dragin", variant="paper", config={"threshold": 0.3},
                  model={"name": "M " + PAYLOAD}, corpus={"name": "C " + IMG}, run_id=run_id,
                  gold={"answers": [PAYLOAD], "gold_passages": ["p<1>"]})
    rec = TraceRecorder(trace)
    tokens = [TokenSignal(id=i, text=t, prob=0.5, entropy=1.0, top=[(IMG, 0.5)], amax=0.2, rind=0.2 * (i + 1),
                          content=True).to_dict() for i, t in enumerate([SCRIPT, " " + IMG, " " + LINK, " end\n"])]
    gen = rec.add("generation", purpose="draft " + IMG, text="".join(t["text"] for t in tokens), tokens=tokens,
                  prompt=PAYLOAD, decoding="greedy")
    rec.add("check", span=gen.id, signal="rind" + IMG, threshold=0.3, compare=">", fired=1, rule=PAYLOAD,
            unit="token", units=[{"text": t["text"], "value": t["signals"]["rind"], "eligible": True} for t in tokens])
    rec.add("trigger", span=gen.id, token_index=1, signal="rind", value=0.4, threshold=0.3, token=IMG)
    rec.add("truncation", span=gen.id, token_index=1, kept_text=SCRIPT, discarded_text=IMG, reason=PAYLOAD)
    query = rec.add("query", text="query " + PAYLOAD, source="qfs" + IMG, masked=[IMG, SCRIPT],
                    sentence=f"a {IMG} b", qfs_note=PAYLOAD,
                    candidates=[{"text": SCRIPT, "weight": 0.5, "eligible": True, "chosen": True, "segment": IMG},
                                {"text": LINK, "weight": 0.1, "eligible": False, "chosen": False, "segment": "q"}])
    hits = [{"id": "p<1>", "title": "T " + IMG, "text": "passage " + PAYLOAD, "score": 3.0, "rank": 1},
            {"id": "p2" + SCRIPT, "title": LINK, "text": SCRIPT, "score": 2.0, "rank": 2}]
    ret = rec.add("retrieval", query=query.id, hits=hits, k=2)
    rec.step = 1
    tokens2 = [TokenSignal(id=9, text=" more " + LINK, prob=0.9, entropy=0.3, top=[], amax=0.1, rind=0.03).to_dict()]
    gen2 = rec.add("generation", purpose="draft", text=tokens2[0]["text"], tokens=tokens2, prompt="", decoding="greedy",
                   appended=SCRIPT)
    rec.add("continuation", span=gen2.id, retrieval=ret.id)
    rec.add("generation", purpose="sample", text=IMG, tokens=[], prompt="", decoding={"sampling": {}})
    rec.add("uncertainty", estimator="gram " + IMG, value=-5.0, samples=[SCRIPT, {"text": IMG}], eigenvalues=[2.0, 1.0],
            threshold=-6.0, context=LINK, span=gen2.id, primary=True)
    rec.add("uncertainty", estimator="energy", value=123.0, span=gen2.id, primary=False)
    rec.add("check", span=gen2.id, signal="U(gram)", threshold=-6.0, compare=">", fired=0, unit="step",
            units=[{"text": LINK, "value": -5.0, "eligible": True}], rule=IMG)
    rec.add("rerank", candidates=[{"id": "p<1>", "title": IMG, "rank": 1, "score": 3.0, "uncertainty": -7.0},
                                  {"id": "p2" + SCRIPT, "title": SCRIPT, "rank": 2, "score": 2.0, "uncertainty": -6.5}],
            chosen="p<1>")
    rec.add("filter", passage_ids=["p<1>", "p2" + SCRIPT], kept=[True, False], raw_answer=PAYLOAD)
    rec.add("filter", passage_ids=["p<1>"], kept=["p<1>"], raw_answer=IMG, retrieval=ret.id, set="external" + IMG)
    rec.add("query", text="q+d " + PAYLOAD, source="qdc", anchor="p<1>")
    rec.add("classifier", pair=["p<1>", "p2" + SCRIPT], probability=0.7, accepted=True)
    rec.add("selection", passage_ids=["p<1>", "p2" + SCRIPT], reason=PAYLOAD)
    rec.add("note", message=PAYLOAD, level="defect" + IMG)
    rec.add("answer", text="So the answer is " + PAYLOAD, answer=PAYLOAD)
    trace.answer, trace.output, trace.status, trace.error = PAYLOAD, "So the answer is " + PAYLOAD, "error", PAYLOAD
    return trace


class Elements(HTMLParser):
    """Every element and attribute of an HTML text, to check that nothing was injected."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_bodies: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_bodies.append(data)

    def injected(self) -> list[str]:
        """Anything a payload could have created: scripts, images, handlers, javascript: links."""
        found = []
        for tag, attrs in self.tags:
            if tag in ("script", "img", "iframe", "object", "embed"):
                found.append(tag)
            for name, value in attrs.items():
                if name.startswith("on"):
                    found.append(f"{tag}[{name}]")
                if name in ("href", "src", "action") and (value or "").strip().lower().startswith("javascript:"):
                    found.append(f"{tag}[{name}=javascript:]")
        return found
