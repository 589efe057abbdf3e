// Harness page behaviour. Self-hosted (CSP: script-src 'self'), no inline handlers.
// htmx + its WebSocket extension do the transport; this file adds the seed's keybindings,
// prompt history, auto-scroll, copy buttons and the help overlay. Each part is a small
// function with one job; init() at the end wires them together. The parts share state only
// through what init() hands them (nothing is put on window).
(function () {
  "use strict";
  const $ = (sel) => document.querySelector(sel);
  const HISTORY_LIMIT = 100;
  const QUIET_RUN_MS = 5000;

  // Page state that several parts read lives in the DOM: body[data-ws] and body.running.
  function isSocketOpen() { return document.body.dataset.ws === "open"; }
  function isRunning() { return document.body.classList.contains("running"); }

  // --- WebSocket state, and exactly-once delivery by seq ---------------------------------
  // Every batch from the server starts with <div id="sync-state" data-from data-to>. A
  // batch is applied only when it continues exactly where this page is; anything else is
  // dropped and, when something is missing, a sync asks the server for everything after
  // our last seq (the reply carries data-sync). Reconnects and tab wake-ups sync too.
  const BATCH_MARKER = /^<div id="sync-state"[^>]*?data-from="(\d+)" data-to="(\d+)"( data-sync="1")?/;

  function initialSeq() {
    return Number(($("#sync-state") || { dataset: {} }).dataset.to || 0);
  }

  // Owns lastSeq, the socket and the sync in flight; lets through (htmx:wsBeforeMessage) only
  // the batches that continue at lastSeq + 1.
  function startSeqSync(lastSeq) {
    let socket = null;
    let syncing = false;

    function request() {
      if (!socket || syncing) return;
      syncing = true;
      socket.send(JSON.stringify({ action: "sync", after: lastSeq }));
    }
    document.addEventListener("htmx:wsBeforeMessage", (event) => {
      const match = BATCH_MARKER.exec(event.detail.message);
      if (!match) return; // not a batch (an error notice): always shown
      const from = Number(match[1]);
      const to = Number(match[2]);
      if (match[3]) { // a sync reply
        syncing = false;
        if (from === lastSeq + 1) { lastSeq = Math.max(lastSeq, to); return; }
        event.preventDefault();
        if (to > lastSeq) request(); // we moved on meanwhile: ask again from here
        return;
      }
      if (syncing) { event.preventDefault(); return; } // the sync reply will cover it
      if (from === lastSeq + 1) { lastSeq = to; return; }
      event.preventDefault();
      if (to > lastSeq) request(); // a gap (or an overlap): fetch what is missing
    });

    return {
      request,
      connected(openSocket) { socket = openSocket; syncing = false; request(); },
      disconnected() { socket = null; },
      // The sync still marked in flight may itself have been lost: ask again regardless.
      forceRequest() { syncing = false; request(); },
    };
  }

  // body[data-ws] and the "reconnecting" banner follow the socket; every (re)open syncs.
  function trackConnection(seqSync) {
    const reconnecting = $("#reconnecting");
    let wasOpen = false;
    function opened(event) {
      document.body.dataset.ws = "open";
      if (reconnecting) reconnecting.hidden = true;
      wasOpen = true;
      seqSync.connected(event.detail.socketWrapper);
    }
    function closed() {
      document.body.dataset.ws = "closed";
      seqSync.disconnected();
      if (reconnecting && wasOpen) reconnecting.hidden = false;
    }
    document.addEventListener("htmx:wsOpen", opened);
    document.addEventListener("htmx:wsClose", closed);
    document.addEventListener("htmx:wsError", closed);
  }

  function syncOnTabWake(seqSync) {
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && isSocketOpen()) seqSync.request();
    });
  }

  // A run in progress that has gone quiet for a while may have lost frames on the way
  // (an overloaded channel layer drops them silently): ask for what is missing.
  function syncWhenRunGoesQuiet(seqSync) {
    let lastFrame = Date.now();
    document.addEventListener("htmx:wsAfterMessage", () => { lastFrame = Date.now(); });
    setInterval(() => {
      if (isRunning() && isSocketOpen() && Date.now() - lastFrame > QUIET_RUN_MS) {
        lastFrame = Date.now();
        seqSync.forceRequest();
      }
    }, 1000);
  }

  // --- running state follows #status -------------------------------------------------
  function syncRunningClass() {
    const status = $("#status");
    const state = status ? status.dataset.state : "idle";
    document.body.classList.toggle("running", state === "thinking" || state === "running_tool");
  }

  // #status is swapped inside the composer.
  function watchComposer() {
    new MutationObserver(syncRunningClass).observe($(".composer"), { childList: true, subtree: true, attributes: true });
  }

  // --- prompt history (saved on the user; newest last) -------------------------------
  function readPromptHistory() {
    try { return JSON.parse($("#prompt-history").textContent) || []; } catch (e) { return []; }
  }

  // The ↑/↓ walk: index === entries.length is "below the newest", where the text being
  // typed waits as the draft until the walk comes back down.
  function createHistoryWalk(prompt, saved) {
    let entries = saved;
    let index = entries.length;
    let draft = "";
    return {
      canGoOlder() { return index > 0; },
      canGoNewer() { return index < entries.length; },
      older() {
        if (index === entries.length) draft = prompt.value;
        index -= 1;
        setPrompt(prompt, entries[index]);
      },
      newer() {
        index += 1;
        setPrompt(prompt, index === entries.length ? draft : entries[index]);
      },
      record(sent) {
        if (!sent.trim() || entries[entries.length - 1] === sent) return;
        entries.push(sent);
        if (entries.length > HISTORY_LIMIT) entries = entries.slice(-HISTORY_LIMIT);
      },
      restart() { index = entries.length; draft = ""; },
    };
  }

  // --- the prompt form and its keys ------------------------------------------------------
  function setPrompt(prompt, value) {
    prompt.value = value;
    prompt.setSelectionRange(value.length, value.length);
  }
  function caretOnFirstLine(prompt) { return prompt.value.lastIndexOf("\n", prompt.selectionStart - 1) === -1; }
  function caretOnLastLine(prompt) { return prompt.value.indexOf("\n", prompt.selectionEnd) === -1; }
  function isPlainKey(event) { return !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey; }

  function submitPrompt(form, prompt) {
    if (!prompt.value.trim()) return;
    form.requestSubmit();
  }

  function dropBlankPrompts(form) {
    document.addEventListener("htmx:wsConfigSend", (event) => {
      if (event.target === form && !String(event.detail.parameters.content || "").trim()) {
        event.preventDefault();
      }
    });
  }

  // Once sent: into the history, the prompt emptied, and the view back at the bottom.
  function resetPromptAfterSend(form, prompt, historyWalk, autoScroll) {
    document.addEventListener("htmx:wsAfterSend", (event) => {
      if (event.target !== form) return;
      historyWalk.record(prompt.value);
      historyWalk.restart();
      prompt.value = "";
      autoScroll.jumpToBottom();
    });
  }

  // Enter sends, Ctrl+Enter adds a newline, ↑/↓ walk the history, Ctrl+U clears.
  function bindPromptKeys(form, prompt, historyWalk) {
    prompt.addEventListener("keydown", (event) => {
      const plain = isPlainKey(event);
      if (event.key === "Enter" && !event.isComposing) {
        if (plain) {
          event.preventDefault();
          submitPrompt(form, prompt);
        } else if (event.ctrlKey) { // Ctrl+Enter: a newline (Shift+Enter is native)
          event.preventDefault();
          prompt.setRangeText("\n", prompt.selectionStart, prompt.selectionEnd, "end");
        }
      } else if (event.key === "ArrowUp" && plain && caretOnFirstLine(prompt) && historyWalk.canGoOlder()) {
        event.preventDefault();
        historyWalk.older();
      } else if (event.key === "ArrowDown" && plain && caretOnLastLine(prompt) && historyWalk.canGoNewer()) {
        event.preventDefault();
        historyWalk.newer();
      } else if (event.key === "u" && event.ctrlKey && !event.shiftKey) {
        event.preventDefault();
        prompt.value = "";
        historyWalk.restart();
      }
    });
  }

  // --- help overlay ----------------------------------------------------------------------
  // Opening focuses its Close button; closing hands the focus back to the prompt. A click on
  // the backdrop (outside the box) closes it.
  function createHelpOverlay(help, prompt) {
    const close = $("#help-close");
    function toggle(show) {
      const open = show === undefined ? help.hidden : show;
      help.hidden = !open;
      if (open) close.focus(); else prompt.focus();
    }
    close.addEventListener("click", () => toggle(false));
    help.addEventListener("click", (event) => { if (event.target === help) toggle(false); });
    return { toggle, isOpen: () => !help.hidden };
  }

  // --- global keys ---------------------------------------------------------------------
  function isTypingIn(target) {
    return target instanceof HTMLElement && (target.matches("textarea, input, select") || target.isContentEditable);
  }
  function selectedText() { return String(window.getSelection() || ""); }
  function clearSelection() {
    const selection = window.getSelection();
    if (selection) selection.removeAllRanges();
  }

  // Ctrl+C cancels the run only when there is nothing selected to copy.
  function cancelRunUnlessCopying(event, prompt) {
    const promptSelection = prompt.selectionStart !== prompt.selectionEnd;
    if (!selectedText() && !promptSelection && isRunning()) {
      event.preventDefault();
      $("#cancel").click();
    }
  }

  function copySelection(event) {
    const selection = selectedText();
    if (selection && navigator.clipboard) { event.preventDefault(); navigator.clipboard.writeText(selection); }
  }

  function scrollByPage(messages, up) {
    const step = messages.clientHeight * 0.9;
    messages.scrollBy({ top: up ? -step : step });
  }

  function bindGlobalKeys(messages, prompt, helpOverlay) {
    document.addEventListener("keydown", (event) => {
      if (event.key === "F1" || (event.key === "?" && !isTypingIn(event.target) && !event.ctrlKey && !event.metaKey)) {
        event.preventDefault();
        helpOverlay.toggle();
      } else if (event.key === "Escape") {
        if (helpOverlay.isOpen()) { helpOverlay.toggle(false); event.preventDefault(); } else clearSelection();
      } else if (event.key === "c" && event.ctrlKey && !event.shiftKey && !event.metaKey) {
        cancelRunUnlessCopying(event, prompt);
      } else if (event.key === "C" && event.ctrlKey && event.shiftKey) {
        copySelection(event);
      } else if (event.key === "PageUp" || event.key === "PageDown") {
        event.preventDefault();
        scrollByPage(messages, event.key === "PageUp");
      }
    });
  }

  // --- auto-scroll that pauses when the user scrolls up --------------------------------
  // While the user reads further up, new content shows the "↓ New content" pill instead.
  function createAutoScroll(messages, newContent) {
    let stickToBottom = true;
    function atBottom() { return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 40; }
    function scrollToBottom() { messages.scrollTop = messages.scrollHeight; newContent.hidden = true; }
    function jumpToBottom() { stickToBottom = true; scrollToBottom(); }
    messages.addEventListener("scroll", () => {
      stickToBottom = atBottom();
      if (stickToBottom) newContent.hidden = true;
    }, { passive: true });
    newContent.addEventListener("click", jumpToBottom);
    return {
      jumpToBottom,
      contentChanged() { if (stickToBottom) scrollToBottom(); else newContent.hidden = false; },
    };
  }

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

  function copyCodeOnClick(messages) {
    messages.addEventListener("click", (event) => {
      const button = event.target.closest(".copy");
      if (!button) return;
      const text = button.parentElement.querySelector("pre").innerText;
      const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1200); };
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => {});
    });
  }

  // --- new content in #messages --------------------------------------------------------
  function watchMessages(messages, onChange) {
    new MutationObserver(onChange).observe(messages, { childList: true, subtree: true, characterData: true });
  }

  // --- small page helpers ----------------------------------------------------------------
  function confirmBeforeSubmit() {
    document.querySelectorAll("form[data-confirm]").forEach((f) => {
      f.addEventListener("submit", (event) => { if (!window.confirm(f.dataset.confirm)) event.preventDefault(); });
    });
  }

  function submitOnSelectChange() {
    document.querySelectorAll("form[data-autosubmit] select").forEach((select) => {
      select.addEventListener("change", () => select.form.submit());
    });
  }

  function bindFilesPanel() {
    const filesToggle = $("#files-toggle");
    const filesPanel = $("#files-panel");
    if (!filesToggle || !filesPanel) return;
    filesToggle.addEventListener("click", () => {
      const open = filesPanel.hidden;
      filesPanel.hidden = !open;
      filesToggle.setAttribute("aria-expanded", String(open));
      $(".app").classList.toggle("with-files", open);
    });
  }

  function bindSidebarMenu() {
    const menu = $("#menu-toggle");
    if (menu) menu.addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  }

  // --- wiring ----------------------------------------------------------------------------
  function init() {
    const messages = $("#messages");
    const prompt = $("#prompt");
    const form = $("#prompt-form");
    if (!messages || !prompt || !form) return;

    const seqSync = startSeqSync(initialSeq());
    trackConnection(seqSync);
    syncOnTabWake(seqSync);
    syncWhenRunGoesQuiet(seqSync);
    syncRunningClass();

    const autoScroll = createAutoScroll(messages, $("#new-content"));
    const historyWalk = createHistoryWalk(prompt, readPromptHistory());
    dropBlankPrompts(form);
    resetPromptAfterSend(form, prompt, historyWalk, autoScroll);
    bindPromptKeys(form, prompt, historyWalk);
    bindGlobalKeys(messages, prompt, createHelpOverlay($("#help"), prompt));

    copyCodeOnClick(messages);
    addCopyButtons(messages); // the page's own code blocks; the observer covers what arrives later
    watchMessages(messages, () => {
      addCopyButtons(messages);
      syncRunningClass();
      autoScroll.contentChanged();
    });
    watchComposer();
    autoScroll.jumpToBottom();

    confirmBeforeSubmit();
    submitOnSelectChange();
    bindFilesPanel();
    bindSidebarMenu();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
