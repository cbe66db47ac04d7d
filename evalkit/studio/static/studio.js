// evalkit studio: posts each edit with the case's version, keeps an unsaved key-facts draft
// in localStorage, and maps the keys shown on screen. No inline script anywhere (the CSP).
"use strict";
(function () {
  const csrf = (document.querySelector('meta[name="studio-csrf"]') || {}).content || "";
  const box = document.getElementById("case");
  const alertBox = document.getElementById("alert");
  const statusBox = document.getElementById("status");
  const facts = document.querySelector("[data-facts]");
  const draftNote = document.getElementById("draft");
  const draftKey = box ? "evalkit-studio-draft|" + box.dataset.set + "|" + box.dataset.id : null;

  function say(text) { if (statusBox) statusBox.textContent = text; }
  function fail(text) { alertBox.textContent = text; alertBox.hidden = false; }

  function factsList() {
    return facts.value.split("\n").map(function (s) { return s.trim(); }).filter(Boolean);
  }

  async function post(op, args) {
    alertBox.hidden = true;
    say("saving…");
    let res;
    try {
      res = await fetch("/api/edit", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
        body: JSON.stringify({ set: box.dataset.set, id: box.dataset.id, version: box.dataset.version, op: op, args: args }),
      });
    } catch (e) {
      say(""); fail("not saved: the studio did not answer (is `evalkit serve-studio` still running?)"); return;
    }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) {
      if (op === "key_facts" && draftKey) localStorage.removeItem(draftKey);
      say("saved");
      // a draft of the key facts typed since is kept (the reload restores it)
      if (op !== "key_facts" && draftKey && facts && facts.value !== facts.defaultValue) {
        localStorage.setItem(draftKey, JSON.stringify({ version: data.version, text: facts.value }));
      }
      location.reload();
    } else if (res.status === 409 && data.conflict) {
      say("");
      document.getElementById("conflict-current").textContent = JSON.stringify(data.current, null, 2);
      document.getElementById("conflict").hidden = false;
      document.getElementById("conflict-reload").focus();
    } else {
      say("");
      fail("not saved: " + (data.error || res.status));
    }
  }

  // `s`: the selected text of a chunk, or of a note's lines, as a snippet of the support of that place
  function snippet() {
    const sel = window.getSelection();
    const text = sel ? sel.toString().trim() : "";
    const node = sel && sel.anchorNode ? (sel.anchorNode.nodeType === 1 ? sel.anchorNode : sel.anchorNode.parentElement) : null;
    const source = node ? node.closest("[data-snippet-source]") : null;
    if (!text || !source) { fail("select some words in a chunk or in the note first"); return; }
    const line = node.closest(".line");
    const heading = (line || source).dataset.headingPath;
    post("snippet", { rel_path: source.dataset.relPath, heading_path: heading, text: text });
  }
  const snippetButton = document.getElementById("add-snippet");
  // mousedown would clear the selection before the click: keep it
  if (snippetButton) snippetButton.addEventListener("mousedown", function (ev) { ev.preventDefault(); });
  if (snippetButton) snippetButton.addEventListener("click", snippet);

  document.addEventListener("click", function (ev) {
    const button = ev.target.closest("button[data-op]");
    if (!button || !box) return;
    const op = button.dataset.op;
    const args = {};
    if (op === "toggle" || op === "shallower") { args.rel_path = button.dataset.relPath; args.heading_path = button.dataset.headingPath; }
    if (op === "answerable") args.value = button.dataset.value === "true";
    if (op === "drop_support") args.index = parseInt(button.dataset.index, 10);
    if (op === "key_facts") args.facts = factsList();
    post(op, args);
  });

  const reload = document.getElementById("conflict-reload");
  if (reload) reload.addEventListener("click", function () { location.reload(); });

  document.querySelectorAll("select[data-autosubmit]").forEach(function (sel) {
    sel.addEventListener("change", function () { sel.form.submit(); });
  });

  // The key-facts draft: every keystroke kept until saved, restored when the page comes back
  // at the same version of the case (a tab closed mid-edit loses nothing typed).
  if (facts && draftKey) {
    const kept = JSON.parse(localStorage.getItem(draftKey) || "null");
    if (kept && kept.version === box.dataset.version && kept.text !== facts.value) {
      facts.value = kept.text;
      draftNote.textContent = "unsaved draft restored: save it or edit it";
    } else if (kept && kept.version !== box.dataset.version) {
      localStorage.removeItem(draftKey);
      if (kept.text !== facts.value) draftNote.textContent = "a draft made against an older version of this case was dropped";
    }
    facts.addEventListener("input", function () {
      localStorage.setItem(draftKey, JSON.stringify({ version: box.dataset.version, text: facts.value }));
      draftNote.textContent = "unsaved";
    });
    facts.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); post("key_facts", { facts: factsList() }); }
    });
  }

  // Keys: a case page's and the queue's. Ignored while typing in a text box (Esc leaves it).
  const rows = Array.from(document.querySelectorAll("[data-queue] tr[data-row]"));
  let selected = -1;
  function select(n) {
    if (!rows.length) return;
    selected = Math.max(0, Math.min(rows.length - 1, n));
    rows.forEach(function (r, i) { r.classList.toggle("selected", i === selected); r.setAttribute("aria-selected", i === selected ? "true" : "false"); });
    rows[selected].scrollIntoView({ block: "nearest" });
  }
  // Reviewing one generated candidate: accept (with the question and facts as edited) or reject.
  const candidate = document.getElementById("candidate");
  const reviewerBox = document.querySelector("[data-reviewer]");
  if (reviewerBox) {
    reviewerBox.value = localStorage.getItem("evalkit-studio-reviewer") || "";
    reviewerBox.addEventListener("input", function () { localStorage.setItem("evalkit-studio-reviewer", reviewerBox.value); });
  }
  async function decideCandidate(decision) {
    alertBox.hidden = true;
    say("saving…");
    const body = { id: candidate.dataset.id, decision: decision, reviewer: reviewerBox ? reviewerBox.value : "" };
    if (decision === "accept") {
      body.question = document.querySelector("[data-review-question]").value;
      body.facts = document.querySelector("[data-review-facts]").value.split("\n");
    }
    let res;
    try {
      res = await fetch("/api/review", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf }, body: JSON.stringify(body),
      });
    } catch (e) {
      say(""); fail("not saved: the studio did not answer (is `evalkit serve-studio` still running?)"); return;
    }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) {
      say("saved");
      const next = document.getElementById("next-link");
      if (next) location.assign(next.href); else location.assign("/review");
    } else if (res.status === 409 && data.conflict) {
      say("");
      document.getElementById("conflict-current").textContent = data.error || "";
      document.getElementById("conflict").hidden = false;
      document.getElementById("conflict-reload").focus();
    } else {
      say(""); fail("not saved: " + (data.error || res.status));
    }
  }
  document.querySelectorAll("button[data-decide]").forEach(function (b) {
    b.addEventListener("click", function () { decideCandidate(b.dataset.decide); });
  });

  // Batch: write the planned anchor fixes into the next version (the plan's hash names what was shown).
  const fixesBox = document.getElementById("fixes");
  const writeFixes = document.getElementById("write-fixes");
  if (fixesBox && writeFixes) writeFixes.addEventListener("click", async function () {
    alertBox.hidden = true;
    say("writing…");
    const res = await fetch("/api/fixes", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
      body: JSON.stringify({ set: fixesBox.dataset.set, digest: fixesBox.dataset.digest }),
    }).catch(function () { return null; });
    if (!res) { say(""); fail("not written: the studio did not answer"); return; }
    const data = await res.json().catch(function () { return {}; });
    say("");
    if (res.status === 200) location.assign("/queue?set=" + encodeURIComponent(data.written));
    else fail("not written: " + (data.error || res.status));
  });

  // Batch: the unlabeled cases labeled with the chatbot's top N chunks (label --accept-top).
  const acceptTop = document.getElementById("accept-top");
  if (acceptTop) acceptTop.addEventListener("submit", async function (ev) {
    ev.preventDefault();
    alertBox.hidden = true;
    say("asking the chatbot…");
    const res = await fetch("/api/accept-top", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
      body: JSON.stringify({ set: acceptTop.dataset.set, n: parseInt(document.getElementById("top-n").value, 10) }),
    }).catch(function () { return null; });
    if (!res) { say(""); fail("not written: the studio did not answer"); return; }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) { say(data.labeled.length + " labeled"); location.reload(); }
    else { say(""); fail("not written: " + (data.error || res.status)); }
  });

  // A renamed note's anchors into the next version (the plan the page showed, by its digest).
  const renameBox = document.getElementById("rename");
  const writeRename = document.getElementById("write-rename");
  if (renameBox && writeRename) writeRename.addEventListener("click", async function () {
    alertBox.hidden = true;
    say("writing…");
    const d = renameBox.dataset;
    const res = await fetch("/api/rename", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
      body: JSON.stringify({ set: d.set, from: d.from, to: d.to, digest: d.digest }),
    }).catch(function () { return null; });
    if (!res) { say(""); fail("not written: the studio did not answer"); return; }
    const data = await res.json().catch(function () { return {}; });
    say("");
    if (res.status === 200) location.assign("/queue?set=" + encodeURIComponent(data.written));
    else fail("not written: " + (data.error || res.status));
  });

  // Batch operations on the cases selected in the queue (each sent with the version shown).
  const batch = document.getElementById("batch");
  const picks = Array.from(document.querySelectorAll("input[data-pick]"));
  function picked() { return picks.filter(function (c) { return c.checked; }); }
  function countPicked() { const n = document.getElementById("n-picked"); if (n) n.textContent = picked().length + " selected"; }
  picks.forEach(function (c) { c.addEventListener("change", countPicked); });
  const pickAll = document.getElementById("pick-all");
  if (pickAll) pickAll.addEventListener("change", function () { picks.forEach(function (c) { c.checked = pickAll.checked; }); countPicked(); });
  async function batchPost(url, body, done) {
    alertBox.hidden = true;
    if (!picked().length) { fail("select cases first (x, or the boxes)"); return; }
    say("writing…");
    const res = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
      body: JSON.stringify(body),
    }).catch(function () { return null; });
    if (!res) { say(""); fail("not written: the studio did not answer"); return; }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) { say(done(data)); location.reload(); }
    else { say(""); fail("not written: " + (data.error || res.status)); }
  }
  document.querySelectorAll("button[data-drop]").forEach(function (b) {
    b.addEventListener("click", function () {
      const kind = b.dataset.drop;
      const versions = {};
      picked().forEach(function (c) { versions[c.dataset.pick] = c.dataset.version; });
      const body = { set: batch.dataset.set, versions: versions };
      body[kind] = document.getElementById("drop-" + kind).value;
      batchPost("/api/drop", body, function (data) { return data.changed.length + " changed"; });
    });
  });
  const acceptPicked = document.getElementById("accept-picked");
  if (acceptPicked) acceptPicked.addEventListener("click", function () {
    batchPost("/api/accept-top", { set: batch.dataset.set, n: parseInt(document.getElementById("picked-n").value, 10),
      ids: picked().map(function (c) { return c.dataset.pick; }) }, function (data) { return data.labeled.length + " labeled"; });
  });

  // Grading one answer: the grade is posted with the hashes of what the page showed.
  const gradeBox = document.getElementById("grade");
  let active = "groundedness";
  function checked(kind) {
    const r = document.querySelector('input[name="' + kind + '"]:checked');
    return r ? parseInt(r.value, 10) : null;
  }
  if (gradeBox && checked("groundedness") !== null && checked("correctness") === null) active = "correctness";
  // a groundedness chosen by mouse moves the digit keys on to correctness too
  document.querySelectorAll('input[name="groundedness"]').forEach(function (r) {
    r.addEventListener("change", function () { active = "correctness"; });
  });
  async function saveGrade() {
    const g = checked("groundedness"), c = checked("correctness");
    if (g === null || c === null) { fail("choose both grades, 0 to 5"); return; }
    alertBox.hidden = true;
    say("saving…");
    const d = gradeBox.dataset;
    let res;
    try {
      res = await fetch("/api/grade", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
        body: JSON.stringify({ run: d.run, id: d.id, grader: d.grader, groundedness: g, correctness: c,
          item: { answer_sha256: d.answerSha256, context_sha256: d.contextSha256, facts_sha256: d.factsSha256 } }),
      });
    } catch (e) {
      say(""); fail("not saved: the studio did not answer (is `evalkit serve-studio` still running?)"); return;
    }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) {
      say("saved");
      const next = document.getElementById("next-link");
      if (next) location.assign(next.href); else location.reload();
    } else if (res.status === 409 && data.conflict) {
      say("");
      document.getElementById("conflict-current").textContent = JSON.stringify(data.current, null, 2);
      document.getElementById("conflict").hidden = false;
      document.getElementById("conflict-reload").focus();
    } else {
      say(""); fail("not saved: " + (data.error || res.status));
    }
  }
  const saveButton = document.getElementById("save-grade");
  if (saveButton) saveButton.addEventListener("click", saveGrade);

  // Two runs side by side: the choice is posted with the sha256 of the two answers shown.
  const pairBox = document.getElementById("pair");
  async function choose(choice) {
    alertBox.hidden = true;
    say("saving…");
    const d = pairBox.dataset;
    let res;
    try {
      res = await fetch("/api/pair", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Studio-CSRF": csrf },
        body: JSON.stringify({ a: d.a, b: d.b, id: d.id, reviewer: d.reviewer, choice: choice,
          shown: { answer_a_sha256: d.answerASha256, answer_b_sha256: d.answerBSha256 } }),
      });
    } catch (e) {
      say(""); fail("not saved: the studio did not answer (is `evalkit serve-studio` still running?)"); return;
    }
    const data = await res.json().catch(function () { return {}; });
    if (res.status === 200) {
      say("saved");
      const next = document.getElementById("next-link");
      if (next) location.assign(next.href); else location.reload();
    } else if (res.status === 409 && data.conflict) {
      say("");
      document.getElementById("conflict-current").textContent = JSON.stringify(data.current, null, 2);
      document.getElementById("conflict").hidden = false;
      document.getElementById("conflict-reload").focus();
    } else {
      say(""); fail("not saved: " + (data.error || res.status));
    }
  }
  document.querySelectorAll("button[data-choose]").forEach(function (b) {
    b.addEventListener("click", function () { choose(b.dataset.choose); });
  });

  document.addEventListener("keydown", function (ev) {
    const t = ev.target;
    if (t && t.tagName === "BUTTON" && (ev.key === "Enter" || ev.key === " ")) return;  // the button's own click
    if (t && (t.tagName === "TEXTAREA" || (t.tagName === "INPUT" && t.type !== "radio" && t.type !== "checkbox") || t.tagName === "SELECT")) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const key = ev.key;
    if (key === "?") { const k = document.getElementById("keys"); k.hidden = !k.hidden; return; }
    if (rows.length) {
      if (key === "j") select(selected + 1);
      else if (key === "k") select(selected - 1);
      else if (key === "Enter" && selected >= 0) rows[selected].querySelector("a").click();
      else if (key === "x" && selected >= 0) {
        const c = rows[selected].querySelector("input[data-pick]");
        if (c) { c.checked = !c.checked; countPicked(); }
      }
      return;
    }
    if (gradeBox) {
      if (/^[0-5]$/.test(key)) {
        const r = document.querySelector('input[name="' + active + '"][value="' + key + '"]');
        r.checked = true;
        r.focus();
        if (active === "groundedness") active = "correctness";
      } else if (key === "Enter") { ev.preventDefault(); saveGrade(); }
      else if (key === "j" || key === "k") {
        const a = document.getElementById(key === "j" ? "next-link" : "prev-link");
        if (a) a.click();
      }
      return;
    }
    if (pairBox) {
      if (key === "j" || key === "k") {
        const a = document.getElementById(key === "j" ? "next-link" : "prev-link");
        if (a) a.click();
        return;
      }
      const b = document.querySelector('button[data-choose][data-key="' + CSS.escape(key) + '"]');
      if (b) { ev.preventDefault(); b.click(); }
      return;
    }
    if (candidate) {
      if (key === "j") { const a = document.getElementById("next-link"); if (a) a.click(); return; }
      const b = document.querySelector('button[data-key="' + CSS.escape(key) + '"]');
      if (b) { ev.preventDefault(); b.click(); }
      return;
    }
    if (!box) return;
    if (key === "j" || key === "k") {
      const a = document.getElementById(key === "j" ? "next-link" : "prev-link");
      if (a) a.click();
    } else if (key === "f" && facts) { ev.preventDefault(); facts.focus(); }
    else if (key === "/") { const q = document.getElementById("q"); if (q) { ev.preventDefault(); q.focus(); } }
    else {
      const button = document.querySelector('button[data-key="' + CSS.escape(key) + '"]');
      if (button) { ev.preventDefault(); button.click(); }
    }
  });
})();
