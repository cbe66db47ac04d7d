/* evalkit run report: the case table, every case of the run, drawn a screenful at a time.
 *
 * Data (evalkit/report/html/cases.py): <template id="case-rows"> holds the table's columns,
 * packed (JSON, raw deflate, base 85); <template id="case-details">, after this script, holds
 * one packed block per <p>: per-case details, then the text of each distinct chunk, then each
 * distinct anchor, unpacked when a row that needs them is first expanded. Run text reaches
 * the page through textContent and attribute values only.
 *
 * Drawing: case rows have one height; the body holds a spacer, the rows in view plus a
 * margin (each open row followed by its detail row), and a spacer. Sorting and filtering
 * work on arrays of row numbers and typed columns, never on DOM rows. Header cells name
 * their column with data-col; controls are the page's usual data-filter-for elements.
 */
(function () {
  "use strict";

  var table = document.getElementById("cases-table");
  var packed = document.getElementById("case-rows");
  var scroller = document.getElementById("cases-scroll");
  if (!table || !packed || !scroller) { return; }
  var status = document.getElementById("cases-status");
  if (typeof DecompressionStream !== "function" || typeof Blob.prototype.stream !== "function") {
    if (status) { status.textContent = "this browser cannot unpack the full case table (no DecompressionStream)"; }
    return;
  }

  var OVERSCAN = 12;          // rows drawn beyond each edge of the view
  var DETAIL_GUESS = 420;     // px of a detail row not measured yet
  var EXPAND_LIMIT = 200;     // "expand all" opens at most this many rows
  var KEPT_BLOCKS = 16;       // unpacked detail blocks kept (about 0.2 MB of JSON each; 4 times as many chunk blocks)
  var MISSING = "\u2014";

  // Base 85 digits: printable ASCII without " & ' ( ) < > @ \ (cases.ALPHABET).
  var DIGIT = new Uint8Array(128);
  for (var code = 33, digit = 0; code < 127; code += 1) {
    if ("\"&'()<>@\\".indexOf(String.fromCharCode(code)) === -1) { DIGIT[code] = digit; digit += 1; }
  }

  // cases.pack in reverse: a digit saying how many fill bytes end the data, groups of 5
  // base 85 digits (4 bytes each, big-endian), raw deflate, JSON.
  function unpack(text) {
    text = text.trim();
    var groups = (text.length - 1) / 5, fill = text.charCodeAt(0) - 48;
    if (groups !== Math.floor(groups) || fill < 0 || fill > 3) { return Promise.reject(new Error("damaged data")); }
    var bytes = new Uint8Array(groups * 4);
    for (var i = 1, j = 0; i < text.length; i += 5, j += 4) {
      var v = (((DIGIT[text.charCodeAt(i)] * 85 + DIGIT[text.charCodeAt(i + 1)]) * 85 + DIGIT[text.charCodeAt(i + 2)]) * 85 +
        DIGIT[text.charCodeAt(i + 3)]) * 85 + DIGIT[text.charCodeAt(i + 4)];
      bytes[j] = v >>> 24;
      bytes[j + 1] = (v >>> 16) & 255;
      bytes[j + 2] = (v >>> 8) & 255;
      bytes[j + 3] = v & 255;
    }
    var stream = new Blob([bytes.subarray(0, bytes.length - fill)]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    return new Response(stream).json();
  }

  // ---- formatting: the same text as the template's filters (env.py)

  var formats = {};
  function fixed(v, digits) {
    if (v !== v) { return MISSING; }
    var f = formats[digits] || (formats[digits] = new Intl.NumberFormat("en-US", {
      minimumFractionDigits: digits, maximumFractionDigits: digits, useGrouping: true
    }));
    return f.format(v);
  }
  function ms(v) {
    if (v !== v) { return MISSING; }
    return Math.abs(v) < 10 ? v.toFixed(1) + " ms" : fixed(v, 0) + " ms";
  }
  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) { e.className = className; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function floats(list) {
    var out = new Float64Array(list.length);
    for (var i = 0; i < list.length; i += 1) { out[i] = list[i] === null ? NaN : list[i]; }
    return out;
  }

  // Text sorts like the other tables (case-insensitive, digit runs as numbers), through a
  // key per value made once, so a 100,000-row sort compares plain strings.
  function textKey(s) {
    return s.toLowerCase().replace(/\d+/g, function (d) {
      return d.length >= 20 ? d : "00000000000000000000".slice(d.length) + d;
    });
  }
  function textRanks(values) {
    var n = values.length, keys = new Array(n), rows = [], ranks = new Float64Array(n);
    for (var i = 0; i < n; i += 1) {
      if (values[i]) { keys[i] = textKey(values[i]); rows.push(i); } else { ranks[i] = NaN; }
    }
    rows.sort(function (a, b) { return keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : 0; });
    var rank = 0;
    for (var j = 0; j < rows.length; j += 1) {
      if (j > 0 && keys[rows[j]] !== keys[rows[j - 1]]) { rank += 1; }
      ranks[rows[j]] = rank;
    }
    return ranks;
  }

  function start(data) {
    var n = data.n;
    var categories = data.categories, outcomes = data.outcomes;
    var category = data.category, outcome = data.outcome;
    var errors = data.error || {};
    var num = {
      index: floats(data.index), first_rank: floats(data.first_rank), recall: floats(data.recall),
      mrr: floats(data.mrr), ndcg: floats(data.ndcg), groundedness: floats(data.groundedness),
      correctness: floats(data.correctness), abstained: floats(data.abstained), latency: floats(data.latency)
    };
    var answerable = data.answerable;
    var sortKeys = {};
    function errorOf(row) { return errors[row] || ""; }
    function keysOf(col) {
      if (num[col]) { return num[col]; }
      if (!sortKeys[col] && data.ranks && data.ranks[col]) {
        sortKeys[col] = floats(data.ranks[col]);  // ranked when the page was written (cases.text_ranks)
      } else if (!sortKeys[col] && (col === "category" || col === "outcome")) {
        // few names: rank the names, then each row by its name's code
        var names = textRanks(col === "category" ? categories : outcomes), codes = col === "category" ? category : outcome;
        var ranked = new Float64Array(n);
        for (var r = 0; r < n; r += 1) { ranked[r] = names[codes[r]]; }
        sortKeys[col] = ranked;
      } else if (!sortKeys[col]) {
        var values = new Array(n);
        for (var i = 0; i < n; i += 1) {
          values[i] = col === "error" ? errorOf(i) : data[col][i];
        }
        sortKeys[col] = textRanks(values);
      }
      return sortKeys[col];
    }

    var head = table.tHead.rows[table.tHead.rows.length - 1];
    var columns = Array.prototype.map.call(head.cells, function (th) { return th.getAttribute("data-col"); });
    var body = table.tBodies[0];

    // ---- cells

    function numCell(col, digits) {
      return function (row) {
        var v = num[col][row];
        var td = el("td", "num", digits === "ms" ? ms(v) : fixed(v, digits));
        td.setAttribute("data-sort", v !== v ? "" : String(v));
        return td;
      };
    }
    var cells = {
      index: function (row) {
        var td = el("td", "n", String(num.index[row]));
        td.setAttribute("data-sort", String(num.index[row]));
        return td;
      },
      id: function (row) { var td = el("td", "mono", data.id[row]); td.title = data.id[row]; return td; },
      question: function (row) {
        var td = el("td", "question");
        var button = el("button", "expand", data.question[row] || "(no question)");
        button.type = "button";
        button.title = data.question[row];
        td.appendChild(button);
        return td;
      },
      category: function (row) { return el("td", "", categories[category[row]]); },
      outcome: function (row) {
        var name = outcomes[outcome[row]], td = el("td");
        td.appendChild(el("span", "outcome outcome-" + name, name));
        return td;
      },
      first_rank: numCell("first_rank", 0),
      recall: numCell("recall", 2), mrr: numCell("mrr", 2), ndcg: numCell("ndcg", 2),
      groundedness: numCell("groundedness", 1), correctness: numCell("correctness", 1),
      abstained: function (row) {
        var v = num.abstained[row], td = el("td");
        if (v === 1) { td.appendChild(el("span", "yes", "yes")); } else { td.textContent = v === 0 ? "no" : MISSING; }
        return td;
      },
      latency: numCell("latency", "ms"),
      error: function (row) { var td = el("td", "", errorOf(row)); td.title = errorOf(row); return td; }
    };

    function makeRow(row) {
      var tr = el("tr", "case-row");
      tr.setAttribute("data-category", categories[category[row]]);
      tr.setAttribute("data-outcome", outcomes[outcome[row]]);
      tr.setAttribute("data-abstained", num.abstained[row] === 1 ? "yes" : "no");
      tr.setAttribute("data-answerable", answerable[row] === null ? MISSING : answerable[row] ? "yes" : "no");
      tr.setAttribute("data-id", data.id[row]);
      tr.setAttribute("data-row", String(row));
      for (var c = 0; c < columns.length; c += 1) {
        var make = cells[columns[c]];
        tr.appendChild(make ? make(row) : el("td"));
      }
      return tr;
    }

    // ---- details, unpacked a block at a time (cases._Details): a row's record is in a
    // detail block; its chunks' text in chunk blocks; anchor texts in anchor blocks. The
    // template holds the detail blocks, then the chunk blocks, then the anchor blocks.

    var detailsParsed = new Promise(function (resolve) {
      if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", resolve);
      } else {
        resolve();
      }
    });
    var counts = data.blocks;
    var kinds = {
      details: { first: 0, kept: KEPT_BLOCKS, cache: new Map(), prepare: prepareDetails },
      chunks: { first: counts.details, kept: 4 * KEPT_BLOCKS, cache: new Map(), prepare: null },
      anchors: { first: counts.details + counts.chunks, kept: KEPT_BLOCKS, cache: new Map(), prepare: null }
    };
    function prepareDetails(blk) {
      var starts = new Int32Array(blk.n_chunks.length + 1);
      for (var i = 0; i < blk.n_chunks.length; i += 1) { starts[i + 1] = starts[i] + blk.n_chunks[i]; }
      blk.starts = starts;
      // chunk j is stored chunk number bodies[j]: 0 in `chunk` means "the next new one"
      var bodies = new Int32Array(blk.chunk.length), stored = blk.base;
      for (var j = 0; j < blk.chunk.length; j += 1) {
        bodies[j] = blk.chunk[j] === 0 ? stored++ : blk.chunk[j] - 1;
      }
      blk.bodies = bodies;
      return blk;
    }
    function block(kind, b) {   // Promise of block b of a kind (most recently used last)
      var k = kinds[kind], found = k.cache.get(b);
      if (found) { k.cache.delete(b); k.cache.set(b, found); return found; }
      var holder = document.getElementById("case-details");
      var p = holder && holder.content.children[k.first + b];
      found = p && b < counts[kind] ? unpack(p.textContent) : Promise.reject(new Error("no " + kind + " block " + b));
      if (k.prepare) { found = found.then(k.prepare); }
      k.cache.set(b, found);
      if (k.cache.size > k.kept) { k.cache.delete(k.cache.keys().next().value); }
      return found;
    }
    // The blocks holding items `numbers` of a kind: {block number: unpacked block}.
    function blocksOf(kind, numbers, size) {
      var wanted = {};
      numbers.forEach(function (x) { wanted[Math.floor(x / size)] = true; });
      var keys = Object.keys(wanted);
      return Promise.all(keys.map(function (b) { return block(kind, Number(b)); })).then(function (list) {
        var out = {};
        keys.forEach(function (b, i) { out[b] = list[i]; });
        return out;
      });
    }
    function loadDetail(row) {
      var slot = data.detail ? data.detail[row] : row, k = slot % data.block, found = { k: k };
      return detailsParsed.then(function () { return block("details", Math.floor(slot / data.block)); })
        .then(function (blk) {
          found.blk = blk;
          found.bodies = Array.prototype.slice.call(blk.bodies, blk.starts[k], blk.starts[k + 1]);
          return blocksOf("chunks", found.bodies, data.chunk_block);
        })
        .then(function (chunks) {
          var size = data.chunk_block;
          found.chunk = function (x) {
            var c = chunks[Math.floor(x / size)], i = x % size;
            return { anchor: c.anchor[i], text: c.text[i], cut: c.cut[i] };
          };
          var anchors = found.blk.refs[k].concat(found.blk.gold[k], found.bodies.map(function (x) { return found.chunk(x).anchor; }));
          return blocksOf("anchors", anchors, data.anchor_block);
        })
        .then(function (anchors) {
          var size = data.anchor_block;
          found.anchor = function (a) { return anchors[Math.floor(a / size)][a % size]; };
          return found;
        });
    }

    function list(box, title, items) {
      if (!items.length) { return; }
      box.appendChild(el("h4", "", title));
      var ul = el("ul");
      items.forEach(function (item) { ul.appendChild(el("li", "", item)); });
      box.appendChild(ul);
    }
    function fillDetail(box, row, found) {
      var blk = found.blk, k = found.k, first = num.first_rank[row];
      box.textContent = "";
      if (blk.turn && blk.turn[k]) {
        // a conversation's turn: where it sits, and the turns before it as it was sent them
        box.appendChild(el("h4", "", "conversation"));
        box.appendChild(el("p", "note", blk.turn[k]));
        blk.history[k].forEach(function (m) {
          box.appendChild(el("p", "turn-" + (m[0] === "user" ? "user" : "bot"), (m[0] === "user" ? "you: " : "bot: ") + m[1]));
        });
      }
      box.appendChild(el("h4", "", blk.answer_cut[k] ? "answer (cut)" : "answer"));
      box.appendChild(el("pre", "answer", blk.answer[k] || "(empty)"));
      list(box, "cited", blk.refs[k].map(found.anchor));
      list(box, "gold supports", blk.gold[k].map(found.anchor));
      var from = blk.starts[k], to = blk.starts[k + 1];
      box.appendChild(el("h4", "", "retrieved chunks (" + (to - from) + ")"));
      if (to > from) {
        var ol = el("ol", "chunks");
        for (var j = from; j < to; j += 1) {
          var chunk = found.chunk(blk.bodies[j]), li = el("li");
          // `rank` is stored less its position (1-based): 0 for the usual order
          var rank = blk.rank[j] === null ? null : blk.rank[j] + (j - from + 1);
          li.value = rank === null ? j - from + 1 : rank;
          var gold = rank !== null && rank === first;
          if (gold) { li.className = "chunk-gold"; }
          var score = blk.score[j];
          var headLine = el("div", "chunk-head", found.anchor(chunk.anchor) + " \u00b7 score " + fixed(score === null ? NaN : score, 3));
          if (gold) { headLine.appendChild(el("span", "badge", "first gold match")); }
          li.appendChild(headLine);
          li.appendChild(el("pre", "chunk-text", chunk.text + (chunk.cut ? "\u2026" : "")));
          ol.appendChild(li);
        }
        box.appendChild(ol);
      }
      if (blk.judge[k].length) {
        box.appendChild(el("h4", "", "judge"));
        blk.judge[k].forEach(function (line) { box.appendChild(el("p", "note", line)); });
      }
      var steps = blk.traces ? blk.traces[k] : [];
      if (steps.length) {
        // the target's debug.traces, as stored: each step's name, what it took in, what it gave back
        box.appendChild(el("h4", "", "trace steps (" + steps.length + ")"));
        var ol2 = el("ol", "traces");
        steps.forEach(function (t) {
          var li = el("li");
          li.appendChild(el("div", "chunk-head", t[0] || "(unnamed)"));
          li.appendChild(el("pre", "chunk-text", "in: " + t[1] + "\nout: " + t[2]));
          ol2.appendChild(li);
        });
        box.appendChild(ol2);
      }
    }

    // ---- which rows, in which order, and where they sit

    var order = new Int32Array(n);         // every row, in the current sort
    for (var i = 0; i < n; i += 1) { order[i] = i; }
    var view = order.slice();              // the rows that pass the filters, in order
    var place = new Int32Array(n);         // row -> position in view, or -1
    var open = new Map();                  // open row -> {height, tr}
    var openAt = [];                       // view positions of open rows, ascending
    var openAbove = new Float64Array(1);   // openAbove[j]: detail heights of openAt[0..j)
    var rowHeight = 33;                    // measured on the first draw

    function relayout() {
      place.fill(-1);
      for (var p = 0; p < view.length; p += 1) { place[view[p]] = p; }
      openAt = [];
      open.forEach(function (o, row) { if (place[row] >= 0) { openAt.push(place[row]); } });
      openAt.sort(function (a, b) { return a - b; });
      openAbove = new Float64Array(openAt.length + 1);
      for (var j = 0; j < openAt.length; j += 1) { openAbove[j + 1] = openAbove[j] + open.get(view[openAt[j]]).height; }
    }
    function top(p) {   // where view position p starts, from the top of the body
      var lo = 0, hi = openAt.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (openAt[mid] < p) { lo = mid + 1; } else { hi = mid; } }
      return p * rowHeight + openAbove[lo];
    }
    function positionAt(y) {   // the last view position starting at or above y
      var lo = 0, hi = view.length;
      while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (top(mid) <= y) { lo = mid; } else { hi = mid - 1; } }
      return lo;
    }

    function spacer() {
      var tr = el("tr", "spacer"), td = el("td");
      tr.setAttribute("aria-hidden", "true");
      td.colSpan = columns.length;
      tr.appendChild(td);
      return tr;
    }
    var above = spacer(), below = spacer();
    var drawn = new Map();                 // row -> its <tr>, for the rows on the page

    function detailRow(row) {
      var o = open.get(row);
      if (o.tr) { return o.tr; }
      var tr = el("tr", "case-detail-row"), td = el("td"), box = el("div", "case-detail", "reading\u2026");
      td.colSpan = columns.length;
      td.appendChild(box);
      tr.appendChild(td);
      o.tr = tr;
      loadDetail(row).then(function (found) { fillDetail(box, row, found); schedule(); }, function (err) {
        box.textContent = "could not read this case's details: " + err;
      });
      return tr;
    }

    function draw() {
      var bodyTop = table.offsetTop + table.tHead.offsetHeight;
      var y = Math.max(0, scroller.scrollTop - bodyTop);
      var first = Math.max(0, positionAt(y) - OVERSCAN);
      var last = Math.min(view.length, positionAt(y + scroller.clientHeight) + 1 + OVERSCAN);
      var next = new Map(), nodes = [above];
      for (var p = first; p < last; p += 1) {
        var row = view[p];
        var tr = drawn.get(row) || makeRow(row);
        var button = tr.querySelector("button.expand");
        if (button) { button.setAttribute("aria-expanded", open.has(row) ? "true" : "false"); }
        tr.setAttribute("aria-rowindex", String(p + 2));  // the header is row 1
        next.set(row, tr);
        nodes.push(tr);
        if (open.has(row)) { nodes.push(detailRow(row)); }
      }
      nodes.push(below);
      // Nothing may force a layout while rows are out of the page (the box would clamp its
      // scroll position to the shorter content): focus moves before the one DOM change,
      // to the box itself when the focused row is leaving (the arrow keys then scroll it).
      var focused = document.activeElement, keep = null;
      if (focused && focused !== body && body.contains(focused)) {
        var holder = focused.closest("tr");
        if (holder && nodes.indexOf(holder) !== -1) { keep = focused; } else { scroller.focus({ preventScroll: true }); }
      }
      above.firstChild.style.height = top(first) + "px";
      below.firstChild.style.height = Math.max(0, top(view.length) - top(last)) + "px";
      body.replaceChildren.apply(body, nodes);
      drawn = next;
      if (keep && document.activeElement !== keep) { keep.focus({ preventScroll: true }); }
      return measure(first, last);
    }

    // Row and detail heights are the browser's: read them after drawing, redraw if a guess
    // was off (at most twice, so a layout that never settles cannot loop).
    function measure(first, last) {
      var changed = false;
      var sample = drawn.values().next().value;
      if (sample) {
        var h = sample.getBoundingClientRect().height;
        if (h > 0 && Math.abs(h - rowHeight) > 0.01) { rowHeight = h; changed = true; }
      }
      for (var p = first; p < last; p += 1) {
        var o = open.get(view[p]);
        if (o && o.tr) {
          var dh = o.tr.getBoundingClientRect().height;
          if (dh > 0 && Math.abs(dh - o.height) > 0.5) { o.height = dh; changed = true; }
        }
      }
      if (changed) { relayout(); }
      return changed;
    }
    function redraw() {
      for (var pass = 0; pass < 3 && draw(); pass += 1) { /* heights settled after a redraw */ }
    }

    var pending = false;
    function schedule() {
      if (pending) { return; }
      pending = true;
      requestAnimationFrame(function () { pending = false; redraw(); });
    }

    // ---- sorting and filtering

    var countLabels = document.querySelectorAll('[data-filter-count-for="cases-table"]');
    var controls = Array.prototype.slice.call(document.querySelectorAll('[data-filter-for="cases-table"]'));
    var haystack = null;   // lower-cased searchable text per row, made on the first search

    function searchText() {
      if (!haystack) {
        haystack = new Array(n);
        for (var i = 0; i < n; i += 1) {
          haystack[i] = (data.id[i] + "\n" + data.question[i] + "\n" + categories[category[i]] + "\n" +
            outcomes[outcome[i]] + "\n" + errorOf(i)).toLowerCase();
        }
      }
      return haystack;
    }

    function refilter() {
      var want = { category: null, outcome: null, abstained: null, text: "" };
      controls.forEach(function (c) {
        if (c.tagName === "INPUT") { want.text = c.value.trim().toLowerCase(); return; }
        var key = c.getAttribute("data-filter-key");
        if (c.value && key in want) { want[key] = c.value; }
      });
      var cat = want.category === null ? -2 : categories.indexOf(want.category);
      var out = want.outcome === null ? -2 : outcomes.indexOf(want.outcome);
      var abst = want.abstained === null ? -1 : want.abstained === "yes" ? 1 : 0;
      var hay = want.text ? searchText() : null, q = want.text;
      var abstained = num.abstained;
      var kept = new Int32Array(n), m = 0;
      for (var k = 0; k < n; k += 1) {
        var row = order[k];
        if (cat !== -2 && category[row] !== cat) { continue; }
        if (out !== -2 && outcome[row] !== out) { continue; }
        if (abst !== -1 && (abstained[row] === 1 ? 1 : 0) !== abst) { continue; }
        if (hay && hay[row].indexOf(q) === -1) { continue; }
        kept[m] = row;
        m += 1;
      }
      view = kept.subarray(0, m);
      table.setAttribute("aria-rowcount", String(m + 1));  // screen readers learn the size the page does not hold
      relayout();
      var label = fixed(m, 0) + " of " + fixed(n, 0) + " rows";
      Array.prototype.forEach.call(countLabels, function (e) { e.textContent = label; });
      redraw();
    }

    // Blank keys last both ways; ties keep the order they had (Array.prototype.sort is stable).
    function sortBy(col, descending) {
      var keys = keysOf(col), present = [], blank = [];
      for (var k = 0; k < n; k += 1) {
        var row = order[k];
        if (keys[row] !== keys[row]) { blank.push(row); } else { present.push(row); }
      }
      present.sort(descending ? function (a, b) { return keys[b] - keys[a]; } : function (a, b) { return keys[a] - keys[b]; });
      order.set(present);
      order.set(blank, present.length);
      refilter();
    }

    Array.prototype.forEach.call(head.cells, function (th) {
      var col = th.getAttribute("data-col");
      if (!col || th.getAttribute("data-sort") === "none") { return; }
      var button = el("button", "sort-button");
      button.type = "button";
      while (th.firstChild) { button.appendChild(th.firstChild); }
      th.appendChild(button);
      button.addEventListener("click", function () {
        var current = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-sort-first") === "desc" ? "descending" : "ascending";
        var next = current === "ascending" ? "descending" : current === "descending" ? "ascending" : first;
        Array.prototype.forEach.call(head.cells, function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", next);
        sortBy(col, next === "descending");
      });
    });

    controls.forEach(function (c) { c.addEventListener(c.tagName === "INPUT" ? "input" : "change", refilter); });

    body.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest("button.expand");
      if (!button) { return; }
      var row = Number(button.closest("tr").getAttribute("data-row"));
      if (open.has(row)) { open.delete(row); } else { open.set(row, { height: DETAIL_GUESS, tr: null }); }
      relayout();
      redraw();
    });

    document.querySelectorAll('[data-expand-for="cases-table"]').forEach(function (button) {
      button.addEventListener("click", function () {
        open.clear();
        if (button.getAttribute("data-expand") !== "close") {
          var count = Math.min(view.length, EXPAND_LIMIT);
          for (var p = 0; p < count; p += 1) { open.set(view[p], { height: DETAIL_GUESS, tr: null }); }
          if (status) {
            status.textContent = view.length > count ? "opened the first " + fixed(count, 0) + " of " + fixed(view.length, 0) +
              " rows (filter to open the rest)" : "";
          }
        } else if (status) {
          status.textContent = "";
        }
        relayout();
        redraw();
      });
    });

    if (!scroller.hasAttribute("tabindex")) { scroller.tabIndex = -1; }
    scroller.addEventListener("scroll", schedule, { passive: true });
    window.addEventListener("resize", schedule);

    var note = document.getElementById("cases-static-note");
    if (note) { note.hidden = true; }
    refilter();
    table.setAttribute("data-ready", "");
    if (window.performance && performance.mark) { performance.mark("evalkit:cases-ready"); }
  }

  unpack(packed.content.textContent).then(start).catch(function (err) {
    if (status) { status.textContent = "could not read the case table: " + err; }
    throw err;
  });
}());
