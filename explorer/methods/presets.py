"""Per-model defaults for thresholds, because thresholds do not transfer across models.

The config classes keep the papers' defaults (DRAGIN's θ = 1.2 was tuned for Llama-2-13B).
On another model the same signal has another scale: on the embedded SmolLM2-135M-Instruct,
θ = 1.2 fires on 1 demo question in 41, θ = 0.3 on 29 (benchmarks/calibrate_thresholds.py,
recorded in BENCHMARKS.md). A preset fills only the values a user did not set, and the run's
trace says which values came from a preset, so nothing changes silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: model name (as the trace's model fingerprint records it) -> (method, variant) -> values
PRESETS: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
    "SmolLM2-135M-Instruct": {
        ("dragin", "paper"): {"threshold": 0.3},
        # On 10 demo questions drafted without retrieval (benchmarks/calibrate_etc_targ.py) ETC's
        # per-question largest indicator (attention x smoothed Δ²H) has quartiles 4.64 / 6.90 / 9.12:
        # the authors' θ = 1.3 (Llama-3-8B) fires on every question, θ = 4.6 on about three in four,
        # as DRAGIN's 0.3 does. TARG's presets are per gate (BY_CHOICE below).
        ("etc", "paper"): {"threshold": 4.6},
    },
    # The per-question maximum RIND on the demo questions is about half SmolLM2's (median 0.215
    # against 0.421; θ = 1.2 fires on none of 41): θ = 0.12, its lower quartile, fires on about
    # three in four questions, as SmolLM2's 0.3 does (benchmarks/results/calibration.md).
    # SEAKR separates here as it does not on SmolLM2: the gold passages lower the first step's U
    # on 9 of 12 questions, and δ = -2.0 fires on 50% without passages, on none with them.
    "Gemma-3-270M": {
        ("dragin", "paper"): {"threshold": 0.12},
        ("seakr", "paper"): {"delta": -2.0},
        ("seakr", "reference"): {"delta": -2.0},
    },
}


#: Presets that hold for one choice of a field only: model -> (method, variant) -> field -> choice -> values.
#: TARG's τ is read on the scale of the chosen gate (a margin in (0, 1], a variance in nats²), so a
#: τ measured for one gate must not reach a run of another; a gate without an entry keeps the
#: config's model-free default.
BY_CHOICE: dict[str, dict[tuple[str, str], dict[str, dict[Any, dict[str, Any]]]]] = {
    "SmolLM2-135M-Instruct": {
        # 10 demo questions drafted without retrieval (benchmarks/calibrate_etc_targ.py,
        # benchmarks/calibrate_targ_variance.py). The mean margin over a 20-token draft has quartiles
        # 0.24 / 0.29 / 0.40: τ = 0.5 retrieves for 1 in 10, τ = 0.4 for 2 in 10 (a retrieval budget
        # of about 20%, within the paper's 70-90% fewer retrievals than retrieving always). The
        # variance of 5 prefixes' mean log-probability (seed 0) has quartiles 0.32 / 0.50 / 0.60:
        # τ = 0.6 retrieves for 2 in 10, the margin preset's budget (the margin's 0.4 would retrieve
        # for 7 in 10).
        ("targ", "paper"): {"gate": {"margin": {"threshold": 0.4}, "variance": {"threshold": 0.6}}},
    },
}


def preset_for(model_name: str, method: str, variant: str,
               chosen: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The preset values for this model, method and variant (empty when there is none).

    ``chosen`` is the run's value of each field before presets (the user's, else the variant's,
    else the config's default); a preset of :data:`BY_CHOICE` applies when its field's value there
    is its choice.
    """
    values = dict(PRESETS.get(model_name, {}).get((method, variant), {}))
    for name, by_value in BY_CHOICE.get(model_name, {}).get((method, variant), {}).items():
        if chosen is not None and name in chosen:
            values.update(by_value.get(chosen[name], {}))
    return values


def choice_fields(model_name: str, method: str, variant: str) -> dict[str, tuple[Any, ...]]:
    """The fields whose value picks a preset of :data:`BY_CHOICE` for this model, method and variant, with the
    values that have one.

    A form must treat them first: the value its other controls start at depends on them.
    """
    by_field = BY_CHOICE.get(model_name, {}).get((method, variant), {})
    return {name: tuple(by_value) for name, by_value in by_field.items()}
