// The page's terminals: the Terminal panel's shell and a CLI agent's pane, each drawn by
// xterm.js (static/vendor) from the socket's `terminal` frames (docs/API.md). Their data
// is the pane's output, hostile: it only ever reaches xterm.js as data (never HTML).
// Keys and the panel's size go back as `terminal_input` and `terminal_resize` frames, from
// those who may drive (the server refuses a viewer's anyway). Self-hosted, no inline code.
// This script comes with the page where a CLI agent's pane shows, else when the Terminal
// panel is first reached (data-load): arriving after the socket opened, it asks for the
// panes' screens again (`terminal_screen`). xterm.js and its stylesheets (~130 KB gzipped)
// are fetched when a pane first opens: a page whose terminals stay closed never loads them
// (data-xterm-styles and data-xterm-scripts on #terminal-panel name them, hashed by the
// template's {% static %}).
(function () {
  "use strict";
  const ASSETS = (document.getElementById("terminal-panel") || { dataset: {} }).dataset;
  const MIN_SIZE = 2;
  const MAX_SIZE = 500;
  const MAX_INPUT = 4096; // characters per frame (agent/runs/terminals.py)
  const MAX_WAITING = 2 * 1024 * 1024; // characters kept for a pane not yet opened
  // The palette scripts/xterm_css.py writes into static/terminal.css: they must agree.
  const THEME = {
    foreground: "#ffffff", background: "#000000", cursor: "#ffffff", cursorAccent: "#000000",
    selectionBackground: "rgba(255, 255, 255, 0.3)",
    black: "#2e3436", red: "#cc0000", green: "#4e9a06", yellow: "#c4a000", blue: "#3465a4",
    magenta: "#75507b", cyan: "#06989a", white: "#d3d7cf", brightBlack: "#555753",
    brightRed: "#ef2929", brightGreen: "#8ae234", brightYellow: "#fce94f",
    brightBlue: "#729fcf", brightMagenta: "#ad7fa8", brightCyan: "#34e2e2",
    brightWhite: "#eeeeec",
  };
  const FONT = { fontFamily: '"DejaVu Sans Mono", ui-monospace, monospace', fontSize: 13 };

  const panes = {};
  let loading = null;

  function words(value) { return (value || "").split(/\s+/).filter(Boolean); }

  function fetched(element) {
    return new Promise((resolve, reject) => {
      element.addEventListener("load", resolve, { once: true });
      element.addEventListener("error", () => reject(new Error("terminal assets")), { once: true });
      document.head.appendChild(element);
    });
  }

  // Once per page: the stylesheets, then the scripts in order (the fit addon needs xterm.js).
  function loadAssets() {
    if (window.Terminal && window.FitAddon) return Promise.resolve();
    if (loading) return loading;
    const styles = words(ASSETS.xtermStyles).map((href) => {
      const link = document.createElement("link");
      Object.assign(link, { rel: "stylesheet", href });
      return fetched(link);
    });
    loading = Promise.all(styles).then(() => words(ASSETS.xtermScripts).reduce((done, src) => done.then(() => {
      const script = document.createElement("script");
      script.src = src;
      return fetched(script);
    }), Promise.resolve()));
    loading.catch(() => { loading = null; }); // a later opening tries again
    return loading;
  }

  // On the page's socket (static/harness.js); false while it is closed.
  function send(frame) {
    const asked = new CustomEvent("harness:send", { detail: { frame, sent: false } });
    document.dispatchEvent(asked);
    return asked.detail.sent;
  }

  function clamp(value) { return Math.max(MIN_SIZE, Math.min(MAX_SIZE, value)); }

  // A pane's emulator is made when its panel first opens (xterm.js's renderer tries inline
  // styles the CSP refuses: a page whose terminal stays closed makes none); until then its
  // frames wait here, from the last screen on, bounded.
  function create(host) {
    return {
      host, readonly: "readonly" in host.dataset, panel: host.closest("details"), sent: null,
      term: null, fit: null, waiting: [], waitingSize: 0,
    };
  }

  // Resolves once the pane's emulator exists (its assets fetched first, the first time).
  function open(pane) {
    if (pane.term) return Promise.resolve(pane);
    return loadAssets().then(() => { makeTerm(pane); return pane; });
  }

  function makeTerm(pane) {
    if (pane.term) return;
    pane.host.textContent = "";
    const term = new window.Terminal({
      ...FONT, theme: THEME, disableStdin: pane.readonly, scrollback: 2000, cursorBlink: false,
      // A pane's links (OSC 8) are the pane's words: never opened from here.
      linkHandler: { activate() {}, allowNonHttpProtocols: false },
    });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(pane.host);
    Object.assign(pane, { term, fit });
    if (!pane.readonly) {
      term.onData((data) => {
        for (let at = 0; at < data.length; at += MAX_INPUT) {
          send({ action: "terminal_input", data: data.slice(at, at + MAX_INPUT) });
        }
      });
    }
    // Keys typed here are the shell's: the page's own shortcuts (Ctrl+C cancels a run,
    // PageUp scrolls the transcript, ? opens the help) must not see them.
    pane.host.addEventListener("keydown", (event) => event.stopPropagation());
    pane.waiting.forEach(draw.bind(null, pane));
    pane.waiting = [];
    pane.waitingSize = 0;
  }

  // The driver's panel decides the shell's size (every page follows the server's).
  function sendSize(pane, force) {
    if (pane.readonly || !pane.term || !pane.panel || !pane.panel.open) return;
    const size = pane.fit.proposeDimensions();
    if (!size || !size.cols || !size.rows) return;
    const cols = clamp(size.cols);
    const rows = clamp(size.rows);
    const key = `${cols}x${rows}`;
    if (!force && pane.sent === key) return;
    if (send({ action: "terminal_resize", cols, rows })) {
      pane.sent = key;
      pane.term.resize(cols, rows);
    }
  }

  function receive(frame) {
    const pane = panes[frame.pane];
    if (!pane) return;
    if (pane.term) { draw(pane, frame); return; }
    if (frame.reset) { pane.waiting = []; pane.waitingSize = 0; }
    pane.waiting.push(frame);
    pane.waitingSize += (frame.data || "").length;
    while (pane.waitingSize > MAX_WAITING && pane.waiting.length > 1) {
      pane.waitingSize -= (pane.waiting.shift().data || "").length;
    }
  }

  function draw(pane, frame) {
    const term = pane.term;
    if (typeof frame.error === "string") {
      // The server's words, shown as text: control characters dropped.
      term.write(`\r\n\x1b[31m${frame.error.replace(/[\x00-\x1f\x7f]/g, "")}\x1b[0m\r\n`);
      return;
    }
    if (Number.isInteger(frame.cols) && Number.isInteger(frame.rows)) {
      term.resize(clamp(frame.cols), clamp(frame.rows));
    }
    if (frame.reset) term.reset();
    if (typeof frame.data === "string" && frame.data) term.write(frame.data);
  }

  function init() {
    const hosts = document.querySelectorAll(".xterm-host[data-pane]");
    if (!hosts.length) return;
    hosts.forEach((host) => { panes[host.dataset.pane] = create(host); });
    // A terminal frame is JSON, not the fragments the transport swaps in: taken here, and
    // the transport is told to leave it (transport:wsBeforeMessage cancelled).
    document.addEventListener("transport:wsBeforeMessage", (event) => {
      const message = event.detail.message;
      if (typeof message !== "string" || !message.startsWith("{")) return;
      let frame;
      try { frame = JSON.parse(message); } catch (e) { return; }
      if (!frame || frame.type !== "terminal") return;
      event.preventDefault();
      receive(frame);
    });
    // Each (re)opening of the socket brings the screens; one that opened before this script
    // came has brought them already, to no one: asked for again.
    // (once the page's own listener has taken the socket: this one may come first)
    document.addEventListener("transport:wsOpen", () => setTimeout(() => {
      Object.values(panes).forEach((pane) => sendSize(pane, true));
    }, 0));
    if (document.body.dataset.ws === "open") send({ action: "terminal_screen" });
    const shown = (pane, focus) => open(pane).then(() => {
      sendSize(pane, false);
      if (focus && !pane.readonly && pane.panel.open) pane.term.focus();
    }, () => {
      pane.host.textContent = "The terminal could not be loaded: close and open it to try again.";
    });
    Object.values(panes).forEach((pane) => {
      if (!pane.panel || pane.panel.open) shown(pane, false);
      if (!pane.panel) return;
      pane.panel.addEventListener("toggle", () => { if (pane.panel.open) shown(pane, true); });
    });
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(() => Object.values(panes).forEach((pane) => sendSize(pane, false)), 150);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
