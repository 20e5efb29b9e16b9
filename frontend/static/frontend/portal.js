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
  // Copy buttons: copy the text of the element named by data-copy (shown only when scripts run).
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source || !navigator.clipboard) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(source.textContent).then(function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      });
    });
  });
  // After a refused submit, put the keyboard on the first field that needs correcting.
  if (document.querySelector(".form-errors[role=alert]")) {
    var invalid = document.querySelector('main [aria-invalid="true"]');
    if (invalid) { invalid.focus(); }
  }
});
