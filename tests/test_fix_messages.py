"""Messages that carry the fix for the mistakes a researcher makes with files and models the explorer has not
seen: a question file given as a corpus and a corpus as questions, an encoder-decoder folder, and a method
that reads attention weights asked of a set-up that has none (found before any model loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer import cli
from explorer.engine.loader import load_model
from explorer.errors import ModelError


@pytest.fixture()
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a case that loads a model: each mistake here is visible without one."""
    import explorer.runtime

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for input that could be refused without one")

    monkeypatch.setattr(explorer.runtime, "open_engine", refuse)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    from transformers import AutoConfig

    questions = tmp_path / "bamboogle.jsonl"
    questions.write_text('{"idx": 0, "question": "Who founded Rome?", "answer": "Romulus"}\n', encoding="utf-8")
    corpus = tmp_path / "hotpotqa_train_corpus.json"
    corpus.write_text(json.dumps([{"idx": 0, "title": "Rome", "text": "Rome was founded by Romulus."}]),
                      encoding="utf-8")
    t5 = tmp_path / "t5-small-copy"
    AutoConfig.for_model("t5", d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8).save_pretrained(t5)
    (t5 / "model.safetensors").write_bytes(b"\0" * 16)  # weights present: only the kind of model is wrong
    mamba = tmp_path / "mamba-folder"
    AutoConfig.for_model("mamba", hidden_size=16, num_hidden_layers=2, state_size=4).save_pretrained(mamba)
    return {"questions": questions, "corpus": corpus, "t5": t5, "mamba": mamba}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_each_mistake_is_named_with_its_fix_before_a_model_loads(files, capsys, no_model) -> None:
    code, text = _run(["corpus", "info", str(files["questions"])], capsys)
    assert code == 1 and "this is a question file, not a corpus" in text
    assert f"python -m explorer eval --dataset {files['questions']} --corpus CORPUS" in text

    code, text = _run(["eval", "--dataset", str(files["corpus"]), "--methods", "wo"], capsys)
    assert code == 1 and f"{files['corpus']} is a corpus (passage) file, not a question file" in text
    assert f"--corpus {files['corpus']}, and the questions with --dataset QUESTION_FILE" in text

    # DRAGIN reads attention weights: flash kernels have none, and a Mamba folder has no attention layer.
    # Both are refused before the model is resolved (the first model path does not even exist).
    code, text = _run(["run", "--method", "dragin", "--question", "Q?", "--attn", "flash_attention_2",
                       "--model", str(files["t5"] / "nosuch")], capsys)
    assert code == 1 and "dragin (paper) reads attention weights, but --attn flash_attention_2" in text
    assert "--attn auto" in text and "does not exist" not in text
    code, text = _run(["eval", "--dataset", "demo", "--methods", "wo,dragin:reference", "--attn", "flex_attention",
                       "--db", str(files["t5"].parent / "runs.sqlite")], capsys)
    assert code == 1 and "dragin (reference) reads attention weights, but --attn flex_attention" in text
    code, text = _run(["run", "--method", "dragin", "--question", "Q?", "--model", str(files["mamba"])], capsys)
    assert code == 1 and "(mamba) has no attention layer" in text and "flare, seakr, drrag" in text
    assert "no model weights" not in text  # the folder has none, but the method was refused first
    assert "Traceback" not in text


def test_an_encoder_decoder_folder_is_refused_as_one(files) -> None:
    with pytest.raises(ModelError) as info:
        load_model(str(files["t5"]))
    message = f"{info.value.message} {info.value.fix}"
    assert "'t5'" in message and "encoder-decoder (sequence-to-sequence) model" in message
    assert "encoders like BERT" not in message and "decoder-only" in info.value.fix


def test_a_json_list_question_file_given_as_a_corpus_gets_a_command_with_its_path(tmp_path: Path, capsys,
                                                                               no_model) -> None:
    questions = tmp_path / "my questions.json"
    questions.write_text(json.dumps([{"id": "q1", "question": "Who founded Rome?", "answer": "Romulus"}]),
                         encoding="utf-8")
    code, text = _run(["corpus", "info", str(questions)], capsys)
    assert code == 1 and "this is a question file, not a corpus" in text and f"{questions} [item 0]" in text
    assert f"python -m explorer eval --dataset '{questions}' --corpus CORPUS" in text  # the path, quoted
    assert f"--dataset '{questions}' [item 0]" not in text and "0]'" not in text
