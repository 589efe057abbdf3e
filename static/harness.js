// Harness page behaviour. Self-hosted (CSP: script-src 'self'), no inline handlers.
// htmx + its WebSocket extension do the transport; this file adds the seed's keybindings,
// prompt history, auto-scroll, copy buttons and the help overlay.
(function () {
  "use strict";
  const $ = (sel) => document.querySelector(sel);
  const HISTORY_LIMIT = 100;

  function init() {
    const body = document.body;
    const messages = $("#messages");
    const prompt = $("#prompt");
    const form = $("#prompt-form");
    const help = $("#help");
    const newContent = $("#new-content");
    if (!messages || !prompt || !form) return;

    // --- WebSocket state, and exactly-once delivery by seq ---------------------------------
    // Every batch from the server starts with <div id="sync-state" data-from data-to>. A
    // batch is applied only when it continues exactly where this page is; anything else is
    // dropped and, when something is missing, a sync asks the server for everything after
    // our last seq (the reply carries data-sync). Reconnects and tab wake-ups sync too.
    const reconnecting = $("#reconnecting");
    let lastSeq = Number(($("#sync-state") || { dataset: {} }).dataset.to || 0);
    let socket = null;
    let syncing = false;
    let wasOpen = false;
    const MARKER = /^<div id="sync-state"[^>]*?data-from="(\d+)" data-to="(\d+)"( data-sync="1")?/;

    function requestSync() {
      if (!socket || syncing) return;
      syncing = true;
      socket.send(JSON.stringify({ action: "sync", after: lastSeq }));
    }
    document.addEventListener("htmx:wsOpen", (event) => {
      body.dataset.ws = "open";
      socket = event.detail.socketWrapper;
      syncing = false;
      if (reconnecting) reconnecting.hidden = true;
      wasOpen = true;
      requestSync();
    });
    function closed() {
      body.dataset.ws = "closed";
      socket = null;
      if (reconnecting && wasOpen) reconnecting.hidden = false;
    }
    document.addEventListener("htmx:wsClose", closed);
    document.addEventListener("htmx:wsError", closed);
    document.addEventListener("htmx:wsBeforeMessage", (event) => {
      const match = MARKER.exec(event.detail.message);
      if (!match) return; // not a batch (an error notice): always shown
      const from = Number(match[1]);
      const to = Number(match[2]);
      if (match[3]) { // a sync reply
        syncing = false;
        if (from === lastSeq + 1) { lastSeq = Math.max(lastSeq, to); return; }
        event.preventDefault();
        if (to > lastSeq) requestSync(); // we moved on meanwhile: ask again from here
        return;
      }
      if (syncing) { event.preventDefault(); return; } // the sync reply will cover it
      if (from === lastSeq + 1) { lastSeq = to; return; }
      event.preventDefault();
      if (to > lastSeq) requestSync(); // a gap (or an overlap): fetch what is missing
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && body.dataset.ws === "open") requestSync();
    });
    // A run in progress that has gone quiet for a while may have lost frames on the way
    // (an overloaded channel layer drops them silently): ask for what is missing.
    let lastFrame = Date.now();
    document.addEventListener("htmx:wsAfterMessage", () => { lastFrame = Date.now(); });
    setInterval(() => {
      if (body.classList.contains("running") && body.dataset.ws === "open" &&
          Date.now() - lastFrame > 5000) {
        lastFrame = Date.now();
        syncing = false;
        requestSync();
      }
    }, 1000);

    // --- running state follows #status -------------------------------------------------
    function syncRunning() {
      const status = $("#status");
      const state = status ? status.dataset.state : "idle";
      body.classList.toggle("running", state === "thinking" || state === "running_tool");
    }
    syncRunning();

    // --- prompt history (saved on the user; newest last) -------------------------------
    let history = [];
    try { history = JSON.parse($("#prompt-history").textContent) || []; } catch (e) { history = []; }
    let index = history.length;
    let draft = "";

    function setPrompt(value) {
      prompt.value = value;
      prompt.setSelectionRange(value.length, value.length);
    }
    function onFirstLine() { return prompt.value.lastIndexOf("\n", prompt.selectionStart - 1) === -1; }
    function onLastLine() { return prompt.value.indexOf("\n", prompt.selectionEnd) === -1; }

    function send() {
      if (!prompt.value.trim()) return;
      form.requestSubmit();
    }

    document.addEventListener("htmx:wsConfigSend", (event) => {
      if (event.target === form && !String(event.detail.parameters.content || "").trim()) {
        event.preventDefault();
      }
    });
    document.addEventListener("htmx:wsAfterSend", (event) => {
      if (event.target !== form) return;
      const sent = prompt.value;
      if (sent.trim() && history[history.length - 1] !== sent) {
        history.push(sent);
        if (history.length > HISTORY_LIMIT) history = history.slice(-HISTORY_LIMIT);
      }
      index = history.length;
      draft = "";
      prompt.value = "";
      stickToBottom = true;
      scrollToBottom();
    });

    prompt.addEventListener("keydown", (event) => {
      const plain = !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey;
      if (event.key === "Enter" && !event.isComposing) {
        if (plain) {
          event.preventDefault();
          send();
        } else if (event.ctrlKey) { // Ctrl+Enter: a newline (Shift+Enter is native)
          event.preventDefault();
          prompt.setRangeText("\n", prompt.selectionStart, prompt.selectionEnd, "end");
        }
      } else if (event.key === "ArrowUp" && plain && onFirstLine() && index > 0) {
        event.preventDefault();
        if (index === history.length) draft = prompt.value;
        index -= 1;
        setPrompt(history[index]);
      } else if (event.key === "ArrowDown" && plain && onLastLine() && index < history.length) {
        event.preventDefault();
        index += 1;
        setPrompt(index === history.length ? draft : history[index]);
      } else if (event.key === "u" && event.ctrlKey && !event.shiftKey) {
        event.preventDefault();
        prompt.value = "";
        index = history.length;
      }
    });

    // --- global keys ---------------------------------------------------------------------
    function toggleHelp(show) {
      const open = show === undefined ? help.hidden : show;
      help.hidden = !open;
      if (open) $("#help-close").focus(); else prompt.focus();
    }
    $("#help-close").addEventListener("click", () => toggleHelp(false));
    help.addEventListener("click", (event) => { if (event.target === help) toggleHelp(false); });

    document.addEventListener("keydown", (event) => {
      const typing = event.target instanceof HTMLElement &&
        (event.target.matches("textarea, input, select") || event.target.isContentEditable);
      if (event.key === "F1" || (event.key === "?" && !typing && !event.ctrlKey && !event.metaKey)) {
        event.preventDefault();
        toggleHelp();
      } else if (event.key === "Escape") {
        if (!help.hidden) { toggleHelp(false); event.preventDefault(); }
        else { const sel = window.getSelection(); if (sel) sel.removeAllRanges(); }
      } else if (event.key === "c" && event.ctrlKey && !event.shiftKey && !event.metaKey) {
        const selection = String(window.getSelection() || "");
        const promptSelection = prompt.selectionStart !== prompt.selectionEnd;
        if (!selection && !promptSelection && body.classList.contains("running")) {
          event.preventDefault();
          $("#cancel").click();
        }
      } else if (event.key === "C" && event.ctrlKey && event.shiftKey) {
        const selection = String(window.getSelection() || "");
        if (selection && navigator.clipboard) { event.preventDefault(); navigator.clipboard.writeText(selection); }
      } else if (event.key === "PageUp" || event.key === "PageDown") {
        event.preventDefault();
        const step = messages.clientHeight * 0.9;
        messages.scrollBy({ top: event.key === "PageUp" ? -step : step });
      }
    });

    // --- auto-scroll that pauses when the user scrolls up --------------------------------
    let stickToBottom = true;
    function atBottom() { return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 40; }
    function scrollToBottom() { messages.scrollTop = messages.scrollHeight; newContent.hidden = true; }
    messages.addEventListener("scroll", () => {
      stickToBottom = atBottom();
      if (stickToBottom) newContent.hidden = true;
    }, { passive: true });
    newContent.addEventListener("click", () => { stickToBottom = true; scrollToBottom(); });

    // --- copy buttons on code blocks -----------------------------------------------------
    function addCopyButtons(root) {
      root.querySelectorAll(".md pre").forEach((pre) => {
        if (pre.parentElement.classList.contains("code-wrap")) return;
        const wrap = document.createElement("div");
        wrap.className = "code-wrap";
        pre.parentNode.insertBefore(wrap, pre);
        wrap.appendChild(pre);
        const button = document.createElement("button");
        button.type = "button";
        button.className = "copy";
        button.textContent = "Copy";
        wrap.appendChild(button);
      });
    }
    messages.addEventListener("click", (event) => {
      const button = event.target.closest(".copy");
      if (!button) return;
      const text = button.parentElement.querySelector("pre").innerText;
      const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1200); };
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => {});
    });
    addCopyButtons(messages);

    new MutationObserver(() => {
      addCopyButtons(messages);
      syncRunning();
      if (stickToBottom) scrollToBottom(); else newContent.hidden = false;
    }).observe(messages, { childList: true, subtree: true, characterData: true });
    new MutationObserver(syncRunning).observe(document.querySelector(".composer"), { childList: true, subtree: true, attributes: true });
    scrollToBottom();

    // --- small form helpers ----------------------------------------------------------------
    document.querySelectorAll("form[data-confirm]").forEach((f) => {
      f.addEventListener("submit", (event) => { if (!window.confirm(f.dataset.confirm)) event.preventDefault(); });
    });
    document.querySelectorAll("form[data-autosubmit] select").forEach((select) => {
      select.addEventListener("change", () => select.form.submit());
    });
    const filesToggle = $("#files-toggle");
    const filesPanel = $("#files-panel");
    if (filesToggle && filesPanel) {
      filesToggle.addEventListener("click", () => {
        const open = filesPanel.hidden;
        filesPanel.hidden = !open;
        filesToggle.setAttribute("aria-expanded", String(open));
        document.querySelector(".app").classList.toggle("with-files", open);
      });
    }
    const menu = $("#menu-toggle");
    if (menu) menu.addEventListener("click", () => body.classList.toggle("sidebar-open"));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
