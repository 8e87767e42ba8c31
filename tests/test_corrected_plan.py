"""``berds label plan``: how many questions to label for a target interval width, from a pilot sample."""

from __future__ import annotations

import math

import pytest
import typer

from berds.cli.label_plan import register
from berds.evaluate.evaluation import evaluate_paths
from berds.runs import save_run
from berds.trust.labels import write_labelled_pairs
from berds.trust.ppi import plan_labels, questions_needed
from conftest import make_run
from test_corrected_eval import JUDGE, label_rows

stats = pytest.importorskip("scipy.stats")


def plan_app() -> typer.Typer:
    """An app holding only `label plan`, as berds registers it."""
    app = typer.Typer()
    label_app = typer.Typer()
    register(label_app)
    app.add_typer(label_app, name="label")
    return app


def half_width(n: int, N: int, s: float) -> float:
    return stats.t.ppf(0.975, n - 1) * math.sqrt((1 - n / N) * s * s / n)


def test_questions_needed_is_the_fewest_that_reach_the_width():
    n = questions_needed(0.5, 100, 0.2)
    assert 2 * half_width(n, 100, 0.5) <= 0.2 < 2 * half_width(n - 1, 100, 0.5)
    # the normal-quantile formula with the finite-population correction, n0 / (1 + n0 / N), is close (t adds a few)
    n0 = (1.959964 * 0.5 / 0.1) ** 2
    assert n0 / (1 + n0 / 100) <= n <= n0 / (1 + n0 / 100) + 3
    assert questions_needed(0.0, 100, 0.01) == 2  # a judge that never errs on the pilot: 2 (the table warns)
    assert questions_needed(0.5, 10, 0.001) == 10  # every question labelled gives the exact value
    # questions like these: the judged part's variance over N questions bounds what labels can do
    assert questions_needed(0.3, 50, 0.05, population="superpopulation", s_judged=0.5) is None
    sup = questions_needed(0.3, 2000, 0.1, population="superpopulation", s_judged=0.5)
    z = stats.norm.ppf(0.975)
    assert 2 * z * math.sqrt(0.25 / (2000 - sup) + 0.09 / sup) <= 0.1
    assert 2 * z * math.sqrt(0.25 / (2001 - sup) + 0.09 / (sup - 1)) > 0.1


def test_label_plan_command(tmp_path):
    from typer.testing import CliRunner

    run = make_run(n_questions=6, depth=6, name="tiny")
    folder = save_run(run, tmp_path / "tiny")
    cache = tmp_path / "c.sqlite"
    evaluate_paths([folder], JUDGE, ks=(5, 6), progress=False, cache_path=cache)
    labels = tmp_path / "pilot.tsv"
    from dataclasses import replace

    # the 'human' says No to every pair of q0 and q2: the judge is wrong on some questions, so the spreads are > 0
    write_labelled_pairs(labels, [replace(p, label=False) if p.id in ("q0", "q2") else p
                                  for p in label_rows(run, ["q0", "q1", "q2", "q3"])])
    rows = plan_labels(folder, JUDGE, labels, target_width=20, cache_path=cache)
    assert [r.metric for r in rows] == ["mrecall@5", "precision@5"]
    for r in rows:
        assert r.pilot == 4 and r.N == 6 and r.s_rectifier > 0 and r.s_human > 0
        for s, n in ((r.s_rectifier, r.n_ppi), (r.s_human, r.n_labels_only)):
            assert n == questions_needed(s, 6, 0.2)

    app = plan_app()
    result = CliRunner().invoke(app, ["label", "plan", str(folder), "--labels", str(labels), "--target-width", "20",
                                      "--judge", JUDGE, "--cache", str(cache)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "questions to label" in result.output and "MRecall@5" in result.output
    # at k=6 no pilot question is labelled whole: the row of dashes comes with a note saying why
    result = CliRunner().invoke(app, ["label", "plan", str(folder), "--labels", str(labels), "--target-width", "20",
                                      "--judge", JUDGE, "--cache", str(cache), "--k", "5,6"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "mrecall@6: 0 question(s) of the pilot are labelled whole" in " ".join(result.stderr.split())
    assert "mrecall@5:" not in result.stderr
    assert all(len(line) <= 80 for line in result.stdout.splitlines())  # (the table; notes are one line each)

    # nothing is judged: a run the cache has no verdicts for is refused with what to run
    other = save_run(make_run(n_questions=6, depth=6, name="other"), tmp_path / "other")
    from berds.errors import BerdsError

    with pytest.raises(BerdsError, match="berds eval") as err:
        plan_labels(other, JUDGE, labels, target_width=20, cache_path=tmp_path / "empty.sqlite")
    assert "not in the judgement cache" in str(err.value) and "--overwrite" not in str(err.value)  # (no such option)


def test_plan_table_keeps_the_metric_name_in_80_columns_and_gives_sds_in_points():
    """Three-digit widths and N used to squeeze the metric column to "MRecall…" in 80 columns, and the SDs were
    fractions (0.577) beside widths in points (83.3)."""
    import io

    from rich.console import Console

    from berds.trust.ppi import PlanRow, plan_table

    rows = [PlanRow("mrecall@10", 40, 802, 0.5774, 0.5, 120, 133, 0.833),
            PlanRow("precision@10", 40, 802, 0.342, 0.379, 45, 52, 0.644)]
    buf = io.StringIO()
    Console(file=buf, width=80).print(plan_table(rows, target_width=10))
    text = buf.getvalue()
    assert "MRecall@10" in text and "Prec@10" in text and "…" not in text
    assert "57.7" in text and "37.9" in text and "0.577" not in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_the_run_prevalence_and_bayes_give_the_odds_of_a_true_yes():
    from berds.trust.ppi import ErrorRates, _true_label_odds

    rates = ErrorRates("j", sensitivity=0.8, specificity=0.9, pairs=100)
    q = 0.8 * 0.3 + 0.1 * 0.7  # a run whose true Yes share is 0.3
    ppv, false_omission = _true_label_odds(rates, q)
    assert ppv == pytest.approx(0.24 / q) and false_omission == pytest.approx(0.06 / (1 - q))
    from berds.errors import BerdsError

    with pytest.raises(BerdsError, match="no information to plan from"):
        _true_label_odds(ErrorRates("j", 0.4, 0.5, 10), 0.5)


def _simulated_result(rng, n_questions, sens, spec, prevalence=0.3, m=2, depth=5):
    """A judged 'evaluation' whose truth is drawn pair by pair and whose judge errs at the given rates, pair by
    pair: the model plan_from_error_rates assumes. Returns (result, truth matrices)."""
    from types import SimpleNamespace

    from berds.evaluate.metrics import question_metrics

    truth, support = {}, {}
    for i in range(n_questions):
        t = rng.random((m, depth)) < prevalence
        judged = np.where(t, rng.random(t.shape) < sens, rng.random(t.shape) >= spec)
        truth[f"q{i}"], support[f"q{i}"] = t, judged
    per_question = {q: question_metrics(s, (5,)) for q, s in support.items()}
    return SimpleNamespace(judge_id="sim", ks=(5,), support=support, per_question=per_question), truth


np = pytest.importorskip("numpy")


def test_error_rates_plan_the_spread_a_labelled_pilot_would_measure_when_errors_are_independent():
    from berds.evaluate.metrics import question_metrics
    from berds.trust.ppi import ErrorRates, plan_from_error_rates

    rng = np.random.default_rng(3)
    result, truth = _simulated_result(rng, 400, sens=0.7, spec=0.85)
    rows = {r.metric: r for r in plan_from_error_rates(result, ErrorRates("sim", 0.7, 0.85, 500), target_width=10,
                                                       draws=100)}
    for metric in ("mrecall@5", "precision@5"):
        actual = np.std([question_metrics(truth[q], (5,))[metric] - result.per_question[q][metric]
                         for q in result.per_question], ddof=1)
        row = rows[metric]
        assert row.s_rectifier == pytest.approx(actual, rel=0.12), metric
        assert row.n_ppi == questions_needed(row.s_rectifier, 400, 0.1)
        assert row.n_labels_only is None and row.source == "error rates"
    # a judge that never errs leaves nothing to correct: 2 questions reach any width
    perfect = plan_from_error_rates(result, ErrorRates("sim", 1.0, 1.0, 500), target_width=10, draws=20)
    assert {r.s_rectifier for r in perfect} == {0.0} and {r.n_ppi for r in perfect} == {2}


def test_the_validated_rates_posterior_is_beta_with_uniform_priors():
    from berds.trust.ppi import ErrorRates

    rates = ErrorRates.from_counts("sim", tp=7, fp=2, fn=3, tn=8)
    assert (rates.sensitivity, rates.specificity, rates.pairs) == (0.7, 0.8, 20)
    sens, spec = rates.posterior(np.random.default_rng(0), 200_000)
    for draws, (a, b) in ((sens, (8, 4)), (spec, (9, 3))):  # Beta(tp + 1, fn + 1), Beta(tn + 1, fp + 1)
        assert draws.mean() == pytest.approx(a / (a + b), abs=0.002)
        assert draws.var() == pytest.approx(a * b / ((a + b) ** 2 * (a + b + 1)), rel=0.02)
    (sl, sh), (pl, ph) = rates.interval()
    assert (sl, sh) == pytest.approx(tuple(stats.beta.ppf([0.025, 0.975], 8, 4)))
    assert (pl, ph) == pytest.approx(tuple(stats.beta.ppf([0.025, 0.975], 9, 3)))
    exact = ErrorRates("sim", 0.7, 0.8, 20)  # no counts: the rates are taken as exact
    assert exact.interval() is None and set(exact.posterior(np.random.default_rng(0), 5)[0]) == {0.7}


def test_label_odds_of_a_drawn_judge_that_errs_the_wrong_way_stay_probabilities():
    """A small validation's posterior reaches judges that say Yes less often to supporting pairs than to others;
    their draws still give labels whose Yes share is the prevalence solved from the run's judged Yes share."""
    from berds.trust.ppi import _label_odds

    tpr, fpr, q = np.array([0.3, 0.8, 0.5]), np.array([0.6, 0.1, 0.5]), 0.45
    ppv, false_omission = _label_odds(tpr, fpr, q)
    assert ppv[0] == pytest.approx(0.3 * 0.5 / q) and false_omission[0] == pytest.approx(0.7 * 0.5 / (1 - q))
    assert ppv[0] * q + false_omission[0] * (1 - q) == pytest.approx(0.5)  # π = (q − fpr)/(tpr − fpr) = 0.5
    assert ppv[1] * q + false_omission[1] * (1 - q) == pytest.approx((q - 0.1) / 0.7)
    assert ppv[2] == pytest.approx(q) and false_omission[2] == pytest.approx(q)  # verdicts are noise: π = q
    assert ((0 <= ppv) & (ppv <= 1) & (0 <= false_omission) & (false_omission <= 1)).all()


def test_a_plan_from_validated_rates_carries_their_uncertainty():
    from berds.trust.ppi import ErrorRates, plan_from_error_rates

    result, _ = _simulated_result(np.random.default_rng(5), 200, sens=0.9, spec=0.95)

    def plan(rates, seed=0):
        return {r.metric: r for r in plan_from_error_rates(result, rates, target_width=10, draws=400, seed=seed)}

    point = plan(ErrorRates("sim", 0.7, 0.8, 100_000))
    # 100k validated pairs: the posterior is narrow, the plan is the point-estimate plan (same label draws)
    large = plan(ErrorRates.from_counts("sim", tp=28_000, fn=12_000, tn=48_000, fp=12_000))
    assert large["mrecall@5"].rates["pairs"] == 100_000
    for metric in ("mrecall@5", "precision@5"):
        p, big = point[metric], large[metric]
        assert big.s_rectifier == pytest.approx(p.s_rectifier, rel=0.01), metric
        assert big.s_rectifier_90 == pytest.approx(p.s_rectifier_90, rel=0.02), metric
        assert abs(big.n_ppi - p.n_ppi) <= 1 and abs(big.n_ppi_90 - p.n_ppi_90) <= 1, metric
        assert p.n_ppi_90 >= p.n_ppi  # (the conservative plan is never the smaller one)

    # a judge that made no error on 20 validated pairs: the point estimates call it perfect (2 questions reach any
    # width); its posterior still leaves it room to err, so the plan asks for many more
    perfect = plan(ErrorRates("sim", 1.0, 1.0, 20))
    unsure = plan(ErrorRates.from_counts("sim", tp=10, fn=0, tn=10, fp=0))
    for metric in ("mrecall@5", "precision@5"):
        assert perfect[metric].s_rectifier == 0 and perfect[metric].n_ppi == 2
        assert unsure[metric].s_rectifier > 0.1 and unsure[metric].n_ppi > 20, metric
        assert unsure[metric].n_ppi_90 > unsure[metric].n_ppi, metric
    # 7 of 10 and 8 of 10: the draws spread further than those of the exact rates, so the conservative n lies
    # further above the central one
    few = plan(ErrorRates.from_counts("sim", tp=7, fn=3, tn=8, fp=2))
    for metric in ("mrecall@5", "precision@5"):
        f, p = few[metric], point[metric]
        assert f.s_rectifier_90 - f.s_rectifier > 1.5 * (p.s_rectifier_90 - p.s_rectifier), metric
        assert f.n_ppi_90 - f.n_ppi > p.n_ppi_90 - p.n_ppi, metric
        assert f.rates["sensitivity_ci95"] == pytest.approx(list(stats.beta.ppf([0.025, 0.975], 8, 4)))

    for name, plans in (("exact 0.7/0.8", point), ("100k pairs", large), ("exact 1/1", perfect),
                        ("10/10, 10/10", unsure), ("7/10, 8/10", few)):  # (docs/corrected-estimates.md quotes them)
        print(name, "; ".join(f"{m}: SD {100 * r.s_rectifier:.1f} (90%: {100 * r.s_rectifier_90:.1f}), n {r.n_ppi} "
                              f"(90%: {r.n_ppi_90})" for m, r in plans.items()))
    # the seed fixes the plan; another seed draws another
    again = plan(ErrorRates.from_counts("sim", tp=7, fn=3, tn=8, fp=2))
    assert [vars(r) for r in again.values()] == [vars(r) for r in few.values()]
    other = plan(ErrorRates.from_counts("sim", tp=7, fn=3, tn=8, fp=2), seed=1)
    assert other["precision@5"].s_rectifier != few["precision@5"].s_rectifier


def test_label_plan_from_a_validation_report(tmp_path):
    from typer.testing import CliRunner

    from berds.errors import BerdsError, InputError
    from berds.io import write_json

    run = make_run(n_questions=6, depth=6, name="tiny")
    folder = save_run(run, tmp_path / "tiny")
    cache = tmp_path / "c.sqlite"
    [(_, result, _)] = evaluate_paths([folder], JUDGE, ks=(5,), progress=False, cache_path=cache)
    report = tmp_path / "validate.json"
    write_json(report, {"judges": [{"judge_id": result.judge_id, "counts": {"tp": 40, "fp": 10, "fn": 20, "tn": 130}}]})
    rows = plan_labels(folder, JUDGE, validation=report, target_width=20, cache_path=cache)
    assert [r.source for r in rows] == ["error rates"] * 2 and all(r.s_rectifier > 0 for r in rows)
    with pytest.raises(BerdsError, match="give one of them"):
        plan_labels(folder, JUDGE, target_width=20, cache_path=cache)
    other = tmp_path / "other.json"
    write_json(other, {"judges": [{"judge_id": "someone-else", "counts": {"tp": 1, "fp": 1, "fn": 1, "tn": 1}}]})
    with pytest.raises(InputError, match=r"no validation of the judge .*\(it validated: someone-else\)"):
        plan_labels(folder, JUDGE, validation=other, target_width=20, cache_path=cache)

    app = plan_app()
    done = CliRunner().invoke(app, ["label", "plan", str(folder), "--validation", str(report), "--target-width", "20",
                                    "--judge", JUDGE, "--cache", str(cache)], env={"COLUMNS": "80"})
    assert done.exit_code == 0, (done.output, done.exception)
    flat = " ".join(done.stdout.split())
    assert "rates" in done.stdout and "labels only needs a pilot" in flat
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    # the conservative n in its own column, and the line saying which rates it rests on: 40/60 and 130/140, with
    # the 95% credible intervals of Beta(41, 21) and Beta(131, 11)
    assert "90%" in done.stdout and "width now" not in flat and "judg…" not in done.stdout
    sens, spec = stats.beta.ppf([0.025, 0.975], 41, 21), stats.beta.ppf([0.025, 0.975], 131, 11)
    assert (f"rates: sensitivity 66.7% [{100 * sens[0]:.1f}, {100 * sens[1]:.1f}] (40/60), specificity 92.9% "
            f"[{100 * spec[0]:.1f}, {100 * spec[1]:.1f}] (130/140): 200 validated pairs") in flat
    assert rows[0].n_ppi_90 is not None and rows[0].n_ppi_90 >= rows[0].n_ppi
