// Harness page behaviour. Self-hosted (CSP: script-src 'self'), no inline handlers.
// static/transport.js does the requests and the socket; this file adds the seed's keybindings,
// prompt history, what became of a sent prompt (typed text is never lost), prompts queued
// while the agent works (a follow-up or steering; a dropped one comes back), the length
// counter, auto-scroll, copy buttons (code, tool results, every message part), the help
// dialog, the drawers (the conversation list and the files panel), the theme switch and
// what assistive technology is told while a prompt runs. Each part is a small function
// with one job; init() at the end wires them together. The parts share
// state only through what init() hands them (nothing is put on window).
(function () {
  "use strict";
  const $ = (sel) => document.querySelector(sel);
  const HISTORY_LIMIT = 100;
  const QUIET_RUN_MS = 5000;

  // Page state that several parts read lives in the DOM: body[data-ws], body.running and
  // body.ended (the socket closed for good).
  function isSocketOpen() { return document.body.dataset.ws === "open"; }
  function isRunning() { return document.body.classList.contains("running"); }
  function hasEnded() { return document.body.classList.contains("ended"); }

  // --- WebSocket state, and exactly-once delivery by seq ---------------------------------
  // Every batch from the server starts with <div id="sync-state" data-from data-to>. A
  // batch is applied only when it continues exactly where this page is; anything else is
  // dropped and, when something is missing, a sync asks the server for everything after
  // our last seq (the reply carries data-sync). Reconnects and tab wake-ups sync too.
  // A batch with data-reset (a branch switch) is the transcript whole: taken as is.

  // The batch marker of a frame as the DOM reads it, or null (an error notice). Only the
  // frame's first tag is parsed: the marker is always first, and the rest may be long.
  const markerParser = document.createElement("template");
  function batchMarker(message) {
    if (!message.startsWith("<div")) return null;
    markerParser.innerHTML = message.slice(0, message.indexOf(">") + 1);
    const marker = markerParser.content.firstElementChild;
    if (!marker || marker.id !== "sync-state") return null;
    const data = marker.dataset;
    return {
      from: Number(data.from), to: Number(data.to), sync: "sync" in data, reset: "reset" in data,
      dropLive: "dropLive" in data,
    };
  }

  function initialSeq() {
    return Number(($("#sync-state") || { dataset: {} }).dataset.to || 0);
  }

  // Owns lastSeq, the socket and the sync in flight; lets through (transport:wsBeforeMessage) only
  // the batches that continue at lastSeq + 1.
  function startSeqSync(lastSeq) {
    let socket = null;
    let syncing = false;

    function request() {
      if (!socket || syncing) return;
      syncing = true;
      socket.send(JSON.stringify({ action: "sync", after: lastSeq }));
    }
    document.addEventListener("transport:wsBeforeMessage", (event) => {
      const marker = batchMarker(event.detail.message);
      if (!marker) return; // not a batch (an error notice): always shown
      const { from, to } = marker;
      if (marker.reset) { syncing = false; lastSeq = to; return; } // the whole transcript
      if (marker.sync) { // a sync reply
        syncing = false;
        if (from === lastSeq + 1) {
          lastSeq = Math.max(lastSeq, to);
          // The reply's text replaces a live block the page may hold: the server cannot know
          // whether it does, so the marker says so instead of a swap that may miss its target.
          const live = marker.dropLive && document.getElementById("live-text");
          if (live) live.remove();
          return;
        }
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
      // A frame of the page's own (an action); false while the socket is closed.
      send(frame) {
        if (!socket) return false;
        socket.send(JSON.stringify(frame));
        return true;
      },
    };
  }

  // The server closes a socket for good with these codes (agent/web/consumers.py): the
  // banner that says so, with where to go. The transport does not reconnect after them.
  const CLOSED_FOR_GOOD = { 4404: "#conversation-gone", 4401: "#signed-out" };

  // A reconnect the server refuses (the conversation deleted, or the session ended, while
  // the socket was down) looks to the page like a network still down: after each close the
  // page asks over HTTP. The banner to show, or null (there, or the server unreachable).
  async function whyClosedForGood() {
    try {
      const page = await fetch(location.pathname,
        { method: "HEAD", redirect: "manual", cache: "no-store" });
      if (page.status === 404) return CLOSED_FOR_GOOD[4404];
      if (page.type === "opaqueredirect") return CLOSED_FOR_GOOD[4401]; // to the sign-in page
    } catch (e) { /* the server is not answering: keep trying */ }
    return null;
  }

  // body[data-ws] and the banners follow the socket; every (re)open syncs.
  function trackConnection(seqSync, outcomes) {
    const reconnecting = $("#reconnecting");
    let wasOpen = false;
    function end(banner) {
      if (hasEnded()) return;
      document.body.classList.add("ended");
      reconnecting.hidden = true;
      $(banner).hidden = false;
      // The server's last word before closing says the same as the banner, which also
      // says where to go: one notice, not two.
      clearComposerAlert("forbidden");
      clearComposerAlert("signed_out");
      window.transport.closeSocket();
    }
    function opened(event) {
      document.body.dataset.ws = "open";
      reconnecting.hidden = true;
      wasOpen = true;
      clearComposerAlert("disconnected");
      clearComposerAlert("too_many_connections"); // a later try was let in
      seqSync.connected(event.detail.socketWrapper);
    }
    function lost() {
      document.body.dataset.ws = "closed";
      seqSync.disconnected();
      outcomes.socketClosed();
    }
    function closed(event) {
      lost();
      const banner = CLOSED_FOR_GOOD[event.detail.event.code];
      if (banner) { end(banner); return; }
      if (hasEnded()) return;
      if (wasOpen) reconnecting.hidden = false;
      whyClosedForGood().then((found) => { if (found) end(found); });
    }
    document.addEventListener("transport:wsOpen", opened);
    document.addEventListener("transport:wsClose", closed);
    document.addEventListener("transport:wsError", lost);
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
    document.addEventListener("transport:wsAfterMessage", () => { lastFrame = Date.now(); });
    setInterval(() => {
      if (isRunning() && isSocketOpen() && Date.now() - lastFrame > QUIET_RUN_MS) {
        lastFrame = Date.now();
        seqSync.forceRequest();
      }
    }, 1000);
  }

  // --- running state follows #status -------------------------------------------------
  // body.running also turns the Send button into Stop (CSS), and marks the transcript busy
  // for assistive technology (what a run adds is announced once it settles). A prompt
  // refused because one was running is no longer refused once it ends: that alert goes too.
  let noticeStatus = () => {};
  function syncRunningClass() {
    const status = $("#status");
    const state = status ? status.dataset.state : "idle";
    const wasRunning = isRunning();
    // Waiting for a tool approval is still running (Stop cancels it), but the
    // transcript is not busy: the approval card is what the user must read now.
    const busy = state === "thinking" || state === "running_tool";
    const running = busy || state === "waiting_input";
    document.body.classList.toggle("running", running);
    const messages = $("#messages");
    if (messages) messages.setAttribute("aria-busy", String(busy));
    if (wasRunning && !running) clearComposerAlert("prompt_running");
    markCurrentEntry(running);
    showPromptPlaceholder(running);
    noticeStatus();
  }

  // --- notices in a background tab ---------------------------------------------------
  // A run that ends (or starts waiting for an approval) while the tab is hidden marks
  // the tab's title until the tab is seen again and, if the user turned it on in the ⋯
  // menu (the browser asks for its permission then: a user gesture), shows a notification
  // that brings the tab back when clicked (the choice is static/conversation_menu.js's,
  // kept in localStorage under NOTIFY_KEY). A visible tab gets neither: the page shows it.
  const NOTIFY_KEY = "harness-notify";
  const NOTICE_MARK = /^(● Done|⏸ Needs approval|✕ Error) — /;
  const ACTIVE_STATES = ["thinking", "running_tool", "waiting_input"];
  function statusState() {
    const status = $("#status");
    return status ? status.dataset.state : "idle";
  }
  function noticeFor(previous, state) {
    if (state === "waiting_input" && previous !== "waiting_input") {
      const card = $("#messages [data-part=approval][data-approval-state=pending] .approval-title");
      return ["⏸ Needs approval", card ? card.textContent.trim() : "Waiting for your approval"];
    }
    if (!ACTIVE_STATES.includes(previous)) return null;
    if (state === "idle") return ["● Done", "The run finished."];
    if (state === "error") return ["✕ Error", ($("#status") || {}).textContent || "The run ended in an error."];
    return null;
  }
  function notificationsAllowed() {
    return localStorage.getItem(NOTIFY_KEY) === "on" && "Notification" in window &&
      Notification.permission === "granted";
  }
  function createRunNotices() {
    let previous = statusState();
    const plainTitle = () => document.title.replace(NOTICE_MARK, "");
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) document.title = plainTitle();
    });
    return function statusChanged() {
      const state = statusState();
      const notice = state === previous ? null : noticeFor(previous, state);
      previous = state;
      if (!notice || !document.hidden) return;
      const [mark, body] = notice;
      const title = plainTitle();
      document.title = `${mark} — ${title}`;
      if (!notificationsAllowed()) return;
      const shown = new Notification(title, { body: body.trim().slice(0, 200), tag: location.pathname });
      shown.onclick = () => { window.focus(); shown.close(); };
    };
  }
  // The tab's title and the list's entry of the open conversation (its own list's or
  // "Shared with me") follow the heading (the first prompt names the chat, a rename, a
  // catch-up bringing a name the page missed), as a reload would show them; a notice's mark
  // stays.
  function tabTitleFollowsHeading() {
    document.addEventListener("transport:oobAfterSwap", (event) => {
      const heading = $("#conv-title");
      if (!event.target || event.target.id !== "conv-title" || !heading) return;
      const title = heading.textContent.trim();
      const mark = (document.title.match(NOTICE_MARK) || [""])[0];
      document.title = `${mark}${title} · Harness`;
      // The ⋯ menu's Title field too (the first prompt names the conversation), unless
      // the user is typing in it.
      const field = $(".rename-form input[name=title]");
      if (field && document.activeElement !== field) field.value = title;
      const entry = document.getElementById(`conv-link-${$("main.chat").dataset.conversation}`);
      if (entry && entry.textContent !== title) entry.textContent = title;
    });
  }
  // While a prompt runs, the empty prompt box says what Enter and Alt+Enter do now (the
  // hint that fits: see fitPlaceholder).
  let fitPromptPlaceholder = () => {};
  function showPromptPlaceholder(running) {
    fitPromptPlaceholder(running);
  }

  // Removing a queued prompt re-renders #queue, and the focused Remove button goes with it:
  // the focus moves to the first Remove button left, else back to the prompt.
  function keepFocusInQueue(prompt) {
    let removedFrom = null; // the #queue a Remove button was pressed in
    document.addEventListener("transport:wsAfterSend", (event) => {
      const queue = event.target.closest && event.target.closest("#queue");
      if (queue) removedFrom = queue;
    });
    return function queueChanged() {
      if (!removedFrom || $("#queue") === removedFrom) return;
      removedFrom = null;
      const active = document.activeElement;
      if (active && active !== document.body && active.isConnected) return; // moved on
      ($("#queue:not([hidden]) .unqueue") || prompt).focus();
    };
  }

  // The sidebar's entry for this conversation follows its run as it starts and ends.
  function markCurrentEntry(running) {
    const link = $(".conv-list a[aria-current=page]");
    const entry = link && link.closest(".conv-item");
    if (!entry) return;
    let mark = entry.querySelector(".conv-running");
    if (running && !mark) {
      mark = document.createElement("span");
      mark.className = "conv-running";
      mark.setAttribute("role", "img");
      mark.setAttribute("aria-label", "Running");
      mark.title = "Running";
      link.after(mark);
    } else if (!running && mark) {
      mark.remove();
    }
  }

  // The transcript is a log (role="log", aria-relevant="additions"): each new part is read
  // once. The streaming block grows by a fragment per frame; it is taken out of the log's
  // announcements (its finished text arrives as a new part, and that one is read).
  function quietLiveBlock(messages) {
    const live = messages.querySelector("#live-text");
    if (live && live.getAttribute("aria-live") !== "off") live.setAttribute("aria-live", "off");
  }

  // #status and #queue are swapped inside the composer.
  function watchComposer(queueChanged) {
    new MutationObserver(() => { syncRunningClass(); queueChanged(); })
      .observe($(".composer"), { childList: true, subtree: true, attributes: true });
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
  // Every change made here is announced like typing, so the length counter follows it.
  function setPrompt(prompt, value) {
    prompt.value = value;
    prompt.setSelectionRange(value.length, value.length);
    prompt.dispatchEvent(new Event("input"));
  }
  function caretOnFirstLine(prompt) { return prompt.value.lastIndexOf("\n", prompt.selectionStart - 1) === -1; }
  function caretOnLastLine(prompt) { return prompt.value.indexOf("\n", prompt.selectionEnd) === -1; }
  function isPlainKey(event) { return !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey; }

  // While a prompt runs, a prompt sent is queued on it: Enter as a
  // follow-up, Alt+Enter as steering. The mode rides on the frame of the next submit.
  function createPromptModes(form) {
    let next = null;
    document.addEventListener("transport:wsConfigSend", (event) => {
      if (event.target !== form) return;
      if (next) event.detail.parameters.mode = next;
      next = null;
    });
    return { set(mode) { next = mode; } };
  }

  // A queued prompt dropped with its run (cancelled, or the run ended otherwise) arrives as
  // a "not sent" part: its text goes back into #prompt, after what is typed there, once,
  // and the part is hidden (the text is offered once, in the box; it stays in the DOM for
  // the page's seq bookkeeping). Those the page loaded with stay where they are (their
  // part has a Send button), and so do they where the box is disabled (a viewer).
  function createDroppedPromptRestore(messages, prompt) {
    const restored = new Set(Array.from(messages.querySelectorAll("[data-restore]"), (part) => part.dataset.restore));
    return function restore() {
      messages.querySelectorAll("[data-restore]").forEach((part) => {
        if (restored.has(part.dataset.restore) || prompt.disabled) return;
        restored.add(part.dataset.restore);
        const text = part.querySelector(".not-sent-text").textContent;
        part.hidden = true;
        if (prompt.value.includes(text)) return;
        setPrompt(prompt, prompt.value.trim() ? `${prompt.value}\n\n${text}` : text);
      });
    };
  }

  // Enter and the Send button. A prompt that cannot go (the socket is not open, or it is
  // over the length limit, which the server refuses too) stays in #prompt, and the alert
  // beside it says why; one already on its way is not sent twice. While a prompt runs it
  // is queued: as steering with ``steer``, else as a follow-up.
  function submitPrompt(form, prompt, limit, outcomes, modes, steer) {
    const text = prompt.value;
    if (!text.trim() || outcomes.isWaitingFor(text)) return;
    const length = charCount(text);
    if (uploadsPending()) {
      showComposerAlert("uploading", "A file is still uploading; send once its name is in the prompt.");
    } else if (!isSocketOpen()) {
      showComposerAlert("disconnected", hasEnded()
        ? "Nothing was sent: this page can send no more (see above). Your text is kept."
        : "Not connected to the server, so nothing was sent; your text is kept.");
    } else if (length > limit) {
      showComposerAlert("prompt_too_large",
        `The prompt is ${formatCount(length)} characters; the limit is ${formatCount(limit)}. Nothing was sent.`);
    } else {
      modes.set(isRunning() ? (steer ? "steer" : "follow_up") : null);
      form.requestSubmit();
    }
  }

  // --- files into the workspace from the composer --------------------------------------
  // Dropped on the composer, pasted into the prompt (a screenshot) or picked with #attach:
  // static/uploads.js (fetched with the first file: #attach's data-script) uploads them. The
  // gestures are taken here, so a paste's or a drop's files are read while the event lasts.
  // While a file is on its way (or the script that sends it), the composer carries
  // data-uploading, and a prompt waits for the file's path.
  function uploadsPending() {
    const composer = $(".composer");
    return Boolean(composer) && "uploading" in composer.dataset;
  }
  function bindUploads(prompt, composer, button, input) {
    if (!button || !input) return; // a watcher cannot add files
    function uploadAll(files) {
      if (!files.length) return;
      const waiting = !uploadsPending();
      if (waiting) composer.dataset.uploading = "0";
      loadScript(button.dataset.script).then(() => {
        document.dispatchEvent(new CustomEvent("harness:upload", { detail: { files } }));
      }, () => {
        if (waiting && composer.dataset.uploading === "0") delete composer.dataset.uploading;
        showComposerAlert("upload", "Nothing was uploaded: this page could not fetch its upload script; reload it.");
      });
    }
    document.addEventListener("harness:composer-alert", (event) => {
      const { code, message } = event.detail;
      if (message) showComposerAlert(code, message);
      else clearComposerAlert(code);
    });
    button.addEventListener("click", () => input.click());
    input.addEventListener("change", () => { uploadAll(Array.from(input.files)); input.value = ""; });
    prompt.addEventListener("paste", (event) => {
      const files = Array.from(event.clipboardData ? event.clipboardData.files : []);
      if (!files.length) return; // plain text pastes as ever
      event.preventDefault();
      uploadAll(files);
    });
    let depth = 0; // dragenter/leave fire for every child crossed
    const carriesFiles = (event) => Array.from(event.dataTransfer.types || []).includes("Files");
    composer.addEventListener("dragenter", (event) => {
      if (!carriesFiles(event)) return;
      depth += 1;
      composer.classList.add("dropping");
    });
    composer.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (!depth) composer.classList.remove("dropping");
    });
    composer.addEventListener("dragover", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    });
    composer.addEventListener("drop", (event) => {
      depth = 0;
      composer.classList.remove("dropping");
      if (!event.dataTransfer.files.length) return;
      event.preventDefault();
      prompt.focus();
      uploadAll(Array.from(event.dataTransfer.files));
    });
  }

  // The one button beside the prompt: Send, or Stop (#cancel) while a prompt runs.
  function bindSendStop(button, cancelForm, send) {
    button.addEventListener("click", () => {
      if (isRunning()) cancelForm.requestSubmit();
      else send();
    });
  }

  function dropBlankPrompts(form) {
    document.addEventListener("transport:wsConfigSend", (event) => {
      if (event.target === form && !String(event.detail.parameters.content || "").trim()) {
        event.preventDefault();
      }
    });
  }

  function jumpToBottomOnSend(form, autoScroll) {
    document.addEventListener("transport:wsAfterSend", (event) => {
      if (event.target === form) autoScroll.jumpToBottom();
    });
  }

  // The placeholder is the whole hint where the box has room for it, and the short one
  // (data-placeholder-narrow) where the whole would be cut off, as on a phone. Measured with
  // the text in the empty box (the same font and padding), whenever the box changes size.
  function fitPlaceholder(prompt) {
    const hints = {
      idle: [prompt.placeholder, prompt.dataset.placeholderNarrow],
      running: [prompt.dataset.placeholderRunning, prompt.dataset.placeholderRunningNarrow],
    };
    function fits(text) {
      prompt.value = text;
      const fit = prompt.scrollHeight <= prompt.clientHeight && prompt.scrollWidth <= prompt.clientWidth;
      prompt.value = "";
      return fit;
    }
    const apply = (running = isRunning()) => {
      if (prompt.value !== "") return;
      const [wide, narrow] = hints[running && hints.running[0] ? "running" : "idle"];
      const wanted = !narrow || fits(wide) ? wide : narrow;
      if (prompt.placeholder !== wanted) prompt.placeholder = wanted; // (the observer sees this)
    };
    new ResizeObserver(() => apply()).observe(prompt);
    prompt.addEventListener("input", () => apply());
    fitPromptPlaceholder = apply;
  }

  // The prompt grows with its text up to its max-height (then it scrolls) and shrinks back
  // as it empties (after a send too). By script: CSS field-sizing: content hung Chromium
  // here. One measurement a change; the box collapses to be measured only when the text got
  // shorter. The transcript, if it was at its end, stays there (see createAutoScroll).
  function growWithText(prompt) {
    const style = getComputedStyle(prompt);
    const borders = parseFloat(style.borderTopWidth) + parseFloat(style.borderBottomWidth);
    let length = 0;
    function fit() {
      const shorter = prompt.value.length < length;
      length = prompt.value.length;
      if (shorter || !length) prompt.style.height = "";
      if (length && prompt.scrollHeight > prompt.clientHeight) {
        prompt.style.height = `${prompt.scrollHeight + borders}px`;
      }
    }
    prompt.addEventListener("input", fit);
    let width = prompt.clientWidth; // a narrower box wraps its lines anew: fitted again
    new ResizeObserver(() => {
      if (prompt.clientWidth === width) return; // (its own height's changes: nothing to do)
      width = prompt.clientWidth;
      length = Infinity; // measured from the collapsed box, as after a deletion
      fit();
    }).observe(prompt);
    fit();
  }

  // --- the alert beside the composer --------------------------------------------------------
  // #composer-alert says why a prompt was not sent: the server's refusals replace it whole
  // (the transport), the page's own set its text. Looked up each time, since a swap replaces it.
  function showComposerAlert(code, message) {
    const alert = $("#composer-alert");
    alert.dataset.code = code;
    alert.textContent = message;
    alert.hidden = false;
  }

  // Empties the alert; with a code, only an alert of that code (its reason has gone).
  function clearComposerAlert(code) {
    const alert = $("#composer-alert");
    if (!alert || (code && alert.dataset.code !== code)) return;
    delete alert.dataset.code;
    alert.textContent = "";
    alert.hidden = true;
  }

  // --- what became of a sent prompt ----------------------------------------------------
  // The server answers each prompt frame on the socket that sent it, in order:
  // #composer-alert comes back with data-outcome="accepted" (empty) or "refused" (saying
  // why). The text leaves #prompt only once accepted, and only if it is still what was
  // sent (typing goes on meanwhile). Other tabs get no answer, so their text stays. When the
  // socket closes before the answer, the text stays; if that prompt did run, its user part
  // comes with the catch-up after the reconnect, and that clears it then.
  // A prompt accepted: the last one's ending (an error, a stop) is stale. Only when the
  // status line is still the one shown when the prompt went (no newer one came since).
  function clearStaleError(statusAtSend) {
    const status = $("#status");
    if (!status || status !== statusAtSend || status.dataset.state !== "error") return;
    status.dataset.state = "idle";
    delete status.dataset.code;
    const text = status.querySelector(".status-text");
    if (text) text.textContent = "";
  }

  function trackPromptOutcomes(form, prompt, messages, historyWalk) {
    const waiting = []; // per unanswered prompt frame: the composer's {text, after}, or null
    let unconfirmed = null; // the composer's one whose answer went with a closed socket

    function lastUserSeq() {
      const users = messages.querySelectorAll("[data-part=user]");
      return users.length ? Number(users[users.length - 1].dataset.seq) : 0;
    }
    function accepted(text) {
      historyWalk.record(text);
      if (prompt.value !== text) return;
      historyWalk.restart();
      setPrompt(prompt, "");
    }
    document.addEventListener("transport:wsAfterSend", (event) => {
      let frame = null;
      try { frame = JSON.parse(event.detail.message); } catch (e) { return; }
      if (typeof frame.content !== "string") return; // a cancel: not answered
      const status = $("#status");
      waiting.push({ text: frame.content, after: lastUserSeq(), status, mine: event.target === form,
        images: frame.images || [] });
    });
    document.addEventListener("transport:wsAfterMessage", () => {
      const alert = $("#composer-alert");
      const outcome = alert.dataset.outcome;
      if (!outcome) return;
      delete alert.dataset.outcome; // one answer, taken once
      const sent = waiting.shift();
      if (outcome !== "accepted" || !sent) return;
      clearStaleError(sent.status);
      if (sent.mine) {
        accepted(sent.text);
        document.dispatchEvent(new CustomEvent("harness:prompt-accepted", { detail: { images: sent.images } }));
      }
    });
    return {
      isWaitingFor(text) { return waiting.some((sent) => sent.mine && sent.text === text); },
      socketClosed() {
        unconfirmed = waiting.filter((sent) => sent.mine).pop() || unconfirmed;
        waiting.length = 0;
      },
      messagesChanged() {
        if (!unconfirmed) return;
        const mine = Array.from(messages.querySelectorAll("[data-part=user]")).some((part) =>
          Number(part.dataset.seq) > unconfirmed.after &&
          part.querySelector(".user-text").textContent === unconfirmed.text);
        if (!mine) return;
        accepted(unconfirmed.text);
        unconfirmed = null;
      },
    };
  }

  // --- the length limit, while typing ---------------------------------------------------
  // Characters as the server counts them (code points), and as it writes numbers.
  function charCount(text) { return Array.from(text).length; }
  function formatCount(n) { return n.toLocaleString("en-US"); }

  // From 90% of the limit a counter shows the length; past the limit it says by how much
  // (nothing is cut: the text is the user's). Back within it, its refusal goes.
  function showPromptLength(prompt, counter, limit) {
    function update() {
      // Code points never outnumber UTF-16 units: a short text needs no counting.
      const length = prompt.value.length < limit * 0.9 ? 0 : charCount(prompt.value);
      const near = length >= limit * 0.9;
      const over = length - limit;
      counter.hidden = !near;
      counter.classList.toggle("over", over > 0);
      let text = near ? `${formatCount(length)} / ${formatCount(limit)}` : ""; // it describes #prompt
      if (over > 0) text += `: ${formatCount(over)} over the limit`;
      counter.textContent = text;
      if (over <= 0) clearComposerAlert("prompt_too_large");
    }
    prompt.addEventListener("input", update);
    update();
  }

  // Enter sends (queues a follow-up while a prompt runs), Alt+Enter steers the running
  // prompt, Ctrl+Enter adds a newline, ↑/↓ walk the history, Ctrl+U clears.
  function bindPromptKeys(prompt, send, historyWalk) {
    prompt.addEventListener("keydown", (event) => {
      const plain = isPlainKey(event);
      if (event.key === "Enter" && !event.isComposing) {
        if (plain) {
          event.preventDefault();
          send(false);
        } else if (event.altKey && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
          event.preventDefault();
          send(true);
        } else if (event.ctrlKey) { // Ctrl+Enter: a newline (Shift+Enter is native)
          event.preventDefault();
          prompt.setRangeText("\n", prompt.selectionStart, prompt.selectionEnd, "end");
          prompt.dispatchEvent(new Event("input")); // (as typing: the box grows, the counter follows)
        }
      } else if (event.key === "ArrowUp" && plain && caretOnFirstLine(prompt) && historyWalk.canGoOlder()) {
        event.preventDefault();
        historyWalk.older();
      } else if (event.key === "ArrowDown" && plain && caretOnLastLine(prompt) && historyWalk.canGoNewer()) {
        event.preventDefault();
        historyWalk.newer();
      } else if (event.key === "u" && event.ctrlKey && !event.shiftKey) {
        event.preventDefault();
        setPrompt(prompt, "");
        historyWalk.restart();
      }
    });
  }

  // --- focus helpers ---------------------------------------------------------------------
  const FOCUSABLE = "a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), " +
    "select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])";

  function focusablesIn(root) {
    return Array.from(root.querySelectorAll(FOCUSABLE)).filter((el) => el.getClientRects().length > 0);
  }

  // Tab and Shift+Tab go round inside `root` (a modal dialog), never out of it.
  function trapTab(root, event) {
    const items = focusablesIn(root);
    if (!items.length) { event.preventDefault(); return; }
    const first = items[0];
    const last = items[items.length - 1];
    const inside = root.contains(document.activeElement);
    if (event.shiftKey && (!inside || document.activeElement === first)) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && (!inside || document.activeElement === last)) {
      event.preventDefault();
      first.focus();
    }
  }

  // Focus goes back where it was before a dialog or drawer took it (or to `fallback`).
  function restoreFocus(previous, fallback) {
    const target = previous && previous.isConnected && previous !== document.body ? previous : fallback;
    if (target) target.focus();
  }

  // --- help overlay ----------------------------------------------------------------------
  // A modal dialog: opening focuses its Close button and makes the page behind it inert;
  // Tab stays inside; closing hands the focus back to where it was. A click on the backdrop
  // (outside the box) closes it.
  function createHelpOverlay(help, prompt) {
    const close = $("#help-close");
    const page = $(".app");
    let opener = null;
    function toggle(show) {
      const open = show === undefined ? help.hidden : show;
      if (open === !help.hidden) return;
      help.hidden = !open;
      if (page) page.inert = open;
      if (open) {
        opener = document.activeElement;
        close.focus();
      } else {
        restoreFocus(opener, prompt);
        opener = null;
      }
    }
    close.addEventListener("click", () => toggle(false));
    help.addEventListener("click", (event) => { if (event.target === help) toggle(false); });
    help.addEventListener("keydown", (event) => { if (event.key === "Tab") trapTab(help, event); });
    const button = $("#help-toggle");
    if (button) button.addEventListener("click", () => toggle(true));
    return { toggle, isOpen: () => !help.hidden };
  }

  // --- drawers: the conversation list and the files panel --------------------------------
  // On a phone each slides over the chat below its header (so it never covers the toggle
  // that opened it) with a backdrop; a Close button, Esc or a tap on the backdrop close it,
  // and the focus goes back to its toggle. One is open at a time.
  function createDrawers(backdrop) {
    const drawers = [];
    const head = $(".chat-head");
    function placeBelowHeader() {
      if (head) document.documentElement.style.setProperty("--drawer-top", `${Math.round(head.getBoundingClientRect().bottom)}px`);
    }
    function anyOpen() { return drawers.find((drawer) => drawer.isOpen()); }
    function syncBackdrop() { backdrop.hidden = !anyOpen(); }
    function add(toggleId, panelId, closeId, { isOpen, setOpen }) {
      const toggle = $(toggleId);
      const panel = $(panelId);
      const close = $(closeId);
      if (!toggle || !panel || !close) return;
      const drawer = {
        panel,
        isOpen,
        open() {
          drawers.forEach((other) => { if (other !== drawer && other.isOpen()) other.close(false); });
          placeBelowHeader();
          setOpen(true);
          toggle.setAttribute("aria-expanded", "true");
          syncBackdrop();
        },
        close(refocus = true) {
          const hadFocus = panel.contains(document.activeElement) || document.activeElement === close;
          setOpen(false);
          toggle.setAttribute("aria-expanded", "false");
          syncBackdrop();
          if (refocus || hadFocus) toggle.focus();
        },
      };
      toggle.addEventListener("click", () => { if (drawer.isOpen()) drawer.close(); else drawer.open(); });
      close.addEventListener("click", () => drawer.close());
      drawers.push(drawer);
    }
    backdrop.addEventListener("click", () => { const open = anyOpen(); if (open) open.close(); });
    window.addEventListener("resize", placeBelowHeader);
    return {
      add,
      // Esc: the drawer open, if any, closes (true when one did).
      closeOpen() { const open = anyOpen(); if (open) open.close(); return Boolean(open); },
      // Makes an element of a drawer's or the list's seen: a panel open on a mid-size
      // screen takes the list's place (it closes); on a phone the list is a drawer (it opens).
      reveal(element) {
        const seen = () => element.checkVisibility({ visibilityProperty: true });
        if (!seen()) this.closeOpen();
        const holder = drawers.find((drawer) => drawer.panel.contains(element));
        if (!seen() && holder) holder.open();
      },
    };
  }

  // The files panel (a third column on a wide screen; loaded by the transport on its first opening)
  // and the conversation list (a drawer only on a phone).
  function bindDrawers(drawers) {
    const files = $("#files-panel");
    drawers.add("#files-toggle", "#files-panel", "#files-close", {
      isOpen: () => !files.hidden,
      setOpen(open) {
        files.hidden = !open;
        $(".app").classList.toggle("with-files", open);
      },
    });
    const changes = $("#changes-panel"); // a project conversation's (static/projects.js fills it)
    if (changes) {
      drawers.add("#changes-toggle", "#changes-panel", "#changes-close", {
        isOpen: () => !changes.hidden,
        setOpen(open) {
          changes.hidden = !open;
          $(".app").classList.toggle("with-files", open);
          changes.dispatchEvent(new CustomEvent(open ? "harness:opened" : "harness:closed"));
        },
      });
    }
    // On a mid-size screen an open panel takes the list's place; its ☰ brings the list back.
    document.querySelectorAll(".list-back").forEach((button) => {
      button.addEventListener("click", () => {
        const here = $("#conv-list .conv-link.current") || $("#search");
        drawers.reveal(here);
        here.focus();
      });
    });
    drawers.add("#menu-toggle", "#sidebar", "#sidebar-close", {
      isOpen: () => document.body.classList.contains("sidebar-open"),
      setOpen(open) { document.body.classList.toggle("sidebar-open", open); },
    });
  }

  // --- the files panel follows what tools write ----------------------------------------
  // A batch with a write, edit or bash result replaces #files-changed (agent/ui/fragments.py).
  // A loaded panel then fetches again what it shows (the directory or file the user is in:
  // its refresh link's URL), where it is scrolled to; a closed one when it next opens.
  // Only the newest refresh lands, and never over a place the user moved to meanwhile (that
  // place is fetched afresh instead).
  function refreshFilesOnChange(panel, toggle) {
    let stale = false;
    let generation = 0;
    async function refresh() {
      const body = $("#files-body");
      const link = body && body.querySelector(".refresh");
      if (!link) return; // never opened: its first opening loads it fresh
      if (panel.hidden) { stale = true; return; }
      stale = false;
      const mine = ++generation;
      let html;
      try {
        const response = await fetch(link.getAttribute("hx-get"),
          { headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store" });
        // 404: the file or directory went (the panel says so); a redirect: signed out
        if (response.redirected || !(response.ok || response.status === 404)) return;
        html = await response.text();
      } catch (e) { return; }
      if (mine !== generation) return; // a newer refresh is on its way
      if ($("#files-body") !== body) { refresh(); return; } // the user moved: fetch that place
      window.transport.swap($("#files-view"), html, "innerHTML"); // scroll stays
    }
    document.addEventListener("transport:oobAfterSwap", (event) => {
      if (event.target && event.target.id === "files-changed") refresh();
    });
    if (toggle) toggle.addEventListener("click", () => { if (stale) refresh(); });
  }

  // --- the list follows changes made elsewhere ------------------------------------------
  // The socket swaps in #conv-list-refresh when one of the user's conversations was made,
  // renamed, pinned, archived or deleted elsewhere; it fetches the list on its own. It waits
  // while the list is in use (a ⋯ menu open, a rename being typed: a redraw would close the
  // menu and lose the text) and while an answer the page asked for is on its way (swapping
  // the list from under it would lose that answer: the archived view opened, say). A list
  // that comes back as the page shows it (the change was this page's own) is not swapped
  // in, so the focus stays.
  function listSignature(html) {
    const list = new DOMParser().parseFromString(html, "text/html").getElementById("conv-list");
    if (!list) return null;
    list.querySelectorAll("[name=csrfmiddlewaretoken]").forEach((input) => input.remove());
    return list.outerHTML;
  }

  function followListChanges() {
    let waiting = null; // a refresh held back
    let shown = null; // the list as the page's last answer for it drew it
    const asked = new Set(); // the page's own requests for the list (their xhr)
    const isRefresh = (elt) => Boolean(elt) && elt.id === "conv-list-refresh";
    const forList = (detail) => Boolean(detail.target) && detail.target.id === "conv-list";
    const answering = () => [...asked].some((xhr) => xhr.readyState > 0 && xhr.readyState < 4);
    function inUse() {
      const list = $("#conv-list");
      return Boolean(list && (list.contains(document.activeElement) || list.querySelector("details[open]")));
    }
    function retry() {
      setTimeout(() => { // once the focus has moved on, or the request now ending is over
        if (!waiting || inUse() || answering()) return;
        const refresh = waiting;
        waiting = null;
        if (refresh.isConnected) window.transport.trigger(refresh, "harness:refresh");
      }, 0);
    }
    document.addEventListener("transport:beforeRequest", (event) => {
      if (!isRefresh(event.detail.elt) || (!inUse() && !answering())) return;
      event.preventDefault();
      waiting = event.detail.elt;
    });
    document.addEventListener("transport:beforeSend", (event) => {
      if (forList(event.detail) && !isRefresh(event.detail.elt)) asked.add(event.detail.xhr);
    });
    document.addEventListener("transport:afterRequest", (event) => {
      asked.delete(event.detail.xhr);
      retry();
    });
    document.addEventListener("transport:beforeSwap", (event) => {
      if (!forList(event.detail) || !event.detail.shouldSwap) return;
      const next = listSignature(event.detail.serverResponse);
      const config = event.detail.requestConfig; // (detail.elt is the target here)
      const refresh = config && isRefresh(config.elt) ? config.elt : null;
      // Asked for after this was sent (fetched again after it), or the list came into use
      // while it was on its way (a menu opened): held like a refresh asked for then.
      if (refresh && (answering() || inUse())) {
        event.detail.shouldSwap = false;
        waiting = refresh;
      } else if (refresh && next !== null && next === shown) {
        event.detail.shouldSwap = false;
      } else {
        shown = next;
      }
    });
    document.addEventListener("focusout", retry);
    document.addEventListener("toggle", retry, true); // (a ⋯ menu closed)
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

  // `?` is a shortcut outside text fields, and in the prompt while it is empty (typed into
  // any text, it is just a character).
  function isHelpKey(event, prompt) {
    if (event.key === "F1") return true;
    if (event.key !== "?" || event.ctrlKey || event.metaKey || event.altKey) return false;
    return !isTypingIn(event.target) || (event.target === prompt && prompt.value === "");
  }

  // `/` outside text fields, or Ctrl+K anywhere, focuses the search box.
  function isSearchKey(event) {
    if (event.altKey || event.shiftKey) return false;
    if (event.key === "k" && (event.ctrlKey || event.metaKey)) return true;
    return event.key === "/" && !event.ctrlKey && !event.metaKey && !isTypingIn(event.target);
  }

  // A search result opens its conversation at the message (#seq-N): scrolled to, outlined
  // (loaded first when it is further back than the page's latest parts).
  function showLinkedPart(messages, earlier) {
    const match = /^#seq-(\d+)$/.exec(location.hash);
    const part = match && messages.querySelector(`:scope > [data-seq="${match[1]}"]`);
    if (!part) {
      if (match && earlier.before() > Number(match[1])) {
        earlier.load(Number(match[1])).then(() => showLinkedPart(messages, earlier));
      }
      return;
    }
    requestAnimationFrame(() => {
      part.scrollIntoView({ block: "center" });
      part.classList.add("found");
    });
  }

  // "Compact context" and Rename close the menu they sit in (on a phone it would cover the
  // transcript); the focus, hidden with it, goes back to its summary, as Esc's does.
  function closeMenuOnCompact() {
    document.querySelectorAll(".compact-form, .rename-form").forEach((form) => {
      form.addEventListener("submit", () => {
        const menu = form.closest("details");
        if (!menu) return;
        const hadFocus = menu.contains(document.activeElement);
        menu.open = false;
        if (hadFocus) menu.querySelector("summary").focus();
      });
    });
  }

  // --- the page's menus: the ⋯ menu, Share, a listed conversation's ⋯ --------------------
  // Open <details> that float over the page. Esc closes the open one (the focus back on its
  // summary when it was inside), as does a click anywhere else.
  const MENUS = "details.conv-actions[open], details.share[open], details.conv-item-actions[open]";
  function closeMenus(except) {
    let closed = false;
    document.querySelectorAll(MENUS).forEach((menu) => {
      if (except && menu.contains(except)) return;
      const hadFocus = menu.contains(document.activeElement);
      menu.open = false;
      closed = true;
      if (hadFocus) menu.querySelector("summary").focus();
    });
    return closed;
  }
  // The Share panel is redrawn whole by each of its forms (the transport): the focus, lost with the
  // control that had it, goes to the same control redrawn, else to the username field (a
  // Share or a Remove done: ready for the next).
  function keepFocusInSharePanel() {
    let had = null;
    document.addEventListener("transport:beforeRequest", (event) => {
      const panel = $("#share-panel");
      if (panel && panel.contains(event.target)) had = document.activeElement && document.activeElement.id;
    });
    document.addEventListener("transport:afterSettle", () => {
      const panel = $("#share-panel");
      if (had === null || !panel) return;
      const lost = !document.activeElement || document.activeElement === document.body;
      const again = (had && document.getElementById(had)) || $("#share-username");
      had = null;
      if (lost && again && panel.contains(again)) again.focus();
    });
  }

  // The conversation list redrawn by an entry's Rename, Pin or Archive, or by the archived
  // view's toggle: the focus, lost with the old list, goes to that entry's ⋯ (where it is
  // still listed) or the toggle again, else to the list's first link, not to the page's top.
  function keepFocusInConversationList() {
    let had = null; // the entry's id, or the control's
    document.addEventListener("transport:beforeRequest", (event) => {
      const list = $("#conv-list");
      if (!list || !list.contains(event.target)) return;
      const entry = event.target.closest(".conv-item");
      had = entry ? entry.dataset.conversationId : event.target.id;
    });
    document.addEventListener("transport:afterSettle", () => {
      const list = $("#conv-list");
      if (had === null || !list) return;
      const lost = !document.activeElement || document.activeElement === document.body;
      const again = list.querySelector(`.conv-item[data-conversation-id="${had}"] > details > summary`) ||
        (had && document.getElementById(had)) || list.querySelector("a");
      had = null;
      if (lost && again && list.contains(again)) again.focus();
    });
  }

  function closeMenusOnClickElsewhere() {
    document.addEventListener("click", (event) => {
      // (a click that removed its own target, such as a share's Remove, was inside)
      if (event.target instanceof Node && event.target.isConnected) closeMenus(event.target);
    });
  }

  function bindGlobalKeys(messages, prompt, helpOverlay, drawers) {
    document.addEventListener("keydown", (event) => {
      if (isHelpKey(event, prompt)) {
        event.preventDefault();
        helpOverlay.toggle();
      } else if (isSearchKey(event) && $("#search")) {
        event.preventDefault();
        // A panel open on a mid-size screen takes the list's place: it closes to show it.
        drawers.reveal($("#search"));
        $("#search").focus();
        $("#search").select();
      } else if (event.key === "Escape") {
        if (helpOverlay.isOpen()) { helpOverlay.toggle(false); event.preventDefault(); } else if (!event.defaultPrevented && closeMenus()) event.preventDefault(); else if (drawers.closeOpen()) event.preventDefault(); else clearSelection();
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
  function createAutoScroll(messages, newContent, composer) {
    let stickToBottom = true;
    function atBottom() { return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 40; }
    function scrollToBottom() { messages.scrollTop = messages.scrollHeight; newContent.hidden = true; }
    function jumpToBottom() { stickToBottom = true; scrollToBottom(); }
    let above = false; // parts were just put above the reader: not new content
    messages.addEventListener("scroll", () => {
      stickToBottom = atBottom();
      if (stickToBottom) newContent.hidden = true;
    }, { passive: true });
    newContent.addEventListener("click", jumpToBottom);
    // The transcript's box shrinks as the composer grows: a reader at its end stays there.
    // (Only then: a panel opened from a card leaves the card where it was, in sight.)
    let measured = false; // (the observer's first call is the page's first layout)
    new ResizeObserver(() => {
      if (measured && stickToBottom) scrollToBottom();
      measured = true;
    }).observe(composer);
    // Just above the transcript's end, whatever is between it and the composer (the
    // Terminal and Preview rows, an open terminal): it covered them, at a fixed height.
    function showPill() {
      const chat = messages.parentElement.getBoundingClientRect();
      newContent.style.bottom = `${Math.round(chat.bottom - messages.getBoundingClientRect().bottom + 12)}px`;
      newContent.hidden = false;
    }
    return {
      jumpToBottom,
      contentChanged() {
        if (above) return;
        // (a re-drawn transcript can end up shorter than the screen: then nothing is below)
        if (stickToBottom || atBottom()) { stickToBottom = true; scrollToBottom(); } else showPill();
      },
      // A change the reader made where they read (a prompt's editor opening or closing):
      // not new content, and nothing moves.
      inPlace(change) {
        above = true;
        change();
        requestAnimationFrame(() => { above = false; });
      },
      // Puts content above what the reader sees, which stays where it was on the screen. Till
      // the next frame, changes are that content's (its copy buttons, its times): not new.
      insertAbove(insert) {
        const fromBottom = messages.scrollHeight - messages.scrollTop;
        above = true;
        insert();
        messages.scrollTop = messages.scrollHeight - fromBottom;
        requestAnimationFrame(() => { above = false; });
      },
    };
  }

  // --- earlier parts of a long conversation ---------------------------------------------
  // The page holds a long conversation's latest parts under a "Show earlier messages"
  // button (#earlier); clicked, or scrolled into view, it is replaced by the page of parts
  // before them (GET its data-url: the server's HTML, as a swap would take it), which
  // brings the next button while there are more.
  function createEarlierParts(messages, autoScroll) {
    let loading = null;
    let watched = null;
    const button = () => messages.querySelector(":scope > #earlier");
    const seen = new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting)) load();
    }, { root: messages, rootMargin: "200px 0px 0px 0px" });

    // Called on every change of the transcript: a branch switch redraws it, button included.
    function watch() {
      if (button() === watched) return;
      seen.disconnect();
      watched = button();
      if (watched) seen.observe(watched);
    }

    function load(at) {
      const current = button();
      if (!current) return Promise.resolve();
      if (loading) return loading.then(() => (at && before() > at ? load(at) : undefined));
      const url = new URL(current.dataset.url, location.href);
      if (at) url.searchParams.set("at", at);
      current.disabled = true;
      current.setAttribute("aria-busy", "true");
      loading = fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true" } })
        .then((response) => {
          if (!response.ok) throw new Error(`HTTP ${response.status}`);
          return response.text();
        })
        .then((html) => {
          const fragment = document.createRange().createContextualFragment(html);
          const added = Array.from(fragment.children);
          autoScroll.insertAbove(() => current.replaceWith(fragment));
          added.forEach((element) => window.transport.process(element));
        })
        .catch(() => {
          current.disabled = false;
          current.removeAttribute("aria-busy");
          current.textContent = "Earlier messages could not be loaded: try again";
        })
        .finally(() => { loading = null; watched = null; watch(); });
      return loading;
    }

    function before() { return Number((button() || { dataset: {} }).dataset.before || 0); }

    messages.addEventListener("click", (event) => {
      if (event.target.closest("#earlier")) load();
    });
    watch();
    return { load, before, watch };
  }

  // --- copy buttons ----------------------------------------------------------------------
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

  // What a copy button copies: a message part's text (data-copy="text": the prompt as typed,
  // the answer as shown) or the answer's markdown as the model wrote it (data-copy=
  // "markdown", kept escaped in its inert <template class="md-source">), a tool's whole
  // result (its collapsed parts too), or a code block's text.
  function copiedText(button) {
    const part = partOf(button);
    if (button.dataset.copy === "markdown") {
      return answerTexts(part).map((text) => text.querySelector("template.md-source").content.textContent).join("\n\n");
    }
    if (button.dataset.copy === "text") {
      const user = part.querySelector(".user-text");
      return user ? user.textContent : answerTexts(part).map((text) => text.querySelector(".md").innerText).join("\n\n");
    }
    const result = button.closest(".tool-result");
    if (!result) return button.parentElement.querySelector("pre").innerText;
    const pres = result.querySelectorAll("pre.tool-output, pre.diff, .tool-code pre");
    return Array.from(pres, (pre) => pre.textContent).join("");
  }

  // An answer's text parts, up to ``last`` (its last): the prefaces before its tool calls
  // and its final words, which share one action row (markAnswerEnds).
  function answerTexts(last) {
    const texts = [last];
    for (let part = last.previousElementSibling; part && part.dataset.part !== "user"; part = part.previousElementSibling) {
      if (part.dataset.part === "text") texts.unshift(part);
    }
    return texts;
  }

  // One action row per answer, not per text part: only the answer's last text part shows
  // Copy · Copy as markdown · Regenerate, for the whole answer; the answer being written
  // shows none until its run ends. The row comes after the answer's last part: an answer
  // that ends in a tool card or an error (a stopped one) has its last text part's row
  // moved after that part (an "answer-row", naming its text part by seq), so it reads as
  // the answer's end, by eye and by Tab order alike.
  function markAnswerEnds(messages) {
    let ended = !isRunning(); // walking back from the end: the newest answer, once done
    let tail = null; // the current answer's last part
    for (let part = messages.lastElementChild; part; part = part.previousElementSibling) {
      const kind = part.dataset.part;
      if (!kind) continue; // a moved row, a branch switch
      if (kind === "user") { ended = true; tail = null; continue; }
      tail = tail || part;
      if (kind !== "text") continue;
      if (part.classList.contains("answer-end") !== ended) part.classList.toggle("answer-end", ended);
      placeAnswerRow(messages, part, ended ? tail : part);
      ended = false;
    }
  }

  function placeAnswerRow(messages, text, after) {
    const seq = text.dataset.seq;
    const row = text.querySelector(":scope > .part-actions")
      || (seq && messages.querySelector(`:scope > .answer-row[data-answer-of="${seq}"]`));
    if (!row) return;
    if (after === text) {
      if (row.parentElement !== text) { row.classList.remove("answer-row"); text.appendChild(row); }
    } else if (after.nextElementSibling !== row) {
      row.classList.add("answer-row");
      row.dataset.answerOf = seq;
      after.after(row);
    }
  }

  // The part a button acts for: its own, or, on a moved answer row, the text part it names.
  function partOf(button) {
    const row = button.closest(".answer-row");
    if (!row) return button.closest("[data-part]");
    return $(`#messages > [data-part=text][data-seq="${row.dataset.answerOf}"]`);
  }

  // Without the Clipboard API (a page served over plain http to another host) or when it
  // refuses, a selected off-screen textarea and execCommand("copy").
  function copyWithSelection(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "sr-only";
    document.body.appendChild(area);
    area.select();
    let copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    area.remove();
    return copied;
  }

  async function writeClipboard(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try { await navigator.clipboard.writeText(text); return true; } catch (e) { /* the fallback */ }
    }
    return copyWithSelection(text);
  }

  // Every copy button in the transcript: it says "Copied" (or "Copy failed") for a moment,
  // and #copy-status tells assistive technology the same.
  function copyOnClick(messages) {
    const status = $("#copy-status");
    messages.addEventListener("click", async (event) => {
      const button = event.target.closest(".copy");
      if (!button) return;
      if (!button.dataset.label) button.dataset.label = button.textContent;
      const copied = await writeClipboard(copiedText(button));
      button.textContent = copied ? "Copied" : "Copy failed";
      if (status) status.textContent = copied ? "Copied to the clipboard" : "Could not copy";
      clearTimeout(Number(button.dataset.timer));
      button.dataset.timer = String(setTimeout(() => {
        button.textContent = button.dataset.label;
        if (status) status.textContent = "";
      }, 1500));
    });
  }

  // --- branches: edit a prompt, regenerate an answer, switch versions -------------
  // Edit turns the prompt into a box in place; saving sends it as a new version (the
  // server re-draws the transcript for every tab). Typed text survives a refusal: the box
  // stays until the transcript is re-drawn.
  // In a project conversation each of them also restores the files: static/projects.js
  // takes the cancelable harness:branch-action, asks, and sends the frame itself (with
  // restore_files) through harness:send.
  function bindBranches(messages, seqSync, autoScroll) {
    function act(frame, anchor) {
      const asked = new CustomEvent("harness:branch-action", { cancelable: true, detail: { frame, anchor } });
      if (document.dispatchEvent(asked)) seqSync.send(frame);
    }
    messages.addEventListener("click", (event) => {
      const edit = event.target.closest("[data-edit]");
      if (edit) { openEditor(edit.closest("[data-part]"), Number(edit.dataset.edit)); return; }
      const again = event.target.closest("[data-regenerate]");
      if (again) { act({ action: "regenerate", of: Number(again.dataset.regenerate) }, again); return; }
      const arrow = event.target.closest("[data-branch-switch] button[data-branch]");
      if (arrow && arrow.dataset.branch !== "") act({ action: "branch", id: Number(arrow.dataset.branch) }, arrow);
    });

    function openEditor(part, seq) {
      if (!part || part.querySelector(".edit-form")) return;
      const text = part.querySelector(".user-text");
      const form = document.createElement("form");
      form.className = "edit-form";
      const area = document.createElement("textarea");
      area.value = text.textContent;
      area.rows = Math.min(12, Math.max(2, area.value.split("\n").length));
      area.setAttribute("aria-label", "Edited prompt");
      const save = document.createElement("button");
      save.type = "submit";
      save.textContent = "Send as a new version";
      const cancel = document.createElement("button");
      cancel.type = "button";
      cancel.textContent = "Cancel";
      form.append(area, save, cancel);
      autoScroll.inPlace(() => { text.hidden = true; text.after(form); });
      area.focus();
      const editButton = part.querySelector("[data-edit]");
      // Closed, the focus goes back to the prompt's Edit (it would be lost with the form).
      const close = () => {
        autoScroll.inPlace(() => { form.remove(); text.hidden = false; });
        if (editButton) editButton.focus();
      };
      cancel.addEventListener("click", close);
      area.addEventListener("keydown", (event) => {
        if (event.key === "Escape") { event.preventDefault(); close(); }
        if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.altKey) {
          event.preventDefault();
          form.requestSubmit();
        }
      });
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        if (!area.value.trim()) return;
        act({ action: "edit", of: seq, content: area.value }, save);
      });
    }
  }

  // --- new content in #messages --------------------------------------------------------
  function watchMessages(messages, onChange) {
    new MutationObserver(onChange).observe(messages, { childList: true, subtree: true, characterData: true });
  }

  // --- small page helpers ----------------------------------------------------------------
  // Delegated: the sidebar's list is swapped whole (pin, archive), its forms with it.
  function confirmBeforeSubmit() {
    document.addEventListener("submit", (event) => {
      const form = event.target.closest("form[data-confirm]");
      if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }

  // The model select and the theme switch save in the background: the page (and its
  // socket) stays. Should that fail, the form is submitted the plain way, which shows what
  // happened.
  function submitOnChange() {
    document.querySelectorAll("form[data-autosubmit]").forEach((form) => {
      form.addEventListener("change", async (event) => {
        form.setAttribute("aria-busy", "true");
        try {
          const response = await fetch(form.action, {
            method: "POST", body: new FormData(form), credentials: "same-origin",
            headers: { "HX-Request": "true" }, redirect: "manual",
          });
          if (!response.ok) throw new Error(String(response.status));
          form.dataset.saved = event.target.value;
        } catch (error) {
          form.submit();
        } finally {
          form.removeAttribute("aria-busy");
        }
      });
    });
  }

  // The theme is <html data-theme> (rendered by the server from the account, so the first
  // paint has it): a choice applies at once, while the form saves it.
  function applyThemeOnChange() {
    document.querySelectorAll("input[name=theme]").forEach((radio) => {
      radio.addEventListener("change", () => { document.documentElement.dataset.theme = radio.value; });
    });
  }

  // The offline demo's banner, once dismissed, stays away (this browser remembers).
  const OFFLINE_DISMISSED = "harness.offlineBannerDismissed";
  function dismissibleOfflineBanner() {
    const banner = $("#offline-banner");
    const button = $("#offline-dismiss");
    if (!banner || !button) return;
    let dismissed = false;
    try { dismissed = window.localStorage.getItem(OFFLINE_DISMISSED) === "1"; } catch (e) { /* storage off */ }
    if (dismissed) banner.hidden = true;
    button.addEventListener("click", () => {
      banner.hidden = true;
      try { window.localStorage.setItem(OFFLINE_DISMISSED, "1"); } catch (e) { /* storage off */ }
      $("#prompt").focus();
    });
  }

  // The owner changed this reader's role (#role-changed, swapped in by the socket): what
  // the page offers (the composer, Files, Compact…) is drawn for a role, so it reloads,
  // keeping the typed text for the reloaded page (once, this tab only).
  const KEPT_PROMPT = "harness.keptPrompt";
  function redrawOnRoleChange(prompt) {
    const marker = $("#role-changed");
    if (!marker) return;
    const drawnFor = marker.dataset.role;
    const key = `${KEPT_PROMPT}.${location.pathname}`;
    try {
      const kept = window.sessionStorage.getItem(key);
      window.sessionStorage.removeItem(key);
      if (kept && !prompt.disabled && !prompt.value) setPrompt(prompt, kept);
    } catch (e) { /* storage off */ }
    document.addEventListener("transport:wsAfterMessage", () => {
      const now = $("#role-changed");
      if (!now || now.dataset.role === drawnFor) return;
      try { if (prompt.value) window.sessionStorage.setItem(key, prompt.value); } catch (e) { /* storage off */ }
      location.reload();
    });
  }

  // An empty conversation's welcome: a suggestion fills the prompt (it is not sent), and
  // the welcome goes once the transcript has a part.
  function bindWelcome(welcome, prompt, messages) {
    if (!welcome) return () => {};
    welcome.querySelectorAll("[data-suggestion]").forEach((button) => {
      button.addEventListener("click", () => {
        setPrompt(prompt, button.dataset.suggestion);
        prompt.focus();
      });
    });
    return () => { if (messages.children.length) welcome.hidden = true; };
  }

  // Every part shows when it happened on hover: its event's time (data-ts, or the page's
  // #part-times for tool cards), or, for a tool card that arrived live, when it arrived.
  function createPartTimes() {
    const times = new Map();
    try {
      const loaded = JSON.parse(($("#part-times") || {}).textContent || "{}");
      Object.entries(loaded).forEach(([seq, ts]) => times.set(seq, Number(ts)));
    } catch (e) { /* no times: the arrival time stands in */ }
    const format = (ts) => new Date(ts).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
    const short = (ts) => new Date(ts).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
    return function stamp(root) {
      // Earlier parts loaded on scroll bring their times along.
      root.querySelectorAll(".part-times").forEach((holder) => {
        try {
          Object.entries(JSON.parse(holder.textContent)).forEach(([seq, ts]) => times.set(seq, Number(ts)));
        } catch (e) { /* their arrival time stands in */ }
        holder.remove();
      });
      root.querySelectorAll("[data-part][data-seq]").forEach((part) => {
        const seq = part.dataset.seq;
        const ts = Number(part.dataset.ts) || times.get(seq) || Date.now();
        times.set(seq, ts);
        if (!part.title) part.title = format(ts);
        // When it was sent or answered, at a glance: on the part's action row (the date
        // and seconds in its title).
        const actions = part.querySelector(":scope > .part-actions");
        if (actions && !actions.querySelector(".part-time")) {
          const time = document.createElement("time");
          time.className = "part-time";
          time.dateTime = new Date(ts).toISOString();
          time.textContent = short(ts);
          time.title = format(ts);
          actions.prepend(time);
        }
      });
    };
  }

  // --- scripts on demand ------------------------------------------------------------------
  // What first paint does not need comes when the user first reaches it: a holder's
  // data-load names its scripts (hashed by the template's {% static %}, run in order), fetched
  // on a pointer down or a focus within it (or on what its data-load-for selector names
  // elsewhere: a tool card's preview button), on a <details> in it opening, or at once when
  // it holds a [data-load-now] (a project still cloning: its state is polled). A click on a
  // control (a checkbox's too) or a form's submit that comes before they have run is held
  // and replayed once they have, so a first click, or Enter, works; data-loading marks the
  // holder meanwhile. Should a script not come (the network; a deploy that replaced it), the
  // held action goes on without it (a link, a plain form still work), data-load-failed says
  // so, and the next reach fetches it again.
  const loadedScripts = new Map(); // src → its promise: a script two holders name runs once

  function loadScript(src) {
    if (!loadedScripts.has(src)) {
      loadedScripts.set(src, new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = src;
        script.async = false;
        script.addEventListener("load", resolve, { once: true });
        script.addEventListener("error", () => {
          loadedScripts.delete(src); // asked for again, fetched again
          script.remove();
          reject(new Error(src));
        }, { once: true });
        document.head.appendChild(script);
      }));
    }
    return loadedScripts.get(src);
  }

  function bindOnDemand(holder) {
    const sources = holder.dataset.load.split(/\s+/).filter(Boolean);
    const elsewhere = holder.dataset.loadFor || "";
    let loading = null;
    let ready = false;
    let replaying = false; // a held action going on: not held again
    const reaches = (target) => target instanceof Element
      && (holder.contains(target) || (elsewhere !== "" && target.closest(elsewhere) !== null));
    // The document-wide listeners go once they have done their part (back if it failed):
    // none stays on every click and focus of the page for its lifetime.
    function listen(on) {
      const method = on ? "addEventListener" : "removeEventListener";
      document[method]("pointerdown", early, true);
      document[method]("focusin", early, true);
      holder[method]("toggle", start, true); // (a <details> inside: toggle does not bubble)
    }
    function load() {
      if (loading) return loading;
      listen(false);
      holder.dataset.loading = "";
      delete holder.dataset.loadFailed;
      holder.setAttribute("aria-busy", "true");
      loading = sources.reduce((before, src) => before.then(() => loadScript(src)), Promise.resolve())
        .then(() => {
          ready = true;
          document.removeEventListener("click", hold, true);
          document.removeEventListener("submit", hold, true);
        }, (error) => {
          loading = null;
          holder.dataset.loadFailed = "";
          listen(true);
          throw error;
        })
        .finally(() => { delete holder.dataset.loading; holder.removeAttribute("aria-busy"); });
      return loading;
    }
    const start = () => { load().catch(() => {}); }; // (a failure is shown: data-load-failed)
    const early = (event) => { if (reaches(event.target)) start(); };
    function hold(event) {
      if (ready || replaying || !reaches(event.target)) return;
      const control = event.type === "submit" ? event.target
        : event.target.closest("button, a[href], input[type=submit], input[type=checkbox]");
      if (!control || control.closest("summary")) return; // a <details> opens by itself
      event.preventDefault();
      event.stopImmediatePropagation();
      const replay = () => {
        replaying = true;
        try {
          if (event.type === "submit") control.requestSubmit();
          else control.click();
        } finally {
          replaying = false;
        }
      };
      load().then(replay, replay);
    }
    listen(true);
    document.addEventListener("click", hold, true);
    document.addEventListener("submit", hold, true);
    if (holder.querySelector("[data-load-now]") || holder.querySelector("details[open]")) start();
  }

  // At phone width the header's one row scrolls sideways: a fade at an edge (CSS, by
  // data-more: "start", "end" or both) says more controls are that way.
  function hintHeaderScroll(head) {
    if (!head) return;
    const update = () => {
      const more = [];
      if (head.scrollLeft > 1) more.push("start");
      if (head.scrollLeft + head.clientWidth < head.scrollWidth - 1) more.push("end");
      const value = more.join(" ");
      if ((head.dataset.more || "") !== value) head.dataset.more = value;
    };
    head.addEventListener("scroll", update, { passive: true });
    new ResizeObserver(update).observe(head);
    update();
  }

  // --- wiring ----------------------------------------------------------------------------
  // The page's CSRF token on every request of the transport (a form the server pushed over the socket,
  // such as the Archived mark's Unarchive, carries none: a socket has no token to give).
  // Not on the socket's own messages (transport:wsConfigSend): the server has no use for it there.
  function sendCsrfTokenWithRequests() {
    const chat = $("main[data-csrf]");
    if (!chat) return;
    document.addEventListener("transport:configRequest", (event) => {
      event.detail.headers["X-CSRFToken"] = chat.dataset.csrf;
    });
  }

  function init() {
    document.querySelectorAll("[data-load]").forEach(bindOnDemand);
    sendCsrfTokenWithRequests();
    followListChanges();
    const messages = $("#messages");
    const prompt = $("#prompt");
    const form = $("#prompt-form");
    if (!messages || !prompt || !form) return;

    const historyWalk = createHistoryWalk(prompt, readPromptHistory());
    const outcomes = trackPromptOutcomes(form, prompt, messages, historyWalk);
    const seqSync = startSeqSync(initialSeq());
    trackConnection(seqSync, outcomes);
    syncOnTabWake(seqSync);
    syncWhenRunGoesQuiet(seqSync);
    noticeStatus = createRunNotices();
    tabTitleFollowsHeading();
    syncRunningClass();

    const autoScroll = createAutoScroll(messages, $("#new-content"), $(".composer"));
    const limit = Number(prompt.dataset.maxChars);
    const modes = createPromptModes(form);
    const send = (steer) => submitPrompt(form, prompt, limit, outcomes, modes, steer);
    dropBlankPrompts(form);
    jumpToBottomOnSend(form, autoScroll);
    showPromptLength(prompt, $("#prompt-count"), limit);
    fitPlaceholder(prompt);
    growWithText(prompt);
    bindSendStop($("#cancel"), $("#cancel-form"), () => send(false));
    const steer = $("#steer");
    if (steer) steer.addEventListener("click", () => { send(true); prompt.focus(); });
    bindUploads(prompt, $(".composer"), $("#attach"), $("#attach-input"));
    bindPromptKeys(prompt, send, historyWalk);
    const drawers = createDrawers($("#backdrop"));
    bindDrawers(drawers);
    refreshFilesOnChange($("#files-panel"), $("#files-toggle"));
    bindGlobalKeys(messages, prompt, createHelpOverlay($("#help"), prompt), drawers);

    copyOnClick(messages);
    bindBranches(messages, seqSync, autoScroll);
    // Frames other scripts of the page send on this socket (static/projects.js: a branch
    // action with restore_files, a comment on a changed line); detail.sent says if it went.
    document.addEventListener("harness:send", (event) => {
      event.detail.sent = seqSync.send(event.detail.frame);
    });
    addCopyButtons(messages); // the page's own code blocks; the observer covers what arrives later
    quietLiveBlock(messages);
    const welcomeChanged = bindWelcome($("#welcome"), prompt, messages);
    const stampTimes = createPartTimes();
    stampTimes(messages);
    const restoreDropped = createDroppedPromptRestore(messages, prompt);
    const earlier = createEarlierParts(messages, autoScroll);
    watchMessages(messages, () => {
      welcomeChanged();
      stampTimes(messages);
      quietLiveBlock(messages);
      addCopyButtons(messages);
      syncRunningClass();
      markAnswerEnds(messages);
      outcomes.messagesChanged();
      restoreDropped();
      earlier.watch();
      autoScroll.contentChanged();
    });
    const queueChanged = keepFocusInQueue(prompt);
    watchComposer(() => { queueChanged(); markAnswerEnds(messages); });
    markAnswerEnds(messages);
    autoScroll.jumpToBottom();
    showLinkedPart(messages, earlier);
    window.addEventListener("hashchange", () => { // a search hit in this conversation
      // (on a phone the conversations drawer, where the hit was, would cover the part)
      if (document.body.classList.contains("sidebar-open")) $("#sidebar-close").click();
      showLinkedPart(messages, earlier);
    });
    closeMenuOnCompact();
    closeMenusOnClickElsewhere();
    keepFocusInSharePanel();
    keepFocusInConversationList();

    confirmBeforeSubmit();
    applyThemeOnChange();
    submitOnChange();
    dismissibleOfflineBanner();
    hintHeaderScroll($(".chat-head"));
    redrawOnRoleChange(prompt);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
