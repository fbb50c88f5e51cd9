"""Torch's thread count on a shared machine: the documented rule, the user's choices, and --threads on a command."""

from __future__ import annotations

import pytest
import torch

from explorer import cli
from explorer.threads import apply_threads, automatic_threads, choose_threads, usable_cores


@pytest.mark.parametrize("cores,load,ceiling,expected", [
    (16, 0.2, 16, 15),    # an idle machine: every whole free core (the fraction in use is not counted)
    (16, 13.4, 16, 2),    # a busy one: what is left
    (16, 27.0, 16, 1),    # more runnable processes than cores: one thread, never zero
    (32, 0.0, 16, 16),    # never more than torch's own default (one per physical core)
    (2, None, 2, 2),      # no load average on this platform: the cores
])
def test_the_automatic_rule(cores: int, load: float | None, ceiling: int, expected: int) -> None:
    assert automatic_threads(cores, load, ceiling) == expected


def test_the_users_choice_wins_and_a_command_applies_it(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
        auto = choose_threads()
        assert auto.how == "automatic" and 1 <= auto.threads <= usable_cores() and auto.load is not None
        assert choose_threads(3).threads == 3 and choose_threads(3).how == "--threads"
        assert apply_threads(3).threads == 3 and torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert (choose_threads().threads, choose_threads().how) == (1, "OMP_NUM_THREADS")
        torch.set_num_threads(1)
        assert cli.main(["retrieve", "--corpus", "demo", "-k", "1", "--threads", "2", "Lewiston arena"]) == 0
        assert "2 torch threads (--threads)" in capsys.readouterr().err
        assert torch.get_num_threads() == 1  # an in-process caller keeps its own setting afterwards
        with pytest.raises(SystemExit):
            cli.main(["retrieval-metrics", "--threads", "0"])
        assert "give at least 1 thread, or auto" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
