// GET /docs: Redoc on Relay's document, in the console's theme: the console's toggle (console.js, kept in this
// browser's localStorage as "relay.theme") when it chose light or dark, else the system's preference. A file, not
// an inline script: the page's Content-Security-Policy runs Relay's own scripts only.
(function () {
  "use strict";

  // The console's dark palette (console.css), in Redoc's theme options.
  var DARK = {
    colors: {
      primary: { main: "#6ea8ff" },
      text: { primary: "#dfe4ea", secondary: "#9aa4b2" },
      border: { dark: "#3a4452", light: "#2c3440" },
      success: { main: "#8ce99a" },
      warning: { main: "#ffd43b" },
      error: { main: "#ffa8a8" },
      tonalOffset: 0.2,
      // mid tones: the selected response tab is light (Redoc paints it rightPanel.textColor), the panels dark
      responses: {
        success: { color: "#37b24d", backgroundColor: "#1e3a26", tabTextColor: "#8ce99a" },
        error: { color: "#f03e3e", backgroundColor: "#45201f", tabTextColor: "#ffa8a8" },
      },
    },
    schema: {
      linesColor: "#3a4452",
      typeNameColor: "#9aa4b2",
      typeTitleColor: "#c4ccd8",
      requireLabelColor: "#ffa8a8",
      nestedBackground: "#1b212b",
    },
    typography: {
      code: { color: "#ffd43b", backgroundColor: "#232b37" },
      links: { color: "#6ea8ff", visited: "#6ea8ff", hover: "#9cc3ff" },
    },
    sidebar: {
      backgroundColor: "#1b212b",
      textColor: "#dfe4ea",
      activeTextColor: "#6ea8ff",
      arrow: { color: "#9aa4b2" },
    },
    rightPanel: { backgroundColor: "#0b0f14", textColor: "#dfe4ea" },
    codeBlock: { backgroundColor: "#12161d" },
    fab: { backgroundColor: "#232b37", color: "#dfe4ea" },
  };
  var DARK_BACKGROUND = "#12161d";

  var system = window.matchMedia("(prefers-color-scheme: dark)");

  function isDark() {
    var chosen = null;
    try {
      chosen = window.localStorage.getItem("relay.theme");
    } catch (e) {
      chosen = null; // storage refused (private mode): the system decides
    }
    if (chosen === "dark") return true;
    if (chosen === "light") return false;
    return system.matches;
  }

  function render() {
    var dark = isDark();
    var root = document.documentElement;
    root.setAttribute("data-theme", dark ? "dark" : "light");
    root.style.colorScheme = dark ? "dark" : "light";
    document.body.style.background = dark ? DARK_BACKGROUND : "";
    var element = document.getElementById("redoc");
    window.Redoc.init(element.getAttribute("data-spec-url"), { theme: dark ? DARK : {} }, element);
  }

  system.addEventListener("change", render);
  render();
})();
