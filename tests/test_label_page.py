"""`berds label serve` in a real headless Chromium (the system one, /usr/bin/chromium, driven by Playwright).

One annotator labels 10 pairs by keyboard, skips and undoes, reloads and resumes where they were; a second
annotator in another browser context labels at the same time with their own progress; the server is killed
with SIGKILL and restarted with every label kept; the export reads with ``read_labelled_pairs`` and
``berds judge validate`` accepts it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from berds.trust.labelling import sample_task
from berds.trust.labels import read_labelled_pairs
from conftest import berds_cmd, subprocess_env
from label_fixtures import JUDGE, evaluated_run

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"no system Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def start_server(task: Path, port: int = 0) -> tuple[subprocess.Popen, str]:
    """`berds label serve TASK` as its own process; returns it and the URL it printed."""
    proc = subprocess.Popen(berds_cmd("label", "serve", str(task), "--port", str(port)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env())
    line = proc.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not found:
        proc.kill()
        raise AssertionError(f"no URL in {line!r}: {proc.stderr.read()}")
    return proc, found.group(1)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
    with sync_api.sync_playwright() as p:
        # a fresh profile per launch (Playwright's temporary user-data-dir); no browser download
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


def progress(page) -> str:
    return page.inner_text("#progress")


def shown(page) -> str:
    """The passage as the judge read it, from the page: the text, then the title the page shows above it."""
    body = page.inner_text("#passage")
    return body + " " + page.inner_text("#passage-title") if page.is_visible("#passage-title") else body


def wait_progress(page, text: str) -> None:
    page.wait_for_function("t => document.getElementById('progress').textContent === t", arg=text, timeout=10_000)


def test_label_by_keyboard_resume_two_annotators_and_kill(tmp_path, browser):
    evaluated_run(tmp_path / "run")
    task, _ = sample_task([tmp_path / "run"], questions=3, seed=3, k=3, out=tmp_path / "task")
    n = len(task.pairs)
    assert n >= 14
    proc, url = start_server(tmp_path / "task")
    try:
        alice = browser.new_context().new_page()
        errors: list[str] = []  # e.g. the browser's favicon request answered 404
        alice.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        alice.on("pageerror", lambda e: errors.append(str(e)))
        alice.goto(url)
        alice.fill("#name-input", "alice")
        alice.click("#name-ok")
        wait_progress(alice, f"0 of {n} labelled by you")
        assert shown(alice) == task.pairs[0]["document"]
        # the title stands apart above the text (glued to its end, it read as the last sentence's words)
        title = task.pairs[0]["title"]
        assert title and alice.inner_text("#passage-title") == title
        assert not alice.inner_text("#passage").endswith(title)
        assert alice.is_hidden("#judge")  # the judge's verdict is hidden unless asked
        answers = "yynynnyyny"
        for i, key in enumerate(answers, start=1):
            alice.keyboard.press(key.upper())
            wait_progress(alice, f"{i} of {n} labelled by you")
        alice.keyboard.press("S")  # skip the 11th
        wait_progress(alice, f"10 of {n} labelled by you (1 skipped)")
        assert shown(alice) == task.pairs[11]["document"]
        alice.keyboard.press("U")  # undo the skip: the 11th pair comes back
        wait_progress(alice, f"10 of {n} labelled by you")
        assert shown(alice) == task.pairs[10]["document"]
        alice.keyboard.press("Backspace")  # undo the 10th label
        wait_progress(alice, f"9 of {n} labelled by you")
        assert shown(alice) == task.pairs[9]["document"]
        alice.keyboard.press("Y")  # ... and answer it again (yes, where it was yes)
        wait_progress(alice, f"10 of {n} labelled by you")
        alice.check("#show-judge")
        alice.wait_for_selector("#judge", state="visible")
        want = "yes" if task.pairs[10]["judge_label"] else "no"
        assert alice.inner_text("#judge").endswith(f"says: {want}")
        alice.uncheck("#show-judge")
        alice.wait_for_selector("#judge", state="hidden")

        alice.reload()  # the name is remembered; the page resumes at the first unlabelled pair
        wait_progress(alice, f"10 of {n} labelled by you")
        assert alice.is_hidden("#name-form")
        assert shown(alice) == task.pairs[10]["document"]
        assert not errors, errors

        bob = browser.new_context().new_page()  # another profile: another annotator, at the same time
        bob.goto(url)
        bob.fill("#name-input", "bob")
        bob.click("#name-ok")
        wait_progress(bob, f"0 of {n} labelled by you")
        for i in range(1, 4):
            bob.click("#no")
            alice.keyboard.press("N")
            wait_progress(bob, f"{i} of {n} labelled by you")
            wait_progress(alice, f"{10 + i} of {n} labelled by you")
        assert shown(bob) == task.pairs[3]["document"]

        proc.send_signal(signal.SIGKILL)  # no chance to flush anything: every answer was committed already
        proc.wait(timeout=10)
        alice.keyboard.press("Y")  # the server is gone: the page says the answer was not saved, and why
        alice.wait_for_selector("#error", state="visible")
        assert alice.inner_text("#error").startswith("Not saved: the labelling server does not answer")
        assert progress(alice) == f"13 of {n} labelled by you"
        errors.clear()  # (the refused connection is a console error, as it should be)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        proc, url = start_server(tmp_path / "task", port=port)  # the same origin: the page keeps its name
        alice.reload()
        wait_progress(alice, f"13 of {n} labelled by you")
        bob.reload()
        wait_progress(bob, f"3 of {n} labelled by you")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0 and "labelled per annotator: alice 13, bob 3" in " ".join(out.split())

    # alice answered pairs 0-12 (y y n y n n y y n y, then n n n); bob answered pairs 0-2 no.
    status = subprocess.run(berds_cmd("label", "status", str(tmp_path / "task")), capture_output=True, text=True,
                            env=subprocess_env(COLUMNS="80"))
    assert status.returncode == 0, status.stderr
    assert re.search(r"alice\s*│\s*6\s*│\s*7\s*│\s*0\s*│\s*13 of", status.stdout), status.stdout
    assert "alice / bob" in status.stdout and "2 pair(s) were labelled both yes and no" in status.stdout
    out = tmp_path / "labels.tsv"
    refused = subprocess.run(berds_cmd("label", "export", str(tmp_path / "task"), "--out", str(out)),
                             capture_output=True, text=True, env=subprocess_env())
    assert refused.returncode == 2 and "2 pair(s) were labelled both yes and no" in refused.stderr
    assert not out.exists()
    done = subprocess.run(berds_cmd("label", "export", str(tmp_path / "task"), "--out", str(out), "--conflicts",
                                    "first"), capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    labelled = read_labelled_pairs(out)
    by_pair = {p.extra["pair"]: p for p in labelled}
    assert len(labelled) == 13
    expected = [c == "y" for c in "yynynnyynynnn"]
    assert [by_pair[p["pair"]].label for p in task.pairs[:13]] == expected  # 'first': alice answered first
    assert by_pair[task.pairs[0]["pair"]].extra["annotators"] == "alice,bob"
    assert all(p.document == q["document"] and p.id == q["qid"] for p, q in zip(labelled, task.pairs))
    validated = subprocess.run(berds_cmd("judge", "validate", "--labels", str(out), "--judge", JUDGE, "--no-cache",
                                         "--column", "judge_label", "-q", "--bootstrap", "50"),
                               capture_output=True, text=True, env=subprocess_env(COLUMNS="80"))
    assert validated.returncode == 0, validated.stderr
    assert "13 labelled pairs" in validated.stdout
    # the judge re-judged the exported texts as it did in the evaluation: its verdicts equal judge_label
    from judges_for_tests import OverlapJudge

    verdicts = OverlapJudge().judge(labelled.judge_pairs())
    assert [int(v.label) for v in verdicts] == [int(p.extra["judge_label"]) for p in labelled]


def test_the_all_labelled_card_lines_up_with_the_page(tmp_path, browser):
    """Once every pair is answered the page shows a card in place of the pair's cards: it used to stick out 1em on
    each side of them, with its button on its bottom border."""
    evaluated_run(tmp_path / "run")
    task, _ = sample_task([tmp_path / "run"], questions=1, seed=0, k=1, out=tmp_path / "task")
    proc, url = start_server(tmp_path / "task")
    try:
        page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
        page.goto(url)
        page.fill("#name-input", "alice")
        page.click("#name-ok")
        wait_progress(page, f"0 of {len(task.pairs)} labelled by you")
        cards = page.locator("#question-box").bounding_box()
        for i in range(1, len(task.pairs) + 1):
            page.keyboard.press("Y")
            if i < len(task.pairs):
                wait_progress(page, f"{i} of {len(task.pairs)} labelled by you")
        page.wait_for_selector("#done", state="visible")
        done = page.locator("#done").bounding_box()
        button = page.locator("#done-undo").bounding_box()
        assert abs(done["x"] - cards["x"]) < 1 and abs(done["width"] - cards["width"]) < 1, (done, cards)
        assert done["y"] + done["height"] - (button["y"] + button["height"]) >= 8  # room under the button
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)
