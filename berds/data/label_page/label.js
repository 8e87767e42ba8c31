// The berds labelling page: one pair at a time; every answer is stored by the server before the next shows.
"use strict";
(function () {
  const NAME_KEY = "berds-label-annotator";
  const $ = (id) => document.getElementById(id);
  let annotator = localStorage.getItem(NAME_KEY) || "";
  let current = null;      // the pair shown
  let busy = false;        // one request at a time: a key pressed meanwhile is ignored

  function showError(text) {
    $("error").textContent = text;
    $("error").hidden = !text;
  }

  async function call(path, body) {
    const options = body === undefined ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
    let response;
    try {
      response = await fetch(path, options);
    } catch (e) {  // the browser's own words ("Failed to fetch") do not say whether the answer was kept
      throw new Error("Not saved: the labelling server does not answer. Is `berds label serve` still running? " +
                      "Start it again and answer this pair again; every answer counted above is saved.");
    }
    const payload = await response.json().catch(() => ({error: "the server answered " + response.status}));
    if (!response.ok) throw new Error(payload.error || ("the server answered " + response.status));
    return payload;
  }

  function judgeWanted() { return $("show-judge").checked; }

  function render(state) {
    const p = state.progress;
    $("progress").textContent = p.labelled + " of " + p.total + " labelled by you" +
      (p.skipped ? " (" + p.skipped + " skipped)" : "");
    current = state.pair;
    $("labelling").hidden = state.done;
    $("done").hidden = !state.done;
    if (state.done) {
      $("done-text").textContent = "All " + p.total + " pairs are labelled by " + annotator + ". Thank you.";
      return;
    }
    $("question").textContent = current.question;
    $("perspective").textContent = current.perspective;
    $("passage").textContent = current.passage;
    $("passage-title").textContent = current.title || "";  // (the judge read it with the text, as one string)
    $("passage-title").hidden = !current.title;
    $("note").textContent = current.skipped_before ? "You skipped this pair before; answer it now or skip again." : "";
    const judge = $("judge");
    judge.hidden = !current.judge;
    judge.textContent = current.judge ? "judge " + current.judge.id + " says: " + current.judge.label : "";
  }

  async function run(work) {
    if (busy) return;
    busy = true;
    document.body.classList.add("busy");
    try {
      render(await work());
      showError("");
    } catch (e) {
      showError(String(e.message || e));
    } finally {
      busy = false;
      document.body.classList.remove("busy");
    }
  }

  function loadNext() {
    return run(() => call("/api/next?annotator=" + encodeURIComponent(annotator) + (judgeWanted() ? "&judge=1" : "")));
  }

  function answer(value) {
    if (!current) return;
    const pair = current.pair;
    return run(() => call("/api/label", {annotator: annotator, pair: pair, value: value, judge: judgeWanted()}));
  }

  function undo() {
    return run(() => call("/api/undo", {annotator: annotator, judge: judgeWanted()}));
  }

  function start() {
    $("name-form").hidden = true;
    $("who").textContent = "annotator: " + annotator;
    $("change-name").hidden = false;
    loadNext();
  }

  function askName() {
    $("labelling").hidden = true;
    $("done").hidden = true;
    $("name-form").hidden = false;
    $("name-input").value = annotator;
    $("name-input").focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    call("/api/task").then((info) => {
      $("task-info").textContent = info.task + ": " + info.pairs + " pairs of " + info.questions +
        " questions (top " + info.k + ")";
    }).catch((e) => showError(String(e.message || e)));
    $("name-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const name = $("name-input").value.trim();
      if (!name) return;
      annotator = name;
      localStorage.setItem(NAME_KEY, name);
      start();
    });
    $("change-name").addEventListener("click", askName);
    $("yes").addEventListener("click", () => answer("yes"));
    $("no").addEventListener("click", () => answer("no"));
    $("skip").addEventListener("click", () => answer("skip"));
    $("undo").addEventListener("click", undo);
    $("done-undo").addEventListener("click", undo);
    $("show-judge").addEventListener("change", loadNext);
    document.addEventListener("keydown", (event) => {
      if (!annotator || !$("name-form").hidden) return;
      if (event.target instanceof HTMLInputElement && event.target.type !== "checkbox") return;
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      const key = event.key.toLowerCase();
      if (key === "y") answer("yes");
      else if (key === "n") answer("no");
      else if (key === "s") answer("skip");
      else if (key === "u" || key === "backspace") { event.preventDefault(); undo(); }
    });
    if (annotator) start(); else askName();
  });
})();
