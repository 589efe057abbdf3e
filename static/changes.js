// A project conversation's Changes panel (docs/API.md, "Projects"): GET …/changes drawn file
// by file, each file's part of the unified diff with its lines coloured (added, removed,
// hunk) and numbered. The diff is repository content: it only ever becomes text nodes.
// Drawn when the panel opens and again after each checkpoint the transcript shows (a
// closed panel when it next opens). Who may drive the conversation comments on a line (a
// follow-up to the agent quoting path:line, sent through harness.js: harness:send),
// commits and pushes.
(function () {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const STATUS_MARK = { added: "A", modified: "M", deleted: "D", renamed: "R" };
  const HUNK = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/;

  const { api, say } = window.harnessApi;

  function element(tag, className, text) {
    const made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  // The unified diff cut at each file's "diff --git" line: one piece per file, in the
  // order of the files listed (both come from one git diff-tree). A line of a hunk starts
  // with " ", "+", "-" or "\", so a piece never starts inside one.
  function pieces(diff) {
    const out = [];
    let current = null;
    for (const line of diff.split("\n")) {
      if (line.startsWith("diff --git ")) { current = []; out.push(current); continue; }
      if (current) current.push(line);
    }
    return out;
  }

  // One file's lines: headers dim, hunks cyan, additions green, removals red; a line of a
  // hunk carries its number (the new file's; a removed line the old file's).
  function diffLines(lines, path, canComment) {
    const pre = element("div", "diff change-diff");
    pre.setAttribute("role", "group");
    pre.setAttribute("aria-label", `Diff of ${path}`);
    let oldLine = 0;
    let newLine = 0;
    let inHunk = false;
    for (const line of lines) {
      const hunk = HUNK.exec(line);
      let kind = "diff-file";
      let number = null;
      if (hunk) {
        oldLine = Number(hunk[1]);
        newLine = Number(hunk[2]);
        inHunk = true;
        kind = "diff-hunk";
      } else if (inHunk && line.startsWith("+")) {
        kind = "diff-add"; number = newLine++;
      } else if (inHunk && line.startsWith("-")) {
        kind = "diff-del"; number = oldLine++;
      } else if (inHunk && line.startsWith(" ")) {
        kind = "diff-ctx"; number = newLine++; oldLine++;
      } else if (line === "" || line.startsWith("+++ ") || line.startsWith("--- ")) {
        continue;
      }
      const row = element("div", `diff-line ${kind}`);
      if (number !== null && canComment) {
        const button = element("button", "diff-ln", String(number));
        button.type = "button";
        button.dataset.path = path;
        button.dataset.line = String(number);
        button.dataset.removed = kind === "diff-del" ? "1" : "";
        button.setAttribute("aria-label", `Comment on ${path}:${number}`);
        row.append(button);
      } else {
        row.append(element("span", "diff-ln", number === null ? "" : String(number)));
      }
      row.append(element("span", "diff-text", line));
      pre.append(row);
    }
    return pre;
  }

  function fileItem(file, lines, canComment) {
    const item = element("li", "change-file");
    item.dataset.path = file.path;
    item.dataset.status = file.status;
    const details = element("details");
    details.open = true;
    const summary = element("summary");
    const mark = element("span", "change-status", STATUS_MARK[file.status] || "?");
    mark.title = file.status;
    mark.setAttribute("aria-label", file.status);
    summary.append(mark, " ", element("code", "change-path", file.path), " ",
      element("span", "change-adds", `+${file.additions}`), " ",
      element("span", "change-dels", `−${file.deletions}`));
    details.append(summary);
    details.append(lines ? diffLines(lines, file.path, canComment)
      : element("p", "changes-note", "Its diff is past what is shown (the diff is too large)."));
    item.append(details);
    return item;
  }

  function draw(panel, found) {
    const list = $("#changes-files", panel);
    const summary = $("#changes-summary", panel);
    const canComment = panel.hasAttribute("data-can-drive");
    const split = pieces(found.diff || "");
    list.replaceChildren(...found.files.map((file, i) => fileItem(file, split[i], canComment)));
    const adds = found.files.reduce((n, f) => n + f.additions, 0);
    const dels = found.files.reduce((n, f) => n + f.deletions, 0);
    say(summary, found.files.length
      ? `${found.files.length} file${found.files.length === 1 ? "" : "s"} changed, +${adds} −${dels}` +
        (found.truncated ? " (the diff is cut: it is too large to show whole)" : "")
      : "No changes yet: the files are as the branch started.");
  }

  // Drawn once now, and again on each checkpoint while open; only the newest answer lands.
  function refresher(panel) {
    let generation = 0;
    let stale = true;
    async function refresh() {
      if (panel.hidden) { stale = true; return; }
      stale = false;
      const mine = ++generation;
      const { status, data } = await api("GET", panel.dataset.changesUrl);
      if (mine !== generation) return;
      if (status === 200) draw(panel, data);
      else say($("#changes-summary", panel), `The changes could not be read: ${data.message}`, "error");
    }
    panel.addEventListener("harness:opened", () => { if (stale) refresh(); });
    return refresh;
  }

  // A checkpoint part arriving (live, a catch-up, a redrawn transcript) means new files.
  function onCheckpoints(messages, refresh) {
    let timer = 0;
    new MutationObserver((records) => {
      const arrived = records.some((record) => Array.from(record.addedNodes).some((node) =>
        node.nodeType === 1 && (node.matches("[data-part=checkpoint]") || node.querySelector("[data-part=checkpoint]"))));
      if (!arrived) return;
      clearTimeout(timer);
      timer = setTimeout(refresh, 200);
    }).observe(messages, { childList: true });
  }

  // A comment on a line: a box below it; sent as a prompt (a follow-up while the agent
  // works) quoting path:line and the line.
  function bindComments(panel) {
    panel.addEventListener("click", (event) => {
      const button = event.target.closest("button.diff-ln");
      if (!button) return;
      const row = button.closest(".diff-line");
      if (row.nextElementSibling && row.nextElementSibling.matches(".line-comment")) {
        $("textarea", row.nextElementSibling).focus();
        return;
      }
      const where = `${button.dataset.path}:${button.dataset.line}${button.dataset.removed ? " (a removed line)" : ""}`;
      const form = element("form", "line-comment");
      const area = element("textarea");
      area.rows = 2;
      area.setAttribute("aria-label", `Comment on ${where} for the agent`);
      area.placeholder = `What should the agent do about ${where}?`;
      const sendButton = element("button", "", "Send to the agent");
      sendButton.type = "submit";
      const cancel = element("button", "", "Cancel");
      cancel.type = "button";
      const note = element("p", "line-comment-note");
      note.setAttribute("role", "status");
      form.append(area, sendButton, cancel, note);
      row.after(form);
      area.focus();
      const close = () => { form.remove(); button.focus(); };
      cancel.addEventListener("click", close);
      form.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); } });
      area.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.ctrlKey && !e.altKey) { e.preventDefault(); form.requestSubmit(); }
      });
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        if (!area.value.trim()) return;
        const quoted = $(".diff-text", row).textContent;
        const content = `Comment on \`${where}\`:\n> ${quoted}\n\n${area.value.trim()}`;
        const running = document.body.classList.contains("running");
        const frame = running ? { content, mode: "follow_up" } : { content };
        const asked = new CustomEvent("harness:send", { detail: { frame, sent: false } });
        document.dispatchEvent(asked);
        if (!asked.detail.sent) { say(note, "Not connected: nothing was sent; your comment is kept.", "error"); return; }
        say(note, running ? "Queued for the agent as a follow-up." : "Sent to the agent.");
        area.value = "";
        setTimeout(() => { if (form.isConnected && !area.value) close(); }, 1500);
      });
    });
  }

  const PUSH_REFUSED = {
    push_rejected: "The remote refused the push (someone else's commits are on the branch, or a rule forbids it): ",
    remote_error: "The push did not reach the remote: ",
  };

  function bindCommit(panel, refresh) {
    const form = $("#commit-form", panel);
    if (!form) return;
    const status = $("#commit-status", panel);
    const message = $("#commit-message", panel);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!message.value.trim()) { say(status, "Write a commit message first.", "error"); message.focus(); return; }
      form.setAttribute("aria-busy", "true");
      say(status, "Committing…");
      const { status: code, data } = await api("POST", form.dataset.commitUrl, { message: message.value });
      form.removeAttribute("aria-busy");
      if (code === 201) {
        message.value = "";
        say(status, `Committed ${data.commit.slice(0, 10)} on the branch.`, "ok");
        refresh();
      } else {
        say(status, code === 409 ? `Nothing to commit: ${data.message}` : `Not committed: ${data.message}`, "error");
      }
    });
    $("#push-button", panel).addEventListener("click", async () => {
      form.setAttribute("aria-busy", "true");
      say(status, "Pushing…");
      const { status: code, data } = await api("POST", form.dataset.pushUrl);
      form.removeAttribute("aria-busy");
      if (code === 200) say(status, `Pushed ${data.branch} (${data.commit.slice(0, 10)}) to ${data.remote}.`, "ok");
      else say(status, (PUSH_REFUSED[data.error] || "Not pushed: ") + data.message, "error");
    });
  }

  function init() {
    const panel = $("#changes-panel");
    const messages = $("#messages");
    if (!panel || !messages) return;
    const refresh = refresher(panel);
    onCheckpoints(messages, refresh);
    bindComments(panel);
    bindCommit(panel, refresh);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
