"""Probing-RAG's prober: a small head on one intermediate layer's hidden states that says whether the
model's own answer is likely wrong, so that retrieval is needed.

The authors (Baek et al., NAACL 2025 Findings, arXiv 2410.13339; their ``train.py`` and ``exp_rag.py``)
read the residual stream after a decoder layer (``hook_resid_post``) at every generated token, pool the
answer's tokens (mean in training, sum at inference; the prober begins with a LayerNorm, which makes the
two nearly the same), and train the head on whether the no-retrieval answer was correct. Here the head is
their small ``Probe`` form: a LayerNorm and one linear unit (a logistic head), so a trained prober is a
few kilobytes and trains in seconds on a CPU. Its output is P(needs retrieval) = 1 - P(answer correct).

A prober belongs to one model (its hidden size and layer count) and one layer; :func:`load_prober`
finds the one matching the loaded model in the user cache (written by ``python -m explorer train-prober``)
or among the shipped ones, and otherwise refuses with what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.errors import ConfigError

FORMAT = 1
SHIPPED = Path(__file__).resolve().parents[2] / "data" / "probers"


def model_key(config: Any) -> str:
    """The name a prober is filed under: the model's name, else its architecture, with its shape."""
    name = str(getattr(config, "_name_or_path", "") or getattr(config, "model_type", "model"))
    name = name.rstrip("/").split("/")[-1] or "model"
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return f"{safe}-h{config.hidden_size}-l{config.num_hidden_layers}"


def default_layer(num_layers: int) -> int:
    """The layer read when none is given: two thirds of the way up (the authors read layers 6 to 16 of
    Gemma-2B's 18, and report the upper-middle layers as the most informative)."""
    return max(0, min(num_layers - 1, (2 * num_layers) // 3))


@torch.no_grad()
def answer_state(model: nn.Module, prompt_ids: list[int], answer_ids: list[int], layer: int) -> torch.Tensor:
    """The mean over the answer's tokens of the residual stream after decoder layer ``layer``.

    One forward pass over prompt + answer; ``hidden_states[layer + 1]`` is the output of layer
    ``layer`` (index 0 is the embeddings). An empty answer pools the prompt's last position.
    """
    ids = list(prompt_ids) + list(answer_ids)
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True, use_cache=False)
    states = out.hidden_states[layer + 1][0].float()
    start = len(prompt_ids) if answer_ids else len(ids) - 1
    return states[start:].mean(dim=0).cpu()


class ProberHead(nn.Module):
    """LayerNorm then one logistic unit: the logit of P(needs retrieval)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x)).squeeze(-1)


@dataclass
class Prober:
    """A trained head with what it was trained on (its manifest)."""

    head: ProberHead
    layer: int
    key: str
    manifest: dict[str, Any] = field(default_factory=dict)

    @torch.no_grad()
    def probability(self, state: torch.Tensor) -> float:
        """P(needs retrieval) for one pooled hidden state."""
        return float(torch.sigmoid(self.head(state.float().unsqueeze(0)))[0])

    def save(self, folder: Path) -> Path:
        """Write ``<folder>/<key>/head.pt`` (a plain tensor dict) and ``manifest.json``."""
        target = folder / self.key
        target.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().clone() for k, v in self.head.state_dict().items()}
        torch.save(tensors, target / "head.pt")
        manifest = {**self.manifest, "format": FORMAT, "layer": self.layer, "key": self.key,
                    "hidden_size": int(self.head.linear.in_features)}
        (target / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        return target


def read_prober(folder: Path) -> Prober:
    """Load a prober folder written by :meth:`Prober.save`."""
    manifest = json.loads((folder / "manifest.json").read_text())
    head = ProberHead(int(manifest["hidden_size"]))
    head.load_state_dict(torch.load(folder / "head.pt", weights_only=True))
    head.eval()
    return Prober(head=head, layer=int(manifest["layer"]), key=str(manifest["key"]), manifest=manifest)


def user_folder() -> Path:
    from explorer.paths import cache_dir

    return cache_dir("probers")


def load_prober(config: Any, *, folder: Path | None = None) -> Prober:
    """The prober for this model: ``folder`` if given, else the user cache, else the shipped ones."""
    key = model_key(config)
    places = [folder] if folder is not None else [user_folder(), SHIPPED]
    for place in places:
        if place is not None and (place / key / "manifest.json").is_file():
            prober = read_prober(place / key)
            if prober.layer >= config.num_hidden_layers:
                break
            return prober
    shipped = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir()) if SHIPPED.is_dir() else []
    raise ConfigError(f"no Probing-RAG prober matches this model ({key}); shipped probers: "
                      f"{', '.join(shipped) or 'none'}", where="model",
                      fix="train one for it with `python -m explorer train-prober --model <the model>` "
                          "(a few minutes on a CPU), or pick a model that has a shipped prober")


def fit_head(states: torch.Tensor, labels: torch.Tensor, *, seed: int, steps: int = 300,
             lr: float = 0.05, weight_decay: float = 0.01) -> ProberHead:
    """Train the head on pooled states and labels (1 = needs retrieval) by full-batch AdamW.

    Deterministic given ``seed``: the initial weights come from a generator seeded with it and every
    step sees the whole batch in order, so the same data and seed give the same weights.
    """
    gen = torch.Generator().manual_seed(seed)
    head = ProberHead(states.shape[1])
    with torch.no_grad():
        bound = 1.0 / states.shape[1] ** 0.5
        head.linear.weight.copy_(torch.rand(head.linear.weight.shape, generator=gen) * 2 * bound - bound)
        head.linear.bias.zero_()
    positives = float(labels.sum())
    negatives = len(labels) - positives
    weight = torch.tensor(negatives / positives if positives and negatives else 1.0)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=weight)  # balance the classes: few small-model answers are right
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    head.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(head(states.float()), labels.float())
        loss.backward()
        opt.step()
    head.eval()
    return head
