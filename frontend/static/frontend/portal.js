// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // "Select all" checkboxes: shown only when scripts run; they tick every box of the named group.
  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    var name = all.getAttribute("data-select-all");
    var boxes = all.form ? all.form.querySelectorAll('input[type="checkbox"][name="' + name + '"]') : [];
    all.hidden = false;
    all.addEventListener("change", function () {
      boxes.forEach(function (box) { box.checked = all.checked; });
    });
  });
  // Copy buttons (the usage guide's examples, the API token shown once): the element named by
  // data-copy is copied (an input's value, otherwise its text); shown only when scripts run.
  document.body.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var id = button.getAttribute("data-copy");
    var field = document.getElementById(id);
    var status = document.querySelector('[data-copy-status="' + id + '"]');
    if (!field) { return; }
    var isInput = typeof field.select === "function" && "value" in field;
    if (isInput) { field.select(); }
    var text = isInput ? field.value : field.textContent;
    var done = function (ok) {
      if (status) { status.textContent = ok ? "Copied." : "Select the text and copy it."; return; }
      if (ok) {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      }
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
    } else { done(false); }
  });
  var revealCopyButtons = function (root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = false; });
  };
  revealCopyButtons(document);
  document.body.addEventListener("htmx:afterSettle", function () { revealCopyButtons(document); });
  // Chart values (frontend/charts.py): the bucket pointed at or focused is read out under its
  // chart; one point per chart is in the tab order and the arrow keys (Home, End) move between
  // them. Delegated, so charts that HTMX swaps in work too. Without this, each point's <title>
  // still shows on hover and its accessible name tells its values.
  var chartOf = function (point) { return point.closest ? point.closest("[data-chart-readout]") : null; };
  var readOut = function (point) {
    var chart = chartOf(point);
    var out = chart ? document.getElementById(chart.getAttribute("data-chart-readout")) : null;
    if (out) { out.textContent = point.getAttribute("aria-label"); }
  };
  var isPoint = function (target) { return target && target.classList && target.classList.contains("chart-point"); };
  document.addEventListener("focusin", function (event) { if (isPoint(event.target)) { readOut(event.target); } });
  document.addEventListener("mouseover", function (event) { if (isPoint(event.target)) { readOut(event.target); } });
  document.addEventListener("keydown", function (event) {
    var point = event.target;
    if (!isPoint(point)) { return; }
    var points = Array.prototype.slice.call(chartOf(point).querySelectorAll(".chart-point"));
    var at = points.indexOf(point);
    var next = { ArrowRight: at + 1, ArrowUp: at + 1, ArrowLeft: at - 1, ArrowDown: at - 1, Home: 0, End: points.length - 1 }[event.key];
    if (next === undefined) { return; }
    event.preventDefault();
    next = Math.max(0, Math.min(points.length - 1, next));
    point.setAttribute("tabindex", "-1");
    points[next].setAttribute("tabindex", "0");
    points[next].focus();
  });
  // The quota-window form (frontend/window_presets.py): only the chosen preset's fields show, and
  // the day/night preset shows the rule it writes, as the server writes it. Without this every
  // part shows and the server still writes the rule.
  var windowForm = document.getElementById("window-form");
  if (windowForm) {
    var parts = windowForm.querySelectorAll("[data-presets]");
    var days = windowForm.querySelectorAll('input[name="weekdays"]');
    var dailyRule = function () {
      var starts = (windowForm.querySelector('input[name="daily_from"]') || {}).value || "";
      var match = /^(\d{1,2}):(\d{2})/.exec(starts);
      var chosen = Array.prototype.filter.call(days, function (box) { return box.checked; })
        .map(function (box) { return box.value; });
      if (!match || !chosen.length) { return "—"; }
      var hours = "BYHOUR=" + parseInt(match[1], 10) + ";BYMINUTE=" + parseInt(match[2], 10);
      return chosen.length === days.length ? "FREQ=DAILY;" + hours : "FREQ=WEEKLY;BYDAY=" + chosen.join(",") + ";" + hours;
    };
    var showPreset = function () {
      var checked = windowForm.querySelector('input[name="kind"]:checked');
      var kind = checked ? checked.value : "";
      parts.forEach(function (part) {
        var shown = !kind || part.getAttribute("data-presets").split(" ").indexOf(kind) >= 0;
        part.hidden = !shown;
        if (shown && kind === "recurring" && part.tagName === "DETAILS") { part.open = true; }
      });
      var out = document.getElementById("daily-rule");
      if (out) { out.textContent = dailyRule(); }
    };
    windowForm.addEventListener("change", showPreset);
    windowForm.addEventListener("input", showPreset);
    showPreset();
  }
  // After a refused submit, put the keyboard on the first field that needs correcting.
  if (document.querySelector(".form-errors[role=alert]")) {
    var invalid = document.querySelector('main [aria-invalid="true"]');
    if (invalid) { invalid.focus(); }
  }
});
