"""``berds judge train``: a LoRA perspective detector fine-tuned the study's way, on a tiny random Mistral on CPU,
then loaded back as a judge by its folder (``transformers:DIR``) and used like any other."""

from __future__ import annotations

import json

import pytest

from llm_fixtures import tiny_mistral  # noqa: F401
from cli_fixtures import cli as run_cli

pytest.importorskip("peft")

WORDS = "cities bike lanes safer streets shops sales vaccines work taxes school uniforms help students".split()


def write_labels(path, label: int, questions: int = 4, per_question: int = 4):
    rows = ["question\tid\tdocument\tperspective\tlabel"]
    for q in range(questions):
        for d in range(per_question):
            doc = " ".join(WORDS[(q + d + k) % len(WORDS)] for k in range(6))
            rows.append(f"Question {q}?\tq{q}\t{doc}\t{WORDS[q]} are safer\t{label}")
    path.write_text("\n".join(rows) + "\n")
    return path


def cli(capsys, monkeypatch, *args):
    return run_cli(capsys, monkeypatch, *args, columns=100)


def test_an_example_is_the_judges_prompt_then_the_answer_with_loss_on_the_answer_only(tiny_mistral):
    from berds.judges.llm_judge import LLMJudge
    from berds.llm.shared import prompt_token_ids
    from berds.llm.transformers_backend import TransformersLLM
    from berds.trust.training import training_example
    from berds.types import JudgePair

    llm = TransformersLLM(str(tiny_mistral), device="cpu").load()
    messages = LLMJudge(llm).render(JudgePair("bike lanes are safer", "Cities that built bike lanes"))
    assert [m["role"] for m in messages] == ["user"]  # the system turn dropped for Mistral, as at evaluation
    ids, labels = training_example(llm.tokenizer, messages, "Yes")
    prompt = prompt_token_ids(llm.tokenizer, messages)
    assert ids[:len(prompt)] == prompt and labels[:len(prompt)] == [-100] * len(prompt)
    answer = ids[len(prompt):]
    assert labels[len(prompt):] == answer and answer[-1] == llm.tokenizer.eos_token_id
    assert llm.tokenizer.decode(answer, skip_special_tokens=True).strip() == "Yes"


def test_question_split_is_seeded_disjoint_and_independent_of_row_order():
    from berds.trust.training import question_split

    questions = [f"q{i}" for i in range(10)] * 3
    held = question_split(questions, 0.2, seed=1)
    assert len(held) == 2 and held == question_split(list(reversed(questions)), 0.2, seed=1)
    assert question_split(questions, 0.0, seed=1) == set()
    assert len(question_split(["a", "b"], 0.9, seed=0)) == 1  # one question always left to train on


@pytest.mark.slow
def test_train_on_labels_reload_as_a_judge_and_validate(tiny_mistral, tmp_path, capsys, monkeypatch):
    """Every pair labelled Yes, a high learning rate and a few dozen steps: the trained judge must answer Yes,
    where the random base model does not."""
    from berds.judges.catalogue import load_judge
    from berds.trust.labels import read_labelled_pairs

    labels = write_labels(tmp_path / "labels.tsv", 1)
    pairs = read_labelled_pairs(labels).judge_pairs()
    base_texts = [v.raw for v in load_judge(f"transformers:{tiny_mistral}", device="cpu").judge(pairs)]
    assert not all(t == "Yes" for t in base_texts)
    out = tmp_path / "trained"
    code, stdout, err = cli(capsys, monkeypatch, "judge", "train", "--labels", str(labels), "--base", str(tiny_mistral),
                            "--out", str(out), "--learning-rate", "0.02", "--epochs", "20", "--batch-size", "4",
                            "--max-steps", "40", "--lora-r", "4", "--device", "cpu", "--quiet")
    assert code == 0, err
    assert "12 pairs, 3 questions" in stdout and "4 pairs, 1 question (question-disjoint)" in stdout
    # the held-out F1 is in the table: no "berds has no held-out figure" beside it, but what is left to measure
    assert "no held-out figure" not in err
    assert "held-out F1 above comes from 1 question of the training file" in " ".join(err.split())
    assert f"--judgetransformers:{out}" in "".join(err.split()), err
    assert "F1 100.0" in stdout and "n=4" in stdout
    assert (out / "adapter_config.json").is_file() and not (tmp_path / ".trained.partial").exists()
    manifest = json.loads((out / "berds-training.json").read_text())
    assert manifest["settings"]["lora_alpha"] == 16 and manifest["result"]["steps"] == 40
    assert set(manifest["settings"]["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"}
    assert manifest["losses"][-1] < manifest["losses"][0]
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and set(adapter_config["target_modules"]) == set(manifest["settings"]["target_modules"])
    # by its folder alone: the base it names, with it as the adapter
    judge = load_judge(f"transformers:{out}", device="cpu")
    assert judge.llm.adapter == str(out) and judge.llm.model_name == str(tiny_mistral.resolve())
    verdicts = judge.judge(pairs)
    assert all(v.label for v in verdicts), [v.raw for v in verdicts]
    # and validated like any other judge
    code, stdout, err = cli(capsys, monkeypatch, "judge", "validate", "--labels", str(labels), "--judge",
                            f"transformers:{out}", "-o", "device=cpu", "--no-cache", "--bootstrap", "0", "--quiet")
    assert code == 0, err
    assert "16 labelled pairs" in stdout
    # an existing folder is not overwritten by accident
    code, _, err = cli(capsys, monkeypatch, "judge", "train", "--labels", str(labels), "--base", str(tiny_mistral),
                       "--out", str(out), "--max-steps", "1", "--device", "cpu", "--quiet")
    assert code == 2 and "exists and is not empty" in err


@pytest.mark.slow
def test_distillation_trains_on_the_teachers_cached_verdicts_not_the_files_labels(tiny_mistral, tmp_path):
    from berds.errors import BerdsError, InputError
    from berds.evaluate.cache import JudgementCache
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.training import TrainSettings, train_judge
    from berds.types import Verdict

    labels = write_labels(tmp_path / "labels.tsv", 0)  # the humans said No everywhere
    labelled = read_labelled_pairs(labels)
    cache_path = tmp_path / "cache.sqlite"
    settings = TrainSettings(learning_rate=0.02, epochs=20, batch_size=4, max_steps=40, lora_r=4, device="cpu")
    with JudgementCache(cache_path) as cache:  # the teacher (say GPT-4) said Yes, but only to some pairs so far
        cache.put_many("openai:gpt-4|parse=berds-study", "zero-shot-v1", labelled.judge_pairs()[:10],
                       [Verdict(label=True, p_yes=None, raw="Yes")] * 10)
    with pytest.raises(InputError, match=r"6 of 16 pairs have no verdict of 'openai:gpt-4\|parse=berds-study'"):
        train_judge(labels, str(tiny_mistral), tmp_path / "a", settings=settings,
                    from_cache="openai:gpt-4|parse=berds-study", cache_path=str(cache_path), progress=False)
    with pytest.raises(BerdsError, match="no verdicts of judge 'gpt-5'"):
        train_judge(labels, str(tiny_mistral), tmp_path / "a", settings=settings, from_cache="gpt-5",
                    cache_path=str(cache_path), progress=False)
    with JudgementCache(cache_path) as cache:
        cache.put_many("openai:gpt-4|parse=berds-study", "zero-shot-v1", labelled.judge_pairs()[10:],
                       [Verdict(label=True, p_yes=None, raw="Yes")] * 6)
    result = train_judge(labels, str(tiny_mistral), tmp_path / "b", settings=settings,
                         from_cache="openai:gpt-4|parse=berds-study", cache_path=str(cache_path), progress=False,
                         n_boot=0)
    assert result.labels_source == "cache:openai:gpt-4|parse=berds-study|zero-shot-v1"
    assert result.dev["metrics"]["accuracy"] == 1.0  # it learnt the teacher's Yes ...
    assert result.dev_against_file["metrics"]["accuracy"] == 0.0  # ... which the file's labels call wrong


def test_an_adapter_folder_without_its_base_named_is_one_clear_error(tmp_path):
    from berds.errors import BerdsError
    from berds.llm.transformers_backend import TransformersLLM

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"r": 4, "peft_type": "LORA"}')
    with pytest.raises(BerdsError, match=r"names no base_model_name_or_path — load it as transformers:BASE -o adapter="):
        TransformersLLM(str(folder))
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(BerdsError, match="not a readable adapter config"):
        TransformersLLM(str(folder))


def test_bad_training_settings_are_refused_before_any_model_loads(tmp_path):
    from berds.errors import BerdsError
    from berds.trust.training import TrainSettings, train_judge

    labels = write_labels(tmp_path / "labels.tsv", 1)
    for bad, message in ((TrainSettings(dev_share=1.0), "dev share must be in"),
                         (TrainSettings(learning_rate=0.0), "learning_rate must be > 0"),
                         (TrainSettings(lora_r=0), "lora_r must be a positive integer")):
        with pytest.raises(BerdsError, match=message):
            train_judge(labels, "/nonexistent/base", tmp_path / "out", settings=bad, progress=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BerdsError, match="is a file"):
        train_judge(labels, "/nonexistent/base", tmp_path / "file", progress=False)


def test_a_judge_name_given_to_from_cache_is_pointed_at_its_cached_id(tmp_path):
    # `--from-cache embedded` after `judge validate --judge embedded` said "pass the judge id it prints", which
    # validate does not print; the id it needs was in the list, unmarked
    from berds.errors import BerdsError
    from berds.evaluate.cache import JudgementCache
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.training import teacher_labels
    from berds.types import Verdict

    labelled = read_labelled_pairs(write_labels(tmp_path / "labels.tsv", 0))
    cache_path = tmp_path / "cache.sqlite"
    with JudgementCache(cache_path) as cache:
        for judge in ("embedded:v2-minilm-abc+stance-def", "openai:gpt-4|parse=berds-study"):
            cache.put_many(judge, "v1", labelled.judge_pairs(), [Verdict(label=True, p_yes=None, raw="Yes")] * 16)
    with pytest.raises(BerdsError, match=r"did you mean 'embedded:v2-minilm-abc\+stance-def'\? — --from-cache takes "
                                         r"the judge id the cache stores \(`berds cache info --cache "):
        teacher_labels(labelled, "embedded", cache_path=str(cache_path))
    with pytest.raises(BerdsError) as refused:  # no near name: no guess
        teacher_labels(labelled, "gpt-5", cache_path=str(cache_path))
    assert "did you mean" not in str(refused.value)
    labels, source = teacher_labels(labelled, "openai:gpt-4|parse=berds-study", cache_path=str(cache_path))
    assert labels == [True] * 16 and source == "cache:openai:gpt-4|parse=berds-study|v1"


def test_the_training_copy_is_freed_before_the_trained_judge_loads(tiny_mistral, tmp_path, monkeypatch):
    """On a GPU the base model trained (14.5 GB for the study's 7B in bf16) must be gone before the held-out
    questions are judged by the saved folder, loaded afresh: two copies side by side is what a 24-40 GB card
    cannot hold. Checked without collecting garbage here: train_judge itself must let go of it."""
    import weakref

    from berds.llm.transformers_backend import TransformersLLM
    from berds.trust.training import TrainSettings, train_judge

    labels = write_labels(tmp_path / "labels.tsv", 1, questions=2, per_question=2)
    trained: list[weakref.ref] = []
    alive_when_the_judge_loads: list[bool] = []
    real_load = TransformersLLM.load

    def load(self):
        fresh = self._model is None
        if fresh and trained:  # the second model loaded: the trained judge, for the held-out questions
            alive_when_the_judge_loads.append(trained[0]() is not None)
        done = real_load(self)
        if fresh and not trained:
            trained.append(weakref.ref(done._model))
        return done

    monkeypatch.setattr(TransformersLLM, "load", load)
    settings = TrainSettings(max_steps=1, batch_size=2, lora_r=4, device="cpu")
    result = train_judge(labels, str(tiny_mistral), tmp_path / "out", settings=settings, progress=False, n_boot=0)
    assert result.dev_pairs == 2 and result.dev["n"] == 2
    assert alive_when_the_judge_loads == [False]


def test_gradient_checkpointing_from_the_cli_and_an_out_of_memory_batch_is_one_line(tiny_mistral, tmp_path, capsys,
                                                                                    monkeypatch):
    """`--gradient-checkpointing` reaches the training (recorded in the manifest, the model told); a batch the GPU
    cannot hold (torch's CUDA OOM, raised here on CPU from the model's forward) is one line naming the remedies."""
    import torch
    import transformers

    labels = write_labels(tmp_path / "labels.tsv", 1, questions=2, per_question=2)
    enabled: list[bool] = []
    name = next(n for n in ("activation_checkpointing_enable", "gradient_checkpointing_enable")
                if hasattr(transformers.PreTrainedModel, n))  # (transformers 5.x's name, else the older one)
    real_enable = getattr(transformers.PreTrainedModel, name)
    monkeypatch.setattr(transformers.PreTrainedModel, name,
                        lambda self, *a, **k: (enabled.append(True), real_enable(self, *a, **k))[1])
    code, _, err = cli(capsys, monkeypatch, "judge", "train", "--labels", str(labels), "--base", str(tiny_mistral),
                       "--out", str(tmp_path / "gc"), "--max-steps", "1", "--batch-size", "2", "--lora-r", "4",
                       "--device", "cpu", "--gradient-checkpointing", "--quiet")
    assert code == 0, err
    assert enabled == [True]
    assert json.loads((tmp_path / "gc" / "berds-training.json").read_text())["settings"]["gradient_checkpointing"]

    def out_of_memory(self, *args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.MistralForCausalLM, "forward", out_of_memory)
    code, _, err = cli(capsys, monkeypatch, "judge", "train", "--labels", str(labels), "--base", str(tiny_mistral),
                       "--out", str(tmp_path / "oom"), "--max-steps", "1", "--batch-size", "2", "--lora-r", "4",
                       "--device", "cpu", "--quiet")
    line = " ".join(err.split())
    assert code == 2, err
    assert "out of GPU memory at training step 1: a batch of 2 examples padded to" in line, line
    assert "did not fit without gradient checkpointing — train again with --gradient-checkpointing, or a smaller " \
           "--batch-size" in line and "Traceback" not in err
    assert not (tmp_path / "oom").exists() or not any((tmp_path / "oom").iterdir())


def _adapter(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _stop_at_forward(monkeypatch, call: int, error: BaseException) -> None:
    """The model's forward raises ``error`` on its ``call``-th call (a crash or Ctrl-C in that training step)."""
    import transformers

    real = transformers.MistralForCausalLM.forward
    calls = []

    def forward(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transformers.MistralForCausalLM, "forward", forward)


def test_an_interrupted_training_resumes_to_the_same_adapter(tiny_mistral, tmp_path, capsys, monkeypatch):
    """A crash (checkpoints after every step) and a Ctrl-C (the state saved as it stops) both resume, when the
    same command runs again, to exactly the adapter and losses of the training that was never interrupted; the
    checkpoint is gone once the adapter is in place, and another training's checkpoint is refused."""
    import torch

    from berds.errors import BerdsError
    from berds.trust.training import TrainSettings, train_judge

    labels = write_labels(tmp_path / "labels.tsv", 1)
    settings = TrainSettings(max_steps=6, batch_size=2, lora_r=4, device="cpu", checkpoint_seconds=0)
    whole = train_judge(labels, str(tiny_mistral), tmp_path / "whole", settings=settings, progress=False, n_boot=0)
    assert whole.steps == 6 and whole.resumed_from_step is None
    assert not (tmp_path / ".whole.checkpoint").exists()

    # a crash in step 4: the checkpoint of step 3 is on disk, the output is not
    with monkeypatch.context() as patch:
        _stop_at_forward(patch, 4, RuntimeError("the machine went away"))
        with pytest.raises(RuntimeError, match="went away"):
            train_judge(labels, str(tiny_mistral), tmp_path / "crashed", settings=settings, progress=False, n_boot=0)
    assert (tmp_path / ".crashed.checkpoint" / "state.pt").is_file() and not (tmp_path / "crashed").exists()
    other = TrainSettings(max_steps=6, batch_size=2, lora_r=4, device="cpu", checkpoint_seconds=0, learning_rate=3e-4)
    with pytest.raises(BerdsError, match=r"holds the checkpoint of another training .* delete the folder"):
        train_judge(labels, str(tiny_mistral), tmp_path / "crashed", settings=other, progress=False, n_boot=0)
    state = tmp_path / ".crashed.checkpoint" / "state.pt"
    kept = state.read_bytes()
    state.write_bytes(b"not a checkpoint")  # (replaced by hand: read as weights only, never run; refused in one line)
    with pytest.raises(BerdsError, match=r"state.pt: not a training checkpoint berds can read \(UnpicklingError: "
                                         r"Weights only load failed\) — delete .*\.crashed\.checkpoint to start"):
        train_judge(labels, str(tiny_mistral), tmp_path / "crashed", settings=settings, progress=False, n_boot=0)
    state.write_bytes(kept)
    resumed = train_judge(labels, str(tiny_mistral), tmp_path / "crashed", settings=settings, progress=False, n_boot=0)
    assert resumed.resumed_from_step == 3 and resumed.losses == whole.losses
    want = _adapter(tmp_path / "whole")
    got = _adapter(tmp_path / "crashed")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert not (tmp_path / ".crashed.checkpoint").exists()

    # Ctrl-C in step 3 with no periodic checkpoint yet: the state after step 2 is saved as the command stops
    args = ["judge", "train", "--labels", str(labels), "--base", str(tiny_mistral), "--out", str(tmp_path / "stopped"),
            "--max-steps", "6", "--batch-size", "2", "--lora-r", "4", "--device", "cpu", "--quiet",
            "--checkpoint-seconds", "3600", "--dev-share", "0.2", "--seed", "0"]
    with monkeypatch.context() as patch:
        _stop_at_forward(patch, 3, KeyboardInterrupt())
        code, _, err = cli(capsys, monkeypatch, *args)
    assert code == 130 and "training state after the last finished step is kept" in " ".join(err.split()), err
    assert (tmp_path / ".stopped.checkpoint" / "state.pt").is_file()
    code, stdout, err = cli(capsys, monkeypatch, *args)
    assert code == 0, err
    assert "resumed at step 2" in stdout
    got = _adapter(tmp_path / "stopped")
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert json.loads((tmp_path / "stopped" / "berds-training.json").read_text())["losses"] == whole.losses


def test_a_second_training_into_the_same_out_at_once_is_refused(tiny_mistral, tmp_path):
    """The checkpoint folder is locked while a training runs; one that stopped before any step leaves none behind."""
    import os

    from berds.errors import BerdsError, InputError
    from berds.io import lock_folder
    from berds.trust.training import TrainSettings, train_judge

    labels = write_labels(tmp_path / "labels.tsv", 1)
    settings = TrainSettings(max_steps=1, batch_size=2, lora_r=4, device="cpu")
    folder = tmp_path / ".out.checkpoint"
    folder.mkdir()
    held = lock_folder(folder, what="berds judge train")  # (another process, as far as flock can tell)
    try:
        with pytest.raises(InputError, match="another berds judge train is writing into this folder right now"):
            train_judge(labels, str(tiny_mistral), tmp_path / "out", settings=settings, progress=False, n_boot=0)
    finally:
        os.close(held)
    empty = tmp_path / "empty.tsv"
    empty.write_text("question\tid\tdocument\tperspective\tlabel\n")
    with pytest.raises(BerdsError):  # refused after the lock was taken: no pairs to train on
        train_judge(empty, str(tiny_mistral), tmp_path / "out", settings=settings, progress=False, n_boot=0)
    assert not folder.exists()
