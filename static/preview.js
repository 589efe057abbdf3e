// The Preview panel: what a server in the conversation's terminal sandbox serves, shown in
// a sandboxed frame (and in a new tab). Opening the panel (or "Find ports") asks the ports
// API what listens; "Show" loads /preview/<conversation>/<port>/, which the server
// redirects to the page's signed address. The page shown is hostile: the frame is
// sandboxed without same-origin, and the server adds its own sandboxing policy.
(function () {
  "use strict";
  const panel = document.getElementById("preview-panel");
  if (!panel) return;
  const form = document.getElementById("preview-form");
  const port = document.getElementById("preview-port");
  const list = document.getElementById("preview-ports");
  const frame = document.getElementById("preview-frame");
  const open = document.getElementById("preview-open");
  const status = document.getElementById("preview-status");

  function say(text) { status.textContent = text; }

  async function findPorts() {
    say("Looking for servers…");
    let ports = [];
    try {
      const answer = await fetch(panel.dataset.ports, { credentials: "same-origin" });
      if (answer.ok) ports = (await answer.json()).ports || [];
    } catch (error) {
      say("The ports could not be listed.");
      return;
    }
    list.replaceChildren(...ports.map((p) => {
      const option = document.createElement("option");
      option.value = String(p.port);
      return option;
    }));
    if (!ports.length) {
      say("Nothing listens yet: start a server in the Terminal, or ask the agent to " +
        "(on 127.0.0.1 or all addresses).");
      return;
    }
    say("Listening: " + ports.map((p) => p.port).join(", "));
    if (!port.value) {
      port.value = String(ports[0].port);
      show();
    }
  }

  function show() {
    const number = Number(port.value);
    if (!Number.isInteger(number) || number < 1 || number > 65535) {
      say("A port is a whole number from 1 to 65535.");
      return;
    }
    const address = panel.dataset.base + number + "/";
    frame.src = address;
    frame.hidden = false;
    open.href = address;
    open.hidden = false;
  }

  // A background command's card names the ports it listens on: shown here on a click.
  document.addEventListener("click", (event) => {
    const button = event.target.closest(".preview-show");
    if (!button) return;
    port.value = button.dataset.port;
    // Opening the panel looks for ports (its toggle); one open already looks again, so
    // that its status does not still say a server listens that has stopped since.
    if (panel.open) findPorts();
    panel.open = true;
    show();
    // The open panel shortens the transcript: the card clicked stays in sight above it.
    requestAnimationFrame(() => {
      button.scrollIntoView({ block: "center" });
      frame.scrollIntoView({ block: "nearest" });
    });
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show();
  });
  document.getElementById("preview-refresh").addEventListener("click", findPorts);
  panel.addEventListener("toggle", () => {
    if (panel.open) findPorts();
  });
  // Fetched when the panel is first reached (static/harness.js): it may be open already.
  if (panel.open) findPorts();
})();
