// The panels' one way to the JSON API (projects.js, git_signins.js, changes.js): the page's
// session and CSRF token, and {status, data} back, where data is the JSON answer (an
// error's {error, message}) or {} with a message saying what went wrong.
(function () {
  "use strict";

  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function api(method, url, body) {
    const headers = { "X-CSRFToken": csrfToken(), Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(url, { method, headers, credentials: "same-origin", cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      return { status: 0, data: { message: "The server could not be reached; nothing was changed." } };
    }
    let data = {};
    try { data = await response.json(); } catch (e) { /* 204, or not JSON */ }
    if (!response.ok && !data.message) data.message = `The server answered ${response.status}.`;
    return { status: response.status, data };
  }

  // A status line's text and its kind (data-kind: "error", "ok" or none).
  function say(element, text, kind) {
    if (!element) return;
    element.textContent = text;
    element.dataset.kind = kind || "";
  }

  window.harnessApi = { api, csrfToken, say };
})();
