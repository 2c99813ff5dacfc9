// Runs an admin action on every matching job: one batch per request, until done or stopped.
// Without JavaScript the page's Continue button runs one batch per click.
"use strict";
(function () {
  const form = document.getElementById("ojs-bulk-form");
  if (!form || form.dataset.finished === "true") {
    return;
  }
  const state = document.getElementById("ojs-bulk-state");
  const processed = document.getElementById("ojs-bulk-processed");
  const total = document.getElementById("ojs-bulk-total");
  const progress = document.getElementById("ojs-bulk-progress");
  const summary = document.getElementById("ojs-bulk-summary");
  const status = document.getElementById("ojs-bulk-status");
  const stop = document.getElementById("ojs-bulk-stop");
  const resume = document.getElementById("ojs-bulk-continue");
  let running = false;
  let stopping = false;

  function show(data) {
    state.value = data.state;
    processed.textContent = data.processed;
    total.textContent = data.total;
    progress.max = Math.max(data.total, 1);
    progress.value = data.processed;
    summary.textContent = data.message;
  }

  async function run() {
    running = true;
    stopping = false;
    resume.hidden = true;
    stop.hidden = false;
    status.textContent = "Running…";
    try {
      for (;;) {
        const body = new FormData(form);
        body.set("ojs_format", "json");
        const response = await fetch(window.location.href, {
          method: "POST",
          body: body,
          credentials: "same-origin",
          headers: {"X-Requested-With": "XMLHttpRequest"},
        });
        if (!response.ok) {
          throw new Error("the server answered " + response.status);
        }
        const data = await response.json();
        show(data);
        if (data.finished) {
          form.dataset.finished = "true";
          stop.hidden = true;
          status.textContent = "Done.";
          return;
        }
        if (stopping) {
          status.textContent = "Stopped. Continue resumes after the last job acted on.";
          break;
        }
      }
    } catch (error) {
      status.textContent = "Interrupted (" + error.message + "). Continue resumes after the last job acted on.";
    }
    running = false;
    stop.hidden = true;
    resume.hidden = false;
  }

  stop.addEventListener("click", function () {
    stopping = true;
    status.textContent = "Stopping after this batch…";
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (!running) {
      run();
    }
  });
  run();
})();
