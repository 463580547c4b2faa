"""The search page served at ``/``: one self-contained HTML string, no external assets.

It lives in Python rather than a package data file so an editable or wheel install needs no
extra packaging rule. ``/?q=...&k=...&mode=...&index=NAME`` fills the form and runs the search, so a
result page can be linked to (and rendered by ``chromium --dump-dom``); each new search is a
history entry, so Back and Forward step through earlier searches. Only the newest search's reply
is shown (an older one answering late used to replace it); a query cut at the index's query max length
says so under the form. Hit text is inserted with ``textContent`` only, never as HTML, so documents
cannot inject markup or script, each title and snippet in an element of its own with ``dir="auto"``, so a
right-to-left one reads right to left and its bidi controls stay inside it.
"""
from __future__ import annotations

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>retriever search</title>
<style>
  :root { --ink: #1d2433; --muted: #5f6b7a; --line: #dde2ea; --accent: #2a5bd7; --bg: #f6f7f9; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
         color: var(--ink); background: var(--bg); }
  main { max-width: 860px; margin: 0 auto; padding: 32px 20px 64px; }
  h1 { margin: 0 0 4px; font-size: 26px; letter-spacing: -0.5px; }
  h1 span { color: var(--accent); }
  .sub { margin: 0 0 20px; color: var(--muted); font-size: 14px; }
  form { display: flex; gap: 8px; flex-wrap: wrap; }
  input[type=search] { flex: 1 1 360px; padding: 11px 14px; font-size: 17px; border: 1px solid #b9c2cf;
                       border-radius: 8px; background: #fff; }
  input[type=search]:focus { outline: 2px solid var(--accent); border-color: transparent; }
  select, button { padding: 10px 12px; font-size: 15px; border-radius: 8px; border: 1px solid #b9c2cf;
                   background: #fff; }
  button { background: var(--accent); color: #fff; border-color: var(--accent); cursor: pointer;
           font-weight: 600; padding: 10px 20px; }
  button:hover { filter: brightness(1.08); }
  label { font-size: 14px; color: var(--muted); display: flex; align-items: center; gap: 6px; }
  [hidden] { display: none !important; }  /* an author display rule would otherwise beat the hidden attribute */
  #status { margin: 18px 0 8px; font-size: 14px; color: var(--muted); min-height: 21px; }
  #status.error { color: #b3261e; font-weight: 600; }
  ol { list-style: none; margin: 0; padding: 0; }
  .hit { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px;
         margin-bottom: 10px; overflow-wrap: anywhere; }  /* a long URL or sequence breaks, not widens the page */
  .hit h2 { margin: 0; font-size: 17px; line-height: 1.35; }
  .meta { margin: 2px 0 6px; font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
          color: var(--muted); display: flex; gap: 14px; flex-wrap: wrap; }
  .score { color: #1b7f3b; }
  .snippet { margin: 0; font-size: 15px; color: #333c4a; }
</style>
</head>
<body data-state="idle">
<main>
  <h1><span>retriever</span> search</h1>
  <p class="sub" id="about">Top-k search</p>
  <form id="form" role="search" autocomplete="off">
    <input type="search" id="q" name="q" placeholder="Type a query and press Enter" aria-label="Query" autofocus>
    <label id="index-label" hidden>index <select id="index" name="index"></select></label>
    <label>mode <select id="mode" name="mode">
      <option value="">default</option><option>dense</option><option>bm25</option><option>hybrid</option>
    </select></label>
    <label>k <select id="k" name="k">
      <option>5</option><option selected>10</option><option>20</option><option>50</option><option>100</option>
    </select></label>
    <button type="submit">Search</button>
  </form>
  <div id="status" role="status"></div>
  <ol id="results"></ol>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let defaultIndex = null;
let served = [];
let latest = 0;  // the newest search's number: a reply to an older one, arriving later, is dropped

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// A document's own text takes its direction from its first strong letter (a Hebrew title reads right to left), and
// its bidi controls stay inside it.
function passage(tag, className, text) {
  const node = element(tag, className, text);
  node.dir = "auto";
  return node;
}

function snippet(text, width) {
  const flat = text.split(/\\s+/).join(" ").trim();
  const characters = Array.from(flat);  // whole characters: a cut by UTF-16 units could split a surrogate pair
  if (characters.length <= width) return flat;
  const cut = characters.slice(0, width - 1).join("");
  return cut.slice(0, cut.lastIndexOf(" ") > 0 ? cut.lastIndexOf(" ") : cut.length) + "\\u2026";
}

function setK(value) {
  if (![...$("k").options].some((option) => option.value === value)) $("k").append(new Option(value, value));
  $("k").value = value;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function render(data) {
  const list = $("results");
  list.replaceChildren();
  for (const hit of data.hits) {
    const item = element("li", "hit");
    item.dataset.id = hit.id;
    item.append(passage("h2", "title", hit.title || hit.id));
    const meta = element("div", "meta");
    meta.append(element("span", "rank", "#" + hit.rank), element("span", "id", "id " + hit.id),
                element("span", "score", "score " + hit.score.toFixed(4)));
    item.append(meta, passage("p", "snippet", snippet(hit.text, 300)));
    list.append(item);
  }
  let status = data.hits.length + " hits from " + data.index + " (" + data.mode + ") in " + data.took_ms.toFixed(1) + " ms";
  if (data.cut_at_tokens) {
    status += " \u2014 the query is longer than the index's " + data.cut_at_tokens + " tokens: only its beginning was encoded";
  }
  if (data.note) status += " \u2014 " + data.note;
  setStatus(status, false);
}

// A reply's JSON, or an error saying what came instead: a reply that is not JSON (a proxy's error page) showed
// "Unexpected token '<' ... is not valid JSON", and a server that did not answer "Failed to fetch".
async function fetchJson(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new Error("the server did not answer (" + error.message + "); is it still running?");
  }
  const data = await response.json().catch(() => null);
  if (data === null || typeof data !== "object") {
    throw new Error("HTTP " + response.status + " " + response.statusText + ", with a reply that is not the " +
                    "server's JSON (from a proxy in between?)");
  }
  if (!response.ok) throw new Error(data.error || ("HTTP " + response.status));
  return data;
}

// A search typed in is a new history entry; one the address asked for (followLink) keeps its entry.
async function search(fromAddress) {
  const query = $("q").value;
  const k = $("k").value;
  const index = $("index").value || defaultIndex;
  const mode = $("mode").value;
  const params = new URLSearchParams({ q: query, k: k });
  if (mode) params.set("mode", mode);
  if (index && index !== defaultIndex) params.set("index", index);
  const url = "?" + params.toString();
  const replace = fromAddress || !query.trim() || url === location.search;
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  const ticket = ++latest;
  if (!query.trim()) { $("results").replaceChildren(); setStatus("Type a query first.", true); return; }
  document.body.dataset.state = "loading";
  setStatus("Searching\\u2026", false);
  const base = index && index !== defaultIndex ? "indexes/" + encodeURIComponent(index) + "/search" : "search";
  try {
    const request = new URLSearchParams({ q: query, k: k });
    if (mode) request.set("mode", mode);
    const data = await fetchJson(base + "?" + request.toString());
    if (ticket !== latest) return;
    render(data);
    document.body.dataset.state = "done";
  } catch (error) {
    if (ticket !== latest) return;
    $("results").replaceChildren();
    setStatus("Error: " + error.message, true);
    document.body.dataset.state = "error";
  }
}

async function loadIndexes() {
  try {
    const data = await fetchJson("indexes");
    defaultIndex = data.default;
    const select = $("index");
    for (const info of data.indexes) {
      const option = element("option", "", info.name);
      option.value = info.name;
      select.append(option);
    }
    select.value = defaultIndex;
    $("index-label").hidden = data.indexes.length < 2;
    served = data.indexes;
    showIndex();
  } catch (error) {
    setStatus("Could not list the indexes: " + error.message, true);
  }
}

// The modes and summary of the index picked: another index may lack BM25, so its modes differ.
function showIndex() {
  const current = served.find((info) => info.name === $("index").value);
  for (const option of $("mode").options) {
    option.disabled = Boolean(option.value) && Boolean(current) && !current.modes.includes(option.value);
  }
  if ($("mode").selectedOptions[0]?.disabled) $("mode").value = "";
  if (current) {
    $("about").textContent = "Top-k search (" + current.modes.join(", ") + ") over " + current.documents.toLocaleString() +
      " documents (" + String(current.encoder.model).split("/").pop() + ", " + current.index_type + ")";
  }
}

// A link's index and mode, or why they cannot be used: an index not served (the select fell back to
// the default, which then answered in its place) or a mode it lacks (a disabled option was selected).
function applyLink(params) {
  if (params.has("index")) {
    const name = params.get("index").normalize("NFC");  // as the server names indexes (a link may be NFD)
    if (served.length && !served.some((info) => info.name === name)) {
      return "No index named \\u201c" + name + "\\u201d is served here; pick one from the list.";
    }
    $("index").value = name;
    showIndex();
  }
  if (params.has("mode")) {
    const mode = params.get("mode");
    const option = [...$("mode").options].find((o) => o.value === mode);
    if (!option) return "There is no mode \\u201c" + mode + "\\u201d; pick dense, bm25 or hybrid.";
    if (option.disabled) {
      return "Index " + $("index").value + " has no BM25 part, so mode " + mode +
        " cannot run on it; pick another mode.";
    }
    $("mode").value = mode;
  }
  return null;
}

$("index").addEventListener("change", showIndex);

$("form").addEventListener("submit", (event) => { event.preventDefault(); search(); });

// The form as the address says (a link, a reload, Back or Forward), searched when it holds a query.
async function followLink() {
  const params = new URLSearchParams(location.search);
  latest++;
  $("results").replaceChildren();
  setStatus("", false);
  document.body.dataset.state = "idle";
  $("q").value = params.get("q") || "";
  setK(params.get("k") || "10");
  $("index").value = defaultIndex;
  $("mode").value = "";
  showIndex();
  const refused = applyLink(params);
  if (refused) { setStatus(refused, true); document.body.dataset.state = "error"; return; }
  if (params.get("q")) await search(true);
  if (document.body.dataset.state === "idle") document.body.dataset.state = "ready";
}

window.addEventListener("popstate", followLink);

(async () => {
  await loadIndexes();
  await followLink();
})();
</script>
</body>
</html>
"""


def page_html() -> str:
    return PAGE_HTML
