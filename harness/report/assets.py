"""The one script and the one style sheet of every page (allowed by hash in the page's policy).

The script sorts tables (click a header; numbers as numbers), and on a trajectory page moves between
steps with the keyboard (j / k, or n / p; g and G for the first and last step; e for the next failed
call; f filters to failed calls; d jumps to the final patch).
"""

SCRIPT = r"""
(function () {
  "use strict";
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v === null) { v = cell.textContent; }
    var n = Number(v);
    return (v !== "" && !isNaN(n)) ? {n: n, s: v} : {n: null, s: v.toLowerCase()};
  }
  function compare(a, b) {
    if (a.n !== null && b.n !== null) { return a.n - b.n; }
    if (a.n !== null) { return -1; }
    if (b.n !== null) { return 1; }
    return a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, column) {
      var button = th.querySelector("button.sort");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var c = compare(key(r1.cells[column]), key(r2.cells[column]));
          return ascending ? c : -c;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  var steps = Array.prototype.slice.call(document.querySelectorAll("section.step"));
  var filter = document.getElementById("only-failed");
  function visible() {
    return steps.filter(function (s) { return s.offsetParent !== null; });
  }
  function current(list) {
    var focused = list.indexOf(document.activeElement);
    if (focused >= 0) { return focused; }
    var top = window.scrollY + 50;  /* past the sections' scroll margin */
    var index = -1;
    list.forEach(function (s, i) { if (s.offsetTop <= top) { index = i; } });
    return index;
  }
  function go(section) {
    if (!section) { return; }
    section.focus({preventScroll: true});
    section.scrollIntoView({block: "start"});
    if (history.replaceState) { history.replaceState(null, "", "#" + section.id); }
  }
  function applyFilter() {
    if (filter) { document.body.classList.toggle("only-failed", filter.checked); }
  }
  if (filter) { filter.addEventListener("change", applyFilter); applyFilter(); }
  var token = document.body.getAttribute("data-marks-token");
  document.querySelectorAll("button.mark-button").forEach(function (button) {
    if (!token) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      var session = button.getAttribute("data-session");
      fetch("/marks", {
        method: "POST",
        headers: {"Content-Type": "application/json", "X-Harness-Token": token},
        body: JSON.stringify({session: session, mark: button.getAttribute("data-mark")})
      }).then(function (answer) {
        if (!answer.ok) { throw new Error("the mark was refused"); }
        return answer.json();
      }).then(function (saved) {
        document.querySelectorAll("span.mark").forEach(function (cell) {
          if (cell.getAttribute("data-session") === session) { cell.textContent = saved.mark; }
        });
      }).catch(function (error) { button.textContent = error.message; });
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA")) { return; }
    if (!steps.length) { return; }
    var list = visible();
    var at = current(list);
    if (event.key === "j" || event.key === "n") { go(list[Math.min(at + 1, list.length - 1)]); }
    else if (event.key === "k" || event.key === "p") { go(list[Math.max(at - 1, 0)]); }
    else if (event.key === "g") { go(list[0]); }
    else if (event.key === "G") { go(list[list.length - 1]); }
    else if (event.key === "e") {
      var failed = Array.prototype.slice.call(document.querySelectorAll(".call.failed"));
      var next = failed.filter(function (c) { return c.getBoundingClientRect().top > 20; })[0] || failed[0];
      if (next) { next.open = true; go(next); }
    }
    else if (event.key === "f" && filter) { filter.checked = !filter.checked; applyFilter(); }
    else if (event.key === "d") { go(document.getElementById("patch")); }
    else { return; }
    event.preventDefault();
  });
}());
"""

STYLE = """
:root { --fg: #1d2330; --muted: #5d6677; --line: #d8dce3; --bg: #fff; --soft: #f4f6f9;
  --ok: #1a7f37; --bad: #c0362c; --warn: #9a6700; --accent: #2f5fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); }
header { padding: 12px 20px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { margin: 0; font-size: 18px; }
main { padding: 12px 20px 60px; max-width: 1400px; }
h2 { font-size: 16px; margin: 26px 0 8px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
a { color: var(--accent); }
pre, code { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--soft); border: 1px solid var(--line);
  border-radius: 4px; padding: 8px; margin: 4px 0; max-height: 480px; overflow: auto; }
table { border-collapse: collapse; margin: 6px 0 14px; max-width: 100%; }
.table-wrap { max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
td { overflow-wrap: anywhere; }
table.runs td:first-child { min-width: 12ch; }
th { background: var(--soft); }
th button.sort { all: unset; cursor: pointer; font-weight: 600; }
th button.sort:focus-visible { outline: 2px solid var(--accent); }
th[aria-sort="ascending"] button.sort::after { content: " \\25B2"; }
th[aria-sort="descending"] button.sort::after { content: " \\25BC"; }
td.num, th.num { text-align: right; }
.muted { color: var(--muted); }
.ok { color: var(--ok); }
.bad { color: var(--bad); }
.warn { color: var(--warn); }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; border: 1px solid currentColor;
  font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; }
figure { margin: 0; }
figcaption { font-weight: 600; margin-bottom: 4px; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .bar { fill: var(--accent); }
svg .bar.bad { fill: var(--bad); }
svg .bar.ok { fill: var(--ok); }
svg .line { fill: none; stroke: var(--bad); stroke-width: 2; }
svg .axis { stroke: var(--muted); stroke-width: 1; }
.banner { padding: 6px 10px; border: 1px solid var(--warn); background: #fff8e6; border-radius: 4px; }
.toolbar { position: sticky; top: 0; background: var(--bg); padding: 6px 0; border-bottom: 1px solid var(--line);
  z-index: 1; }
section.step { border-top: 2px solid var(--line); padding: 6px 0 10px; scroll-margin-top: 40px; }
section.step:focus { outline: 2px solid var(--accent); outline-offset: 2px; }
section.step h2 { margin: 6px 0; }
details.call { border: 1px solid var(--line); border-left: 4px solid var(--ok); border-radius: 4px;
  margin: 6px 0; padding: 4px 8px; scroll-margin-top: 40px; }
details.call.failed { border-left-color: var(--bad); }
details.call summary { cursor: pointer; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0; }
.kv dt { color: var(--muted); }
.kv dd { margin: 0; }
.diff .add { color: var(--ok); }
.diff .del { color: var(--bad); }
.diff .hunk { color: var(--accent); }
body.only-failed details.call:not(.failed) { display: none; }
body.only-failed section.step:not(.has-failed) { display: none; }
"""
