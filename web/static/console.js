// Relay console: live executors table and bulk selection. No framework, no build step.
(function () {
  "use strict";

  function cell(text, code) {
    var td = document.createElement("td");
    if (code) {
      var c = document.createElement("code");
      c.textContent = text;
      td.appendChild(c);
    } else {
      td.textContent = text;
    }
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
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC");
  }

  function render(table, data) {
    var body = table.tBodies[0];
    var rows = document.createDocumentFragment();
    data.executors.forEach(function (e) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-executor", e.executorId);
      tr.appendChild(cell(e.executorId, true));
      tr.appendChild(badge(e.status));
      tr.appendChild(cell(e.appVersion, true));
      tr.appendChild(cell(e.hostname));
      tr.appendChild(cell(e.language));
      tr.appendChild(cell(e.dbosVersion));
      tr.appendChild(cell(when(e.connectedAt)));
      tr.appendChild(cell(e.status === "HEALTHY" ? "" : when(e.deadAt || e.disconnectedAt)));
      tr.appendChild(cell(e.instance));
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

  function bulk() {
    var all = document.getElementById("select-all");
    var counter = document.getElementById("selected-count");
    var boxes = Array.prototype.slice.call(document.querySelectorAll('#bulk input[name="ids"]'));
    function count() {
      if (counter) counter.textContent = boxes.filter(function (b) { return b.checked; }).length + " selected";
    }
    if (all) all.addEventListener("change", function () {
      boxes.forEach(function (b) { b.checked = all.checked; });
      count();
    });
    boxes.forEach(function (b) { b.addEventListener("change", count); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.querySelector("table[data-live]");
    if (table) live(table);
    bulk();
  });
})();
