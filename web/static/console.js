// Relay console: self-refreshing workflow list, bulk selection and the theme toggle.
// No framework, no build step.
(function () {
  "use strict";

  // Delegated to the form: rows swapped in by the refresh need no listeners of their own.
  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('#bulk input[name="ids"]'));
  }

  function count() {
    var counter = document.getElementById("selected-count");
    if (counter) counter.textContent = boxes().filter(function (b) { return b.checked; }).length + " selected";
  }

  function bulk() {
    var form = document.getElementById("bulk");
    if (!form) return;
    form.addEventListener("change", function (event) {
      if (event.target.id === "select-all") {
        boxes().forEach(function (b) { b.checked = event.target.checked; });
      }
      count();
    });
  }

  // The workflow list re-reads its own page (same URL, same filters) and swaps the table body in, keeping the
  // ticked boxes. How often is a person's choice (the rate select: off or seconds), in the URL (?refresh=) and
  // remembered per browser; the button pauses and resumes. A hidden tab asks nothing, and catches up when shown.
  function refreshing(table) {
    var button = document.getElementById("refresh-toggle");
    var select = document.getElementById("refresh-rate");
    var note = document.getElementById("refresh-note");
    var rates = [2, 3, 5, 15, 60];
    var pausedKey = "relay.workflows.paused";
    var rateKey = "relay.workflows.rate";
    var every = parseInt(table.getAttribute("data-refresh"), 10) || 3000;
    var stored = parseInt(window.localStorage.getItem(rateKey), 10);
    if (rates.indexOf(stored) >= 0) every = stored * 1000;
    var paused = window.localStorage.getItem(pausedKey) === "1";
    var asked = new URLSearchParams(window.location.search).get("refresh");  // a deep link wins
    if (asked === "off") paused = true;
    else if (rates.indexOf(parseInt(asked, 10)) >= 0) { every = parseInt(asked, 10) * 1000; paused = false; }
    var timer = null;
    var skipped = 0;
    var hiddenSkips = 0;
    function show() {
      if (button) {
        button.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
        button.setAttribute("aria-pressed", paused ? "true" : "false");
      }
      if (select) select.value = paused ? "off" : String(every / 1000);
      table.setAttribute("data-paused", paused ? "true" : "false");
      table.setAttribute("data-every", String(every));
      if (note) note.textContent = paused ? "auto-refresh paused" : "refreshes every " + every / 1000 + " s";
    }
    function remember() {
      window.localStorage.setItem(pausedKey, paused ? "1" : "0");
      window.localStorage.setItem(rateKey, String(every / 1000));
      var url = new URL(window.location.href);
      url.searchParams.set("refresh", paused ? "off" : String(every / 1000));
      window.history.replaceState(null, "", url.toString());
    }
    function fetchPage() {
      fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (r) {
          if (r.redirected || !r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          if (paused) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("table[data-refresh] tbody");
          if (!fresh) throw new Error("no table");
          var ticked = {};
          table.querySelectorAll('input[name="ids"]:checked').forEach(function (b) { ticked[b.value] = true; });
          var body = document.importNode(fresh, true);
          body.querySelectorAll('input[name="ids"]').forEach(function (b) { b.checked = !!ticked[b.value]; });
          table.replaceChild(body, table.tBodies[0]);
          count();
          table.setAttribute("data-updated", String(Date.now()));
          if (note) note.textContent = "refreshes every " + every / 1000 + " s · updated " + new Date().toLocaleTimeString();
        })
        .catch(function () {
          if (note) note.textContent = "auto-refresh failed (reload the page)";
        });
    }
    function tick() {
      if (paused) {
        table.setAttribute("data-skipped", String(++skipped));  // refreshes not done while paused
        return;
      }
      if (document.hidden) {  // a background tab asks the executors nothing
        table.setAttribute("data-hidden-skipped", String(++hiddenSkips));
        return;
      }
      fetchPage();
    }
    function schedule() {
      if (timer) window.clearInterval(timer);
      timer = window.setInterval(tick, every);
    }
    if (button) button.addEventListener("click", function () {
      paused = !paused;
      remember();
      show();
    });
    if (select) select.addEventListener("change", function () {
      if (select.value === "off") {
        paused = true;
      } else {
        paused = false;
        every = parseInt(select.value, 10) * 1000;
      }
      remember();
      show();
      schedule();
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !paused) { fetchPage(); schedule(); }  // shown again: catch up now
    });
    show();
    schedule();
  }

  // A running workflow's page follows it (issue 36): every data-follow ms it asks what changed since its last
  // answer (the status row, and the steps past those it shows), appends the new steps, updates the status, and
  // shows the output or error once the workflow has ended; then it stops. A hidden tab asks nothing.
  function following(root) {
    var url = root.getAttribute("data-follow-url");
    var every = parseInt(root.getAttribute("data-follow"), 10) || 1500;
    var known = parseInt(root.getAttribute("data-steps"), 10) || 0;
    var note = document.getElementById("follow-note");
    var timer = null;
    var busy = false;
    function say(text, state) {
      if (note) note.textContent = text;
      root.setAttribute("data-follow-state", state);
    }
    function stop() {
      if (timer) clearInterval(timer);
      timer = null;
    }
    function apply(answer) {
      if (answer.problem) { say("following paused: " + answer.problem, "problem"); return; }
      var badge = document.querySelector("h2.wfid .badge");
      if (badge && answer.badge) badge.outerHTML = answer.badge;
      var status = document.querySelector("[data-testid=workflow-status]");
      if (status) status.textContent = answer.status;
      var updated = document.querySelector("[data-testid=workflow-updated]");
      if (updated) updated.textContent = answer.updatedAt;
      if (answer.steps) {
        // Not on an earlier page of a paged step table (workflow.html marks it): the new steps belong past it.
        var list = document.querySelector("[data-testid=steps]:not([data-steps-earlier]) ol.timeline");
        var empty = document.querySelector("[data-testid=no-steps]");
        if (empty) empty.remove();
        if (list) list.insertAdjacentHTML("beforeend", answer.steps);
      }
      known = answer.stepCount;
      root.setAttribute("data-steps", String(known));
      if (answer.ended) {
        var io = document.querySelector("[data-testid=workflow-io]");
        if (io && answer.io) io.outerHTML = answer.io;
        document.querySelectorAll("[data-while-running]").forEach(function (el) { el.remove(); });
        say("ended " + new Date().toLocaleTimeString() + ": reload for its graph", "ended");
        stop();
      } else {
        say("following · updated " + new Date().toLocaleTimeString(), "following");
      }
    }
    function tick() {
      if (busy) return;
      if (document.hidden) {
        root.setAttribute("data-skipped", String((parseInt(root.getAttribute("data-skipped"), 10) || 0) + 1));
        say("paused while this tab is hidden", "hidden");
        return;
      }
      busy = true;
      fetch(url + "?steps=" + known, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (r.redirected || !r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(apply)
        .catch(function () { say("following failed (reload the page)", "failed"); stop(); })
        .then(function () { busy = false; });
    }
    say("following", "following");
    timer = setInterval(tick, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden && timer) tick(); });
  }

  // Light, dark or the system's choice ("auto"), remembered per browser; the stylesheet reads data-theme.
  function theme() {
    var root = document.documentElement;
    var button = document.getElementById("theme-toggle");
    var order = ["auto", "light", "dark"];
    var chosen = window.localStorage.getItem("relay.theme") || "auto";
    function apply() {
      root.setAttribute("data-theme", chosen);
      if (button) button.textContent = "Theme: " + chosen;
    }
    if (button) button.addEventListener("click", function () {
      chosen = order[(order.indexOf(chosen) + 1) % order.length];
      window.localStorage.setItem("relay.theme", chosen);
      apply();
    });
    apply();
  }

  document.addEventListener("DOMContentLoaded", function () {
    theme();
    var list = document.querySelector("table[data-refresh]");
    if (list) refreshing(list);
    var followed = document.querySelector("[data-follow-url]");
    if (followed) following(followed);
    bulk();
  });
})();
