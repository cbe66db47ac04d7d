/* evalkit report: sortable tables, row filters, expand/collapse. Vanilla JS, no network.
 *
 * Sorting: every <table class="sortable">; a header cell gets a button unless it has
 *   data-sort="none". A body cell's key is its data-sort attribute, else its text; keys
 *   that parse as numbers compare as numbers; empty keys (and "—") sort last both ways.
 * Filtering: <select data-filter-for="TABLEID" data-filter-key="category"> keeps the rows
 *   whose data-category equals the chosen value ("" = all). With data-filter-match="token"
 *   the row attribute is a space-separated list (tags). <input type="search"
 *   data-filter-for="TABLEID"> keeps rows whose text contains the query. Elements with
 *   data-filter-count-for="TABLEID" show "N of M rows".
 * Expanding: <button data-expand-for="TABLEID" data-expand="open|close"> opens or closes
 *   every <details> of the table's visible rows.
 * A <table data-virtual> (the run report's case table) draws, sorts and filters its own
 *   rows (cases.js); the filters and expanders here leave it alone.
 * Scroll hints: a .table-wrap or .case-scroll whose table is wider than the box gets the
 *   class "scrolls" (report.css then shades the side that has more), kept up to date on
 *   resize and when a <details> opens or closes.
 */
(function () {
  "use strict";

  var NUMERIC = /^[-+\u2212]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/;

  function cellKey(row, index) {
    var cell = row.cells[index];
    if (!cell) { return ""; }
    var key = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    key = key.trim();
    return key === "\u2014" ? "" : key;
  }

  function compareKeys(a, b) {
    if (NUMERIC.test(a) && NUMERIC.test(b)) {
      return parseFloat(a.replace("\u2212", "-")) - parseFloat(b.replace("\u2212", "-"));
    }
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  }

  function sortTable(table, index, descending) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var rows = Array.prototype.slice.call(body.rows).map(function (row, i) {
      return { row: row, key: cellKey(row, index), i: i };
    });
    rows.sort(function (x, y) {
      if (x.key === "" && y.key === "") { return x.i - y.i; }
      if (x.key === "") { return 1; }
      if (y.key === "") { return -1; }
      var c = compareKeys(x.key, y.key);
      if (c === 0) { return x.i - y.i; }
      return descending ? -c : c;
    });
    var fragment = document.createDocumentFragment();
    rows.forEach(function (r) { fragment.appendChild(r.row); });
    body.appendChild(fragment);
  }

  function initSortable(table) {
    var head = table.tHead;
    if (!head || !head.rows.length) { return; }
    var headerRow = head.rows[head.rows.length - 1];
    Array.prototype.forEach.call(headerRow.cells, function (th, index) {
      if (th.getAttribute("data-sort") === "none") { return; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort-button";
      while (th.firstChild) { button.appendChild(th.firstChild); }
      th.appendChild(button);
      button.addEventListener("click", function () {
        var current = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-sort-first") === "desc" ? "descending" : "ascending";
        var next = current === "ascending" ? "descending" : current === "descending" ? "ascending" : first;
        Array.prototype.forEach.call(headerRow.cells, function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", next);
        sortTable(table, index, next === "descending");
      });
    });
  }

  function rowMatches(row, control) {
    var value = control.value;
    if (!value) { return true; }
    if (control.tagName === "INPUT") {
      return row.textContent.toLowerCase().indexOf(value.toLowerCase()) !== -1;
    }
    var have = row.getAttribute("data-" + control.getAttribute("data-filter-key"));
    if (have === null) { return false; }
    if (control.getAttribute("data-filter-match") === "token") {
      return have.split(/\s+/).indexOf(value) !== -1;
    }
    return have === value;
  }

  function applyFilters(tableId) {
    var table = document.getElementById(tableId);
    if (!table || !table.tBodies[0]) { return; }
    var controls = document.querySelectorAll('[data-filter-for="' + tableId + '"]');
    var rows = table.tBodies[0].rows;
    var shown = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var keep = Array.prototype.every.call(controls, function (c) { return rowMatches(row, c); });
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    document.querySelectorAll('[data-filter-count-for="' + tableId + '"]').forEach(function (el) {
      el.textContent = shown + " of " + rows.length + " rows";
    });
  }

  function isVirtual(tableId) {
    var table = document.getElementById(tableId);
    return Boolean(table && table.hasAttribute("data-virtual"));
  }

  function initFilters() {
    var tables = {};
    document.querySelectorAll("[data-filter-for]").forEach(function (control) {
      var tableId = control.getAttribute("data-filter-for");
      if (isVirtual(tableId)) { return; }
      tables[tableId] = true;
      control.addEventListener(control.tagName === "INPUT" ? "input" : "change", function () {
        applyFilters(tableId);
      });
    });
    Object.keys(tables).forEach(applyFilters);
  }

  function initExpanders() {
    document.querySelectorAll("[data-expand-for]").forEach(function (button) {
      if (isVirtual(button.getAttribute("data-expand-for"))) { return; }
      button.addEventListener("click", function () {
        var table = document.getElementById(button.getAttribute("data-expand-for"));
        if (!table) { return; }
        var open = button.getAttribute("data-expand") !== "close";
        table.querySelectorAll("tbody tr").forEach(function (row) {
          if (row.hidden) { return; }
          row.querySelectorAll("details").forEach(function (d) { d.open = open; });
        });
      });
    });
  }

  function initScrollHints() {
    var boxes = document.querySelectorAll(".table-wrap, .case-scroll");
    function mark() {
      boxes.forEach(function (box) { box.classList.toggle("scrolls", box.scrollWidth > box.clientWidth + 1); });
    }
    mark();
    window.addEventListener("resize", mark);
    document.addEventListener("toggle", mark, true);
  }

  function init() {
    document.querySelectorAll("table.sortable").forEach(initSortable);
    initFilters();
    initExpanders();
    initScrollHints();
    document.documentElement.classList.add("js");
  }

  // The script ends the page's content (only data read later comes after it), so what it
  // wires is already parsed: no need to wait for the rest of a large file.
  init();
}());
