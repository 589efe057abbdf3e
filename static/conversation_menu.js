// The conversation's ⋯ menu: its "Instructions…" dialog and the browser notifications'
// toggle, fetched when the menu is first reached (its data-load: static/harness.js).
(function () {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const NOTIFY_KEY = "harness-notify"; // read by harness.js when a run ends in a hidden tab

  // The ⋯ menu's "Instructions…": a dialog that saves in the background (204). Refused (too
  // long) or not sent, the text stays in the box with the reason; the menu says whether
  // some are set.
  function bindInstructions() {
    const dialog = $("#instructions-dialog");
    const open = $("#instructions-open");
    if (!dialog || !open) return;
    const form = $("#instructions-form");
    const field = $("#instructions");
    const error = $("#instructions-error");
    open.addEventListener("click", () => {
      const menu = open.closest("details");
      if (menu) menu.open = false;
      error.textContent = "";
      dialog.showModal();
      field.focus();
    });
    $("#instructions-cancel").addEventListener("click", () => dialog.close());
    // Closed, the browser gives the focus back to "Instructions…", hidden in the closed
    // menu: it would be lost, so it goes to the menu's ⋯ (once the browser is done).
    dialog.addEventListener("close", () => setTimeout(() => {
      const menu = open.closest("details");
      const lost = !document.activeElement || document.activeElement === document.body;
      if (menu && lost) menu.querySelector("summary").focus();
    }));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      form.setAttribute("aria-busy", "true");
      try {
        const response = await fetch(form.action, {
          method: "POST", body: new FormData(form), credentials: "same-origin",
          headers: { "HX-Request": "true" },
        });
        if (!response.ok) {
          error.textContent = (await response.text()).trim() || `Not saved (HTTP ${response.status}).`;
          return;
        }
        open.textContent = field.value.trim() ? "Instructions (set)…" : "Instructions…";
        dialog.close();
      } catch (e) {
        error.textContent = "Not saved: the server could not be reached. Your text is still here.";
      } finally {
        form.removeAttribute("aria-busy");
      }
    });
  }

  // The user's leave for notifications (the browser asks for its permission on the first
  // turn on: this change is a user gesture).
  function bindNotifyToggle(toggle, note) {
    if (!toggle) return;
    const supported = "Notification" in window;
    const explain = () => {
      if (!supported) note.textContent = "This browser cannot show notifications; the tab title still shows it.";
      else if (Notification.permission === "denied") note.textContent = "Notifications are blocked for this site in the browser's settings; the tab title still shows it.";
      else note.textContent = "";
    };
    toggle.checked = localStorage.getItem(NOTIFY_KEY) === "on" && supported && Notification.permission !== "denied";
    toggle.disabled = !supported;
    explain();
    toggle.addEventListener("change", async () => {
      if (!toggle.checked) { localStorage.setItem(NOTIFY_KEY, "off"); explain(); return; }
      const permission = Notification.permission === "default" ? await Notification.requestPermission() : Notification.permission;
      toggle.checked = permission === "granted";
      localStorage.setItem(NOTIFY_KEY, toggle.checked ? "on" : "off");
      explain();
    });
  }

  bindInstructions();
  bindNotifyToggle($("#notify-toggle"), $("#notify-note"));
})();
