// The workflow page's graph (web/console/graph.py draws it server-side): pan (drag, arrow keys on the focused
// graph), zoom (wheel or pinch, the +/− buttons, Fit), child workflows expanded in place (their steps fetched from
// workflow-graph/<child>), and an inspector fetched per node (workflow-step/<id>?i=<index>). No framework.
(function () {
  "use strict";
  var wrap = document.querySelector("[data-graph]");
  var svg = wrap && wrap.querySelector("svg.wfgraph");
  if (!svg) return;
  performance.mark("graph-start");

  var ROW_H = +svg.getAttribute("data-row-h"), NODE_H = +svg.getAttribute("data-node-h");
  var GAP = +svg.getAttribute("data-gap"), NEST_X = +svg.getAttribute("data-nest-x");
  var CHAIN_X = +svg.getAttribute("data-chain-x"), CHILD_X = +svg.getAttribute("data-child-x");
  var COL_GAP = +svg.getAttribute("data-col-gap");
  var MAX_VIEW_H = 400, MIN_SCALE = 0.02, MAX_SCALE = 4, MARGIN = 10;
  var figure = wrap.querySelector("figure.graph");
  var tools = wrap.querySelector(".graph-tools");
  var inspector = wrap.querySelector(".inspector");
  var body = inspector.querySelector("[data-body]");
  var marks = inspector.querySelector("[data-testid=inspector-marks]");
  var stepUrl = wrap.getAttribute("data-step-url"), partUrl = wrap.getAttribute("data-part-url");
  var naturalW = +svg.getAttribute("width"), naturalH = +svg.getAttribute("height");
  var vb = { x: 0, y: 0, w: naturalW, h: naturalH };
  var current = null; // the node whose inspector is open
  var asked = 0; // inspector answers come back in any order: only the last one asked is shown

  function url(template, workflowId) { return template.replace("__WF__", encodeURIComponent(workflowId)); }
  function size() { return { w: svg.clientWidth || 1, h: svg.clientHeight || 1 }; }
  function scale() { return size().w / vb.w; }
  function apply() {
    svg.setAttribute("viewBox", [vb.x, vb.y, vb.w, vb.h].map(function (v) { return Math.round(v * 100) / 100; }).join(" "));
    svg.setAttribute("data-scale", scale().toFixed(3));
  }

  // -- the view: 1:1 at the top, zoom around a point, pan, fit ------------------------------------------
  function reset() {
    var s = size();
    vb = { x: 0, y: 0, w: s.w, h: s.h };
    apply();
  }
  function zoom(factor, cx, cy) {
    var s = size();
    var next = Math.min(Math.max(scale() * factor, MIN_SCALE), MAX_SCALE);
    var px = vb.x + cx / s.w * vb.w, py = vb.y + cy / s.h * vb.h; // the point under (cx, cy) stays there
    vb.w = s.w / next; vb.h = s.h / next;
    vb.x = px - cx / s.w * vb.w; vb.y = py - cy / s.h * vb.h;
    apply();
  }
  function pan(dx, dy) { // in screen pixels
    var k = 1 / scale();
    vb.x -= dx * k; vb.y -= dy * k;
    apply();
  }
  function fit() {
    var box = svg.querySelector(".chain").getBBox();
    var s = size(), pad = 12;
    var k = Math.min(s.w / (box.width + 2 * pad), s.h / (box.height + 2 * pad), MAX_SCALE);
    vb.w = s.w / k; vb.h = s.h / k;
    vb.x = box.x - pad - (vb.w - box.width - 2 * pad) / 2; vb.y = box.y - pad;
    apply();
  }
  function show(node) { // pans so that `node` is in view
    var r = node.getBoundingClientRect(), v = svg.getBoundingClientRect();
    var dx = 0, dy = 0;
    // Taller or wider than the view: its top or left edge wins.
    if (r.top < v.top) dy = v.top - r.top + 8; else if (r.bottom > v.bottom) dy = Math.max(v.bottom - r.bottom - 8, v.top - r.top + 8);
    if (r.left < v.left) dx = v.left - r.left + 8; else if (r.right > v.right) dx = Math.max(v.right - r.right - 8, v.left - r.left + 8);
    if (dx || dy) pan(dx, dy);
  }

  // -- rows: an expanded child needs room; the rows below it move down --------------------------------
  function rowsOf(chain) { return chain.querySelectorAll(":scope > .row"); }
  function relayout(chain) {
    var top = +chain.getAttribute("data-top"), per = +chain.getAttribute("data-per-col");
    var colW = +chain.getAttribute("data-col-w"), rows = rowsOf(chain), at = {}, columns = [];
    var x = 0, y = top, widest = 0, column = null;
    for (var k = 0; k < rows.length; k++) {
      var row = rows[k], nest = row.querySelector(":scope > .nest");
      if (k % per === 0) { // a new column, right of the last one (wider when that one holds an expanded child)
        if (column) x += Math.max(colW, widest);
        column = { x: x, last: top, bottom: top };
        columns.push(column);
        y = top; widest = 0;
      }
      if (nest) {
        var box = nest.getBBox();
        widest = Math.max(widest, NEST_X + box.x + box.width + COL_GAP);
      }
      row.setAttribute("transform", "translate(" + x + "," + y + ")");
      at[row.getAttribute("data-i")] = [x, y];
      column.last = y;
      y += ROW_H + (nest ? +nest.getAttribute("data-h") + GAP : 0);
      column.bottom = y - GAP;
    }
    chain.querySelectorAll(":scope > .row > line.edge.child[data-to]").forEach(function (edge) {
      var from = at[edge.parentNode.getAttribute("data-i")], to = at[edge.getAttribute("data-to")];
      edge.setAttribute("x2", String(to[0] - from[0] + CHILD_X - 2));
      edge.setAttribute("y2", String(to[1] - from[1] + NODE_H / 2));
    });
    columns.forEach(function (c, i) {
      var line = chain.querySelector(":scope > line.edge.chain[data-col='" + i + "']");
      var cx = c.x + CHAIN_X;
      if (line) {
        line.setAttribute("x1", String(cx)); line.setAttribute("x2", String(cx));
        line.setAttribute("y2", String(Math.max(+line.getAttribute("y1"), c.last)));
      }
      var turn = chain.querySelector(":scope > path.edge.wrap[data-col='" + i + "']");
      if (turn && columns[i + 1]) { // as graph.py's _turn
        var next = columns[i + 1].x + CHAIN_X, gutter = next - CHAIN_X - 14;
        turn.setAttribute("d", "M" + cx + "," + c.bottom + "v" + GAP / 2 + "H" + gutter + "V" + (top - GAP / 2) +
          "H" + next + "V" + top);
      }
    });
    var holder = chain.parentNode, bottom = 0;
    columns.forEach(function (c) { bottom = Math.max(bottom, c.bottom); });
    if (holder.classList && holder.classList.contains("nest")) {
      holder.setAttribute("data-h", String(Math.max(bottom, 0)));
      relayout(holder.closest(".chain"));
    } else {
      fitHeight(bottom + MARGIN);
    }
  }
  function fitHeight(contentH) { // the view grows (up to MAX_VIEW_H) with what an expanded child adds
    var k = scale(), wanted = Math.max(Math.min(contentH * k, MAX_VIEW_H), startH);
    if (Math.abs(wanted - svg.clientHeight) < 1) return;
    svg.style.height = wanted + "px";
    vb.h = wanted / k;
    apply();
  }
  function toggle(button) {
    var row = button.closest(".row"), nest = row.querySelector(":scope > .nest");
    if (nest) {
      if (current && nest.contains(current)) closeInspector();
      nest.remove();
      button.setAttribute("aria-expanded", "false");
      button.querySelector("text").textContent = "+";
      relayout(row.parentNode);
      return Promise.resolve();
    }
    if (button.getAttribute("aria-busy") === "true") return Promise.resolve();
    button.setAttribute("aria-busy", "true");
    var child = button.getAttribute("data-child");
    return fetch(url(partUrl, child), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (r.redirected || !r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (answer) {
        var g = document.createElementNS("http://www.w3.org/2000/svg", "g");
        g.setAttribute("class", "nest");
        g.setAttribute("data-testid", "graph-nest");
        g.setAttribute("transform", "translate(" + NEST_X + "," + ROW_H + ")");
        if (answer.problem || !answer.steps) {
          g.setAttribute("data-h", String(NODE_H / 2));
          var note = document.createElementNS("http://www.w3.org/2000/svg", "text");
          note.setAttribute("class", "sub"); note.setAttribute("x", "10"); note.setAttribute("y", "14");
          note.textContent = answer.problem ? "steps unavailable: " + answer.problem : "no step recorded yet";
          g.appendChild(note);
        } else {
          g.innerHTML = answer.chain; // server-rendered SVG, every executor text escaped (graph.py)
          g.setAttribute("data-h", String(answer.height));
        }
        row.appendChild(g);
        button.setAttribute("aria-expanded", "true");
        button.querySelector("text").textContent = "−";
        relayout(row.parentNode);
        show(g);
      })
      .catch(function (error) { button.setAttribute("data-problem", String(error)); })
      .then(function () { button.removeAttribute("aria-busy"); });
  }

  // -- nodes: one tab stop (the last one focused), arrows between them, Enter to inspect -----------------
  function nodes() { return Array.prototype.slice.call(svg.querySelectorAll(".node[role=button]")); }
  function focusNode(node) {
    svg.querySelectorAll(".node[role=button][tabindex='0']").forEach(function (n) { n.setAttribute("tabindex", "-1"); });
    node.setAttribute("tabindex", "0");
    node.focus({ preventScroll: true });
    show(node);
  }
  function closeInspector() {
    inspector.hidden = true;
    wrap.classList.remove("open");
    if (current) current.classList.remove("sel");
    current = null;
  }
  function inspect(node) {
    var row = node.closest(".row"), chain = row.closest(".chain");
    var which = row.getAttribute("data-i"), mine = ++asked;
    if (current) current.classList.remove("sel");
    current = node;
    node.classList.add("sel");
    var said = [];
    if (row.classList.contains("crit")) said.push("On the critical path");
    if (row.hasAttribute("data-attempt")) said.push("Retry: attempt " + row.getAttribute("data-attempt"));
    marks.textContent = said.join(" · ");
    body.textContent = "Loading…";
    inspector.hidden = false;
    wrap.classList.add("open");
    inspector.setAttribute("data-node", chain.getAttribute("data-wf") + "#" + which);
    return fetch(url(stepUrl, chain.getAttribute("data-wf")) + "?i=" + encodeURIComponent(which), { credentials: "same-origin" })
      .then(function (r) { if (r.redirected) throw new Error("signed out"); return r.text(); })
      .then(function (html) { if (mine === asked) body.innerHTML = html; }) // rendered by Jinja: escaped
      .catch(function (error) { if (mine === asked) body.textContent = "Unavailable: " + error.message; });
  }

  svg.addEventListener("keydown", function (e) {
    var node = e.target.closest && e.target.closest(".node[role=button]");
    var button = e.target.closest && e.target.closest(".toggle");
    var step = 80, s = size();
    if (e.altKey || e.metaKey || (e.ctrlKey && e.key !== "0")) return;
    if ((e.key === "Enter" || e.key === " ") && (node || button)) {
      e.preventDefault();
      e.stopPropagation();
      if (button) toggle(button); else inspect(node);
      return;
    }
    if (node && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      var all = nodes(), at = all.indexOf(node) + (e.key === "ArrowDown" ? 1 : -1);
      if (all[at]) focusNode(all[at]);
      e.preventDefault();
      e.stopPropagation();
      return;
    }
    var moves = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
    if (moves[e.key]) { pan(moves[e.key][0], moves[e.key][1]); e.preventDefault(); }
    else if (e.key === "+" || e.key === "=") { zoom(1.25, s.w / 2, s.h / 2); e.preventDefault(); }
    else if (e.key === "-" || e.key === "_") { zoom(0.8, s.w / 2, s.h / 2); e.preventDefault(); }
    else if (e.key === "0") { fit(); e.preventDefault(); }
    else if (e.key === "1") { reset(); e.preventDefault(); }
    else if (e.key === "Escape" && !inspector.hidden) { closeInspector(); e.preventDefault(); }
    else return;
    e.stopPropagation(); // the graph's keys, not the page's shortcuts
  });
  svg.addEventListener("focusin", function (e) {
    var node = e.target.closest && e.target.closest(".node[role=button]");
    if (node && node.getAttribute("tabindex") !== "0") focusNode(node); else if (node) show(node);
  });

  // A drag pans; a click (no drag) on a node inspects it, on a toggle expands the child.
  var drag = null, dragged = false;
  svg.addEventListener("pointerdown", function (e) {
    if (e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, id: e.pointerId };
    dragged = false;
  });
  svg.addEventListener("pointermove", function (e) {
    if (!drag || drag.id !== e.pointerId) return;
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!dragged) { dragged = true; svg.setPointerCapture(e.pointerId); svg.classList.add("dragging"); }
    pan(dx, dy);
    drag.x = e.clientX; drag.y = e.clientY;
  });
  function endDrag() { drag = null; svg.classList.remove("dragging"); }
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  svg.addEventListener("click", function (e) {
    if (dragged) { e.preventDefault(); e.stopPropagation(); dragged = false; return; }
    var button = e.target.closest(".toggle");
    if (button) { toggle(button); return; }
    var node = e.target.closest(".node[role=button]");
    if (node) { focusNode(node); inspect(node); }
  }, true);
  svg.addEventListener("wheel", function (e) {
    e.preventDefault(); // a pinch arrives as a wheel with ctrlKey: the same zoom
    var r = svg.getBoundingClientRect();
    zoom(Math.exp(-e.deltaY * (e.ctrlKey ? 0.01 : 0.0015)), e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });

  tools.addEventListener("click", function (e) {
    var b = e.target.closest("button[data-zoom]");
    if (!b) return;
    var s = size(), how = b.getAttribute("data-zoom");
    if (how === "in") zoom(1.25, s.w / 2, s.h / 2);
    else if (how === "out") zoom(0.8, s.w / 2, s.h / 2);
    else if (how === "fit") fit();
    else reset();
  });
  inspector.querySelector("[data-close]").addEventListener("click", function () {
    var back = current;
    closeInspector();
    if (back) back.focus({ preventScroll: true });
  });
  inspector.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    var back = current;
    closeInspector();
    if (back) back.focus({ preventScroll: true });
  });

  // -- start: a fixed-height view at 1:1 (without this script the figure scrolls the whole SVG) -----------
  figure.classList.add("live");
  tools.hidden = false;
  wrap.querySelector(".graph-help").hidden = false;
  svg.setAttribute("tabindex", "0");
  svg.setAttribute("aria-roledescription", "zoomable graph");
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  var startH = Math.min(naturalH, MAX_VIEW_H);
  svg.style.height = startH + "px";
  reset();
  var lastW = size().w;
  if (window.ResizeObserver) { // the inspector opening narrows the view: keep the scale, show less
    new ResizeObserver(function () {
      var w = size().w;
      if (Math.abs(w - lastW) < 1) return;
      vb.w *= w / lastW;
      lastW = w;
      apply();
    }).observe(svg);
  }
  requestAnimationFrame(function () {
    setTimeout(function () { // after the first frame is painted
      performance.mark("graph-ready");
      // render: this script's start (the page parsed) to the first painted frame: style, layout, paint and the
      // script itself; load: from the response's last byte, so with the parsing of the page too.
      var nav = performance.getEntriesByType("navigation")[0];
      var ready = performance.getEntriesByName("graph-ready")[0].startTime;
      var start = performance.getEntriesByName("graph-start")[0].startTime;
      wrap.setAttribute("data-render-ms", String(Math.round(ready - start)));
      wrap.setAttribute("data-load-ms", String(Math.round(ready - (nav ? nav.responseEnd : 0))));
      wrap.setAttribute("data-ready", "true");
    }, 0);
  });
})();
