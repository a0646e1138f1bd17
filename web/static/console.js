// Relay console: live executors table, self-refreshing workflow list, bulk selection and the theme toggle.
// No framework, no build step.
(function () {
  "use strict";

  function cell(text, code) {
    var td = document.createElement("td");
    if (code) td.className = "id";
    if (code) {
      var c = document.createElement("code");
      c.textContent = text;
      td.appendChild(c);
    } else {
      td.textContent = text;
    }
    return td;
  }

  // As the short_id macro (_macros.html): a long identifier's first characters, the whole one on hover.
  function shortId(value) {
    var td = document.createElement("td");
    if (!value) return td;
    var c = document.createElement("code");
    c.className = "small";
    c.title = value;
    c.setAttribute("data-full", value);
    c.textContent = value.length <= 14 ? value : value.slice(0, 12) + "\u2026";
    td.appendChild(c);
    return td;
  }

  function badge(status) {
    var td = document.createElement("td");
    var span = document.createElement("span");
    span.className = "badge s-" + status;
    span.textContent = status;
    td.appendChild(span);
    return td;
  }

  function when(iso) {
    if (!iso) return "—";
    var d = new Date(iso);
    if (isNaN(d.getTime())) return iso;
    // As the `ts` filter: a no-break space before "UTC", so a narrow column wraps only after the date.
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "\u00a0UTC").replace(/Z$/, "\u00a0UTC");
  }

  function render(table, data) {
    var body = table.tBodies[0];
    var rows = document.createDocumentFragment();
    data.executors.forEach(function (e) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-executor", e.executorId);
      tr.appendChild(cell(e.executorId, true));
      tr.appendChild(badge(e.status));
      tr.appendChild(shortId(e.appVersion || ""));
      tr.appendChild(cell(e.hostname));
      tr.appendChild(cell(((e.language || "") + " " + (e.dbosVersion || "")).trim()));
      var since = cell(when(e.connectedAt));
      var down = cell(e.status === "HEALTHY" ? "" : when(e.deadAt || e.disconnectedAt));
      since.className = down.className = "t";
      tr.appendChild(since);
      tr.appendChild(down);
      tr.appendChild(cell(e.instance));
      var recovery = cell(e.recovery || "");
      recovery.className = "recovery";
      recovery.setAttribute("data-testid", "recovery");
      tr.appendChild(recovery);
      rows.appendChild(tr);
    });
    if (!data.executors.length) {
      var tr = document.createElement("tr");
      tr.className = "none";
      var td = cell("No executor connected. Start one with this Relay as its conductor.");
      td.colSpan = 9;
      tr.appendChild(td);
      rows.appendChild(tr);
    }
    body.replaceChildren(rows);
    Object.keys(data.counts).forEach(function (state) {
      var el = document.querySelector('[data-count="' + state + '"]');
      if (el) el.textContent = String(data.counts[state]);
    });
  }

  function live(table) {
    var note = document.getElementById("live-note");
    function tick() {
      fetch(table.getAttribute("data-live"), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (r.redirected || !r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(function (data) {
          render(table, data);
          if (note) note.textContent = "live · updated " + new Date().toLocaleTimeString();
          table.setAttribute("data-updated", String(Date.now()));
        })
        .catch(function () {
          if (note) note.textContent = "live updates paused (reload the page)";
        });
    }
    setInterval(tick, 2000);
  }

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

  // The workflow list re-reads its own page (same URL, same filters) and swaps the table body in, keeping
  // the ticked boxes; a button pauses it (remembered per browser).
  function refreshing(table) {
    var button = document.getElementById("refresh-toggle");
    var note = document.getElementById("refresh-note");
    var every = parseInt(table.getAttribute("data-refresh"), 10) || 3000;
    var key = "relay.workflows.paused";
    var paused = window.localStorage.getItem(key) === "1";
    function show() {
      if (button) {
        button.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
        button.setAttribute("aria-pressed", paused ? "true" : "false");
      }
      table.setAttribute("data-paused", paused ? "true" : "false");
      if (note) note.textContent = paused ? "auto-refresh paused" : "refreshes every " + every / 1000 + " s";
    }
    var skipped = 0;
    function tick() {
      if (paused) {
        table.setAttribute("data-skipped", String(++skipped));  // refreshes not done while paused
        return;
      }
      if (document.hidden) return;  // a background tab asks the executors nothing
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
    if (button) button.addEventListener("click", function () {
      paused = !paused;
      window.localStorage.setItem(key, paused ? "1" : "0");
      show();
    });
    show();
    setInterval(tick, every);
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
        var list = document.querySelector("[data-testid=steps] ol.timeline");
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
    var table = document.querySelector("table[data-live]");
    if (table) live(table);
    var list = document.querySelector("table[data-refresh]");
    if (list) refreshing(list);
    var followed = document.querySelector("[data-follow-url]");
    if (followed) following(followed);
    bulk();
  });
})();
