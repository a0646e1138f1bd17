// Relay console: keyboard shortcuts, listed in the help dialog of the layout (#shortcuts-help).
//   /        focus the page's search or filter field
//   j / k    next / previous row of the page's main list (the row's link takes the focus)
//   Enter, o open the highlighted row's link
//   g a      Applications;  g n  Needs attention (where the console has that page)
//   ?        this help (Esc closes it; the focus goes back where it was)
// Keys typed into a field, or with Ctrl, Alt or Meta held, are left to the browser.
(function () {
  "use strict";

  var ROW_CLASS = "kbd-current";
  var current = null; // the highlighted row
  var currentIndex = -1; // its place: a list that refreshed itself replaced the row, not the place
  var pendingG = 0; // when "g" was pressed (ms), for the two-key moves
  var G_WINDOW_MS = 1500;

  function typing(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  function searchField() {
    return document.querySelector("[data-shortcut=search]") ||
      document.querySelector("main input[type=search]") ||
      document.querySelector("main form[method=get] input:not([type=hidden]), main form[method=get] select");
  }

  // The page's main list: the one marked data-shortcut-list, else the first table in <main> whose rows link.
  function rows() {
    var table = document.querySelector("main [data-shortcut-list]");
    if (!table) {
      var tables = document.querySelectorAll("main table");
      for (var i = 0; i < tables.length && !table; i++) {
        if (tables[i].querySelector("tbody tr a[href]")) table = tables[i];
      }
    }
    if (!table) return [];
    return Array.prototype.filter.call(table.querySelectorAll("tbody tr"), function (tr) {
      return tr.offsetParent !== null && tr.querySelector("a[href]");
    });
  }

  function highlight(row, index) {
    if (current) current.classList.remove(ROW_CLASS);
    current = row;
    currentIndex = index;
    row.classList.add(ROW_CLASS);
    var link = row.querySelector("a[href]");
    if (link) link.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var list = rows();
    if (!list.length) return;
    var at = list.indexOf(current);
    if (at < 0 && currentIndex >= 0) at = Math.min(currentIndex, list.length - 1);
    var next = at < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(list.length - 1, Math.max(0, at + step));
    highlight(list[next], next);
  }

  function openCurrent() {
    if (!current || !document.body.contains(current)) return false;
    var link = current.querySelector("a[href]");
    if (!link) return false;
    link.click();
    return true;
  }

  function follow(name) {
    // The Needs attention page's own link may not carry the mark: its path names it.
    var link = document.querySelector("a[data-shortcut=" + name + "]") ||
      (name === "attention" ? document.querySelector("header a[href*='attention']") : null);
    if (link) window.location.assign(link.href);
  }

  // -- the help dialog ----------------------------------------------------------------------------------
  var help = document.getElementById("shortcuts-help");
  var returnTo = null;

  function openHelp() {
    if (!help || help.open) return;
    returnTo = document.activeElement;
    help.showModal();
  }

  if (help) {
    help.addEventListener("close", function () {
      if (returnTo && document.body.contains(returnTo) && returnTo.focus) returnTo.focus();
      returnTo = null;
    });
    var opener = document.getElementById("shortcuts-button");
    if (opener) opener.addEventListener("click", openHelp);
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey || event.defaultPrevented) return;
    if (help && help.open) return; // the dialog's own keys (Esc closes it)
    if (typing(event.target)) return;
    var key = event.key;
    if (pendingG && Date.now() - pendingG < G_WINDOW_MS && (key === "a" || key === "n")) {
      pendingG = 0;
      event.preventDefault();
      follow(key === "a" ? "apps" : "attention");
      return;
    }
    pendingG = 0;
    if (key === "/") {
      var field = searchField();
      if (field) {
        event.preventDefault();
        field.focus();
        if (field.select) field.select();
      }
    } else if (key === "j" || key === "k") {
      event.preventDefault();
      move(key === "j" ? 1 : -1);
    } else if (key === "o" || (key === "Enter" && current && event.target === document.body)) {
      if (openCurrent()) event.preventDefault();
    } else if (key === "g") {
      pendingG = Date.now();
    } else if (key === "?") {
      event.preventDefault();
      openHelp();
    }
  });
  // Tests (and anyone scripting the page) wait for this before pressing keys on a page just opened.
  document.documentElement.setAttribute("data-shortcuts", "ready");
})();
