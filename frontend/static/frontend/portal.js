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
  // After a refused submit, put the keyboard on the first field that needs correcting.
  if (document.querySelector(".form-errors[role=alert]")) {
    var invalid = document.querySelector('main [aria-invalid="true"]');
    if (invalid) { invalid.focus(); }
  }
});
