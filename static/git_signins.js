// The user's git sign-ins on the page (docs/API.md, "Git credentials"): the Projects
// section's "Git sign-ins" lists them (host and username: a token is never sent back),
// removes one, and adds or replaces one. Drawn when the section first opens and again
// whenever a sign-in changes (this form, or the New project form: harness:signins-changed).
// Hosts and usernames only ever become text nodes.
(function () {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);

  const { api, say } = window.harnessApi;

  // What is typed in the host field: a host[:port], or a repository's URL pasted whole.
  function hostTyped(value) {
    const text = value.trim();
    if (!text.includes("://")) return text.replace(/\/+$/, "");
    try { return new URL(text).host; } catch (e) { return text; }
  }

  function changed() {
    document.dispatchEvent(new CustomEvent("harness:signins-changed", { detail: { from: "signins" } }));
  }

  function bind(section) {
    const list = $("#signin-list", section);
    const empty = $("#signin-empty", section);
    const status = $("#signin-status", section);
    const form = $("#signin-form", section);
    const template = $("#signin-item-template");
    const field = (name) => form.elements[name];
    let loaded = false;

    async function draw() {
      const { status: code, data } = await api("GET", "/api/credentials/git");
      if (code !== 200) { say(status, `The sign-ins could not be read: ${data.message}`, "error"); return; }
      loaded = true;
      list.replaceChildren(...data.hosts.map(({ host, username }) => {
        const item = template.content.firstElementChild.cloneNode(true);
        item.dataset.host = host;
        item.dataset.username = username;
        $(".signin-host", item).textContent = host;
        $(".signin-user", item).textContent = `as ${username}`;
        $("[data-edit-signin]", item).setAttribute("aria-label", `Replace the sign-in for ${host}`);
        $("[data-remove-signin]", item).setAttribute("aria-label", `Remove the sign-in for ${host}`);
        return item;
      }));
      empty.hidden = data.hosts.length > 0;
    }

    section.addEventListener("toggle", () => { if (section.open && !loaded) draw(); });
    if (section.open) draw(); // fetched when first reached (static/harness.js): open already
    document.addEventListener("harness:signins-changed", (event) => {
      if (loaded || section.open) draw();
      if (!(event.detail && event.detail.from === "signins")) say(status, "");
    });

    list.addEventListener("click", async (event) => {
      const item = event.target.closest(".signin-item");
      if (!item) return;
      const host = item.dataset.host;
      if (event.target.closest("[data-edit-signin]")) {
        field("host").value = host;
        field("username").value = item.dataset.username;
        field("token").value = "";
        say(status, `Type the new token for ${host}.`);
        field("token").focus();
      } else if (event.target.closest("[data-remove-signin]")) {
        const { status: code, data } = await api("DELETE", `/api/credentials/git/${encodeURIComponent(host)}`);
        if (code !== 204) { say(status, `Not removed: ${data.message}`, "error"); return; }
        say(status, `The sign-in for ${host} was removed.`, "ok");
        changed();
        field("host").focus();
      }
    });

    // What was typed stays in the form on an error; the token field empties once stored.
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const host = hostTyped(field("host").value);
      const username = field("username").value.trim();
      const token = field("token").value;
      const missing = !host ? "host" : !username ? "username" : !token ? "token" : "";
      if (missing) { say(status, `Give the ${missing}.`, "error"); field(missing).focus(); return; }
      form.setAttribute("aria-busy", "true");
      const { status: code, data } = await api("PUT", `/api/credentials/git/${encodeURIComponent(host)}`,
        { username, token });
      form.removeAttribute("aria-busy");
      if (code !== 204) { say(status, `Not stored: ${data.message}`, "error"); return; }
      form.reset();
      say(status, `The sign-in for ${host} was stored (as ${username}).`, "ok");
      changed();
    });
  }

  function init() {
    const section = $("#git-signins");
    if (section) bind(section);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
