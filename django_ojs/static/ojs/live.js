// Refreshes an admin page in place every few seconds: no framework, no full reload.
// <… id="ojs-live" data-mode="fragment" data-url="?live=1" data-seconds="5">: the element's
// content is replaced by what data-url returns (the dashboard).
// <… id="ojs-live" data-mode="list" data-seconds="5">: the changelist's rows and paginator
// are replaced by those of the same page fetched again (the job list). It waits while
// rows are ticked or an action is chosen, so it never changes what an operator acts on.
"use strict";
(function () {
  const root = document.getElementById("ojs-live");
  const seconds = root ? Number(root.dataset.seconds) || 0 : 0;
  if (!seconds) {
    return;
  }
  const list = root.dataset.mode === "list";
  const toggle = document.getElementById("ojs-live-toggle");
  const status = document.getElementById("ojs-live-status");
  let busy = false;

  function operatorIsSelecting() {
    if (document.querySelector("#result_list input.action-select:checked")) {
      return true;
    }
    const across = document.querySelector("#changelist-form input.select-across");
    const action = document.querySelector('#changelist-form select[name="action"]');
    return Boolean((across && across.value === "1") || (action && action.value));
  }

  function swapRows(html) {
    const page = new DOMParser().parseFromString(html, "text/html");
    const fresh = page.querySelector("#result_list tbody");
    const current = document.querySelector("#result_list tbody");
    if (!fresh || !current) {
      // The list became empty, or stopped being empty: its layout changed.
      const freshForm = page.getElementById("changelist-form");
      const currentForm = document.getElementById("changelist-form");
      if (freshForm && currentForm && !fresh !== !current) {
        window.location.reload();
      }
      return;
    }
    // Keep the row checkboxes Django's actions script listens to: give them the new ids.
    const boxes = current.querySelectorAll("input.action-select");
    const rows = fresh.querySelectorAll("tr");
    const sameShape = boxes.length === rows.length;
    if (sameShape) {
      rows.forEach(function (row, i) {
        const box = row.querySelector("input.action-select");
        if (box) {
          boxes[i].value = box.value;
          box.replaceWith(boxes[i]);
        }
      });
    }
    current.replaceWith(document.adoptNode(fresh));
    if (!sameShape && window.Actions) {
      const added = document.querySelectorAll("tr input.action-select");
      if (added.length) {
        window.Actions(added);
      }
    }
    const paginator = page.querySelector("#changelist .paginator");
    const shown = document.querySelector("#changelist .paginator");
    if (paginator && shown) {
      shown.replaceWith(document.adoptNode(paginator));
    }
    const counter = page.querySelector("span.action-counter");
    const shownCounter = document.querySelector("span.action-counter");
    if (counter && shownCounter) {
      shownCounter.dataset.actionsIcnt = counter.dataset.actionsIcnt;
    }
  }

  async function refresh() {
    if (busy || document.hidden || (toggle && !toggle.checked) || (list && operatorIsSelecting())) {
      return;
    }
    busy = true;
    try {
      const response = await fetch(list ? window.location.href : root.dataset.url, {
        credentials: "same-origin",
        headers: {"X-Requested-With": "XMLHttpRequest"},
      });
      if (!response.ok) {
        throw new Error("the server answered " + response.status);
      }
      const html = await response.text();
      if (list) {
        swapRows(html);
      } else {
        root.innerHTML = html;
      }
      root.dataset.refreshed = String(Date.now());
      if (status) {
        status.textContent = "";
      }
    } catch (error) {
      if (status) {
        status.textContent = "Refresh failed (" + error.message + "); trying again.";
      }
    } finally {
      busy = false;
    }
  }

  window.setInterval(refresh, seconds * 1000);
})();
