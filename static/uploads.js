// Files into the workspace from the composer, dropped on it, pasted into the prompt (a
// screenshot) or picked with #attach: harness.js takes the gesture and fetches this script
// with the first file (#attach's data-script), then hands each batch over as a
// harness:upload event. Each file goes to uploads/<name> in the workspace this
// conversation's runs work in (PUT /files/upload/<name>); meanwhile the prompt holds a
// placeholder at the caret, then the file's path, as GitHub's comment box does, so the
// agent is told where it is and typed text is never touched. While any is on its way the
// composer carries data-uploading (harness.js sends no prompt then). A refused upload (too
// large, over the quota, a bad name) says why in #composer-alert (harness:composer-alert).
(function () {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);

  // The alert beside the composer is harness.js's: a message shows it, null clears it
  // (only while it says what ``code`` said).
  function composerAlert(code, message) {
    document.dispatchEvent(new CustomEvent("harness:composer-alert", { detail: { code, message } }));
  }

  const UPLOAD_ERRORS = { too_large: "is larger than the upload limit", quota_exceeded:
    "would pass your workspace's quota", bad_path: "has a name that cannot be stored" };
  function uploadName(file) {
    const generic = !file.name || /^image\.(png|jpe?g|gif|webp)$/i.test(file.name);
    if (!generic) return file.name.replace(/[\/\\]/g, "_");
    const stamp = new Date().toISOString().replace(/\D/g, "").slice(0, 17);
    const extension = (file.type.split("/")[1] || "png").replace("jpeg", "jpg");
    // Two pasted within a second must not overwrite each other: milliseconds and a tag.
    const tag = Math.random().toString(16).slice(2, 6);
    return `screenshot-${stamp.slice(0, 8)}-${stamp.slice(8, 14)}-${stamp.slice(14)}${tag}.${extension}`;
  }
  function replaceInPrompt(prompt, placeholder, text) {
    const at = prompt.value.indexOf(placeholder);
    if (at === -1) return; // the user removed it meanwhile: leave their text alone
    prompt.value = prompt.value.slice(0, at) + text + prompt.value.slice(at + placeholder.length);
    prompt.dispatchEvent(new Event("input", { bubbles: true }));
  }
  function insertAtCaret(prompt, text) {
    const start = prompt.selectionStart ?? prompt.value.length;
    const end = prompt.selectionEnd ?? start;
    const before = prompt.value.slice(0, start);
    const gap = before && !/\s$/.test(before) ? " " : "";
    prompt.value = before + gap + text + " " + prompt.value.slice(end);
    const caret = (before + gap + text + " ").length;
    prompt.setSelectionRange(caret, caret);
    prompt.dispatchEvent(new Event("input", { bubbles: true }));
  }
  // Images (#attachments, on the built-in agent's conversations) are not named in the text:
  // each shows as a thumbnail with a Remove button, and the prompt frame carries their paths
  // as "images", so the model sees the pictures (the server snapshots them). They stay until
  // a prompt carrying them is accepted; a refused one keeps them, as it keeps the text.
  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  function createAttachments(tray, form) {
    const items = []; // {path (once uploaded), item}
    function changed() { tray.hidden = !items.length; }
    function remove(entry) {
      const at = items.indexOf(entry);
      if (at !== -1) items.splice(at, 1);
      entry.item.remove();
      changed();
    }
    document.addEventListener("transport:wsConfigSend", (event) => {
      if (event.target !== form || event.detail.parameters.action) return;
      const paths = items.filter((entry) => entry.path).map((entry) => entry.path);
      if (paths.length) event.detail.parameters.images = paths;
    });
    // A prompt of this page accepted: the images it carried leave the tray.
    document.addEventListener("harness:prompt-accepted", (event) => {
      const sent = event.detail.images || [];
      items.filter((entry) => sent.includes(entry.path)).forEach(remove);
    });
    return {
      takes(file) { return Boolean(tray) && IMAGE_TYPES.includes(file.type); },
      add(name, file) {
        const item = document.createElement("li");
        item.className = "attachment";
        item.dataset.state = "uploading";
        const image = document.createElement("img");
        image.alt = "";
        const label = document.createElement("span");
        label.textContent = name;
        const button = document.createElement("button");
        button.type = "button";
        button.className = "attachment-remove";
        button.textContent = "×";
        button.setAttribute("aria-label", `Remove ${name}`);
        item.append(image, label, button);
        const entry = { path: null, item };
        button.addEventListener("click", () => remove(entry));
        const reader = new FileReader(); // a data: URL (the page's CSP allows no blob:)
        reader.onload = () => { image.src = reader.result; };
        reader.readAsDataURL(file);
        items.push(entry);
        tray.append(item);
        changed();
        return {
          uploaded(path) {
            // The same file again replaced the one uploaded before: one thumbnail for it.
            items.filter((other) => other !== entry && other.path === path).forEach(remove);
            entry.path = path;
            item.dataset.path = path;
            delete item.dataset.state;
          },
          failed() { remove(entry); },
        };
      },
    };
  }
  function createUploads(prompt, composer, attachments) {
    const token = ($("input[name=csrfmiddlewaretoken]") || {}).value || "";
    const form = $("#prompt-form");
    // Into the workspace this conversation's runs work in (its owner's, for a collaborator).
    const target = form && form.dataset.conversation ? `?conversation=${form.dataset.conversation}` : "";
    let pending = 0;
    async function upload(file) {
      const name = uploadName(file);
      const attached = attachments.takes(file) ? attachments.add(name, file) : null;
      const placeholder = `[uploading ${name}…]`;
      if (!attached) insertAtCaret(prompt, placeholder);
      pending += 1;
      composer.dataset.uploading = String(pending);
      let problem = null;
      let path = `uploads/${name}`;
      try {
        const response = await fetch(`/files/upload/${encodeURIComponent(name)}${target}`, {
          method: "PUT", body: file, credentials: "same-origin",
          headers: { "X-CSRFToken": token, "Content-Type": "application/octet-stream" } });
        const answer = await response.json().catch(() => ({}));
        if (!response.ok) {
          problem = `${name} ${UPLOAD_ERRORS[answer.error] || "could not be uploaded"}` +
            (answer.message ? `: ${answer.message}` : ".");
        } else if (answer.path) {
          path = answer.path;
        }
      } catch (error) {
        problem = `${name} could not be uploaded: the connection failed.`;
      }
      pending -= 1;
      if (pending) composer.dataset.uploading = String(pending);
      else delete composer.dataset.uploading;
      if (attached) {
        if (problem) attached.failed();
        else attached.uploaded(path);
      } else {
        replaceInPrompt(prompt, placeholder, problem ? "" : path);
      }
      composerAlert("upload", problem);
      composerAlert("uploading", null);
    }
    return (files) => { for (const file of files) upload(file); };
  }

  const prompt = $("#prompt");
  const composer = $(".composer");
  const uploadAll = createUploads(prompt, composer, createAttachments($("#attachments"), $("#prompt-form")));
  document.addEventListener("harness:upload", (event) => uploadAll(event.detail.files));
})();
