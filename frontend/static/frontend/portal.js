// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // The main menu on a narrow screen (_nav.html): folded under its Menu button, which opens and
  // closes it; Escape closes it and puts the keyboard back on the button. The stylesheet shows the
  // button on narrow screens only; without this script the menu simply stays open.
  document.querySelectorAll("button[data-menu-toggle]").forEach(function (toggle) {
    var nav = toggle.closest("nav");
    var panel = document.getElementById(toggle.getAttribute("aria-controls"));
    if (!nav || !panel) { return; }
    var setOpen = function (open) { toggle.setAttribute("aria-expanded", open ? "true" : "false"); };
    var isOpen = function () { return toggle.getAttribute("aria-expanded") === "true"; };
    setOpen(false);
    toggle.hidden = false;
    toggle.addEventListener("click", function () { setOpen(!isOpen()); });
    nav.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || !isOpen() || toggle.offsetParent === null) { return; }
      setOpen(false);
      toggle.focus();
    });
  });
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
  // Live fragments (every hx-get and hx-post of the portal): while a request runs its target is
  // aria-busy; when no answer has come after LOADING_DELAY_MS a spinner says so (a quick answer
  // shows none, so nothing flickers); a request that fails (an error status, no answer, a timeout)
  // leaves a message with a Retry button that sends it again with the fields as they are now. The
  // message goes into the target, or next to the element that sent the request when that element
  // is inside the target (a form that replaces its own section). Words: data-live-loading and
  // data-live-error on the target or the sender.
  var LOADING_DELAY_MS = 300;
  var requests = new WeakMap();  // xhr -> what it was sent for
  var words = function (sent, name, fallback) {
    var from = sent.target.closest("[" + name + "]") || sent.elt.closest("[" + name + "]");
    return from ? from.getAttribute(name) : fallback;
  };
  var holderOf = function (elt, target) {
    return (target === elt || target.contains(elt)) ? elt : target;
  };
  var clearStatus = function (holder) {
    holder.querySelectorAll(":scope > [data-live-status]").forEach(function (old) { old.remove(); });
  };
  var putStatus = function (holder, node) {
    clearStatus(holder);
    if (holder.tagName === "FORM") { holder.appendChild(node); } else { holder.insertBefore(node, holder.firstChild); }
  };
  var showLoading = function (sent) {
    var status = document.createElement("div");
    status.className = "live-status live-loading";
    status.setAttribute("data-live-status", "loading");
    status.setAttribute("role", "status");
    var spinner = document.createElement("span");
    spinner.className = "spinner";
    spinner.setAttribute("aria-hidden", "true");
    var text = document.createElement("span");
    text.textContent = words(sent, "data-live-loading", "Loading…");
    status.append(spinner, text);
    putStatus(sent.holder, status);
    sent.target.classList.add("live-waiting");
  };
  var retry = function (sent) {
    if (!document.body.contains(sent.elt) || !document.body.contains(sent.target)) { window.location.reload(); return; }
    // A failure again ends in the same message; the promise's rejection has nothing more to say.
    htmx.ajax(sent.verb, sent.path, { source: sent.elt, target: sent.target }).then(null, function () {});
  };
  var showError = function (sent, why) {
    var status = document.createElement("div");
    status.className = "live-status live-error";
    status.setAttribute("data-live-status", "error");
    status.setAttribute("role", "alert");
    var text = document.createElement("span");
    text.textContent = words(sent, "data-live-error", "This part of the page could not be loaded") + ": " + why + ".";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Retry";
    button.addEventListener("click", function () { retry(sent); });
    status.append(text, button);
    putStatus(sent.holder, status);
    // What the target still shows answers an earlier question: dimmed, unless it holds the sender.
    if (sent.holder === sent.target) { sent.target.classList.add("live-stale"); }
  };
  var settle = function (sent) {
    clearTimeout(sent.timer);
    sent.target.removeAttribute("aria-busy");
    sent.target.classList.remove("live-waiting");
    if (sent.holder.isConnected) {
      sent.holder.querySelectorAll(':scope > [data-live-status="loading"]').forEach(function (old) { old.remove(); });
    }
  };
  document.body.addEventListener("htmx:beforeRequest", function (event) {
    var detail = event.detail;
    var target = detail.target;
    if (!target || !target.closest) { return; }
    var elt = detail.elt;
    var sent = { elt: elt, target: target, holder: holderOf(elt, target), verb: detail.requestConfig.verb,
                 path: detail.requestConfig.path };
    requests.set(detail.xhr, sent);
    clearStatus(sent.holder);
    target.classList.remove("live-stale");
    target.setAttribute("aria-busy", "true");
    sent.timer = setTimeout(function () { showLoading(sent); }, LOADING_DELAY_MS);
  });
  // A 400 carries a form's field errors: base.html's htmx-config swaps it as an answer, not a failure.
  document.body.addEventListener("htmx:afterRequest", function (event) {
    var sent = requests.get(event.detail.xhr);
    if (!sent) { return; }
    settle(sent);
    if (event.detail.failed) {
      showError(sent, "the portal answered " + event.detail.xhr.status + (event.detail.xhr.statusText ? " " + event.detail.xhr.statusText : ""));
    }
  });
  var unanswered = function (why) {
    return function (event) {
      var sent = requests.get(event.detail.xhr);
      if (sent) { settle(sent); showError(sent, why); }
    };
  };
  document.body.addEventListener("htmx:sendError", unanswered("the portal could not be reached"));
  document.body.addEventListener("htmx:timeout", unanswered("the portal took too long to answer"));
  // After a refused submit, put the keyboard on the first field that needs correcting.
  if (document.querySelector(".form-errors[role=alert]")) {
    var invalid = document.querySelector('main [aria-invalid="true"]');
    if (invalid) { invalid.focus(); }
  }

  // Destructive actions ask first: a form (or its submit button) with data-confirm opens a dialog
  // saying what will happen; only "yes" posts it, with confirm=yes (the views that require it ask
  // on a page of their own when scripts do not run). Runs before HTMX sees the submit.
  var dialog = null;
  var askFirst = function (text, yesLabel, opener, onYes) {
    if (!dialog) {
      dialog = document.createElement("dialog");
      dialog.className = "confirm-dialog";
      dialog.setAttribute("role", "alertdialog");
      dialog.setAttribute("aria-labelledby", "confirm-dialog-text");
      dialog.innerHTML = '<p id="confirm-dialog-text"></p><div class="button-row">' +
        '<button type="button" class="danger" data-answer="yes"></button>' +
        '<button type="button" class="secondary" data-answer="no">Cancel</button></div>';
      document.body.appendChild(dialog);
    }
    dialog.querySelector("#confirm-dialog-text").textContent = text;
    var yes = dialog.querySelector('[data-answer="yes"]');
    var no = dialog.querySelector('[data-answer="no"]');
    yes.textContent = yesLabel || "Yes";
    var finish = function (confirmed) {
      yes.onclick = null; no.onclick = null; dialog.oncancel = null;
      if (dialog.open) { dialog.close(); }
      if (confirmed) { onYes(); } else if (opener && document.contains(opener)) { opener.focus(); }
    };
    yes.onclick = function () { finish(true); };
    no.onclick = function () { finish(false); };
    dialog.oncancel = function (event) { event.preventDefault(); finish(false); };  // Escape
    dialog.showModal();
    no.focus();  // the safe answer first
  };
  var posts = function (form) { return form.getAttribute && (form.getAttribute("method") || "").toLowerCase() === "post"; };
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var submitter = event.submitter || null;
    if (posts(form) && form.getAttribute("aria-busy") === "true") {  // already posting: no second post
      event.preventDefault(); event.stopImmediatePropagation(); return;
    }
    var source = submitter && submitter.hasAttribute("data-confirm") ? submitter : form;
    var text = source.getAttribute ? source.getAttribute("data-confirm") : null;
    if (!text || form.portalConfirmed) { form.portalConfirmed = false; return; }
    event.preventDefault();
    event.stopImmediatePropagation();
    askFirst(text, source.getAttribute("data-confirm-yes"), submitter, function () {
      if (!form.querySelector('input[name="confirm"]')) {
        var field = document.createElement("input");
        field.type = "hidden"; field.name = "confirm"; field.value = "yes";
        form.appendChild(field);
      }
      form.portalConfirmed = true;
      if (form.requestSubmit) { form.requestSubmit(submitter); } else { form.submit(); }
    });
  }, true);

  // A form being posted says so: aria-busy on the form, the button pressed marked busy (its label
  // gains "…" by the stylesheet), and a second press does nothing until the answer comes.
  var setBusy = function (form, submitter, busy) {
    if (busy) { form.setAttribute("aria-busy", "true"); } else { form.removeAttribute("aria-busy"); }
    form.querySelectorAll('button[aria-disabled="true"]').forEach(function (button) {
      button.removeAttribute("aria-disabled"); button.classList.remove("is-busy");
    });
    if (busy && submitter) { submitter.setAttribute("aria-disabled", "true"); submitter.classList.add("is-busy"); }
  };
  document.addEventListener("submit", function (event) {  // after HTMX, which prevents the default of its own posts
    var form = event.target;
    if (!posts(form) || (event.defaultPrevented && !form.hasAttribute("hx-post"))) { return; }
    setBusy(form, event.submitter || null, true);
  });
  document.body.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail && event.detail.elt;
    if (form && form.tagName === "FORM") { setBusy(form, null, false); }
  });
  window.addEventListener("pageshow", function () {  // back to a page kept while it was posting
    document.querySelectorAll('form[aria-busy="true"]').forEach(function (form) { setBusy(form, null, false); });
  });

  // After HTMX replaces the part of the page that held the focus, put it somewhere sensible rather
  // than leave it on <body>: the first field to correct, else the message saying what happened,
  // else the main part's heading.
  document.body.addEventListener("htmx:afterSettle", function () {
    var active = document.activeElement;
    if (active && active !== document.body && document.contains(active)) { return; }
    var main = document.getElementById("main");
    if (!main) { return; }
    var target = main.querySelector('[aria-invalid="true"]') || main.querySelector(".messages .message") ||
      main.querySelector("h1");
    if (!target) { target = main; }
    if (!target.matches("input, select, textarea, button, a[href]") && !target.hasAttribute("tabindex")) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus();
  });
});
