/* A lesson: the presenter's page shares where it is; followers' pages show the same step as it changes.
 *
 * Presenter: presenting mode (explorer.js, DRE.present) opens a lesson on the server (POST
 * lesson/start; a reloaded page goes on with the key it kept) and a panel at the top with the follow
 * link, its QR code and how many follow. Each step is sent as the presenter's position (POST
 * lesson/CODE/position): the view's runs, how to open them, the decision shown, and whether it is
 * asked or revealed. With "Ask the class first", a decision that has a question (data-ask on its
 * item, written by the server from the trace) is shown first as that question, its outcome hidden;
 * → reveals it, the next → moves on, and the presenter's panel shows the class's answers meanwhile.
 *
 * Follower (?follow=CODE): one server-sent-events stream (lesson/CODE/events) brings each position;
 * the page opens the same runs in its Run view (through the view's own link request, as a case link
 * does) and shows the same decision in presenting mode. Stepping on one's own (keys, the bar's
 * buttons) leaves the presenter's position; Rejoin goes back to it. An asked decision shows its
 * question with one button per answer.
 *
 * Everything a step shows is in the view the server drew from the stored traces: nothing is computed
 * here but where the presenter is. */
(function () {
  "use strict";
  var DRE = (window.DRE = window.DRE || {});
  if (DRE.lesson) return;
  var NEXT = ["ArrowRight", "PageDown", " ", "n", "N"];
  var PREV = ["ArrowLeft", "PageUp", "p", "P"];
  var STORE = "dre-lesson";
  var L = (DRE.lesson = {
    role: null,          // "presenter" | "follower" | null
    code: null, key: null, link: null, voter: null, source: null,
    state: null,         // the last position the server sent
    detached: false,     // a follower stepping on their own
    askFirst: false,     // the presenter asks each decision that has a question before showing it
    asking: false, revealed: true,
    revealedSteps: {},   // presenter: questions already revealed (going back shows them revealed)
    answers: {},         // follower: what this page answered, per question
    sent: "", opening: null, timer: null, panel: null
  });

  function url(path) { return new URL(path, window.location.href).toString(); }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function post(path, body) {
    return fetch(url(path), {
      method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (data) {
        if (!r.ok) throw new Error((data && data.error) || ("the server answered " + r.status));
        return data;
      });
    });
  }

  /* ---- The view on the page and the decision shown (the same rules as explorer.js's presenting) ---- */
  function shownView() {
    var views = document.querySelectorAll("#run-view, #history-view, #evaluations-view");
    for (var i = 0; i < views.length; i++) {
      if (views[i].offsetParent !== null && views[i].querySelector(".dre-decision")) return views[i];
    }
    return null;
  }

  function runsOf(view) {
    return view ? Array.prototype.map.call(view.querySelectorAll(".dre-run[data-run]"), function (r) {
      return r.getAttribute("data-run");
    }) : [];
  }

  function items(view) { return view ? Array.prototype.slice.call(view.querySelectorAll("li.dre-decision")) : []; }

  function presenterBar() { return document.getElementById("dre-presenter"); }

  function currentIndex() {
    var bar = presenterBar();
    var i = bar ? parseInt(bar.getAttribute("data-index"), 10) : NaN;
    return isNaN(i) ? -1 : i;
  }

  function presenting() { return document.body.classList.contains("dre-presenting"); }

  /* How a follower's page opens what the view shows: its link line's address, else the run itself. */
  function viewSpec(view, runs) {
    var link = view.querySelector(".dre-linkline a.dre-link");
    if (link) {
      var params = new URLSearchParams((link.getAttribute("href") || "").replace(/^[^?]*\?/, ""));
      if (params.get("compare")) return { compare: params.get("compare") };
      if (params.get("run")) return { run: params.get("run") };
    }
    return runs.length ? (runs.length === 1 ? { run: runs[0] } : { compare: runs.join(",") }) : {};
  }

  function question(item) {
    if (!item || !item.hasAttribute("data-ask")) return null;
    return { text: item.getAttribute("data-ask"), answer: item.getAttribute("data-answer") || "",
             choices: (item.getAttribute("data-choices") || "").split(",").filter(Boolean) };
  }

  /* While a decision is asked, its outcome is hidden: the span (or retrieval card) it is about is
   * marked instead of the token that fired, and its marks are hidden until it is revealed. */
  function markAsked(view, item, hidden) {
    document.querySelectorAll(".dre-asked").forEach(function (n) { n.classList.remove("dre-asked"); });
    document.body.classList.toggle("dre-asking", !!hidden);
    if (!hidden || !view || !item) return;
    var run = item.closest(".dre-run");
    var target = null;
    try { target = run ? run.querySelector(item.getAttribute("data-target")) : null; } catch (err) { target = null; }
    if (!target) return;
    var around = target.closest("[data-span]") || target;
    around.classList.add("dre-asked");
  }

  /* ---- The panel at the top ---- */
  function panel() {
    if (L.panel && L.panel.isConnected) return L.panel;
    var node = el("div", { id: "dre-lesson", "class": "dre-lesson", role: "region", "aria-label": "Lesson" });
    node.appendChild(el("div", { "class": "dre-ls-line" }));
    node.appendChild(el("div", { "class": "dre-ls-question", "aria-live": "polite" }));
    node.addEventListener("click", onPanelClick);
    // the panel's height, for the presenting bar docked at the right to start below it (lesson.css)
    if (window.ResizeObserver) {
      new ResizeObserver(function () {
        document.documentElement.style.setProperty("--dre-lesson-h", (node.hidden ? 0 : node.offsetHeight) + "px");
      }).observe(node);
    }
    node.addEventListener("change", function (e) {
      if (e.target && e.target.hasAttribute("data-askfirst")) {
        L.askFirst = e.target.checked;
        try { sessionStorage.setItem(STORE + "-ask", L.askFirst ? "1" : "0"); } catch (err) { /* private mode */ }
        L.lastStep = null;
        sync();
      }
    });
    document.body.appendChild(node);
    L.panel = node;
    return node;
  }

  function place() {
    var node = L.panel;
    var shown = node && !node.hidden;
    document.body.classList.toggle("dre-in-lesson", !!shown);
    document.body.style.paddingTop = shown ? node.offsetHeight + "px" : "";
  }

  function tallyText(state) {
    if (!state || !state.tally) return "";
    return state.choices.map(function (c) { return c + " " + (state.tally[c] || 0); }).join(" · ");
  }

  function drawPresenter() {
    var node = panel();
    node.hidden = !presenting();
    var line = node.querySelector(".dre-ls-line");
    line.textContent = "";
    if (!L.code) {
      line.appendChild(el("span", {}, L.error ? "No follow link: " + L.error : "Opening the lesson …"));
    } else {
      var follow = el("span", {}, "Follow on your device: ");
      follow.appendChild(el("a", { href: L.link, "class": "dre-ls-link", target: "_blank", rel: "noopener" }, L.link));
      follow.appendChild(document.createTextNode(" · code "));
      follow.appendChild(el("b", { "class": "dre-ls-code" }, L.code));
      line.appendChild(follow);
      line.appendChild(el("button", { type: "button", "data-qr": "1", "aria-haspopup": "dialog" }, "QR code"));
      var count = L.state && typeof L.state.followers === "number" ? L.state.followers : 0;
      line.appendChild(el("span", { "class": "dre-ls-count" }, count + " following"));
      var label = el("label", { "class": "dre-ls-ask" });
      var box = el("input", { type: "checkbox", "data-askfirst": "1" });
      box.checked = L.askFirst;
      label.appendChild(box);
      label.appendChild(document.createTextNode(" Ask the class first"));
      line.appendChild(label);
      if (!L.reachable) {
        line.appendChild(el("span", { "class": "dre-ls-warn" }, "This address names this computer only: open the " +
          "page at the server's network address so that other devices can follow."));
      }
    }
    var q = node.querySelector(".dre-ls-question");
    q.textContent = "";
    var item = items(shownView())[currentIndex()];
    var asked = question(item);
    if (asked && L.asking) {
      q.appendChild(el("p", { "class": "dre-ls-ask-text" }, asked.text));
      var state = L.state || {};
      var answers = typeof state.answers === "number" ? state.answers : 0;
      var counts = tallyText(state);
      if (!L.revealed) {
        q.appendChild(el("p", { "class": "dre-ls-tally" }, answers + " answer(s)" + (counts ? ": " + counts : "") +
          ". Press → to reveal."));
      } else {
        q.appendChild(el("p", { "class": "dre-ls-tally" }, "Answer: " + asked.answer + (counts ? " (the class: " +
          counts + ")" : "") + "."));
      }
    }
    place();
  }

  function drawFollower() {
    var node = panel();
    node.hidden = false;
    var state = L.state;
    var line = node.querySelector(".dre-ls-line");
    line.textContent = "";
    if (L.ended) {
      line.appendChild(el("span", {}, L.ended));
    } else if (!state || !state.runs || !state.runs.length) {
      line.appendChild(el("span", {}, "Following lesson " + L.code + ": waiting for the presenter to show a run …"));
    } else {
      line.appendChild(el("span", { "class": "dre-ls-where" }, (L.detached ? "On your own. The presenter is at " :
        "Following the presenter: ") + "decision " + (state.step + 1) + " of " + state.total + "."));
      if (L.detached) line.appendChild(el("button", { type: "button", "data-rejoin": "1" }, "Rejoin"));
    }
    var q = node.querySelector(".dre-ls-question");
    q.textContent = "";
    if (state && state.asking && !L.detached) {
      var item = items(shownView())[state.step];
      var asked = question(item);
      var mine = L.answers[askKey(state)];
      if (asked) {
        q.appendChild(el("p", { "class": "dre-ls-ask-text" }, asked.text));
        if (!state.revealed) {
          var row = el("div", { "class": "dre-ls-choices", role: "group", "aria-label": "your answer" });
          state.choices.forEach(function (c) {
            var b = el("button", { type: "button", "data-choice": c, "aria-pressed": mine === c ? "true" : "false" }, c);
            row.appendChild(b);
          });
          q.appendChild(row);
          if (mine) q.appendChild(el("p", { "class": "dre-ls-tally" }, "You answered: " + mine + "."));
        } else {
          var right = mine ? (mine === asked.answer ? " You said " + mine + ": right." : " You said " + mine + ".") : "";
          q.appendChild(el("p", { "class": "dre-ls-tally" }, "Answer: " + asked.answer + "." +
            (state.tally ? " The class: " + tallyText(state) + "." : "") + right));
        }
      }
    }
    place();
  }

  function askKey(state) { return (state.runs || []).join(",") + "#" + state.step; }

  function onPanelClick(e) {
    var b = e.target.closest ? e.target.closest("button") : null;
    if (!b) return;
    if (b.hasAttribute("data-qr")) { showQr(); return; }
    if (b.hasAttribute("data-rejoin")) { rejoin(); return; }
    if (b.hasAttribute("data-choice") && L.state) {
      var state = L.state, choice = b.getAttribute("data-choice");
      post("lesson/" + L.code + "/answer", { voter: L.voter, step: state.step, choice: choice }).then(function () {
        L.answers[askKey(state)] = choice;
        drawFollower();
      }, function (err) { L.ended = null; flash(err.message); });
    }
  }

  function flash(text) {
    var q = panel().querySelector(".dre-ls-question");
    q.appendChild(el("p", { "class": "dre-ls-error", role: "alert" }, text));
    place();
  }

  function showQr() {
    if (!L.qr) return;
    var old = document.getElementById("dre-lesson-qr");
    if (old) { old.remove(); return; }
    var box = el("div", { id: "dre-lesson-qr", "class": "dre-lesson-qr", role: "dialog", "aria-label": "Follow link" });
    box.appendChild(el("img", { src: L.qr, alt: "QR code of the follow link " + L.link }));
    box.appendChild(el("p", {}, L.link));
    var close = el("button", { type: "button" }, "Close");
    close.addEventListener("click", function () { box.remove(); });
    box.appendChild(close);
    document.body.appendChild(box);
    close.focus();
  }

  /* ---- Presenter ---- */
  function startLesson() {
    if (L.starting || L.code) return;
    L.starting = true;
    var kept = {};
    try { kept = JSON.parse(sessionStorage.getItem(STORE) || "{}") || {}; } catch (err) { kept = {}; }
    var page = window.location.origin + window.location.pathname;
    post("lesson/start", { key: kept.key, code: kept.code, page: page }).then(function (answer) {
      L.code = answer.code; L.key = answer.key; L.link = answer.link; L.qr = answer.qr;
      L.reachable = answer.reachable; L.error = null;
      try { sessionStorage.setItem(STORE, JSON.stringify({ code: L.code, key: L.key })); } catch (err) { /* ok */ }
      listen("lesson/" + L.code + "/events?key=" + encodeURIComponent(L.key));
      L.sent = "";
      sync();
    }, function (err) {
      L.error = err.message;
      drawPresenter();
    }).then(function () { L.starting = false; });
  }

  /* The presenter's position from the page; sent when it changed. */
  function sync() {
    if (L.role !== "presenter") return;
    if (!presenting()) { drawPresenter(); place(); return; }
    if (!L.code) { startLesson(); drawPresenter(); return; }
    var view = shownView();
    var runs = runsOf(view);
    var list = items(view);
    var index = Math.max(0, Math.min(list.length - 1, currentIndex()));
    var item = list[index];
    var here = runs.join(",") + "#" + index;
    var asked = L.askFirst ? question(item) : null;
    if (here !== L.lastStep) {  // a new decision: asked first when it has a question
      L.lastStep = here;
      L.asking = !!asked;
      L.revealed = !asked || !!L.revealedSteps[here];
    }
    if (!asked) { L.asking = false; L.revealed = true; }
    if (L.revealed && L.asking) L.revealedSteps[here] = true;
    markAsked(view, item, L.asking && !L.revealed);
    var position = {
      runs: runs, view: view ? viewSpec(view, runs) : {}, step: list.length ? index : 0, total: list.length,
      kind: item ? (item.getAttribute("data-kind") || "") : "", asking: L.asking, revealed: L.revealed,
      choices: L.asking && asked ? asked.choices : []
    };
    var text = JSON.stringify(position);
    drawPresenter();
    if (text === L.sent) return;
    L.sent = text;
    post("lesson/" + L.code + "/position", { key: L.key, position: position }).then(function (state) {
      L.state = Object.assign({}, L.state || {}, state);
      drawPresenter();
    }, function (err) {
      if (/no lesson/.test(err.message)) {  // the server restarted: a new lesson
        L.code = null;
        try { sessionStorage.removeItem(STORE); } catch (e) { /* ok */ }
        startLesson();
      } else {
        L.sent = "";
        flash(err.message);
      }
    });
  }

  function schedule() {
    if (L.timer) return;
    L.timer = setTimeout(function () { L.timer = null; sync(); }, 15);
  }

  function watchPresenter() {
    var seen = null;
    new MutationObserver(function () {
      var bar = presenterBar();
      if (bar && bar !== seen) {
        seen = bar;
        new MutationObserver(schedule).observe(bar, { attributes: true, childList: true, subtree: true,
                                                      characterData: true });
      }
      schedule();
    }).observe(document.body, { attributes: true, attributeFilter: ["class"] });
  }

  /* ---- Follower ---- */
  function listen(path) {
    if (L.source) L.source.close();
    var source = new EventSource(url(path), { withCredentials: true });
    L.source = source;
    source.addEventListener("hello", function (e) {
      try { L.voter = JSON.parse(e.data).voter; } catch (err) { L.voter = null; }
      L.ended = null;
    });
    source.onmessage = function (e) {
      var state;
      try { state = JSON.parse(e.data); } catch (err) { return; }
      L.state = state;
      if (L.role === "follower") apply();
      else drawPresenter();
    };
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED && L.role === "follower") {
        L.ended = "Lesson " + L.code + " is not on this server (it has ended, or the code is mistyped).";
        drawFollower();
      }
    };
  }

  function ensureRunTab() {
    var tab = document.getElementById("tab-run-button");
    if (tab && tab.getAttribute("aria-selected") !== "true") tab.click();
  }

  function same(a, b) { return a.length === b.length && a.every(function (x, i) { return x === b[i]; }); }

  function step(delta) {
    L.applying = true;
    try { DRE.step(delta); } finally { L.applying = false; }
  }

  /* Show the presenter's position: open its runs if this view shows others, then its decision. */
  function apply() {
    var state = L.state;
    drawFollower();
    if (!state || L.detached || !state.runs || !state.runs.length || !DRE.step) return;
    ensureRunTab();
    var view = document.getElementById("run-view");
    var send = DRE.senders && DRE.senders["run:link"];
    if (!view || !send) { setTimeout(apply, 200); return; }
    if (!same(runsOf(view), state.runs)) {
      var wanted = JSON.stringify(state.view);
      if (L.opening !== wanted) {
        L.opening = wanted;
        L.openedAt = Date.now();
        send(Object.assign({ nonce: Date.now() }, state.view));
      } else if (Date.now() - L.openedAt > 8000) {
        L.opening = null;  // asked again below if the view never came
      }
      setTimeout(function () { if (L.state === state) apply(); }, 100);
      return;
    }
    L.opening = null;
    if (!presenting()) {
      L.applying = true;
      try { DRE.present(true); } finally { L.applying = false; }
    }
    var at = currentIndex();
    if (at !== state.step) step(state.step - at);
    var item = items(shownView())[state.step];
    markAsked(shownView(), item, state.asking && !state.revealed);
    drawFollower();
  }

  function rejoin() {
    L.detached = false;
    apply();
    var bar = presenterBar();
    var next = bar && bar.querySelector("[data-step='1']");
    if (next) next.focus();
  }

  function leave() {
    if (L.detached) return;
    L.detached = true;
    markAsked(null, null, false);
    drawFollower();
  }

  /* ---- Keys and the bar's buttons, seen before explorer.js acts on them ---- */
  function inControl(t) { return t && t.closest && t.closest("input, select, textarea, [contenteditable=true], .dre-forkmenu"); }

  document.addEventListener("keydown", function (e) {
    var qr = document.getElementById("dre-lesson-qr");
    if (qr && e.key === "Escape") { e.preventDefault(); e.stopImmediatePropagation(); qr.remove(); return; }
    if (!presenting() || inControl(e.target)) return;
    if (L.role === "presenter" && L.asking && !L.revealed && NEXT.indexOf(e.key) >= 0) {
      e.preventDefault();
      e.stopImmediatePropagation();
      reveal();
    } else if (L.role === "follower" && (NEXT.indexOf(e.key) >= 0 || PREV.indexOf(e.key) >= 0 || e.key === "Escape")) {
      leave();
    }
  }, true);

  document.addEventListener("click", function (e) {
    var b = e.target && e.target.closest ? e.target.closest("#dre-presenter button") : null;
    if (!b) return;
    if (L.role === "presenter" && L.asking && !L.revealed && b.getAttribute("data-step") === "1") {
      e.preventDefault();
      e.stopImmediatePropagation();
      reveal();
    } else if (L.role === "follower") {
      leave();
    }
  }, true);

  function reveal() {
    L.revealed = true;
    L.revealedSteps[L.lastStep] = true;
    sync();
  }

  /* ---- Start ---- */
  function init() {
    var params = new URLSearchParams(window.location.search);
    var code = (params.get("follow") || "").trim().toUpperCase();
    if (code) {
      L.role = "follower";
      L.code = code;
      document.body.classList.add("dre-following");
      drawFollower();
      listen("lesson/" + encodeURIComponent(code) + "/events");
      // the view is drawn again (another run opened, a what-if): show the presenter's step in it again
      var again = function () { if (!L.detached && L.state) setTimeout(apply, 0); };
      var tries = 0;
      (function watchView() {
        var view = document.getElementById("run-view");
        if (!view) { if (tries++ < 200) setTimeout(watchView, 100); return; }
        new MutationObserver(function () { if (!L.applying && !L.opening) again(); })
          .observe(view, { childList: true, subtree: false });
      })();
      return;
    }
    L.role = "presenter";
    try { L.askFirst = sessionStorage.getItem(STORE + "-ask") === "1" || params.get("ask") === "1"; } catch (err) {
      L.askFirst = params.get("ask") === "1";
    }
    watchPresenter();
    if (presenting()) sync();
  }

  window.addEventListener("resize", place);
  if (document.body) init();
  else document.addEventListener("DOMContentLoaded", init);
})();
