// Projects on the page (docs/API.md, "Projects", "Git credentials"): the sidebar's list and
// its "New project" form (empty, cloned from a URL, or from an uploaded archive), "Restore
// files to before this prompt", and the choice Edit, Regenerate and the ‹ › switcher offer
// about the files (the Changes panel: changes.js; the sign-ins: git_signins.js).
// Everything goes to the JSON API with the page's session and CSRF token. Repository
// content (paths, diffs, git's and the unpacker's messages) only ever becomes text nodes.
// Frames for the socket go through harness.js (harness:send).
(function () {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const POLL_MS = 1500;
  const STATE_TEXT = { cloning: "cloning…", ready: "ready", failed: "failed" };

  const { api, csrfToken, say } = window.harnessApi;

  function send(frame) {
    const asked = new CustomEvent("harness:send", { detail: { frame, sent: false } });
    document.dispatchEvent(asked);
    return asked.detail.sent;
  }

  // --- the sidebar's projects ------------------------------------------------------------
  function showProject(item, project) {
    item.dataset.projectId = project.id;
    item.dataset.state = project.state;
    $(".project-name", item).textContent = project.name;
    $(".project-state", item).textContent = STATE_TEXT[project.state] || project.state;
    const error = $(".project-error", item);
    error.hidden = project.state !== "failed";
    error.textContent = project.state === "failed" ? project.error || "" : "";
    const start = $("[data-new-conversation]", item);
    start.hidden = project.state !== "ready";
    start.setAttribute("aria-label", `New conversation in ${project.name}`);
    $("[data-delete-project]", item).setAttribute("aria-label", `Delete the project ${project.name}`);
  }

  // While a clone runs its state is asked for every POLL_MS, until it is ready or failed.
  function pollWhileCloning(item) {
    if (item.dataset.state !== "cloning" || item.dataset.polling) return;
    item.dataset.polling = "1";
    const tick = async () => {
      if (!item.isConnected) return;
      const { status, data } = await api("GET", `/api/projects/${item.dataset.projectId}`);
      if (status === 200) showProject(item, data);
      if (status === 404) { item.remove(); return; }
      if (item.dataset.state === "cloning") setTimeout(tick, POLL_MS);
      else delete item.dataset.polling;
    };
    setTimeout(tick, POLL_MS);
  }

  function bindProjectList(list) {
    list.querySelectorAll(".project-item").forEach(pollWhileCloning);
    list.addEventListener("click", async (event) => {
      const item = event.target.closest(".project-item");
      if (!item) return;
      const error = $(".project-error", item);
      if (event.target.closest("[data-new-conversation]")) {
        const button = event.target.closest("button");
        button.disabled = true;
        const { status, data } = await api("POST", "/api/conversations", { project: item.dataset.projectId });
        if (status === 201) { location.assign(`/c/${data.id}/`); return; }
        button.disabled = false;
        error.hidden = false;
        error.textContent = data.message;
      } else if (event.target.closest("[data-delete-project]")) {
        const name = $(".project-name", item).textContent;
        if (!window.confirm(`Delete the project “${name}” and its repository? Its conversations keep their transcripts.`)) return;
        const { status, data } = await api("DELETE", `/api/projects/${item.dataset.projectId}`);
        if (status === 204 || status === 404) { item.remove(); return; }
        error.hidden = false;
        error.textContent = data.message;
      }
    });
  }

  // The archive form sent with XMLHttpRequest: fetch() says nothing of an upload's progress.
  // {status, data} as api()'s.
  function uploadArchive(name, file, progressed) {
    return new Promise((resolve) => {
      const body = new FormData();
      body.append("name", name);
      body.append("archive", file);
      const xhr = new XMLHttpRequest();
      xhr.open("POST", "/api/projects");
      xhr.setRequestHeader("X-CSRFToken", csrfToken());
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.addEventListener("progress", (event) => {
        if (event.lengthComputable) progressed(event.loaded, event.total);
      });
      xhr.addEventListener("load", () => {
        let data = {};
        try { data = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
        if (xhr.status >= 400 && !data.message) data.message = `The server answered ${xhr.status}.`;
        resolve({ status: xhr.status, data });
      });
      const failed = () => resolve({ status: 0, data: { message: "The upload did not reach the server; nothing was made." } });
      xhr.addEventListener("error", failed);
      xhr.addEventListener("abort", failed);
      xhr.send(body);
    });
  }

  // What a refused archive says, in plain words; the form keeps the name and the file.
  function archiveRefusal(code, data, limitMb) {
    if (code === 413 || data.error === "too_large") {
      return `The archive is too large: the server takes archives of up to ${limitMb} MB. Nothing was made.`;
    }
    if (data.error === "bad_archive") return `${data.message} Nothing was kept.`;
    return `The project was not made: ${data.message}`;
  }

  function hostOf(url) {
    try {
      const parsed = new URL(url);
      return /^https?:$/.test(parsed.protocol) ? parsed.host : "";
    } catch (e) { return ""; }
  }

  // The form shows the remote's fields once a URL is typed: its branch and a sign-in for
  // its host (said when one is stored already). A sign-in given is stored first (PUT), its
  // token field emptied whatever happens; then the project is made.
  function bindNewProject(form, list, template) {
    const status = $("#new-project-status");
    const url = $("#project-url", form);
    const progress = $("#project-upload", form);
    let known = null; // the stored sign-ins' hosts, asked for once
    async function urlChanged() {
      const host = hostOf(url.value.trim());
      $("#project-remote", form).hidden = !host;
      if (!host) return;
      $("#project-host", form).textContent = host;
      if (known === null) {
        const { status: code, data } = await api("GET", "/api/credentials/git");
        known = code === 200 ? data.hosts : [];
      }
      const stored = known.find((entry) => entry.host === host);
      const note = $("#project-credential-known", form);
      note.hidden = !stored;
      note.textContent = stored ? `A sign-in for ${host} is stored (as ${stored.username}): leave these empty to use it.` : "";
    }
    url.addEventListener("input", urlChanged);
    if (url.value) urlChanged(); // typed before this script came (static/harness.js)
    // A chosen archive can be let go again (a file input cannot be emptied by keyboard).
    const archiveInput = $("#project-archive", form);
    const clearArchive = $("#project-archive-clear", form);
    const archiveChanged = () => { clearArchive.hidden = !archiveInput.files.length; };
    archiveInput.addEventListener("change", archiveChanged);
    archiveChanged();
    form.addEventListener("reset", () => setTimeout(archiveChanged));
    clearArchive.addEventListener("click", () => {
      archiveInput.value = "";
      archiveChanged();
      archiveInput.focus();
    });
    // A stored sign-in added or removed elsewhere on the page (git_signins.js).
    document.addEventListener("harness:signins-changed", () => { known = null; urlChanged(); });

    // {status, data} of the POST, or null when it was not sent (said in the status line).
    async function sendJson(name, gitUrl, username, token) {
      const body = { name };
      if (gitUrl) {
        const host = hostOf(gitUrl);
        if (!host) { say(status, "The URL must start with https:// or http://.", "error"); url.focus(); return null; }
        body.git_url = gitUrl;
        if (form.elements.branch.value.trim()) body.branch = form.elements.branch.value.trim();
        if (username || token) {
          form.elements.token.value = "";
          const saved = await api("PUT", `/api/credentials/git/${encodeURIComponent(host)}`, { username, token });
          if (saved.status !== 204) { say(status, `The sign-in was not stored: ${saved.data.message}`, "error"); return null; }
          known = null;
          document.dispatchEvent(new CustomEvent("harness:signins-changed"));
        }
      }
      say(status, gitUrl ? "Starting the clone…" : "Making the project…");
      return api("POST", "/api/projects", body);
    }

    async function sendArchive(name, file) {
      const limitMb = Number(form.dataset.maxUploadMb) || 0;
      if (limitMb && file.size > limitMb * 1024 * 1024) {
        say(status, archiveRefusal(413, {}, limitMb), "error");
        return null;
      }
      const submit = $("button[type=submit]", form);
      submit.disabled = true;
      form.setAttribute("aria-busy", "true");
      progress.hidden = false;
      progress.value = 0;
      say(status, `Uploading ${file.name}…`);
      const made = await uploadArchive(name, file, (loaded, total) => {
        progress.value = total ? loaded / total : 0;
        say(status, loaded < total ? `Uploading ${file.name}… ${Math.floor((100 * loaded) / total)}%`
          : "Unpacking the archive and making the first commit…");
      });
      submit.disabled = false;
      form.removeAttribute("aria-busy");
      if (made.status !== 201) {
        progress.hidden = true;
        say(status, archiveRefusal(made.status, made.data, limitMb), "error");
        return null;
      }
      return made;
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = form.elements.name.value.trim();
      const gitUrl = url.value.trim();
      const username = form.elements.username.value.trim();
      const token = form.elements.token.value;
      if (!name) { say(status, "Give the project a name.", "error"); form.elements.name.focus(); return; }
      const archive = form.elements.archive.files[0];
      if (archive && gitUrl) {
        say(status, "Give a Git URL or an archive, not both.", "error"); url.focus(); return;
      }
      const made = archive ? await sendArchive(name, archive) : await sendJson(name, gitUrl, username, token);
      if (!made) return;
      const { status: code, data } = made;
      if (code !== 201) { say(status, data.message, "error"); return; }
      const item = template.content.firstElementChild.cloneNode(true);
      showProject(item, { id: data.id, name: name.split(/\s+/).join(" "), state: data.state });
      list.append(item);
      pollWhileCloning(item);
      form.reset();
      progress.hidden = true;
      $("#project-remote", form).hidden = true;
      say(status, data.state === "cloning" ? `“${name}” is being cloned.` : `“${name}” is ready.`);
    });
  }

  // --- asking before files are restored --------------------------------------------------
  // A box beside `anchor` (from <template id="restore-choice-template">): resolves with
  // true (restore), false (keep the files) or null (cancel). `keep` false: no keep button.
  function ask(anchor, text, { go = "Restore files and go on", keep = true } = {}) {
    const template = $("#restore-choice-template");
    return new Promise((resolve) => {
      if (!template) { resolve(true); return; }
      document.querySelectorAll(".restore-choice").forEach((open) => open.remove());
      const box = template.content.firstElementChild.cloneNode(true);
      $(".restore-choice-text", box).textContent = text;
      $("[data-restore-files=true]", box).textContent = go;
      $("[data-restore-files=false]", box).hidden = !keep;
      const done = (value) => { box.remove(); anchor.focus(); resolve(value); };
      box.addEventListener("click", (event) => {
        const choice = event.target.closest("[data-restore-files]");
        if (choice) done(choice.dataset.restoreFiles === "cancel" ? null : choice.dataset.restoreFiles === "true");
      });
      box.addEventListener("keydown", (event) => {
        if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); done(null); }
      });
      (anchor.closest(".edit-form, .branch-switch, .part-actions") || anchor).after(box);
      $("[data-restore-files=true]", box).focus();
    });
  }

  const BRANCH_TEXT = {
    edit: "The edited prompt runs from the files as they were before this prompt: the files go back first (what is there now is kept as a checkpoint, so it can be restored).",
    regenerate: "The answer is made again from the files as they were before its prompt: the files go back first (what is there now is kept as a checkpoint, so it can be restored).",
    branch: "The files become what this version left them (what is there now is kept as a checkpoint, so it can be restored).",
  };

  function bindBranchChoices() {
    document.addEventListener("harness:branch-action", async (event) => {
      const { frame, anchor } = event.detail;
      event.preventDefault();
      const restore = await ask(anchor, BRANCH_TEXT[frame.action] || BRANCH_TEXT.branch);
      if (restore === null) return;
      send({ ...frame, restore_files: restore });
    });
  }

  // "Restore files to before this prompt": the checkpoint taken when that prompt started
  // (the active branch's last one before it, by seq), restored after a confirmation.
  function bindRestoreBefore(messages, conversationId) {
    messages.addEventListener("click", async (event) => {
      const button = event.target.closest("[data-restore-before]");
      if (!button) return;
      const part = button.closest("[data-part]");
      const seq = Number(button.dataset.restoreBefore);
      const go = await ask(button, "Every file of the project goes back to how it was when this prompt started: files made since are removed, changed and deleted ones come back (files git ignores stay). What is there now is kept as a checkpoint first, so this can be undone.",
        { go: "Restore files", keep: false });
      if (!go) return;
      let note = $(".restore-result", part);
      if (!note) {
        note = document.createElement("p");
        note.className = "restore-result";
        note.setAttribute("role", "status");
        part.append(note);
      }
      say(note, "Restoring the files…");
      const listed = await api("GET", `/api/conversations/${conversationId}/checkpoints`);
      if (listed.status !== 200) { say(note, listed.data.message, "error"); return; }
      const before = listed.data.checkpoints.filter((c) => c.seq < seq).pop();
      if (!before) { say(note, "No checkpoint was taken before this prompt: nothing to restore.", "error"); return; }
      const { status, data } = await api("POST", `/api/conversations/${conversationId}/restore`, { checkpoint: before.id });
      say(note, status === 200 ? "The files are back to before this prompt." : data.message, status === 200 ? "" : "error");
    });
  }

  function init() {
    const list = $("#project-list");
    if (list) {
      bindProjectList(list);
      bindNewProject($("#new-project-form"), list, $("#project-item-template"));
    }
    const chat = $("main[data-project]");
    const messages = $("#messages");
    if (!chat || !messages) return;
    bindBranchChoices();
    bindRestoreBefore(messages, chat.dataset.conversation);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
