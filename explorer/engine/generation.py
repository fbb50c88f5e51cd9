"""The instrumented, KV-cached generation loop every method shares.

One forward pass per token, exactly as plain ``generate`` does, and every signal a method or a
view needs is computed from what that pass already produced: the RAW next-token distribution
gives probability, entropy and the top alternatives; the attention probe on the last layer gives
the token's attention row over all earlier positions, folded at once into amax; an optional hook
gives a hidden state. Methods never touch tensors: they call :meth:`Engine.generate` and read a
:class:`Generation`, and the engine writes the ``generation`` event and the costs into the trace.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from explorer.engine.attention import AttentionProbe, Window, absolute_row, probed_window, sink_tokens
from explorer.engine.capabilities import cache_argument
from explorer.engine.context_cache import ContextCache, recompute_reason
from explorer.engine.decode import (
    Detokenizer,
    cancelled,
    choose_token,
    count_call,
    drop_after,
    raise_if_cancelled,
    token_signal,
)
from explorer.engine.hidden import HiddenCapture, HiddenSpec, note_fallback
from explorer.engine.model import LoadedModel
from explorer.engine.sampling import sample
from explorer.engine.signal_check import check_signals
from explorer.engine.signals import AmaxTracker
from explorer.engine.spans import Generation, PromptLike, Sampling, Span, SpanRequest, stop_after
from explorer.engine.token_signals import compute_derived, plan
from explorer.errors import ConfigError, ExplorerError, ModelError
from explorer.trace import TokenSignal, TraceRecorder, phase


class Engine:
    """Owns a loaded model; generates with signals; serialises use of the model across threads."""

    def __init__(self, lm: LoadedModel, *, attention_layer: int = -1) -> None:
        self.lm = lm
        self.model = lm.model
        self.tokenizer = lm.tokenizer
        self.device = torch.device(lm.device)
        self.probe = AttentionProbe(self.model, attention_layer)
        #: ``past_key_values``, or ``cache_params`` for the Mamba families.
        self.cache_argument = cache_argument(self.model)
        #: Why every pass re-reads the whole context (a family without a usable cache), or None.
        self.recompute: str | None = recompute_reason(self.model)
        #: The probed layer's sliding window or chunk, when it has one (None: it sees the whole context).
        self.window: Window | None = probed_window(self.model.config, self.probe.layer_index)
        self.lock = threading.RLock()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.special_ids = frozenset(self.tokenizer.all_special_ids) | self.eos_ids
        #: Ids the tokenizer puts before any text (a BOS token). Models trained with one (Gemma,
        #: Llama) degrade without it, so every prompt starts with it; SmolLM2's tokenizer has none.
        self.prefix_ids: list[int] = _special_prefix(self.tokenizer)
        #: Whether sampled rows read their prompt's keys and values once instead of one copy per row
        #: (:mod:`explorer.engine.shared_prefix`; None: not checked on this model yet, False: never).
        self.shares_prefix: bool | None = None
        #: Reuses the states of a prompt's opening shared with a recent prompt (an
        #: :class:`~explorer.engine.prefix_cache.PrefixCache`; None: every prompt is encoded whole).
        self.prefix_cache: Any = None
        #: Decodes the spans of concurrent runs as one batch (a :class:`~explorer.engine.batching.Batcher`;
        #: None: each span decodes alone, one at a time).
        self.batcher: Any = None

    # -- facts ----------------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """What a trace records about the model and how signals were read from it."""
        facts = {**self.lm.fingerprint(), "attention_signals": self.probe.mode if self.probe.readable else "none",
                 "attention_layer": self.probe.layer_index}
        if self.window is not None:
            facts["attention_window"] = self.window.to_dict()
        if self.recompute is not None:
            facts["context_recomputed"] = self.recompute
        return facts

    @property
    def context_length(self) -> int:
        return self.lm.context_length

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` adds the tokenizer's default special tokens (a BOS)."""
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        """Text of ``ids``; ``special`` keeps special tokens (``<|im_end|>``) in the text."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=not special)

    def count_tokens(self, text: str, *, special: bool = False) -> int:
        return len(self.tokenize(text, special=special))

    def token_texts(self, ids: Sequence[int], *, special: bool = False) -> list[str]:
        """Decoded text of each token such that joining them gives the decoded whole."""
        detok = Detokenizer(self, special=special)
        return [detok.push(i) for i in ids]


    def check_fits(self, prompt_len: int, max_new_tokens: int, where: str = "prompt") -> None:
        """Refuse a prompt that cannot fit the model's context with room to answer."""
        limit = self.context_length
        if prompt_len + max_new_tokens > limit:
            raise ExplorerError(
                f"the {where} is {prompt_len} tokens and {max_new_tokens} more are to be generated, but the model's "
                f"context holds {limit} tokens", where=where,
                fix="shorten the question, retrieve fewer or shorter passages, or lower the generation length")

    # -- the loop ---------------------------------------------------------------------------------
    def encode_segments(self, prompt: PromptLike) -> tuple[str, list[int], list[Span]]:
        """Tokenize a prompt given as text or as labelled segments, in ONE call over the whole text.

        Tokenizing segment by segment would hand the model ids it never sees for the same text in
        normal use (``"\n\n" | "Question:"`` instead of one encoding of ``"\n\nQuestion:"``), which
        changes its output. So the joined text is encoded once, with the special tokens the
        tokenizer adds by default (a BOS where the model expects one), and each token is given
        the label of the segment holding its first non-space character: a token such as ``" What"``
        that starts with the space closing ``"Question: "`` belongs to the question. Special tokens
        form a ``special`` span. The returned ``(label, start, end)`` ranges are contiguous runs of
        one label; a segment whose characters all went to a neighbour's tokens has no range.
        """
        if isinstance(prompt, str):
            prompt = [("prompt", prompt)]
        parts = [(label, text) for label, text in prompt if text]
        text = "".join(piece for _, piece in parts)
        ids, offsets = self.encode_with_offsets(text)
        ends = list(itertools.accumulate(len(piece) for _, piece in parts))
        labels = []
        for start, end in offsets:
            if end <= start:
                labels.append("special")
                continue
            chunk = text[start:end]
            first = start + (len(chunk) - len(chunk.lstrip()) if chunk.strip() else 0)
            labels.append(parts[min(bisect.bisect_right(ends, first), len(parts) - 1)][0])
        spans: list[Span] = []
        for i, label in enumerate(labels):
            if spans and spans[-1][0] == label and spans[-1][2] == i:
                spans[-1] = (label, spans[-1][1], i + 1)
            else:
                spans.append((label, i, i + 1))
        return text, ids, spans

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of ``text`` (with the tokenizer's default special tokens) and each token's character range.

        Fast tokenizers report offsets directly; for others they are rebuilt from the decoded
        pieces, which join to the text for every tokenizer that round-trips it. Special tokens
        get an empty range.
        """
        try:
            enc = self.tokenizer(text, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        except (NotImplementedError, ValueError, TypeError, KeyError):
            ids = list(self.tokenizer(text)["input_ids"])
        special = self.special_ids
        detok = Detokenizer(self)
        offsets, pos = [], 0
        for token_id in ids:
            if token_id in special:
                offsets.append((pos, pos))
                continue
            piece = detok.push(token_id)
            offsets.append((pos, pos + len(piece)))
            pos += len(piece)
        return ids, offsets

    def encode_prompt(self, prompt: PromptLike) -> tuple[str, list[int], list[Span]]:
        """:meth:`encode_segments`, led by the tokenizer's BOS where it has one (as a ``bos`` segment)."""
        text, ids, spans = self.encode_segments(prompt)
        n = len(self.prefix_ids)
        if n and ids and ids[:n] != self.prefix_ids:
            ids = [*self.prefix_ids, *ids]
            spans = [("bos", 0, n), *((label, start + n, end + n) for label, start, end in spans)]
        return text, ids, spans

    def generate(self, prompt: PromptLike, *, max_new_tokens: int, purpose: str = "draft",
                 rec: TraceRecorder | None = None, sampling: Sampling | None = None,
                 stop_strings: Sequence[str] = (), attention: bool = True,
                 until: Callable[[list[TokenSignal]], bool] | None = None,
                 hidden: HiddenSpec | None = None, stream: bool = True, ignore_eos: bool = False,
                 keep_special: bool = False, meta: dict[str, Any] | None = None,
                 signals: Sequence[str] = ()) -> Generation:
        """Generate from ``prompt`` (plain text, no special tokens added) with per-token signals.

        Greedy unless ``sampling`` is given (then seeded, so repeatable). Stops at an end-of-
        sequence token, after ``max_new_tokens``, at the first ``stop_strings`` match (the match
        and what follows are dropped) or when ``until(tokens)`` returns True after a token.
        ``attention=False`` skips the attention probe (FLARE and the baselines need no amax).
        ``hidden`` captures that layer's state at the final generated position. ``ignore_eos``
        keeps going past end-of-sequence (benchmarks compare equal token counts with it).
        ``keep_special`` decodes the way ``tokenizer.decode`` does by default: the end-of-sequence
        token that stopped the span stays in it as its last token, and special tokens keep their
        text (``<|im_end|>``), as in the DRAGIN authors' code, whose decisions read that text.
        ``signals`` names registered signals to compute beside the defaults
        (:mod:`explorer.engine.token_signals`).
        """
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, got {max_new_tokens}", where="max_new_tokens")
        if attention:
            self.probe.require("reading amax and RIND")
        prompt, prompt_ids, segments = self.encode_prompt(prompt)
        if not prompt_ids:
            raise ExplorerError("the prompt is empty", where="prompt", fix="give the model some text to continue")
        self.check_fits(len(prompt_ids), max_new_tokens)
        if attention:  # once per kind of model: the stepwise signals against one full eager pass
            check_signals(self, prompt_ids)
        if rec is not None and rec.replay is not None:  # a fork before its divergence: the parent's span
            replayed = rec.replay.generation(self, rec, prompt=prompt, prompt_ids=prompt_ids, segments=segments,
                                             purpose=purpose, max_new_tokens=max_new_tokens, attention=attention,
                                             hidden=hidden)
            if replayed is not None:
                return replayed
        with phase(rec, "generation") as timer:
            request = SpanRequest(prompt, prompt_ids, segments, max_new_tokens, purpose, sampling, tuple(stop_strings),
                               attention, until, hidden, stream, ignore_eos, keep_special, tuple(signals))
            # With a batcher, the span decodes in the batch shared with concurrent runs (None: it cannot).
            gen = self.batcher.generate(request, rec) if self.batcher is not None else None
            if gen is None:
                with self.lock, torch.inference_mode():
                    gen = self._loop(request, rec)
        if rec is not None:
            self._record(gen, rec, sampling, timer.seconds, meta or {}, max_new_tokens)
            # The partial span is in the trace (and its costs counted) before the run unwinds.
            raise_if_cancelled(gen.stopped_by)
        return gen

    def _forward(self, ids: torch.Tensor, cache: Any, *, logits: bool = True) -> Any:
        if isinstance(cache, ContextCache):  # no usable cache: the whole context, only the new queries kept
            kwargs: dict[str, Any] = {"input_ids": cache.extend(ids), "use_cache": False,
                                      "logits_to_keep": 1 if logits else ids.shape[1]}
        else:
            kwargs = {"input_ids": ids, self.cache_argument: cache, "use_cache": True}
            if logits:
                kwargs["logits_to_keep"] = 1
        if self.probe.active and self.probe.needs_output_attentions:
            kwargs["output_attentions"] = True
        if self.probe.active:
            self.probe.last_mean = self.probe.last_heads = None  # a row left from an earlier pass must not pass
        out = self.model(**kwargs)
        if self.probe.active and self.probe.needs_output_attentions:
            self.probe.take_from_outputs(out.attentions)
        if self.probe.active and self.probe.last_mean is None:
            raise self.probe.no_weights_error()
        if self.probe.active and isinstance(cache, ContextCache):
            self.probe.keep_last_queries(int(ids.shape[1]))
        return out

    def _prefill(self, prompt_ids: list[int]) -> tuple[Any, Any]:
        """The prompt's pass: a new cache holding it, and the output with the next token's logits."""
        if self.prefix_cache is not None:
            return self.prefix_cache.prefill(self, prompt_ids)
        cache = self.new_cache()
        return cache, self._forward(torch.tensor([prompt_ids], device=self.device), cache)

    def new_cache(self) -> Any:
        """An empty KV cache for this model (what every decoding loop starts from); a
        :class:`~explorer.engine.context_cache.ContextCache` for a family without a usable one."""
        if self.recompute is not None:
            return ContextCache()
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def forward_batch(self, input_ids: torch.Tensor, cache: Any, *, attention_mask: torch.Tensor | None = None,
                      position_ids: torch.Tensor | None = None) -> Any:
        """One cached pass of a batch of rows, next-token logits only, without the attention probe.

        The batched sampler's step: ``attention_mask`` hides tokens a row cut after feeding them,
        ``position_ids`` (where the model takes them) keep each row's positions its own.
        """
        if isinstance(cache, ContextCache):  # it never masks (it counts as recurrent) and its positions run on
            return self.model(input_ids=cache.extend(input_ids), use_cache=False, logits_to_keep=1)
        kwargs: dict[str, Any] = {"input_ids": input_ids, self.cache_argument: cache, "use_cache": True,
                                  "logits_to_keep": 1}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        return self.model(**kwargs)

    def sample(self, prompt: PromptLike, *, k: int, max_new_tokens: int, **options: Any) -> Any:
        """``k`` sampled continuations in one batched loop: :func:`explorer.engine.sampling.sample`."""
        return sample(self, prompt, k=k, max_new_tokens=max_new_tokens, **options)

    def attention_over(self, gen: Generation, index: int) -> list[float]:
        """Last-layer, head-mean attention of ``gen``'s token ``index`` over every earlier position.

        Rows are not kept while generating (that would grow quadratically); the KV cache is rolled
        back to just before the token and that single token runs again, which costs one one-token
        pass and reproduces the row the loop saw.
        """
        if gen._engine is self and gen._cache is None and getattr(gen, "replayed", False):
            gen._cache = self._span_cache(gen)
        if gen._engine is not self or gen._cache is None:
            raise ExplorerError("this generation kept no KV cache, so its attention rows cannot be read",
                                fix="generate with attention=True")
        return self._replay_row(gen, index)

    def _span_cache(self, gen: Generation) -> Any:
        """The KV cache of a span served from a trace (a fork's replay): one pass over its prompt and tokens."""
        with self.lock, torch.inference_mode():
            self.probe.active = False
            cache, _ = self._prefill(list(gen.prompt_ids) + list(gen.ids))
        return cache

    def _loop(self, req: SpanRequest, rec: TraceRecorder | None) -> Generation:
        """Decode one span: one forward pass per token, signals read from what each pass produced."""
        prompt_ids, sampling, attention = req.prompt_ids, req.sampling, req.attention
        generator = None
        if sampling is not None:
            generator = torch.Generator(device="cpu").manual_seed(int(sampling.seed))
        p_len = len(prompt_ids)
        amax = AmaxTracker(p_len)
        tokens: list[TokenSignal] = []
        ids: list[int] = []
        forward_passes = 0
        capture = HiddenCapture(self.model, req.hidden) if req.hidden is not None else None
        note_fallback(rec, capture)
        stopped_by = "max_tokens"
        specs = plan(req.signals, attention=attention)
        detok = Detokenizer(self, special=req.keep_special)
        cut_at: int | None = None
        try:
            if capture is not None:
                capture.__enter__()
            self.probe.active = False
            cache, out = self._prefill(prompt_ids)
            forward_passes += 1
            logits = out.logits[0, -1]
            while True:
                if cancelled(rec):
                    stopped_by = "cancelled"
                    break
                chosen, warped_entropy = choose_token(logits, sampling, generator)
                at_eos = chosen in self.eos_ids and not req.ignore_eos
                if at_eos and not req.keep_special:
                    stopped_by = "eos"
                    break
                ids.append(chosen)
                token = token_signal(self, logits, chosen, detok.push(chosen), specs, warped_entropy)
                tokens.append(token)
                amax.add_token()
                if rec is not None and req.stream:
                    rec.token(req.purpose, token)
                stop = "eos" if at_eos else stop_after(req, detok.text, tokens)
                if stop is not None:
                    stopped_by, cut_at = stop if isinstance(stop, tuple) else (stop, None)
                    break
                # Feed the token: its attention row (over everything before it, itself included)
                # and the next distribution come out of the same pass.
                logits = self._feed(chosen, cache, attention, amax, len(tokens), p_len, logits=True)
                forward_passes += 1
            # After an end-of-sequence every kept token has been fed. Otherwise the last one has
            # not: its row completes amax of the tokens before it, and its position is the "end"
            # whose hidden state a caller may want.
            if tokens and stopped_by in ("max_tokens", "callback") and (attention or capture is not None):
                self._feed(ids[-1], cache, attention, amax, len(tokens), p_len, logits=False)
                forward_passes += 1
        finally:
            self.probe.active = False
            if capture is not None:
                capture.__exit__(None, None, None)
        if cut_at is not None:
            tokens, ids = drop_after(tokens, ids, cut_at)
        self._finish_signals(tokens, specs, amax.values if attention else None)
        gen = Generation(purpose=req.purpose, prompt=req.prompt, prompt_ids=prompt_ids, segments=req.segments,
                         ids=ids, tokens=tokens, text="".join(t.text for t in tokens), stopped_by=stopped_by,
                         _engine=self if attention else None, _cache=cache if attention else None)
        if capture is not None and capture.last is not None:
            gen.hidden = capture.last[0, -1].clone()
        gen.forward_passes = forward_passes  # type: ignore[attr-defined]
        return gen

    def _feed(self, token_id: int, cache: Any, attention: bool, amax: AmaxTracker, count: int, p_len: int, *,
              logits: bool) -> torch.Tensor | None:
        """Feed the newest of ``count`` generated tokens; fold its attention row into amax; its next logits."""
        self.probe.active = attention
        out = self._forward(torch.tensor([[token_id]], device=self.device), cache, logits=logits)
        if attention:
            amax.add_row(count - 1, self._last_row(cache, p_len + count))
        return out.logits[0, -1] if logits else None

    def _finish_signals(self, tokens: list[TokenSignal], specs: list[Any], amax: list[float | None] | None) -> None:
        """Attention signals (None without attention) and then the signals computed from others."""
        for i, token in enumerate(tokens):
            if "amax" in token.signals:
                token.signals["amax"] = amax[i] if amax is not None else None
            compute_derived(specs, self, token.id, token.text, token.signals)

    def _last_row(self, cache: Any, total: int) -> torch.Tensor:
        """The newest query's probed row on the context's ``total`` absolute positions."""
        return absolute_row(self.probe.last_mean[0, -1], total, sink_tokens(cache, self.probe.layer_index))

    def _replay_row(self, gen: Generation, index: int) -> list[float]:
        if not 0 <= index < len(gen.ids):
            raise IndexError(f"token {index} is outside the span of {len(gen.ids)} tokens")
        total = len(gen.prompt_ids) + index + 1
        if not can_roll_back(gen._cache):
            # A windowed cache has dropped the keys a rollback would need, a recurrent layer's state
            # cannot go back; one pass over the context up to the token gives the same row.
            ids = list(gen.prompt_ids) + gen.ids[:index + 1]
            with self.lock, torch.inference_mode():
                self.probe.active = True
                try:
                    self._forward(torch.tensor([ids], device=self.device), self.new_cache(), logits=False)
                finally:
                    self.probe.active = False
                return absolute_row(self.probe.last_mean[0, -1], total).tolist()
        with self.lock, torch.inference_mode():
            cache = gen._cache
            keep = len(gen.prompt_ids) + index
            if cache.get_seq_length() > keep:
                cache.crop(keep - cache.get_seq_length())
            # Normally just the token itself; more when an earlier replay rolled further back.
            start = cache.get_seq_length() - len(gen.prompt_ids)
            self.probe.active = True
            try:
                self._forward(torch.tensor([gen.ids[start:index + 1]], device=self.device), cache, logits=False)
            finally:
                self.probe.active = False
            return self._last_row(cache, total).tolist()

    def _record(self, gen: Generation, rec: TraceRecorder, sampling: Sampling | None, elapsed: float,
                meta: dict[str, Any], max_new_tokens: int) -> None:
        count_call(rec.costs, forward_passes=getattr(gen, "forward_passes", 0), prompt_tokens=len(gen.prompt_ids),
                   generated_tokens=len(gen.tokens))
        window = self._window_facts(gen)
        event = rec.add("generation", purpose=gen.purpose, text=gen.text,
                        tokens=[t.to_dict() for t in gen.tokens], prompt=gen.prompt,
                        prompt_tokens=len(gen.prompt_ids), prompt_segments=[list(s) for s in gen.segments],
                        stopped_by=gen.stopped_by, max_new_tokens=max_new_tokens,
                        decoding="greedy" if sampling is None else {"sampling": sampling.to_dict()},
                        seconds=round(elapsed, 4), **window, **meta)
        gen.event_id = event.id
        if window.get("attention_window_limited"):
            self.note_window(rec)

    def _window_facts(self, gen: Generation) -> dict[str, Any]:
        """What a span's attention signals were computed over, when the probed layer has a window."""
        if self.window is None or gen._engine is None:
            return {}
        context = len(gen.prompt_ids) + len(gen.ids)
        return {"attention_window": self.window.to_dict(), "attention_window_limited": context > self.window.size}

    def note_window(self, rec: TraceRecorder) -> None:
        """Say once per run that amax and RIND only see inside the window (the UI lists notes)."""
        if any(e.kind == "note" and e.payload.get("attention_window") for e in rec.trace.events):
            return
        assert self.window is not None
        rec.add("note", level="info", attention_window=self.window.to_dict(),
                message=f"the last layer of {self.lm.name} {self.window.describe()}: the context is longer, so "
                        "positions outside the window receive 0 attention from it, and amax, RIND and the QFS "
                        "weights count attention within the window only")

    # -- whole-sequence passes ------------------------------------------------------------------
    def attention_matrix(self, ids: Sequence[int], *, per_head: bool = False,
                         rec: TraceRecorder | None = None) -> torch.Tensor:
        """One forward pass over ``ids``; the last layer's attention, ``(q, k)`` head-mean or ``(h, q, k)``.

        This is the reference DRAGIN's second pass, and the QFS re-encoding; it counts as a
        forward pass in the trace's costs.
        """
        if not ids:
            raise ExplorerError("nothing to encode", where="attention_matrix", fix="pass at least one token")
        self.probe.require("reading the attention matrix")
        self.check_fits(len(ids), 0, where="text to encode")
        check_signals(self, ids)
        with self.lock, torch.inference_mode():
            self.probe.active, self.probe.per_head = True, per_head
            try:
                self._forward(torch.tensor([list(ids)], device=self.device), self.new_cache(), logits=False)
            finally:
                self.probe.active, self.probe.per_head = False, False
            result = self.probe.last_heads[0] if per_head else self.probe.last_mean[0]
        if result.shape[-1] != len(ids):
            raise ModelError(f"the attention matrix has {result.shape[-1]} key positions for {len(ids)} tokens",
                             fix="report this model; --attn eager may help")
        if rec is not None:
            rec.costs.forward_passes += 1
            if self.window is not None and len(ids) > self.window.size:
                self.note_window(rec)
        return result


def can_roll_back(cache: Any) -> bool:
    """Whether ``crop`` can take the cache back: not once a sliding layer has filled its window, and never with a
    recurrent (state-space) layer, whose state has no earlier position to return to."""
    from explorer.engine.capabilities import holds_recurrent_state

    if holds_recurrent_state(cache):
        return False
    for layer in getattr(cache, "layers", ()):
        window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
        if window is not None and layer.get_seq_length() >= window:
            return False
    return True


def _special_prefix(tokenizer: Any) -> list[int]:
    """The ids a tokenizer adds in front of a text when asked for special tokens (BOS), or []."""
    try:
        with_special = list(tokenizer("a", add_special_tokens=True)["input_ids"])
        plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    except (TypeError, ValueError, KeyError):
        return []
    if not plain or len(with_special) <= len(plain):
        return []
    for start in range(len(with_special) - len(plain) + 1):
        if with_special[start:start + len(plain)] == plain:
            return with_special[:start]
    return []

