"""DebateQA's answer metrics over an answers file: ``berds answers eval``.

* **P.D.** (perspective diversity, DebateQA § 4 eq. (1)-(2)): for an answer A and the question's gold partial
  answers PA_1..PA_n, ``P.D. = sum_i PPL(PA_i | chatTemplate(Concat(A, "Please restate.")))`` where
  ``PPL(Y|X) = exp(-1/N sum_j log P(y_j | X, y_<j))`` under an evaluator LM. **Lower is better.** Reported
  beside it: ``pd_mean`` (P.D./n, comparable across questions with different n) and ``pd_length_adjusted``
  (see ``length_adjust``), because P.D. falls as answers grow longer.
* **D.A.** (dispute awareness, § 4 eq. (3)): 1 when an instruction-tuned LM, given Table 13's prompt, returns
  "1", else 0. ``da_parse`` decides what counts as returning "1" (``parse_da_reply``).

Scores and replies are cached (``$BERDS_HOME/answers.sqlite``, the judgement-cache format) under
(metric:model id, prompt version, sha256 of the gold text / question, sha256 of the answer), so re-running,
or scoring the same answers against another question file, costs nothing; an interrupted run resumes.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.answers.prompts import AnswerPrompt, da_prompt, pd_prompt
from berds.errors import BerdsError, InputError
from berds.evaluate.cache import JudgementCache
from berds.lazy import quiet_model_loading
from berds.types import JudgePair, Question, Verdict

METRICS = ("pd", "da")
TEMPLATES = ("auto", "chat", "raw")
DA_PARSERS = ("strict", "first-digit", "every-reply-aware")
DA_MAX_NEW_TOKENS = 8  # D.A. reply length; replies cached under it keep the plain prompt version as their key
# What separates the wrapped answer from the scored partial answer when no chat template is used.
RAW_SEPARATOR = "\n"


@dataclass(frozen=True)
class Answer:
    """One model answer to a question (``question`` is the text the answers file carries, if any)."""

    id: str
    answer: str
    question: str = ""
    line: int = 0
    da_label: int | None = None  # a human's D.A. label (1 aware, 0 not), when the file carries one


def read_answers(path: str | Path) -> list[Answer]:
    """An answers jsonl (``{"id", "answer"}`` + optional ``"question"`` and ``"da_label"`` (0/1, a human's
    dispute-awareness label, to check the D.A. judge against) per line); errors name file and line."""
    from berds.io import iter_jsonl

    path = Path(path)
    out: list[Answer] = []
    seen: dict[str, int] = {}
    for line, rec in iter_jsonl(path):
        qid = rec.get("id", rec.get("qid"))
        if qid is None or (isinstance(qid, str) and not qid.strip()):
            raise InputError("record has no 'id'", path=path, line=line,
                             fix='each line needs {"id": QUESTION_ID, "answer": TEXT} (+ optional "question")')
        from berds.questions import record_id

        qid = record_id(qid, what="answer 'id'", path=path, line=line)
        text = rec.get("answer")
        if not isinstance(text, str) or not text.strip():
            raise InputError("record has no 'answer' text (a non-empty string)", path=path, line=line, record=qid)
        question = rec.get("question", "")
        if not isinstance(question, str):
            raise InputError("'question' must be a string", path=path, line=line, record=qid)
        label = rec.get("da_label")
        if label is not None and not isinstance(label, bool) and label not in (0, 1):
            raise InputError(f"'da_label' must be 0 or 1 (or true/false), got {label!r}", path=path, line=line,
                             record=qid)
        if qid in seen:
            raise InputError(f"duplicate answer id (first on line {seen[qid]})", path=path, line=line, record=qid,
                             fix="one answer per question and file; put another model's answers in another file")
        seen[qid] = line
        out.append(Answer(qid, text, question, line, None if label is None else int(label)))
    if not out:
        raise InputError("holds no answers", path=path)
    return out


@dataclass(frozen=True)
class AnswerEvalOptions:
    """How ``evaluate_answers`` runs.

    * ``metrics`` -- ``pd`` and/or ``da``;
    * ``pd_prompt`` -- Table 12's wrapper (``pd1`` = eq. (1)'s "Please restate."); ``template`` -- ``chat``
      (the evaluator's chat template, as in eq. (1)), ``raw`` (the wrapped answer, a newline, then the partial
      answer: for models without a chat template and for the openai backend) or ``auto`` (chat when the
      backend can render one, else raw);
    * ``da_prompt`` -- ``table13`` or ``zero-shot``; ``da_parse`` -- ``strict`` (the reply must be exactly
      "0" or "1"; anything else counts 0 and is reported as unparsed), ``first-digit`` (the first standalone
      0/1 in the reply) or ``every-reply-aware`` (every reply counts 1: reproduces the scoring pitfall the
      issue reports for the published script; never the default);
    * ``batch_size`` -- pairs per backend call (each batch is committed to the cache);
    * ``cache_path`` / ``use_cache``, ``progress``, ``max_new_tokens`` (D.A. reply length).
    """

    metrics: tuple[str, ...] = ("pd",)
    pd_prompt: str = "pd1"
    template: str = "auto"
    da_prompt: str = "table13"
    da_parse: str = "strict"
    batch_size: int = 32
    max_new_tokens: int = DA_MAX_NEW_TOKENS
    cache_path: str | Path | None = None
    use_cache: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        metrics = tuple(dict.fromkeys(m.lower() for m in self.metrics))
        bad = [m for m in metrics if m not in METRICS]
        if not metrics or bad:
            raise BerdsError(f"unknown --metric {', '.join(bad) or '(none)'}; use pd and/or da")
        object.__setattr__(self, "metrics", metrics)
        if self.template not in TEMPLATES:
            raise BerdsError(f"unknown --template {self.template!r}; use one of {', '.join(TEMPLATES)}")
        if self.da_parse not in DA_PARSERS:
            raise BerdsError(f"unknown --da-parse {self.da_parse!r}; use one of {', '.join(DA_PARSERS)}")
        pd_prompt(self.pd_prompt)
        da_prompt(self.da_prompt)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise BerdsError(f"--batch-size (batch_size=) must be a positive integer, got {self.batch_size!r}")
        # checked here, not when D.A. first generates: that came after the model loaded and P.D. was scored
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise BerdsError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")

    def but(self, **changes: Any) -> "AnswerEvalOptions":
        return replace(self, **changes)


# --------------------------------------------------------------------------------------------- D.A.

_DIGIT = re.compile(r"(?<![\w.])([01])(?!\w|\.\d)")


def parse_da_reply(reply: str, mode: str = "strict") -> tuple[int, bool]:
    """``(D.A. value, parsed)`` for an evaluator reply.

    ``strict``: the reply, without surrounding whitespace, quotes and a final period, must be exactly "0"
    or "1" -- what Table 13 asks for ("Your answer should only contain one digit 0 or 1"). ``first-digit``:
    the first standalone 0 or 1 anywhere. Either way a reply without one is ``(0, False)``: eq. (3) scores
    it 0, and the caller counts it as unparsed. ``every-reply-aware``: ``(1, True)`` for any reply.
    """
    if mode == "every-reply-aware":
        return 1, True
    text = reply.strip().strip("\"'`*").rstrip(".").strip()
    if mode == "strict":
        return (int(text), True) if text in ("0", "1") else (0, False)
    if mode == "first-digit":
        match = _DIGIT.search(reply)
        return (int(match.group(1)), True) if match else (0, False)
    raise BerdsError(f"unknown D.A. parse mode {mode!r}; use one of {', '.join(DA_PARSERS)}")


@dataclass
class DAResult:
    value: int
    parsed: bool
    reply: str


def dispute_awareness(llm: Any, items: Sequence[tuple[str, str]], options: AnswerEvalOptions,
                      cache: JudgementCache | None = None, stats: "AnswerStats | None" = None) -> list[DAResult]:
    """D.A. for each ``(question, answer)``: ask ``llm`` with the D.A. prompt, parse the reply."""
    from berds.llm import user_prompt

    prompt = da_prompt(options.da_prompt)
    pairs = [JudgePair(perspective=q, passage=a) for q, a in items]
    judge_id = f"da:{llm.id}"

    def run(batch: list[JudgePair]) -> list[Verdict]:
        texts = [prompt.fill(question=p.perspective, answer=p.passage) for p in batch]
        generations = llm.generate([user_prompt(t) for t in texts], max_new_tokens=options.max_new_tokens)
        return [Verdict(label=parse_da_reply(g.text, "strict")[0] == 1, raw=g.text) for g in generations]

    # a reply cut at another length is another reply: the length is part of the key (the default's key is unchanged)
    version = prompt.version if options.max_new_tokens == DA_MAX_NEW_TOKENS else \
        f"{prompt.version}:max_new_tokens={options.max_new_tokens}"
    verdicts = _cached_batches(pairs, judge_id, version, run, options, cache, stats, "D.A. replies")
    out = []
    for v in verdicts:
        value, parsed = parse_da_reply(v.raw, options.da_parse)
        out.append(DAResult(value, parsed, v.raw))
    return out


# --------------------------------------------------------------------------------------------- P.D.


class PartialAnswerError(BerdsError):
    """The evaluator cannot score a gold partial answer (``problem`` says why, e.g. longer than its context)."""

    def __init__(self, problem: str, partial_answer: str):
        super().__init__(f"a partial answer {problem}: {partial_answer[:60]!r}")
        self.problem, self.partial_answer = problem, partial_answer


@dataclass
class PDResult:
    perplexities: list[float]
    tokens: list[int]
    truncated: bool = False

    @property
    def pd(self) -> float:
        return float(sum(self.perplexities))

    @property
    def pd_mean(self) -> float:
        return self.pd / len(self.perplexities)


def resolve_template(llm: Any, template: str) -> str:
    """``auto`` -> ``chat`` when the backend renders chat templates (transformers, vLLM) and the model has one
    (so GPT-2, one of DebateQA's P.D. evaluators, gets ``raw``), else ``raw``. Checking loads the tokenizer."""
    if template != "auto":
        return template
    render = getattr(llm, "render", None)
    if not callable(render):
        return "raw"
    from berds.llm import user_prompt

    try:
        render(user_prompt("x"))
    except BerdsError as exc:
        if "chat template" in str(exc):
            return "raw"
        raise
    return "chat"


def pd_inputs(prompt: AnswerPrompt, template: str, answer: str) -> Any:
    """The conditioning prompt for one answer: a chat prompt (``chat``) or plain text (``raw``)."""
    from berds.llm import user_prompt

    wrapped = prompt.fill(response=answer)
    return user_prompt(wrapped) if template == "chat" else wrapped + RAW_SEPARATOR


def perspective_diversity(llm: Any, items: Sequence[tuple[str, Sequence[str]]], options: AnswerEvalOptions,
                          cache: JudgementCache | None = None, stats: "AnswerStats | None" = None) -> list[PDResult]:
    """P.D. for each ``(answer, gold partial answers)`` with ``llm`` as the evaluator LM (it must score)."""
    from berds.llm.base import require_scorer

    scorer = require_scorer(llm, "P.D. (perspective diversity)")
    prompt = pd_prompt(options.pd_prompt)
    template = resolve_template(scorer, options.template)
    pairs = [JudgePair(perspective=pa, passage=answer) for answer, golds in items for pa in golds]
    judge_id = f"pd:{scorer.id}"

    def run(batch: list[JudgePair]) -> list[Verdict]:
        try:
            scores = scorer.score([pd_inputs(prompt, template, p.passage) for p in batch], [p.perspective for p in batch])
        except BerdsError as exc:
            if template == "chat" and "chat template" in str(exc):
                raise BerdsError(f"{exc} — or score without one: --template raw") from exc
            # score() names a bad continuation by its place in the batch; say which partial answer it is
            bad = re.match(r"continuation (\d+) (.+)", str(exc), re.DOTALL)
            if bad and int(bad.group(1)) < len(batch):
                raise PartialAnswerError(bad.group(2), batch[int(bad.group(1))].perspective) from exc
            raise
        out = []
        for s in scores:
            detail = {"sum_logprob": s.total, "tokens": len(s.logprobs), "truncated": s.truncated}
            out.append(Verdict(label=True, raw=json.dumps(detail), detail=detail))
        return out

    verdicts = _cached_batches(pairs, judge_id, f"{prompt.version}:{template}", run, options, cache, stats,
                               "P.D. pairs")
    results, i = [], 0
    for _, golds in items:
        chunk = verdicts[i:i + len(golds)]
        i += len(golds)
        details = [v.detail or json.loads(v.raw) for v in chunk]
        results.append(PDResult([math.exp(-d["sum_logprob"] / d["tokens"]) for d in details],
                                [int(d["tokens"]) for d in details], any(d.get("truncated") for d in details)))
    return results


def length_adjust(pd_means: Sequence[float], lengths: Sequence[int]) -> dict[str, Any]:
    """Fit ``log(P.D./n) = a + b * log(answer words)`` by least squares over the answers given.

    Returns the slope ``b``, the Pearson correlation of ``log P.D./n`` with ``log words`` before and after
    adjustment, the mean log length, and ``factors`` with which ``pd_length_adjusted = P.D. * factor`` --
    P.D. moved along the fitted line to the mean answer length. The fit is in-sample: the adjusted values
    are uncorrelated with length *by construction*, over the answers fitted together (pool every model's
    answers in one call to compare models).
    """
    import numpy as np

    y = np.log(np.asarray(pd_means, dtype=float))
    x = np.log(np.maximum(1, np.asarray(lengths, dtype=float)))
    # equal P.D./n everywhere has no correlation to speak of (np.corrcoef warns and gives NaN, which json writes)
    if len(y) < 3 or float(np.std(x)) == 0.0 or float(np.std(y)) == 0.0:
        return {"slope": 0.0, "n": int(len(y)), "pearson_log_length": None, "pearson_log_length_adjusted": None,
                "mean_log_words": float(x.mean()) if len(x) else 0.0, "factors": [1.0] * len(y),
                "note": "too few answers, one length only or one P.D./n only: no adjustment"}
    slope, intercept = np.polyfit(x, y, 1)
    adjusted = y - slope * (x - x.mean())
    return {
        "slope": float(slope), "n": int(len(y)),
        "pearson_log_length": float(np.corrcoef(x, y)[0, 1]),
        "pearson_log_length_adjusted": float(np.corrcoef(x, adjusted)[0, 1]) if np.std(adjusted) > 0 else 0.0,
        "mean_log_words": float(x.mean()),
        "factors": [float(f) for f in np.exp(-slope * (x - x.mean()))],
    }


# ---------------------------------------------------------------------------------------- the run


@dataclass
class AnswerStats:
    pairs: int = 0
    cached: int = 0
    computed: int = 0
    seconds: float = 0.0


def _cached_batches(pairs: list[JudgePair], judge_id: str, version: str, run: Any, options: AnswerEvalOptions,
                    cache: JudgementCache | None, stats: AnswerStats | None, unit: str) -> list[Verdict]:
    """Verdict per pair: from the cache where present, else from ``run(batch)``, committed batch by batch."""
    from berds.evaluate.cache import unique_pairs
    from berds.indexes.base import progress_bar

    needed = unique_pairs(pairs)
    found: dict[tuple[str, str], Verdict] = {}
    if cache is not None:
        for p, v in zip(needed, cache.get_many(judge_id, version, needed)):
            if v is not None:
                found[(p.perspective, p.passage)] = v
    missing = [p for p in needed if (p.perspective, p.passage) not in found]
    started = time.perf_counter()
    if missing:
        with progress_bar(unit.split()[-1], enabled=options.progress) as bar:
            task = bar.add_task(f"{unit} ({judge_id})", total=len(missing))
            for begin in range(0, len(missing), options.batch_size):
                batch = missing[begin:begin + options.batch_size]
                verdicts = run(batch)
                if cache is not None:
                    cache.put_many(judge_id, version, batch, verdicts)
                found.update(((p.perspective, p.passage), v) for p, v in zip(batch, verdicts))
                bar.advance(task, len(batch))
    if stats is not None:
        stats.pairs += len(needed)
        stats.cached += len(needed) - len(missing)
        stats.computed += len(missing)
        stats.seconds += time.perf_counter() - started
    return [found[(p.perspective, p.passage)] for p in pairs]


@dataclass
class AnswerEvalResult:
    """What ``berds answers eval`` reports for one answers file."""

    path: Path
    model: str
    per_answer: list[dict[str, Any]]
    summary: dict[str, Any]
    settings: dict[str, Any]
    stats: dict[str, AnswerStats] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"answers": str(self.path), "model": self.model, "settings": self.settings, "summary": self.summary,
                "work": {k: vars(v) for k, v in self.stats.items()}}


def answer_words(text: str) -> int:
    """Answer length in whitespace-separated words (backend-independent; DebateQA reports model tokens)."""
    return len(text.split())


def match_questions(answers: Sequence[Answer], questions: Mapping[str, Question] | None, path: Path,
                    needs_gold: bool) -> list[Question | None]:
    """The question of each answer; errors name the answers file and line."""
    out: list[Question | None] = []
    for a in answers:
        q = questions.get(a.id) if questions is not None else None
        if questions is not None and q is None:
            raise InputError("answer id is not a question of the question set", path=path, line=a.line, record=a.id,
                             fix="check --questions (and --split): answers are matched to questions by id")
        if q is not None and a.question and " ".join(a.question.split()).lower() != " ".join(q.text.split()).lower():
            raise InputError(f"the answer's 'question' differs from question {a.id!r} of the question set "
                             f"({a.question[:60]!r} vs {q.text[:60]!r})", path=path, line=a.line, record=a.id,
                             fix="check that --questions is the set these answers were written for")
        if needs_gold and (q is None or not q.perspectives):
            raise InputError("P.D. needs the question's gold perspectives (partial answers) and "
                             + ("no --questions were given" if questions is None else "this question has none"),
                             path=path, line=a.line, record=a.id,
                             fix="pass --questions with gold perspectives (DebateQA partial answers), or use --metric da")
        if q is None and not a.question:
            raise InputError("D.A. needs the question text: the record has no 'question' and no --questions were given",
                             path=path, line=a.line, record=a.id)
        out.append(q)
    return out


def evaluate_answers(
    answers: Sequence[str | Path],
    llm: Any,
    *,
    questions: str | Path | Sequence[Question] | None = None,
    split: str = "test",
    options: AnswerEvalOptions | None = None,
    llm_options: Mapping[str, Any] | None = None,
    **changes: Any,
) -> list[AnswerEvalResult]:
    """Score every answers file with the chosen metrics; one result per file.

    ``llm`` is an LLM backend or a ``BACKEND:MODEL`` name (``berds.llm.load_llm_by_name``, with ``llm_options``),
    loaded after the files are read; ``questions`` a
    question source (``berds.questions.load_questions``) or a list of ``Question``. P.D. needs gold
    perspectives; D.A. needs only the question text (from the answers file when no questions are given).
    The P.D. length adjustment is fitted over all files together, so the files' adjusted values compare.
    """
    opts = (options or AnswerEvalOptions()).but(**changes) if changes else (options or AnswerEvalOptions())
    needs_gold = "pd" in opts.metrics
    by_id: dict[str, Question] | None = None
    if questions is not None:
        if isinstance(questions, (str, Path)):
            from berds.questions import load_questions

            loaded = load_questions(questions, split, require_perspectives=needs_gold)
        else:
            loaded = list(questions)
        by_id = {q.id: q for q in loaded}
    files = [Path(p) for p in answers]
    parsed = [(path, read_answers(path)) for path in files]  # bad input fails before any model loads
    matched = [match_questions(items, by_id, path, needs_gold) for path, items in parsed]
    if isinstance(llm, str):
        from berds.llm import load_llm_by_name

        llm = load_llm_by_name(llm, **dict(llm_options or {}))
    cache = JudgementCache(opts.cache_path or _default_cache()) if opts.use_cache else None
    results: list[AnswerEvalResult] = []
    quiet = quiet_model_loading()  # the model loads at the first batch: its bars would print into berds' own
    quiet.__enter__()
    try:
        for (path, items), qs in zip(parsed, matched):
            stats: dict[str, AnswerStats] = {}
            rows: list[dict[str, Any]] = [
                {"id": a.id, "question": q.text if q is not None else a.question, "answer_words": answer_words(a.answer)}
                for a, q in zip(items, qs)]
            if "pd" in opts.metrics:
                stats["pd"] = AnswerStats()
                try:
                    scored = perspective_diversity(llm, [(a.answer, q.perspectives) for a, q in zip(items, qs)], opts,
                                                   cache, stats["pd"])
                except PartialAnswerError as exc:  # the question set's fault: name its file and record
                    q = next(q for q in qs if exc.partial_answer in q.perspectives)
                    raise InputError(f"perspective {q.perspectives.index(exc.partial_answer)} (a P.D. partial answer) "
                                     f"{exc.problem}", path=str(questions) if isinstance(questions, (str, Path)) else None,
                                     record=q.id) from None
                for row, r in zip(rows, scored):
                    row.update(pd=r.pd, pd_mean=r.pd_mean, perplexities=r.perplexities, gold_tokens=r.tokens,
                               **({"truncated": True} if r.truncated else {}))
            if "da" in opts.metrics:
                stats["da"] = AnswerStats()
                aware = dispute_awareness(llm, [(row["question"], a.answer) for row, a in zip(rows, items)], opts,
                                          cache, stats["da"])
                for row, r, a in zip(rows, aware, items):
                    row.update(da=r.value, da_reply=r.reply, da_parsed=r.parsed)
                    if a.da_label is not None:
                        row["da_label"] = a.da_label
            settings = _settings(opts, llm)
            if by_id is not None:  # so a file that answers only part of the set says so (its means are over fewer)
                settings["questions"] = {"source": str(questions) if isinstance(questions, (str, Path)) else None,
                                         "count": len(by_id)}
            results.append(AnswerEvalResult(path, llm.id, rows, {}, settings, stats))
    finally:
        quiet.__exit__(None, None, None)
        if cache is not None:
            cache.close()
    if "pd" in opts.metrics:
        every = [row for r in results for row in r.per_answer]
        fit = length_adjust([row["pd_mean"] for row in every], [row["answer_words"] for row in every])
        for row, factor in zip(every, fit.pop("factors")):
            row["pd_length_adjusted"] = row["pd"] * factor
        for r in results:
            r.settings["length_adjustment"] = {**fit, "pooled_files": len(results)}
    for r in results:
        r.summary = summarise(r.per_answer, opts.metrics)
    return results


def _default_cache() -> Path:
    from berds.io import home_dir

    return home_dir() / "answers.sqlite"


def _settings(opts: AnswerEvalOptions, llm: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"metrics": list(opts.metrics)}
    if "pd" in opts.metrics:
        p = pd_prompt(opts.pd_prompt)
        out["pd"] = {"prompt": p.name, "prompt_version": p.version, "template": resolve_template(llm, opts.template),
                     "source": p.source, "lower_is_better": True}
    if "da" in opts.metrics:
        p = da_prompt(opts.da_prompt)
        out["da"] = {"prompt": p.name, "prompt_version": p.version, "parse": opts.da_parse, "source": p.source,
                     "max_new_tokens": opts.max_new_tokens}
    return out


def summarise(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> dict[str, Any]:
    """Means over answers (and the D.A. unparsed count)."""
    n = len(rows)
    out: dict[str, Any] = {"answers": n, "mean_answer_words": sum(r["answer_words"] for r in rows) / n if n else 0.0}
    if "pd" in metrics:
        for key in ("pd", "pd_mean", "pd_length_adjusted"):
            out[key] = sum(r[key] for r in rows) / n if n else float("nan")
        out["truncated"] = sum(1 for r in rows if r.get("truncated"))
    if "da" in metrics:
        out["da"] = sum(r["da"] for r in rows) / n if n else float("nan")
        out["da_unparsed"] = sum(1 for r in rows if not r["da_parsed"])
        labelled = [(r["da"], r["da_label"]) for r in rows if "da_label" in r]
        if labelled:
            out["da_agreement"] = agreement(labelled)
    return out


def agreement(pairs: Sequence[tuple[int, int]]) -> dict[str, float]:
    """D.A. against human labels, as DebateQA § E.1 reports it: accuracy and F1 of "aware" (+ P, R, n)."""
    tp = sum(1 for p, g in pairs if p and g)
    fp = sum(1 for p, g in pairs if p and not g)
    fn = sum(1 for p, g in pairs if not p and g)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {"n": len(pairs), "accuracy": sum(1 for p, g in pairs if p == g) / len(pairs),
            "precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0}


def write_answer_outputs(result: AnswerEvalResult, out_dir: str | Path) -> dict[str, Path]:
    """``metrics.json`` (settings + summary) and ``per_answer.jsonl`` in ``out_dir``."""
    from berds.io import write_json, write_jsonl

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "per_answer": out / "per_answer.jsonl"}
    write_json(paths["metrics"], result.to_json())
    write_jsonl(paths["per_answer"], result.per_answer)
    return paths


def answers_stem(path: Path) -> str:
    """The file name without its answers-file suffixes (``.jsonl``, ``.json``, ``.gz``): ``model.v1.jsonl`` ->
    ``model.v1``. (Cutting at the first dot made ``model.v1`` and ``model.v2`` the same output folder.)"""
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def answers_output_dir(path: Path, out: str | Path | None, n_files: int) -> Path:
    """``--out`` (a sub-folder per file when several), else ``ANSWERS.answers-eval/`` beside the file."""
    if out is not None:
        return Path(out) / answers_stem(path) if n_files > 1 else Path(out)
    return path.with_name(answers_stem(path) + ".answers-eval")


def answers_table(results: Sequence[AnswerEvalResult]) -> Any:
    """A rich table: one row per answers file."""
    from rich.table import Table

    metrics = [m for m in METRICS if any(m in r.summary or f"{m}_mean" in r.summary for r in results)]
    models = sorted({r.model for r in results})
    labelled = [r for r in results if "da_agreement" in r.summary and "da" in metrics]
    # the agreement with human labels goes under the table: as a ninth column it cut 'unparsed' at 80 columns
    caption = "\n".join(f"D.A. vs labels, {r.path.name}: accuracy {r.summary['da_agreement']['accuracy']:.2f}, "
                        f"F1 {r.summary['da_agreement']['f1']:.2f} (n={r.summary['da_agreement']['n']})" for r in labelled)
    table = Table(title="DebateQA answer metrics" + (f"\n[dim]evaluator: {models[0]}[/]" if len(models) == 1 else ""),
                  caption=caption or None)
    table.add_column("answers", overflow="fold")
    if len(models) > 1:
        table.add_column("evaluator", overflow="fold")
    for col in ("n", "words"):
        table.add_column(col, justify="right")
    if "pd" in metrics:
        for col in ("P.D. ↓", "P.D./n ↓", "P.D. len-adj ↓"):
            table.add_column(col, justify="right")
    if "da" in metrics:
        table.add_column("D.A. ↑", justify="right")
        table.add_column("unparsed", justify="right")
    for r in results:
        s = r.summary
        row = [r.path.name] + ([r.model] if len(models) > 1 else []) + [str(s["answers"]), f"{s['mean_answer_words']:.0f}"]
        if "pd" in metrics:
            row += [f"{s['pd']:.2f}", f"{s['pd_mean']:.2f}", f"{s['pd_length_adjusted']:.2f}"]
        if "da" in metrics:
            row += [f"{100 * s['da']:.1f}%", str(s["da_unparsed"])]
        table.add_row(*row)
    return table
