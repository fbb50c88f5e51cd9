"""Which architectures and attention backends the explorer supports, measured: the support table in docs/models.md.

For each family (a tiny random model from its config, as in tests/test_architectures.py) and each
backend, the script loads the model, generates with every signal after a prompt longer than any
sliding window, and compares entropy and amax with one full eager forward pass
(``output_attentions=True``), then runs DRAGIN (paper) and DR-RAG (model as judge) on one
question (and, on the families with recurrent state-space layers, SEAKR and FLARE, whose sampling and
replays are what such caches break). A backend the family refuses is reported with the error the user sees. "no weights"
stands in for flash attention: a kernel registered with transformers' AttentionInterface that
runs sdpa and returns no attention weights, as flash attention does.

    .venv/bin/python -m benchmarks.arch_matrix [--out FILE] [--only llama,rwkv]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from benchmarks.common import cpu_name, write_result
from explorer.engine.generation import Engine
from explorer.engine.hidden import HiddenCapture, HiddenSpec
from explorer.engine.tiny import ARCHITECTURES, RECURRENT, tiny_model
from explorer.errors import ExplorerError
from explorer.methods.base import run_question
from explorer.runtime import Runtime

OUT = Path(__file__).parent / "results" / "architectures.md"
WEIGHTLESS = "no-weights-kernel"
PROMPT = ("Question: Who lived longer, Alejandro Jodorowsky or Philip Saville? Think about both of their lives step "
          "by step.\nAnswer:")
QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
SHORT = {"max_length": 12, "fewshot": 1, "answer_tokens": 4}
SEAKR = {**SHORT, "k": 3, "max_steps": 2, "step_tokens": 6, "candidates": 2, "compare_estimators": False}


def _register_weightless() -> None:
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import AttentionInterface

    from explorer.engine.attention import eager_for

    def weightless(module, query, key, value, attention_mask, **kwargs):
        return eager_for(module)(module, query, key, value, attention_mask, **kwargs)[0], None

    AttentionInterface.register(WEIGHTLESS, weightless)
    AttentionMaskInterface.register(WEIGHTLESS, eager_mask)


def _errors(arch: str, engine: Engine, tokenizer) -> tuple[float, float]:
    """Largest entropy (relative) and amax (absolute) error against one full eager pass (amax 0 without attention)."""
    gen = engine.generate(PROMPT, max_new_tokens=12, attention=engine.probe.has_attention)
    reference = tiny_model(arch, seed=7, attn_implementation="eager", tokenizer=tokenizer)
    p, n = len(gen.prompt_ids), len(gen.ids)
    with torch.inference_mode():
        out = reference.model(input_ids=torch.tensor([gen.prompt_ids + gen.ids]), output_attentions=True)
    # Only 4-d weights are attention (RWKV returns its time-mixing outputs under that name).
    attentions = [a for a in (getattr(out, "attentions", None) or ()) if isinstance(a, torch.Tensor) and a.dim() == 4]
    attn = attentions[-1][0].float().mean(0) if attentions and engine.probe.has_attention else None
    d_entropy = d_amax = 0.0
    for i, token in enumerate(gen.tokens):
        logp = torch.log_softmax(out.logits[0, p - 1 + i].float(), dim=-1)
        expected = float(-(logp.exp() * logp).sum())
        d_entropy = max(d_entropy, abs(token.entropy - expected) / expected)
        if attn is None:
            continue
        later = [float(attn[p + j, p + i]) for j in range(i + 1, n)]
        if later:
            if token.amax is None:
                return d_entropy, float("inf")
            d_amax = max(d_amax, abs(token.amax - max(later)))
    return d_entropy, d_amax


def _cell(arch: str, attn: str, tokenizer, retriever) -> str:
    try:
        lm = tiny_model(arch, seed=7, attn_implementation=attn, tokenizer=tokenizer)
    except (ValueError, KeyError, ExplorerError) as exc:
        text = (str(exc) if not isinstance(exc, KeyError) else f"no {attn} attention class").split(".")[0]
        return f"refused ({text[:60]}…)" if len(text) > 60 else f"refused ({text})"
    engine = Engine(lm)
    runtime = Runtime(engine=engine, retriever=retriever, corpus={"spec": "demo"})
    chosen = lm.attn_implementation if attn == "auto" else ""
    drrag = run_question("drrag", QUESTION, runtime, config={**SHORT, "judge": "llm", "k": 2, "k1": 1, "k2": 2})
    dragin = run_question("dragin", QUESTION, runtime, config={**SHORT, "max_rounds": 2})
    if arch in RECURRENT:  # SEAKR's batched sampling and FLARE over a cache with recurrent state
        extra = [run_question("seakr", QUESTION, runtime, config=SEAKR), run_question("flare", QUESTION, runtime,
                                                                                      config=SHORT)]
        if any(t.status != "complete" for t in extra):
            return "✗ " + "; ".join(f"{t.method}: {t.error}" for t in extra if t.status != "complete")[:80]
    if not engine.probe.has_attention:
        d_entropy, _ = _errors(arch, engine, tokenizer)
        ok = (d_entropy <= 1e-5 and drrag.status == "complete" and dragin.status == "error"
              and "no attention layer" in (dragin.error or ""))
        site = "residual stream" if HiddenCapture(engine.model, HiddenSpec()).fallback else "MLP"
        return (f"{chosen + ': ' if chosen else ''}no attention layer: FLARE, SEAKR ({site}), DR-RAG run "
                f"(H {d_entropy:.0e}); DRAGIN refused with the fix" + ("" if ok else " (UNEXPECTED)"))
    if not engine.probe.readable:
        ok = drrag.status == "complete" and dragin.status == "error" and "--attn auto" in (dragin.error or "")
        return (f"{chosen + ': ' if chosen else ''}no attention signals; DR-RAG runs, DRAGIN stops with "
                f"\"use --attn auto\"" + ("" if ok else " (UNEXPECTED)"))
    d_entropy, d_amax = _errors(arch, engine, tokenizer)
    ok = d_entropy <= 1e-5 and d_amax <= 1e-5 and dragin.status == "complete" and drrag.status == "complete"
    return (f"{chosen + ': ' if chosen else ''}{'✓' if ok else '✗'} (H {d_entropy:.0e}, amax {d_amax:.0e}"
            f"{', ' + engine.probe.mode if engine.probe.mode == 'output_attentions' else ''})")


def main() -> None:
    from transformers import AutoTokenizer

    from explorer.engine.embedded import embedded_tokenizer_dir
    from explorer.retrieval.registry import open_retriever

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(OUT), help="markdown file to write ('-' for none)")
    parser.add_argument("--only", default="", help="comma-separated families to measure (default: all)")
    args = parser.parse_args()
    only = [a.strip() for a in args.only.split(",") if a.strip()]
    torch.set_num_threads(1)
    _register_weightless()
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()), local_files_only=True)
    retriever = open_retriever("demo")
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    for arch, (model_type, _fields, note) in ARCHITECTURES.items():
        if only and arch not in only:
            continue
        cells = [_cell(arch, attn, tokenizer, retriever) for attn in ("auto", "sdpa", "eager", WEIGHTLESS)]
        rows.append(f"| {arch} (`{model_type}`) | {note} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    text = "\n".join([
        "# Supported architectures and attention backends (measured)",
        "",
        f"Made by `python -m benchmarks.arch_matrix` ({time.strftime('%Y-%m-%d')}; {cpu_name()}; load average "
        f"{' '.join(load_before)} at start). Tiny random models (hidden 64, 2-3 layers, the embedded tokenizer). "
        "✓: generation with every signal after a prompt longer than any sliding window matches one full eager "
        "forward pass (largest relative entropy error H and absolute amax error shown; both must be at most "
        "1e-5), and DRAGIN (paper) and DR-RAG (model as judge) complete. 'no weights' is a kernel that returns "
        "no attention weights (it runs the family's own attention underneath), as flash attention does.",
        "",
        "| architecture | what is special | --attn auto | --attn sdpa | --attn eager | no weights (flash-like) |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    print(text)
    write_result(text, args.out)


if __name__ == "__main__":
    main()
