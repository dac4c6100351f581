/* RMS feedback dashboard: draws the server-built Plotly figures, polls running tasks, and the
   few conveniences of the review queue. Everything works without it except charts and polling. */
(function () {
  "use strict";

  var PLOT_CONFIG = { displayModeBar: false, responsive: true };

  function drawCharts() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-chart"));
      if (!source) return;
      var fig = JSON.parse(source.textContent);
      window.Plotly.newPlot(el, fig.data, fig.layout, PLOT_CONFIG);
    });
  }

  function pollTasks() {
    var box = document.querySelector("[data-poll-url]");
    if (!box) return;
    var ids = (box.getAttribute("data-poll-ids") || "").split(",").filter(Boolean);
    if (!ids.length) return;
    var url = box.getAttribute("data-poll-url") + "?" + ids.map(function (id) {
      return "id=" + encodeURIComponent(id);
    }).join("&");
    var timer = null;

    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (body) {
          if (!body) return;
          var finished = false;
          body.runs.forEach(function (run) {
            var row = document.querySelector('[data-run-id="' + run.id + '"]');
            if (!row) return;
            var bar = row.querySelector(".progress > span");
            if (bar) bar.style.width = Math.round(run.progress * 100) + "%";
            var pct = row.querySelector("[data-progress-text]");
            if (pct) pct.textContent = Math.round(run.progress * 100) + "%";
            var state = row.querySelector("[data-state]");
            if (state && state.getAttribute("data-state") !== run.state) {
              state.setAttribute("data-state", run.state);
              state.textContent = run.state;
            }
            if (run.state === "succeeded" || run.state === "failed") finished = true;
          });
          if (finished) {
            window.clearInterval(timer);
            window.location.reload();
          }
        })
        .catch(function () { /* a missed poll is retried on the next tick */ });
    }
    timer = window.setInterval(tick, 1500);
  }

  function reviewSelection() {
    var all = document.querySelector("[data-select-all]");
    var boxes = Array.prototype.slice.call(document.querySelectorAll("input[name='ids']"));
    var counter = document.querySelector("[data-selected-count]");
    var submits = Array.prototype.slice.call(document.querySelectorAll("[data-bulk-submit]"));
    if (!boxes.length) return;
    function update() {
      var n = boxes.filter(function (b) { return b.checked; }).length;
      if (counter) counter.textContent = n + " selected";
      submits.forEach(function (s) { s.disabled = n === 0; });
      if (all) {
        all.checked = n === boxes.length;
        all.indeterminate = n > 0 && n < boxes.length;
      }
    }
    boxes.forEach(function (b) { b.addEventListener("change", update); });
    if (all) {
      all.addEventListener("change", function () {
        boxes.forEach(function (b) { b.checked = all.checked; });
        update();
      });
    }
    update();
  }

  function popovers() {
    var pops = Array.prototype.slice.call(document.querySelectorAll("details.pop"));
    pops.forEach(function (d) {
      d.addEventListener("toggle", function () {
        if (!d.open) return;
        pops.forEach(function (o) { if (o !== d) o.open = false; });
        var first = d.querySelector("input:not([type=hidden]), select, textarea");
        if (first) first.focus();
      });
    });
    document.addEventListener("keydown", function (e) {
      if (e.key !== "Escape") return;
      pops.forEach(function (d) {
        if (d.open) {
          d.open = false;
          var s = d.querySelector("summary");
          if (s) s.focus();
        }
      });
    });
  }

  function start() {
    drawCharts();
    pollTasks();
    reviewSelection();
    popovers();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// Destructive buttons ask first (the server still checks the role and the CSRF token).
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});
