"""The console's stylesheet and its one script: served from the gateway itself (no
build step, no CDN, nothing fetched from elsewhere), so the console works on a machine with no
internet.

The script only enhances the server-rendered pages: it follows the server-sent events (pending
approvals, the live state), answers with ``fetch`` instead of a page load, and counts the
waiting time up. Without it every form still works.
"""

from __future__ import annotations

from typing import Final

CSS: Final = """\
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #ffffff; --panel: #f6f8fa;
  --accent: #0a58ca; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); }
a { color: var(--accent); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 8px; top: 8px; background: var(--bg); padding: 4px 8px; z-index: 10; }
header { display: flex; flex-wrap: wrap; gap: 8px 20px; align-items: center;
  padding: 10px 16px; border-bottom: 1px solid var(--line); background: var(--panel); }
header .brand { font-weight: 700; }
header nav { display: flex; gap: 14px; flex-wrap: wrap; }
header nav a[aria-current="page"] { font-weight: 700; text-decoration: none; color: var(--fg); }
header form { margin-left: auto; }
main { padding: 16px; max-width: 1100px; margin: 0 auto; }
h1 { font-size: 1.4rem; margin: 0.2rem 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.4rem 0 0.6rem; }
.muted { color: var(--muted); }
.status { min-height: 1.5em; margin: 0 0 10px; font-weight: 600; }
.cards { list-style: none; padding: 0; margin: 0; display: grid; gap: 14px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px;
  background: var(--bg); }
.card h3 { margin: 0 0 6px; font-size: 1.05rem; word-break: break-all; }
.card dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 8px; }
.card dt { color: var(--muted); }
.card dd { margin: 0; word-break: break-word; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px;
  overflow-x: auto; white-space: pre-wrap; word-break: break-word; margin: 6px 0;
  font-size: 0.9rem; }
details summary { cursor: pointer; color: var(--accent); }
.answer { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-end; margin-top: 8px; }
.answer label { display: flex; flex-direction: column; font-size: 0.9rem; flex: 1 1 220px; }
.answer input[type=text] { font: inherit; padding: 6px 8px; border: 1px solid var(--line);
  border-radius: 6px; min-height: 40px; }
button { font: inherit; min-height: 40px; padding: 6px 14px; border-radius: 6px;
  border: 1px solid var(--line); background: var(--panel); color: var(--fg); cursor: pointer; }
button.allow { background: var(--ok); border-color: var(--ok); color: #fff; }
button.session { background: #fff; border-color: var(--ok); color: var(--ok); }
button.reject { background: #fff; border-color: var(--bad); color: var(--bad); }
.hint { font-size: 0.85rem; color: var(--muted); margin: 4px 0 0; }
.empty { color: var(--muted); }
.table { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: var(--panel); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: var(--ok); }
.bad { color: var(--bad); }
.warn { color: var(--warn); }
.filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-end; margin-bottom: 10px; }
.filters label { display: flex; flex-direction: column; font-size: 0.9rem; }
.filters input, .filters select { font: inherit; padding: 4px 6px; min-height: 36px; }
.login { max-width: 420px; margin: 10vh auto; }
.login label { display: block; margin-bottom: 8px; }
.login input { width: 100%; font: inherit; padding: 8px; min-height: 44px; }
.error { color: var(--bad); font-weight: 600; }
@media (max-width: 600px) {
  main { padding: 10px; }
  .card dl { grid-template-columns: 1fr; }
  .card dt { margin-top: 4px; }
  header form { margin-left: 0; }
}
"""

SCRIPT: Final = """\
(function () {
  "use strict";
  var body = document.body;
  var base = body.getAttribute("data-base");
  var csrf = body.getAttribute("data-csrf");
  var status = document.getElementById("status");

  function say(text) {
    if (status) { status.textContent = text; }
  }

  function waited(seconds) {
    if (seconds < 60) { return Math.floor(seconds) + " s"; }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min " + Math.floor(seconds % 60) + " s";
    }
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-since]").forEach(function (node) {
      node.textContent = waited(Math.max(0, now - parseFloat(node.getAttribute("data-since"))));
    });
  }

  function cardOf(id) {
    return document.getElementById("approval-" + id);
  }

  function gone(id, text) {
    var card = cardOf(id);
    if (card) {
      if (card.contains(document.activeElement)) {
        var heading = document.querySelector("main h1");
        if (heading) { heading.focus(); }
      }
      card.remove();
    }
    var single = document.querySelector("[data-approval='" + id + "']");
    if (single) {
      single.querySelectorAll("button, input").forEach(function (node) { node.disabled = true; });
    }
    say(text);
    showEmpty();
  }

  function showEmpty() {
    var list = document.getElementById("pending");
    var empty = document.getElementById("pending-empty");
    if (list && empty) { empty.hidden = list.children.length > 0; }
  }

  function enhance(root) {
    root.querySelectorAll("form.answer").forEach(function (form) {
      if (form.getAttribute("data-enhanced")) { return; }
      form.setAttribute("data-enhanced", "1");
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var data = new FormData(form, event.submitter);
        var card = form.closest(".card");
        if (card) { card.setAttribute("data-answering", "1"); }
        form.querySelectorAll("button").forEach(function (node) { node.disabled = true; });
        fetch(form.action, {
          method: "POST",
          body: new URLSearchParams(data),
          headers: { "Accept": "application/json", "X-CSRF-Token": csrf },
          credentials: "same-origin"
        }).then(function (response) {
          return response.json();
        }).then(function (answer) {
          gone(form.getAttribute("data-id"), answer.message);
        }).catch(function () {
          if (card) { card.removeAttribute("data-answering"); }
          form.querySelectorAll("button").forEach(function (node) { node.disabled = false; });
          say("The answer could not be sent; try again.");
        });
      });
    });
  }

  function follow(path, handlers) {
    var source = new EventSource(path);
    Object.keys(handlers).forEach(function (name) {
      // every event's data is one line of JSON
      source.addEventListener(name, function (event) { handlers[name](JSON.parse(event.data)); });
    });
    source.addEventListener("ended", function (event) {  // signed out: no more updates
      source.close();
      say(JSON.parse(event.data).message);
    });
    window.addEventListener("pagehide", function () { source.close(); });
    return source;
  }

  var list = document.getElementById("pending");
  var single = document.querySelector("[data-approval]");
  if (list || single) {
    follow(base + "/events", {
      snapshot: function (html) {
        if (!list) { return; }
        list.innerHTML = html;
        enhance(list);
        showEmpty();
      },
      added: function (html) {
        if (!list) { return; }
        var holder = document.createElement("ul");
        holder.innerHTML = html;
        var card = holder.firstElementChild;
        if (card && !document.getElementById(card.id)) {
          list.insertBefore(card, list.firstChild);
          enhance(card);
          say("New: " + card.getAttribute("data-label"));
        }
        showEmpty();
      },
      gone: function (event) {
        var card = cardOf(event.id);
        if (card && card.hasAttribute("data-answering")) { return; }  // its answer will say
        if (card || (single && single.getAttribute("data-approval") === event.id)) {
          gone(event.id, event.message);
        }
      }
    });
  }

  var live = document.getElementById("live");
  if (live) {
    follow(base + "/state/events" + window.location.search, {
      state: function (html) { live.innerHTML = html; }
    });
  }

  enhance(document);
  tick();
  window.setInterval(tick, 1000);
})();
"""
