"""``berds judge train``: fine-tune a LoRA perspective detector the way the BERDS study made its evaluator.

The study (paper, Appendix A.5) fine-tuned Mistral-7B-Instruct-v0.2 with LoRA on ~3K (document, perspective)
pairs labelled by GPT-4 (one-shot prompt), with AdamW, a linear schedule, learning rate 1e-4, warmup ratio 0.1,
2 epochs and weight decay 0.001, choosing the checkpoint by F1 on 100 author-labelled dev pairs. Its adapter is
rank 64, alpha 16, on all seven projections (q, k, v, o, gate, up, down). What the paper does not say — the
LoRA dropout, the batch size per step, the maximum length — berds chooses and records (``TrainSettings``;
docs/llm.md lists which is which).

One training example is the judge's own prompt (the study's zero-shot prompt, ``berds.judges.prompts``, system
turn dropped for Mistral as at evaluation) rendered by the model's chat template, followed by the assistant's
answer ``Yes`` or ``No`` and EOS; the loss is on the answer tokens only. Labels come from a labelled-pairs file
(``berds.trust.labels``: human labels) or, for distillation, from another judge's verdicts in the judgement
cache (``from_cache``: the study trained on GPT-4's labels).

A seeded, question-disjoint share of the questions is held out; after training the new judge answers those
pairs through berds' own judging path and is scored like ``berds judge validate`` does (F1, accuracy, with
bootstrap intervals and n). The output folder — adapter, tokenizer and ``berds-training.json`` — appears
complete or not at all, and loads as a judge by path: ``--judge transformers:DIR``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError
from berds.lazy import require

MANIFEST = "berds-training.json"
SEVEN_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TrainSettings:
    """Fine-tuning settings. ``study`` marks those the paper gives; the others are berds' choices."""

    learning_rate: float = 1e-4  # study
    warmup_ratio: float = 0.1  # study
    epochs: float = 2.0  # study
    weight_decay: float = 0.001  # study
    lora_r: int = 64  # study's adapter
    lora_alpha: int = 16  # study's adapter
    lora_dropout: float = 0.1  # not published: berds' choice
    target_modules: tuple[str, ...] = SEVEN_PROJECTIONS  # study's adapter
    batch_size: int = 8  # not published (8 A40s): berds' choice, examples per optimizer step
    max_length: int = 2048  # not published: longer examples are an error, never silently cut
    dev_share: float = 0.2  # share of questions held out (question-disjoint)
    seed: int = 0
    device: str | None = None  # cuda when available
    dtype: str = "auto"  # bfloat16 on GPU, float32 on CPU
    max_steps: int | None = None  # stop early (tests, speed checks)
    gradient_checkpointing: bool = False  # trades speed for memory on long examples
    checkpoint_seconds: float = 600.0  # training state saved this often (and when interrupted): a rerun resumes

    def check(self) -> None:
        for name, low in (("learning_rate", 0.0), ("epochs", 0.0)):
            if not getattr(self, name) > low:
                raise BerdsError(f"{name} must be > {low}, got {getattr(self, name)!r}")
        if not 0.0 <= self.warmup_ratio < 1.0 or not 0.0 <= self.lora_dropout < 1.0 or self.weight_decay < 0:
            raise BerdsError("warmup_ratio and lora_dropout must be in [0, 1), weight_decay >= 0")
        if not 0.0 <= self.dev_share < 1.0:
            raise BerdsError(f"dev share must be in [0, 1), got {self.dev_share!r}")
        for name in ("lora_r", "lora_alpha", "batch_size", "max_length"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise BerdsError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not self.checkpoint_seconds >= 0:
            raise BerdsError(f"checkpoint_seconds must be >= 0, got {self.checkpoint_seconds!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise BerdsError(f"max_steps must be a positive integer, got {self.max_steps!r}")


@dataclass
class TrainResult:
    out: str
    base: str
    labels_source: str
    train_pairs: int
    train_questions: int
    dev_pairs: int
    dev_questions: int
    steps: int
    tokens: int
    seconds: float
    losses: list[float]
    dev: dict[str, Any] = field(default_factory=dict)  # JudgeValidity.to_json() of the trained judge on the dev pairs
    dev_against_file: dict[str, Any] | None = None  # distillation: the same predictions against the file's labels
    judge_id: str = ""
    resumed_from_step: int | None = None  # the checkpoint's step when an interrupted training was resumed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainCheckpoint:
    """Where ``lora_train`` keeps its state so that an interrupted training resumes: ``folder/state.pt`` holds the
    adapter, the optimizer, the schedule, the losses and the random state after the last finished step, written
    atomically every ``TrainSettings.checkpoint_seconds`` of training and when interrupted (Ctrl-C, SIGTERM) between
    steps. It is used only by the training whose ``fingerprint`` (base, prompt, settings, every example) it was
    written for."""

    folder: Path
    fingerprint: str
    resumed_from_step: int | None = None  # set by lora_train when it resumes

    @property
    def path(self) -> Path:
        return self.folder / "state.pt"

    def load(self, torch: Any) -> dict[str, Any] | None:
        """The saved state, or None when there is none; another training's state is refused, never used."""
        if not self.path.is_file():
            return None
        try:  # weights_only: tensors, numbers and lists, never code (the file could have been replaced)
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # (a file cut short by a crash mid-write cannot exist: it is written atomically)
            # torch's first sentence only: the rest of its message advises loading with weights_only=False
            said = str(exc).split(". ")[0].splitlines()[0] if str(exc) else ""
            raise BerdsError(f"{self.path}: not a training checkpoint berds can read ({type(exc).__name__}: "
                             f"{said}) — delete {self.folder} to start the training over") from None
        if state.get("fingerprint") != self.fingerprint:
            raise BerdsError(f"{self.folder} holds the checkpoint of another training (other labels, base, prompt "
                             "or settings): run the same command as before to resume it, or delete the folder to "
                             "start this one over")
        return state

    def save(self, torch: Any, state: dict[str, Any]) -> None:
        from berds.io import atomic_write

        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.path, "wb", encoding=None) as f:
            torch.save({**state, "fingerprint": self.fingerprint}, f)


def training_fingerprint(base: str, prompt: str, settings: TrainSettings,
                         examples: Sequence[tuple[list[int], list[int]]]) -> str:
    """SHA-256 of what decides a training's steps: the base, the prompt, the settings (not the device) and every
    example's tokens and loss mask, so a checkpoint resumes only the training it was written for."""
    import hashlib

    digest = hashlib.sha256(json.dumps({"base": base, "prompt": prompt, "settings": {
        k: v for k, v in asdict(settings).items() if k not in ("device", "checkpoint_seconds")}},
        sort_keys=True).encode())
    for ids, labels in examples:
        digest.update(json.dumps([ids, labels]).encode())
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------ data


def question_split(questions: Sequence[str], dev_share: float, seed: int) -> set[str]:
    """The held-out questions: ``round(dev_share x questions)`` of them (at least one when dev_share > 0 and
    there are two or more), drawn with ``random.Random(seed)`` from the distinct questions in sorted order, so
    the split does not depend on the file's row order."""
    distinct = sorted(set(questions))
    if dev_share <= 0 or len(distinct) < 2:
        return set()
    n = min(len(distinct) - 1, max(1, round(dev_share * len(distinct))))
    return set(random.Random(seed).sample(distinct, n))


def teacher_labels(labelled: Any, judge_id: str, *, cache_path: str | None = None,
                   prompt_version: str | None = None) -> tuple[list[bool], str]:
    """The verdicts judge ``judge_id`` left in the judgement cache for every pair of ``labelled`` (distillation).

    ``prompt_version`` may be left out when the cache holds that judge under one prompt version only. A pair
    without a cached verdict is an error naming how many and the fix (judge them first)."""
    from berds.evaluate.cache import JudgementCache

    with JudgementCache(cache_path) as cache:
        versions = [(prompt, n) for judge, prompt, n in cache.judges() if judge == judge_id]
        if not versions:
            known = sorted({judge for judge, _, _ in cache.judges()})
            # a judge *name* (`embedded`) is not the id its verdicts are cached under (`embedded:v2-...`)
            meant = [j for j in known if j.startswith(judge_id) and j[len(judge_id):][:1] in (":", "|", "#", "+")]
            hint = f"; did you mean {meant[0]!r}?" if len(meant) == 1 else ""
            raise BerdsError(f"{cache.path}: no verdicts of judge {judge_id!r} in the judgement cache (judges there: "
                             f"{', '.join(known[:5]) or 'none'}){hint} — --from-cache takes the judge id the cache "
                             f"stores (`berds cache info --cache {cache.path}` lists them); to add a judge's "
                             f"verdicts, judge the pairs first: `berds judge validate --labels FILE --judge NAME`")
        if prompt_version is None:
            if len(versions) > 1:
                raise BerdsError(f"judge {judge_id!r} has verdicts under {len(versions)} prompt versions "
                                 f"({', '.join(p for p, _ in versions)}) — name one with --from-cache-prompt")
            prompt_version = versions[0][0]
        verdicts = cache.get_many(judge_id, prompt_version, labelled.judge_pairs())
    missing = [p for p, v in zip(labelled.pairs, verdicts) if v is None]
    if missing:
        raise InputError(f"{len(missing)} of {len(verdicts)} pairs have no verdict of {judge_id!r} "
                         f"(prompt {prompt_version}) in the cache",
                         path=labelled.path, line=missing[0].line,
                         fix="judge them first (`berds judge validate --labels FILE --judge NAME` caches every verdict)")
    return [bool(v.label) for v in verdicts], f"cache:{judge_id}|{prompt_version}"


def training_example(tokenizer: Any, messages: list[dict[str, str]], answer: str, *,
                     chat_template: str | None = None) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` of one example: the prompt exactly as the judge sends it at evaluation
    (``prompt_token_ids``), then the answer and EOS as the chat template writes an assistant turn; labels are
    -100 (no loss) on the prompt. Where the template's full conversation does not begin with the prompt's own
    tokens, the answer is tokenised on its own and EOS appended."""
    from berds.llm.shared import prompt_token_ids

    prompt = prompt_token_ids(tokenizer, messages, chat_template=chat_template)
    answer_ids: list[int] | None = None
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if template and messages[0]["role"] != "plain":
        try:
            full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": answer}], tokenize=False,
                                                 chat_template=template)
            ids = list(tokenizer(full, add_special_tokens=False)["input_ids"])
            if ids[:len(prompt)] == prompt and len(ids) > len(prompt):
                answer_ids = ids[len(prompt):]
        except Exception:  # a template that rejects an assistant turn: the plain way below
            answer_ids = None
    if answer_ids is None:
        answer_ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
        if tokenizer.eos_token_id is not None:
            answer_ids.append(tokenizer.eos_token_id)
    return prompt + answer_ids, [-100] * len(prompt) + answer_ids


# ------------------------------------------------------------------------------------------ training


def train_judge(
    labels: str | Path,
    base: str,
    out: str | Path,
    *,
    settings: TrainSettings = TrainSettings(),
    from_cache: str | None = None,
    from_cache_prompt: str | None = None,
    cache_path: str | None = None,
    prompt: str = "zero-shot",
    overwrite: bool = False,
    progress: bool = True,
    n_boot: int = 1000,
) -> TrainResult:
    """Fine-tune a LoRA on ``base`` to answer the judge prompt for the pairs of ``labels``; write it to ``out``.

    See the module docstring. Returns the figures the summary table shows (also in ``out/berds-training.json``).
    """
    from berds.llm.shared import looks_like_local_path

    settings.check()
    if looks_like_local_path(base):  # the adapter records its base: absolute, so it loads from anywhere
        base = str(Path(base).expanduser().resolve())
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BerdsError(f"{out} is a file — --out names the folder the adapter is written to")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise BerdsError(f"{out} exists and is not empty — choose another --out or pass --overwrite")
    # One training per --out at a time: the checkpoint folder is locked while this one runs (released at exit, even
    # by SIGKILL), so a second command into the same folder is refused instead of writing over the first's state.
    out.parent.mkdir(parents=True, exist_ok=True)
    checkpoint_folder = out.parent / f".{out.name}.checkpoint"
    checkpoint_folder.mkdir(exist_ok=True)
    from berds.io import lock_folder

    lock = lock_folder(checkpoint_folder, what="berds judge train")
    try:
        return _train_locked(labels, base, out, checkpoint_folder, settings=settings, from_cache=from_cache,
                             from_cache_prompt=from_cache_prompt, cache_path=cache_path, prompt=prompt,
                             progress=progress, n_boot=n_boot)
    finally:
        if lock is not None:
            os.close(lock)
        with contextlib.suppress(OSError):  # (an empty one: training never reached a step; a checkpoint stays)
            checkpoint_folder.rmdir()


def _train_locked(labels: str | Path, base: str, out: Path, checkpoint_folder: Path, *, settings: TrainSettings,
                  from_cache: str | None, from_cache_prompt: str | None, cache_path: str | None, prompt: str,
                  progress: bool, n_boot: int) -> TrainResult:
    """``train_judge`` once its arguments are checked and its checkpoint folder is locked."""
    from berds.judges.llm_judge import LLMJudge
    from berds.llm.transformers_backend import TransformersLLM
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.validate import score_predictions

    labelled = read_labelled_pairs(labels)
    if len(labelled) == 0:
        raise InputError("no labelled pairs to train on", path=labels)
    gold = [p.label for p in labelled.pairs]
    source = f"labels:{labelled.path}"
    if from_cache:
        targets, source = teacher_labels(labelled, from_cache, cache_path=cache_path, prompt_version=from_cache_prompt)
    else:
        targets = gold
    dev_questions = question_split([p.question for p in labelled.pairs], settings.dev_share, settings.seed)
    train_rows = [i for i, p in enumerate(labelled.pairs) if p.question not in dev_questions]
    dev_rows = [i for i, p in enumerate(labelled.pairs) if p.question in dev_questions]

    torch = require("torch", extra="llm", purpose="fine-tuning a judge")
    require("peft", extra="llm", purpose="LoRA fine-tuning")  # (before minutes of loading, not after)
    # The base model loads exactly as the judge will load it (same tokenizer handling, device, precision).
    loader = TransformersLLM(base, device=settings.device, dtype=settings.dtype).load()
    tokenizer, model = loader.tokenizer, loader.model
    # The judge's messages, system turn dropped for Mistral as at evaluation (LLMJudge decides as it will later).
    shaping = LLMJudge(loader, prompt=prompt)
    pairs = labelled.judge_pairs()
    examples = []
    for i in train_rows:
        ids, lab = training_example(tokenizer, shaping.render(pairs[i]), "Yes" if targets[i] else "No")
        if len(ids) > settings.max_length:
            raise InputError(f"the training example is {len(ids)} tokens, over max_length {settings.max_length}",
                             path=labelled.path, line=labelled.pairs[i].line,
                             fix="raise --max-length (memory permitting) or shorten the document")
        examples.append((ids, lab))
    if not examples:
        raise BerdsError("every question was held out for validation — lower --dev-share or label more questions")

    # An interrupted training (Ctrl-C, SIGTERM, a crash) resumes from its last checkpoint when run again.
    checkpoint = TrainCheckpoint(checkpoint_folder, training_fingerprint(base, prompt, settings, examples))
    model, losses, tokens, seconds = lora_train(model, examples, settings, pad_id=tokenizer.pad_token_id,
                                                progress=progress, checkpoint=checkpoint)

    # Written next to the output, then moved into place: the folder appears complete or not at all.
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    result = TrainResult(
        out=str(out), base=base, labels_source=source, train_pairs=len(train_rows),
        train_questions=len({labelled.pairs[i].question for i in train_rows}), dev_pairs=len(dev_rows),
        dev_questions=len(dev_questions), steps=len(losses), tokens=tokens, seconds=round(seconds, 2), losses=losses,
        resumed_from_step=checkpoint.resumed_from_step,
    )
    manifest = {"kind": "berds judge train", "base": base, "labels": {"path": labelled.path,
                                                                       "sha256": labelled.sha256},
                "targets": source, "prompt": prompt, "settings": asdict(settings),
                "dev_questions": sorted(dev_questions)}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    # Free the training copy before the judge loads the saved folder (two copies of a 7B base, 14.5 GB each in
    # bf16, do not fit beside the judging on most GPUs). shaping holds the loader too; the collection is for any
    # reference cycle left (cheap next to loading a model), so empty_cache finds the blocks free.
    del model, loader, shaping
    gc.collect()
    if str(settings.device or "").startswith("cuda") or torch.cuda.is_available():
        torch.cuda.empty_cache()
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    shutil.rmtree(checkpoint.folder, ignore_errors=True)  # (the trained adapter is in place: nothing to resume)

    # The held-out questions, judged through the path every berds judge takes.
    judge = LLMJudge(TransformersLLM(str(out), device=settings.device, dtype=settings.dtype), prompt=prompt)
    result.judge_id = judge.id
    if dev_rows:
        verdicts = judge.judge([pairs[i] for i in dev_rows])
        groups = [labelled.pairs[i].question for i in dev_rows]
        row = score_predictions("trained judge", [targets[i] for i in dev_rows], verdicts, judge_id=judge.id,
                                prompt_version=judge.prompt_version, n_boot=n_boot, seed=settings.seed, groups=groups)
        result.dev = row.to_json()
        if from_cache:
            result.dev_against_file = score_predictions(
                "trained judge vs the file's labels", [gold[i] for i in dev_rows], verdicts, judge_id=judge.id,
                prompt_version=judge.prompt_version, n_boot=n_boot, seed=settings.seed, groups=groups).to_json()
    manifest["result"] = {k: v for k, v in result.to_json().items() if k != "losses"}
    manifest["losses"] = losses
    from berds.io import write_json

    write_json(out / MANIFEST, manifest)
    return result


def lora_train(model: Any, examples: Sequence[tuple[list[int], list[int]]], settings: TrainSettings, *,
               pad_id: int | None = None, progress: bool = False,
               checkpoint: TrainCheckpoint | None = None) -> tuple[Any, list[float], int, float]:
    """Wrap ``model`` in a fresh LoRA (``settings``) and train it on ``(input_ids, labels)`` examples: AdamW,
    linear schedule with warmup, shuffled batches of ``settings.batch_size`` (seeded), right-padded with no loss
    on padding. Returns ``(peft model, loss per step, tokens seen, seconds)``. ``train_judge`` and
    benchmarks/gpu_check.py (the 7B training-speed row) both call this.

    With ``checkpoint``, a saved state is resumed (the same steps follow as without the interruption: the batch
    order is replayed from the seed, the random state restored) and the state is saved every
    ``settings.checkpoint_seconds`` and when interrupted between an update and the next."""
    torch = require("torch", extra="llm", purpose="fine-tuning a judge")
    peft = require("peft", extra="llm", purpose="LoRA fine-tuning")
    transformers = require("transformers", extra="llm", purpose="fine-tuning a judge")
    torch.manual_seed(settings.seed)
    targets = [m for m in settings.target_modules if _has_module(model, m)]
    if not targets:
        raise BerdsError(f"none of the projections {', '.join(settings.target_modules)} exist in this model")
    config = peft.LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                             target_modules=targets, task_type="CAUSAL_LM")
    model.train()
    if settings.gradient_checkpointing:  # (transformers 5.x's name; older ones have only the second)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.enable_input_require_grads()
    from berds.lazy import quiet_peft

    with quiet_peft():
        model = peft.get_peft_model(model, config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    per_epoch = math.ceil(len(examples) / settings.batch_size)
    total = max(1, math.ceil(per_epoch * settings.epochs))
    if settings.max_steps:
        total = min(total, settings.max_steps)
    optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(settings.warmup_ratio * total), total)
    rng = random.Random(settings.seed)
    pad = pad_id if pad_id is not None else 0
    losses: list[float] = []
    tokens = 0
    on_gpu = str(model.device).startswith("cuda")
    from berds.llm.transformers_backend import out_of_memory_errors

    out_of_memory = out_of_memory_errors()
    done, earlier_seconds = 0, 0.0  # steps and seconds of the training before an interruption
    saved = checkpoint.load(torch) if checkpoint is not None else None
    if saved is not None:
        peft.set_peft_model_state_dict(model, saved["adapter"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        done, losses, tokens, earlier_seconds = saved["step"], list(saved["losses"]), saved["tokens"], saved["seconds"]
        checkpoint.resumed_from_step = done
    rng_state = saved["rng"] if saved is not None else _rng_state(torch, on_gpu)
    _set_rng_state(torch, rng_state)
    started = last_save = time.perf_counter()

    def state_now() -> dict[str, Any]:  # (between steps only: rng_state is the random state after the last one)
        return {"step": step, "losses": losses, "tokens": tokens, "rng": rng_state,
                "seconds": earlier_seconds + time.perf_counter() - started,
                "adapter": peft.get_peft_model_state_dict(model), "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict()}

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("training"), BarColumn(bar_width=20), MofNCompleteColumn(),
                  TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn(), disable=not progress) as bar:
        task = bar.add_task("train", total=total, loss="-", completed=done)
        step, updating = 0, False
        try:
            while step < total:
                order = list(range(len(examples)))
                rng.shuffle(order)
                for begin in range(0, len(order), settings.batch_size):
                    if step >= total:
                        break
                    if step < done:  # resumed: the batches of the steps before the checkpoint, in the same order
                        step += 1
                        continue
                    batch = [examples[j] for j in order[begin:begin + settings.batch_size]]
                    width = max(len(ids) for ids, _ in batch)
                    # right padding: positions count from each example's first token; padded slots carry no loss
                    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
                    target = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
                    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
                    try:
                        loss = model(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device),
                                     labels=target.to(model.device)).loss
                        loss.backward()
                    except out_of_memory:
                        raise _out_of_memory(step, len(batch), width, settings) from None
                    value = float(loss.detach())  # (a sync per step: the bar shows the loss)
                    updating = True  # an interruption from here to the end of the step: no state saved for it
                    optimizer.step()
                    schedule.step()
                    optimizer.zero_grad(set_to_none=True)
                    losses.append(value)
                    tokens += int(mask.sum())
                    step += 1
                    rng_state = _rng_state(torch, on_gpu)
                    updating = False
                    bar.update(task, advance=1, loss=f"{value:.3f}")
                    if checkpoint is not None and step < total and \
                            time.perf_counter() - last_save >= settings.checkpoint_seconds:
                        checkpoint.save(torch, state_now())
                        last_save = time.perf_counter()
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the steps finished so far are kept for the next run
            if checkpoint is not None and not updating and step > done:
                checkpoint.save(torch, state_now())
            raise
    if on_gpu:
        torch.cuda.synchronize()
    return model, losses, tokens, earlier_seconds + time.perf_counter() - started


def _rng_state(torch: Any, on_gpu: bool) -> dict[str, Any]:
    """torch's random state (LoRA's dropout draws from it), with every GPU's when training on one."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if on_gpu else []}


def _set_rng_state(torch: Any, state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def _out_of_memory(step: int, examples: int, width: int, settings: TrainSettings) -> BerdsError:
    """The one-line error for a training batch the GPU could not hold (torch's own names no remedy)."""
    remedies = ([] if settings.gradient_checkpointing else ["--gradient-checkpointing"]) + [
        "a smaller --batch-size", "a shorter --max-length (longer examples are then refused, never cut)"]
    return BerdsError(f"out of GPU memory at training step {step + 1}: a batch of {examples} examples padded to "
                      f"{width} tokens did not fit{'' if settings.gradient_checkpointing else ' without gradient checkpointing'}"
                      f" — train again with {', or '.join(remedies)}; nothing was saved")


def _has_module(model: Any, suffix: str) -> bool:
    return any(name.split(".")[-1] == suffix for name, _ in model.named_modules())


def _questions(n: int) -> str:
    return f"{n} question" if n == 1 else f"{n} questions"


def result_table(result: TrainResult) -> Any:
    """The summary table (fits 80 columns)."""
    from rich.table import Table

    table = Table(title=f"judge train -> {result.out}", title_justify="left")
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("labels", result.labels_source)
    table.add_row("train", f"{result.train_pairs} pairs, {_questions(result.train_questions)}")
    table.add_row("held out", f"{result.dev_pairs} pairs, {_questions(result.dev_questions)} (question-disjoint)")
    rate = result.tokens / result.seconds if result.seconds else float("nan")
    resumed = f"; resumed at step {result.resumed_from_step}" if result.resumed_from_step else ""
    table.add_row("steps", f"{result.steps} ({result.tokens} tokens, {result.seconds:.1f} s, {rate:.0f} tokens/s"
                           f"{resumed})")
    if result.losses:
        table.add_row("loss", f"{result.losses[0]:.3f} first, {result.losses[-1]:.3f} last")
    for title, row in (("held-out F1", result.dev), ("vs file labels", result.dev_against_file)):
        if not row:
            continue
        m, ci = row["metrics"], row["ci95"]
        f1 = f"F1 {100 * m['f1']:.1f} [{100 * ci['f1'][0]:.1f}, {100 * ci['f1'][1]:.1f}]" if "f1" in ci else \
            f"F1 {100 * m['f1']:.1f}"
        acc = f"acc {100 * m['accuracy']:.1f}"
        if "accuracy" in ci:
            acc += f" [{100 * ci['accuracy'][0]:.1f}, {100 * ci['accuracy'][1]:.1f}]"
        table.add_row(title, f"{f1}, {acc}, n={row['n']}")
    table.add_row("judge", f"--judge transformers:{result.out}")
    return table
