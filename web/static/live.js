// Relay console: live pages. The page's change stream (web/console/live.py, server-sent events) says which areas
// changed; the page then re-reads its regions (elements with data-live-region: from data-live-src, else from the
// page's own URL) and swaps them in. Nothing is asked on a timer: no change, no request. The connection's state is
// shown in the [data-live-url] element (live / reconnecting / offline), which screen readers hear (role=status).
(function () {
  "use strict";

  var RETRY_OFFLINE_MS = 5000;  // after the server refused or ended the stream for good (EventSource gave up)

  function start(state) {
    var url = state.getAttribute("data-live-url");
    var source = null;
    var busy = false;
    var again = false;  // a change arrived while a refresh was in flight: one more refresh afterwards
    var waiting = false;  // a change arrived while the tab was hidden
    var opened = false;  // the stream has been open before: a reconnect may have missed changes
    var changes = 0;

    function say(name, text) {
      state.setAttribute("data-state", name);
      if (state.textContent !== text) state.textContent = text;
    }

    function stamp(root) {
      var now = String(Date.now());
      root.setAttribute("data-updated", now);
      root.querySelectorAll("table").forEach(function (t) { t.setAttribute("data-updated", now); });
    }

    function regions() {
      return Array.prototype.slice.call(document.querySelectorAll("[data-live-region]"));
    }

    // One region swapped for its fresh copy, unless the keyboard is in it (a person choosing in a form there):
    // then once focus leaves it.
    function swap(region, fresh) {
      if (region.contains(document.activeElement) && document.activeElement !== document.body) {
        region.addEventListener("focusout", function later(event) {
          if (region.contains(event.relatedTarget)) return;
          region.removeEventListener("focusout", later);
          swap(region, fresh);
        });
        return;
      }
      var copy = document.importNode(fresh, true);
      region.replaceWith(copy);
      stamp(copy);
    }

    function refresh() {
      if (document.hidden) { waiting = true; return; }
      if (busy) { again = true; return; }
      busy = true;
      var bySource = {};
      regions().forEach(function (region) {
        var src = region.getAttribute("data-live-src") || window.location.href;
        (bySource[src] = bySource[src] || []).push(region);
      });
      var reads = Object.keys(bySource).map(function (src) {
        return fetch(src, { credentials: "same-origin", headers: { Accept: "text/html" } })
          .then(function (r) {
            if (r.redirected || !r.ok) throw new Error("HTTP " + r.status);
            return r.text();
          })
          .then(function (html) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            bySource[src].forEach(function (region) {
              var name = region.getAttribute("data-live-region");
              var fresh = doc.querySelector('[data-live-region="' + name + '"]');
              if (fresh) swap(region, fresh);
            });
          });
      });
      Promise.all(reads)
        .catch(function () { say("offline", "offline: the page could not be re-read (reload it)"); })
        .then(function () {
          busy = false;
          if (again) { again = false; refresh(); }
        });
    }

    function connect() {
      say(opened ? "reconnecting" : "connecting", opened ? "reconnecting…" : "connecting…");
      source = new EventSource(url);
      source.addEventListener("ready", function () {
        say("live", "live");
        regions().forEach(stamp);
        if (opened) refresh();  // changes made while the stream was down
        opened = true;
      });
      source.addEventListener("change", function () {
        changes += 1;
        state.setAttribute("data-changes", String(changes));  // what a test compares its re-reads with
        refresh();
      });
      source.onerror = function () {
        if (source.readyState === EventSource.CLOSED) {  // refused (503, 403...): the browser will not retry
          say("offline", "offline · retrying");
          source.close();
          window.setTimeout(connect, RETRY_OFFLINE_MS);
        } else {
          say("reconnecting", "reconnecting…");  // the browser reconnects by itself (retry: in the stream)
        }
      };
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && waiting) { waiting = false; refresh(); }
    });
    window.addEventListener("pagehide", function () { if (source) source.close(); });  // frees its stream slot
    window.addEventListener("offline", function () { say("offline", "offline"); });
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var state = document.querySelector("[data-live-url]");
    if (state && window.EventSource) start(state);
  });
})();
