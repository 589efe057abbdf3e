// The page's transport: requests and swaps declared in the templates' attributes, and the
// conversation's WebSocket. It reads the part of htmx's attribute vocabulary the templates
// use (htmx and its WebSocket extension were 18.8 KB of a 51 KB page; this is a tenth):
//   hx-get, hx-post      a request: a form's on submit, another element's on click;
//   hx-trigger           instead: load, change, submit, click, a named event, each with
//                        once, changed, delay:<n>ms, from:<selector>;
//   hx-target, hx-swap   where the answer goes (innerHTML, outerHTML);
//   hx-include           more fields sent (an input, or a form's or element's fields);
//   hx-swap-oob          an element of an answer or a frame swapped where it says
//                        (true = in place of the element of its id; innerHTML; outerHTML,
//                        beforeend, afterend or delete, each with :<selector>);
//   ws-connect, ws-send  the socket, and the forms sent on it as JSON;
//   hx-disable           nothing inside is acted on (what a model or a user wrote).
// It says what it does in events (transport:beforeRequest, …, transport:wsAfterMessage;
// cancelable where a listener may stop it) that static/harness.js and terminal.js listen to.
// Only same-origin requests; no script in an answer is ever run.
(function () {
  "use strict";
  // lost, the server's error (its feed failed), restarting, try again later
  const SOCKET_RETRY_CODES = [1006, 1011, 1012, 1013];
  const bound = new WeakSet();
  // The wait before the socket's next try, by the number of tries so far: growing to at
  // most 4 s (a page must not sit on "Reconnecting…" long after the server came back),
  // jittered so that a restart's pages do not all come at once.
  const RECONNECT_MAX_MS = 4000;
  const config = {
    reconnectDelay: (tries) =>
      Math.min(RECONNECT_MAX_MS, 250 * 2 ** tries) * (0.5 + Math.random() / 2),
  };

  function emit(elt, name, detail) {
    const at = elt && elt.isConnected ? elt : document.body;
    return at.dispatchEvent(new CustomEvent(`transport:${name}`,
      { bubbles: true, cancelable: true, detail: detail || {} }));
  }
  const disabled = (elt) => Boolean(elt.closest("[hx-disable]"));

  function fragmentOf(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content;
  }

  // --- swapping ----------------------------------------------------------------------------
  function insert(style, target, nodes) {
    if (style === "innerHTML") target.replaceChildren(...nodes);
    else if (style === "outerHTML") target.replaceWith(...nodes);
    else if (style === "beforeend") target.append(...nodes);
    else if (style === "afterend") target.after(...nodes);
    else if (style === "delete") target.remove();
    else throw new Error(`transport: no swap style ${style}`);
  }

  function settled(nodes, fallback) {
    const elements = nodes.filter((node) => node.nodeType === 1 && node.isConnected);
    elements.forEach(process);
    return elements.length ? elements : [fallback];
  }

  // One element swapped where it says; a bad one (an unknown style, a selector that does not
  // parse) is logged and dropped, and the rest of its frame or answer still swaps.
  function swapOutOfBand(element) {
    try {
      swapOneOutOfBand(element);
    } catch (error) {
      element.remove();
      console.error("transport: oobSwapError", error);
    }
  }

  function swapOneOutOfBand(element) {
    const spec = element.getAttribute("hx-swap-oob") || "true";
    element.removeAttribute("hx-swap-oob");
    let style = "outerHTML";
    let targets = [document.getElementById(element.id)].filter(Boolean);
    if (spec !== "true") {
      const colon = spec.indexOf(":");
      style = colon > 0 ? spec.slice(0, colon) : spec;
      if (colon > 0) targets = [...document.querySelectorAll(spec.slice(colon + 1))];
    }
    element.remove();
    if (!targets.length) {
      console.error("transport: oobErrorNoTarget", spec, element.id);
      return;
    }
    targets.forEach((target) => {
      const copy = element.cloneNode(true);
      const nodes = style === "outerHTML" ? [copy] : [...copy.childNodes];
      insert(style, target, nodes);
      // Told on what was swapped in where it replaced its target, else on the target.
      const swapped = settled(nodes, target);
      (style === "outerHTML" ? swapped : [target])
        .forEach((at) => emit(at, "oobAfterSwap", { target: at }));
    });
  }

  // An answer into its target: its out-of-band elements first, then the rest. The focused
  // element, redrawn with the same id, keeps the focus and its selection.
  function swap(target, html, style) {
    const active = document.activeElement;
    const focus = active && active.id
      ? { id: active.id, start: active.selectionStart, end: active.selectionEnd } : null;
    const fragment = fragmentOf(html);
    fragment.querySelectorAll("[hx-swap-oob]").forEach((element) => {
      const quoted = element.parentElement && disabled(element.parentElement);
      if (quoted) element.removeAttribute("hx-swap-oob");
      else swapOutOfBand(element);
    });
    const nodes = [...fragment.childNodes];
    insert(style || "innerHTML", target, nodes);
    const at = settled(nodes, target.isConnected ? target : document.body);
    const lost = !document.activeElement || document.activeElement === document.body;
    if (focus && lost) {
      const again = document.getElementById(focus.id);
      if (again) {
        again.focus();
        if (focus.start != null && again.setSelectionRange) {
          try {
            again.setSelectionRange(focus.start, focus.end);
          } catch (e) { /* not a text field */ }
        }
      }
    }
    at.forEach((elt) => emit(elt, "afterSwap", { target: elt }));
    at.forEach((elt) => emit(elt, "afterSettle", { target: elt }));
  }

  // --- requests ------------------------------------------------------------------------------
  // The fields a form would send (not its buttons: only the one that submits it counts).
  const FIELDS =
    "input:not([type=submit], [type=button], [type=reset], [type=image]), select, textarea";

  // One control's name and value, as a form sends them: an unchecked box, a disabled
  // control or a file input, nothing; a multiple select, each chosen value.
  function appendControl(control, into) {
    if (!control.name || control.disabled || control.type === "file") return;
    if ((control.type === "checkbox" || control.type === "radio") && !control.checked) return;
    if (control.tagName === "SELECT" && control.multiple) {
      [...control.selectedOptions].forEach((option) => into.append(control.name, option.value));
    } else {
      into.append(control.name, control.value);
    }
  }

  function appendForm(form, into, submitter) {
    new FormData(form, submitter || undefined).forEach((value, name) => into.append(name, value));
  }

  // hx-include's: a form's fields, a field, or the fields inside an element.
  function fieldsOf(elt, into) {
    if (elt.tagName === "FORM") appendForm(elt, into);
    else if (elt.matches(FIELDS)) appendControl(elt, into);
    else elt.querySelectorAll(FIELDS).forEach((field) => appendControl(field, into));
  }

  function valuesFor(elt, verb, submitter) {
    const values = new URLSearchParams();
    const form = elt.tagName === "FORM" ? elt : (verb !== "get" && elt.closest("form"));
    if (form) appendForm(form, values, submitter);
    if (elt !== form && "value" in elt) appendControl(elt, values); // its own (a button's too)
    const include = elt.getAttribute("hx-include");
    if (include) document.querySelectorAll(include).forEach((field) => fieldsOf(field, values));
    return values;
  }

  const inFlight = new WeakMap(); // element -> its request's xhr
  const queued = new WeakMap(); // element -> the latest request asked for meanwhile

  function request(elt, event) {
    const verb = elt.hasAttribute("hx-post") ? "post" : "get";
    if (inFlight.has(elt)) { queued.set(elt, event); return; }
    const targetSelector = elt.getAttribute("hx-target");
    const target = targetSelector ? document.querySelector(targetSelector) : elt;
    if (!target || !emit(elt, "beforeRequest", { elt, target })) return;
    const url = new URL(elt.getAttribute(`hx-${verb}`), location.href);
    if (url.origin !== location.origin) {
      console.error("transport: not this site", url.href);
      return;
    }
    const parameters = valuesFor(elt, verb, event && event.submitter);
    const headers = { "HX-Request": "true", "HX-Current-URL": location.href };
    if (!emit(elt, "configRequest", { elt, target, verb, headers, parameters })) return;
    if (verb === "get") parameters.forEach((value, name) => url.searchParams.append(name, value));
    const xhr = new XMLHttpRequest();
    xhr.open(verb.toUpperCase(), url.href);
    Object.entries(headers).forEach(([name, value]) => xhr.setRequestHeader(name, value));
    const requestConfig = { elt, target, verb, url: url.href };
    inFlight.set(elt, xhr);
    elt.classList.add("requesting");
    const answered = () => {
      const successful = xhr.status >= 200 && xhr.status < 300;
      emit(elt, "afterRequest", { elt, target, xhr, successful, requestConfig });
      if (successful && xhr.status !== 204) {
        const detail = {
          elt: target, target, xhr, requestConfig, serverResponse: xhr.responseText, shouldSwap: true,
        };
        emit(target, "beforeSwap", detail);
        if (detail.shouldSwap && detail.target.isConnected) {
          swap(detail.target, detail.serverResponse, elt.getAttribute("hx-swap") || "innerHTML");
        }
      }
    };
    const done = () => {
      inFlight.delete(elt);
      elt.classList.remove("requesting");
      try {
        answered();
      } finally { // the request asked for meanwhile goes, whatever this answer did
        nextQueued(elt);
      }
    };
    xhr.addEventListener("loadend", done);
    emit(elt, "beforeSend", { elt, target, xhr, requestConfig });
    xhr.send(verb === "get" ? null : parameters);
  }

  function nextQueued(elt) {
    if (!queued.has(elt)) return;
    const next = queued.get(elt);
    queued.delete(elt);
    if (elt.isConnected) request(elt, next);
  }

  // --- triggers ------------------------------------------------------------------------------
  // "input changed delay:250ms from:#search, submit" -> [{event, once, changed, delay, from}]
  function triggersOf(elt) {
    const spec = elt.getAttribute("hx-trigger");
    if (!spec) return [{ event: elt.tagName === "FORM" ? "submit" : "click" }];
    return spec.split(",").map((part) => {
      const [event, ...modifiers] = part.trim().split(/\s+/);
      const trigger = { event };
      modifiers.forEach((modifier) => {
        if (modifier === "once" || modifier === "changed") trigger[modifier] = true;
        else if (modifier.startsWith("delay:")) trigger.delay = parseInt(modifier.slice(6), 10);
        else if (modifier.startsWith("from:")) trigger.from = modifier.slice(5);
      });
      return trigger;
    });
  }

  function bindRequest(elt) {
    triggersOf(elt).forEach((trigger) => {
      if (trigger.event === "load") {
        setTimeout(() => { if (elt.isConnected) request(elt, null); }, 0);
        return;
      }
      const source = trigger.from ? document.querySelector(trigger.from) : elt;
      if (!source) return;
      let timer = null;
      let last;
      let fired = false;
      source.addEventListener(trigger.event, (event) => {
        if (!elt.isConnected) return;
        if (event.type === "submit" || (event.type === "click" && elt.tagName === "A")) {
          const modified = event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey;
          if (event.type === "click" && modified) return; // a new tab or window: the browser's
          event.preventDefault();
        }
        if (trigger.once && fired) return;
        if (trigger.changed) {
          const value = event.target.value;
          if (value === last) return;
          last = value;
        }
        fired = true;
        clearTimeout(timer);
        if (trigger.delay) timer = setTimeout(() => request(elt, event), trigger.delay);
        else request(elt, event);
      });
    });
  }

  // --- the socket ----------------------------------------------------------------------------
  let socket = null; // { ws, elt, queue, tries, stopped }

  function connect(elt) {
    const url = new URL(elt.getAttribute("ws-connect"), location.href);
    if (url.origin !== location.origin) {
      console.error("transport: not this site", url.href);
      return;
    }
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    const state = socket && socket.elt === elt
      ? socket : { elt, queue: [], tries: 0, stopped: false };
    socket = state;
    const ws = new WebSocket(url.href);
    state.ws = ws;
    const wrapper = { send: (message) => send(message, null) };
    ws.addEventListener("open", () => {
      state.tries = 0;
      emit(elt, "wsOpen", { socketWrapper: wrapper });
      state.queue.splice(0).forEach(([message, from]) => send(message, from));
    });
    ws.addEventListener("message", (event) => {
      if (typeof event.data !== "string") return;
      const message = event.data;
      if (!emit(elt, "wsBeforeMessage", { message, socketWrapper: wrapper })) return;
      // A JSON frame (a terminal's output, hostile) is for a script's listener, never
      // markup: a pane printing <div id=messages hx-swap-oob=true> swaps nothing.
      if (!message.startsWith("{")) [...fragmentOf(message).children].forEach(swapOutOfBand);
      emit(elt, "wsAfterMessage", { message, socketWrapper: wrapper });
    });
    ws.addEventListener("error", (error) => emit(elt, "wsError", { error, socketWrapper: wrapper }));
    ws.addEventListener("close", (event) => {
      emit(elt, "wsClose", { event, socketWrapper: wrapper });
      if (state.stopped || !SOCKET_RETRY_CODES.includes(event.code) || !elt.isConnected) {
        return;
      }
      setTimeout(() => { if (!state.stopped && elt.isConnected) connect(elt); },
        config.reconnectDelay(state.tries++));
    });
  }

  // A message is sent now if the socket is open, else once it opens again.
  function send(message, from) {
    if (!socket || socket.stopped) return;
    if (socket.ws.readyState !== WebSocket.OPEN) { socket.queue.push([message, from]); return; }
    socket.ws.send(message);
    if (from) emit(from, "wsAfterSend", { message });
  }

  // A form marked ws-send: its fields as one JSON object (what a listener left of them).
  function sendForm(form, event) {
    event.preventDefault();
    const parameters = {};
    new FormData(form, event.submitter || undefined).forEach((value, name) => { parameters[name] = value; });
    if (!emit(form, "wsConfigSend", { parameters, elt: form })) return;
    send(JSON.stringify(parameters), form);
  }

  // --- processing ------------------------------------------------------------------------------
  function process(root) {
    const all = root.querySelectorAll("[hx-get], [hx-post], [ws-connect], form[ws-send]");
    [root, ...all].forEach((elt) => {
      if (!elt.getAttribute || bound.has(elt) || disabled(elt)) return;
      if (elt.hasAttribute("hx-get") || elt.hasAttribute("hx-post")) { bound.add(elt); bindRequest(elt); }
      // One socket a page: the page's own (a later ws-connect is not acted on).
      if (elt.hasAttribute("ws-connect") && !socket) { bound.add(elt); connect(elt); }
      if (elt.tagName === "FORM" && elt.hasAttribute("ws-send")) {
        bound.add(elt);
        elt.addEventListener("submit", (event) => sendForm(elt, event));
      }
    });
  }

  window.transport = {
    config,
    process,
    swap(target, html, style) { swap(target, html, style); },
    trigger(elt, name) { elt.dispatchEvent(new CustomEvent(name, { bubbles: true })); },
    // The socket ends for good: no more tries (the conversation went, or the session).
    closeSocket() {
      if (!socket) return;
      socket.stopped = true;
      socket.ws.close();
    },
  };
  // Once the page is parsed and its scripts (deferred, after this one) listen.
  if (document.readyState === "complete") process(document.body);
  else document.addEventListener("DOMContentLoaded", () => process(document.body));
})();
