/* Draws the charts of the explorer's views (in the app and in the offline report).
 * A chart is a <div class="dre-plot" data-fig="{plotly json}">; the JSON is data, never code.
 * Charts are drawn once their box has a width (a hidden tab has none) and follow its size. */
(function () {
  "use strict";
  var DRE = (window.DRE = window.DRE || {});
  var observer = null;

  /* One toolbar button (save as PNG) per chart: a page of charts is not a maze of tab stops. The chart's
   * text alternative is its container's aria-label, written by the server from the same trace. */
  function draw(div) {
    if (div.getAttribute("data-done") || !div.offsetWidth || !div.hasAttribute("data-fig")) return;
    var fig;
    try {
      fig = JSON.parse(div.getAttribute("data-fig"));
    } catch (err) {
      fig = null;
    }
    if (!fig || typeof fig !== "object") {
      div.textContent = "chart data unreadable";
      div.setAttribute("data-done", "error");
      return;
    }
    div.setAttribute("data-done", "1");
    window.Plotly.newPlot(div, fig.data || [], fig.layout || {}, {
      displaylogo: false,
      responsive: true,
      modeBarButtons: [["toImage"]],
    });
  }

  function watchSize(div) {
    if (!window.ResizeObserver) return;
    if (!observer) {
      observer = new ResizeObserver(function (entries) {
        entries.forEach(function (entry) {
          var el = entry.target;
          if (!el.isConnected) { observer.unobserve(el); return; }
          if (!el.getAttribute("data-done")) draw(el);
          else if (el.offsetWidth && window.Plotly) window.Plotly.Plots.resize(el);
        });
      });
    }
    observer.observe(div);
  }

  /* A panel title's "?" opens its paragraph in the app's "How to read" tab (absent in a report). The
   * paragraph gets the focus; "Back to the run" (DRE.backFromHelp) returns to the tab and the "?" that
   * was followed. Glossary links inside the help tab move the focus the same way. */
  function reveal(anchor, then) {
    var tries = 0;
    (function find() {
      var target = document.getElementById(anchor);
      if (target && target.offsetParent !== null) {
        var item = target.closest("li, p, h2, h3, h4") || target;
        var show = function () {
          target.scrollIntoView({ block: "start" });
          if (target.getBoundingClientRect().top < 8) window.scrollBy(0, -8);  // a little room above it
        };
        item.setAttribute("tabindex", "-1");
        show();
        item.focus({ preventScroll: true });
        item.classList.add("dre-flash");
        // the tab's text may still be laid out when it first shows: scroll again once it has settled
        setTimeout(function () {
          var r = target.getBoundingClientRect();
          if (r.top < 0 || r.top >= window.innerHeight) show();
        }, 200);
        setTimeout(function () { item.classList.remove("dre-flash"); }, 2000);
        if (then) then(item);
      } else if (tries++ < 40) {
        setTimeout(find, 50);
      }
    })();
  }

  DRE.openHelp = function (anchor, link) {
    var tab = document.querySelector("#tab-help-button");
    if (!tab) return false;
    var from = document.querySelector("#tabs [role=tab][aria-selected=true]");
    if (from && from !== tab) DRE.helpReturn = { tab: from.id, link: link || null, anchor: anchor };
    tab.click();
    reveal(anchor);
    return true;
  };

  DRE.backFromHelp = function () {
    var back = DRE.helpReturn || { tab: "tab-run-button" };
    var tab = document.getElementById(back.tab) || document.getElementById("tab-run-button");
    if (tab) tab.click();
    var tries = 0;
    (function focusLink() {
      var link = back.link && back.link.isConnected && back.link.offsetParent !== null ? back.link : null;
      if (!link && back.anchor) {
        link = Array.prototype.find.call(document.querySelectorAll('a.dre-help[data-help="' + back.anchor + '"]'),
                                         function (a) { return a.offsetParent !== null; }) || null;
      }
      if (link) { link.focus(); link.scrollIntoView({ block: "center" }); }
      else if (tries++ < 40) setTimeout(focusLink, 50);
    })();
  };

  /* The case-study links and the view's own links open in place (a click with a modifier, or a new
   * tab, loads the page at that address, which opens the same view); the address bar follows. */
  function followLink(link) {
    var send = DRE.senders["run:link"];
    if (!send) return false;
    var message = null;
    if (link.hasAttribute("data-case")) message = { "case": link.getAttribute("data-case") };
    else if (link.hasAttribute("data-compare")) message = { compare: link.getAttribute("data-compare") };
    if (!message) return false;
    send(Object.assign({ nonce: Date.now() }, message));
    try { window.history.replaceState(null, "", link.getAttribute("href")); } catch (err) { /* a file page */ }
    markLinked();
    document.querySelectorAll(".dre-cases a[aria-current]").forEach(function (a) { a.removeAttribute("aria-current"); });
    if (link.closest(".dre-cases")) link.setAttribute("aria-current", "true");
    return true;
  }

  /* A "?" followed before this script was loaded left its anchor in the address: open it now. */
  function helpFromAddress(tries) {
    var hash = window.location.hash || "";
    if (hash.indexOf("#help-") !== 0) return;
    if (!DRE.openHelp(hash.slice(1)) && tries < 100) setTimeout(function () { helpFromAddress(tries + 1); }, 100);
  }

  if (!DRE.helpLinks) {
    DRE.helpLinks = true;
    helpFromAddress(0);
    window.addEventListener("hashchange", function () { helpFromAddress(0); });
    document.addEventListener("click", function (event) {
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
      var node = event.target && event.target.closest ? event.target : null;
      if (!node) return;
      var link = node.closest("a.dre-help, a.dre-term-link");
      if (link && DRE.openHelp(link.getAttribute("data-help"), link)) { event.preventDefault(); return; }
      var term = node.closest("#tab-help a[href^='#help-']");
      if (term) { event.preventDefault(); reveal(term.getAttribute("href").slice(1)); return; }
      var open = node.closest("a[data-case], a[data-compare]");
      if (open && followLink(open)) event.preventDefault();
    });
  }

  /* A recorded case study's caption links to the one thing to look at in the run shown below it.
   * The link's data-look is data, never code: a JSON list of [attribute, value] steps from the run's
   * <article data-run> down to the element (a token, a passage, a filter verdict, a re-ranking).
   * The element is scrolled into view, the <details> around it opened, and highlighted (and
   * focused) until the next look; a run that is not on the page leaves the link marked missing. */
  DRE.look = function (link) {
    var path;
    try {
      path = JSON.parse(link.getAttribute("data-look") || "[]");
    } catch (err) {
      return false;
    }
    if (!Array.isArray(path) || !path.length) return false;
    var selector = path.map(function (step) {
      var name = String(step[0]).replace(/[^a-z0-9-]/gi, "");
      return "[" + name + '="' + CSS.escape(String(step[1])) + '"]';
    }).join(" ");
    var target = document.querySelector(selector);
    link.classList.toggle("dre-look-missing", !target);
    if (!target) {
      link.title = "This recorded run is not shown now: open it from its case-study link.";
      return false;
    }
    document.querySelectorAll(".dre-look-target").forEach(function (el) { el.classList.remove("dre-look-target"); });
    for (var d = target.closest("details"); d; d = d.parentElement ? d.parentElement.closest("details") : null) {
      d.open = true;
    }
    var own = target.querySelector(":scope > details");  // a passage: show its text too
    if (own) own.open = true;
    target.classList.add("dre-look-target");
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.scrollIntoView({ block: "center", behavior: "smooth" });
    target.focus({ preventScroll: true });
    return true;
  };

  if (!DRE.lookLinks) {
    DRE.lookLinks = true;
    document.addEventListener("click", function (event) {
      var link = event.target && event.target.closest ? event.target.closest("a.dre-look") : null;
      if (link) {
        event.preventDefault();
        DRE.look(link);
      }
    });
  }

  /* ---- The page's words (assets' .dre-term, written by explorer/ui/views/terms.py) ----
   * A word shows its plain sentence and glossary link on hover and on focus (Tab, or a tap: focus follows
   * a tap on a focusable word). The box is placed here, fixed to the screen: below the word, or above it
   * when there is no room below (the presenting bar), and never past either side, so it stays on a
   * phone's screen and no panel's scrolling cuts it off. Escape, or a tap on the sentence, closes it. */
  function placeTip(termNode) {
    var tip = termNode.querySelector(".dre-term-tip");
    var word = termNode.querySelector(".dre-term-word");
    if (!tip || !word) return;
    var margin = 8, r = word.getBoundingClientRect();
    var width = Math.min(320, window.innerWidth - 2 * margin);
    tip.style.width = width + "px";
    tip.style.left = Math.max(margin, Math.min(r.left, window.innerWidth - width - margin)) + "px";
    tip.style.top = "0px";
    var h = tip.offsetHeight;
    var below = r.bottom + h + margin <= window.innerHeight || r.top - h < margin;
    var top = below ? r.bottom : r.top - h;
    tip.style.top = Math.max(margin, Math.min(top, window.innerHeight - h - margin)) + "px";
  }

  if (!DRE.termTips) {
    DRE.termTips = true;
    var onTerm = function (event) {
      var w = event.target && event.target.closest ? event.target.closest(".dre-term-word") : null;
      var t = w ? w.closest(".dre-term") : null;
      if (t) { t.classList.remove("dre-term-closed"); placeTip(t); }
    };
    document.addEventListener("mouseover", onTerm);
    window.addEventListener("scroll", function () {  // an open sentence follows its word
      var open = document.querySelector(".dre-term:focus-within, .dre-term:hover");
      if (open) placeTip(open);
    }, true);
    document.addEventListener("focusin", onTerm);
    document.addEventListener("click", function (event) {
      var node = event.target && event.target.closest ? event.target : null;
      if (!node) return;
      var w = node.closest(".dre-term-word");
      if (w && document.activeElement !== w) w.focus();  // a tap opens the word's sentence on every browser
      var tip = !node.closest("a") && node.closest(".dre-term-tip");
      if (tip) {  // a tap on the sentence closes it (on a phone it may cover the next word)
        var t = tip.closest(".dre-term");
        t.classList.add("dre-term-closed");
        var word = t.querySelector(".dre-term-word");
        if (word && document.activeElement === word) word.blur();
      }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key !== "Escape") return;
      var t = document.activeElement && document.activeElement.closest && document.activeElement.closest(".dre-term");
      if (!t || t.classList.contains("dre-term-closed")) return;  // a second Escape is the page's (presenting)
      t.classList.add("dre-term-closed");
      event.stopImmediatePropagation();
    }, true);
  }

  /* ---- Presenting: large type, controls hidden, the keyboard steps from one decision to the next ----
   * Each run's "Decisions in words" list names, per decision, the element it is about; the bar at the
   * bottom shows the current decision's explanation and the element is highlighted. Right arrow, Page
   * Down, Space or N: next; Left, Page Up or P: previous; Escape: stop presenting. Keys typed into a
   * control (the what-if slider) are the control's. ?present=1 (and an export for slides) starts in it. */
  var presenting = { index: -1 };

  function shownView() {
    var views = document.querySelectorAll("#run-view, #history-view, #evaluations-view");
    for (var i = 0; i < views.length; i++) {
      if (views[i].offsetParent !== null && views[i].querySelector(".dre-decision")) return views[i];
    }
    return document.querySelector(".dre-report") || document.body;
  }

  function bar() {
    var node = document.getElementById("dre-presenter");
    if (node) return node;
    node = el("div", { id: "dre-presenter", "class": "dre-presenter", role: "region", "aria-label": "Presenting" });
    var prev = el("button", { type: "button", "data-step": "-1", "aria-label": "previous decision" }, "◀");
    var text = el("p", { "aria-live": "polite" });
    var next = el("button", { type: "button", "data-step": "1", "aria-label": "next decision" }, "▶");
    var stop = el("button", { type: "button", "data-stop": "1" }, "Stop presenting");
    [prev, text, next, stop].forEach(function (n) { node.appendChild(n); });
    node.addEventListener("click", function (e) {
      var b = e.target.closest("button");
      if (!b) return;
      if (b.hasAttribute("data-stop")) DRE.present(false);
      else DRE.step(parseInt(b.getAttribute("data-step"), 10));
    });
    document.body.appendChild(node);
    return node;
  }

  DRE.step = function (delta, quiet) {
    if (!document.body.classList.contains("dre-presenting")) return;
    var view = shownView();
    var items = Array.prototype.slice.call(view.querySelectorAll("li.dre-decision"));
    var node = bar();
    document.querySelectorAll(".dre-current").forEach(function (n) { n.classList.remove("dre-current"); });
    if (!items.length) { node.querySelector("p").textContent = "This view has no decisions to step through."; return; }
    presenting.index = Math.max(0, Math.min(items.length - 1, presenting.index + delta));
    var item = items[presenting.index];
    var run = item.closest(".dre-run");
    var target = null;
    try { target = run ? run.querySelector(item.getAttribute("data-target")) : null; } catch (err) { target = null; }
    var label = run ? (run.querySelector(".dre-title b") || {}).textContent : "";
    var line = node.querySelector("p");
    line.textContent = "Decision " + (presenting.index + 1) + " of " + items.length +
      (label && view.querySelectorAll(".dre-run").length > 1 ? " (" + label + ")" : "") + ": ";
    // the decision's own markup: its words (RIND, θ, span …) explain themselves in the bar as in the list
    Array.prototype.forEach.call(item.childNodes, function (n) { line.appendChild(n.cloneNode(true)); });
    node.setAttribute("data-index", String(presenting.index));
    if (target) {
      var details = target.closest("details");
      if (details) details.open = true;
      target.classList.add("dre-current");
      if (!quiet) target.scrollIntoView({ block: "center" });
    }
    showBar(target, item.getAttribute("data-bar"));
  };

  /* A step about a chart's bar (data-bar: its point number) shows that bar's own hover label; the label of
   * the step before goes. The numbers are the chart's, drawn from the trace. */
  function showBar(chart, point) {
    if (presenting.bar && window.Plotly) {
      try { window.Plotly.Fx.unhover(presenting.bar); } catch (err) { /* a chart redrawn meanwhile */ }
    }
    presenting.bar = null;
    if (!chart || point === null || !window.Plotly || chart.getAttribute("data-done") !== "1") return;
    try {
      window.Plotly.Fx.hover(chart, [{ curveNumber: 0, pointNumber: parseInt(point, 10) }]);
      presenting.bar = chart;
      chart.setAttribute("data-shown-bar", point);
    } catch (err) { /* no such bar: the chart stays highlighted as a whole */ }
  }

  DRE.present = function (on) {
    document.body.classList.toggle("dre-presenting", !!on);
    var node = bar();
    node.hidden = !on;
    if (on) {
      presenting.index = -1;
      DRE.step(1);
      node.querySelector("[data-step='1']").focus();
    } else {
      document.querySelectorAll(".dre-current").forEach(function (n) { n.classList.remove("dre-current"); });
      var toggle = document.getElementById("present-toggle");
      if (toggle) toggle.focus();
    }
  };

  if (!DRE.presentKeys) {
    DRE.presentKeys = true;
    document.addEventListener("keydown", function (e) {
      if (!document.body.classList.contains("dre-presenting")) return;
      var t = e.target;
      if (t && t.closest && t.closest(".dre-forkmenu")) return;
      if (e.key === "Escape") { e.preventDefault(); DRE.present(false); return; }
      if (t && t.closest && t.closest("input, select, textarea, [contenteditable=true]")) return;
      else if (["ArrowRight", "PageDown", " ", "n", "N"].indexOf(e.key) >= 0) { e.preventDefault(); DRE.step(1); }
      else if (["ArrowLeft", "PageUp", "p", "P"].indexOf(e.key) >= 0) { e.preventDefault(); DRE.step(-1); }
    });
  }

  /* A page opened at a run's address (?run=, ?case=, ?compare=) is about that run: on a phone it comes
   * before the form (page.css moves the form below it for body.dre-linked). */
  function markLinked() {
    var linked = false;
    try {
      var q = new URLSearchParams(window.location.search);
      linked = !!(q.get("run") || q.get("case") || q.get("compare"));
    } catch (err) { linked = false; }
    if (linked && document.body) document.body.classList.add("dre-linked");
  }
  if (document.body) markLinked();
  else document.addEventListener("DOMContentLoaded", markLinked);

  /* Each method's checkbox says in one line what the method does (a tooltip, and its accessible description),
   * and carries a "?" word like the captions' terms: its sentence and glossary link on hover, focus and a tap.
   * A click on the "?" or in its box never toggles the checkbox; the labels are watched so that a label
   * drawn again gets its "?" back. */
  function methodWords(tries) {
    var source = document.getElementById("method-words");
    var group = document.getElementById("methods");
    var labels = document.querySelectorAll("#methods label");
    if (!source || !group || !labels.length) {
      if (tries < 100) setTimeout(function () { methodWords(tries + 1); }, 100);
      return;
    }
    var words = {}, marks = {};
    try { words = JSON.parse(source.getAttribute("data-words") || "{}"); } catch (err) { words = {}; }
    try { marks = JSON.parse(source.getAttribute("data-terms") || "{}"); } catch (err) { marks = {}; }
    var dress = function () {
      document.querySelectorAll("#methods label").forEach(function (label) {
        var box = label.querySelector("input");
        var name = box && box.getAttribute("name");
        var line = name && words[name];
        if (!line) return;
        if (label.title !== line) label.title = line;
        if (box.getAttribute("aria-description") !== line) box.setAttribute("aria-description", line);
        if (marks[name] && !label.querySelector(".dre-term")) {
          var holder = document.createElement("span");
          holder.className = "dre-method-term";
          holder.innerHTML = marks[name];  // written by the server from the page's words, escaped there
          label.appendChild(holder);
        }
      });
    };
    dress();
    if (!group.getAttribute("data-dressed")) {
      group.setAttribute("data-dressed", "1");
      new MutationObserver(dress).observe(group, { childList: true, subtree: true });
      group.addEventListener("click", function (event) {
        var node = event.target && event.target.closest ? event.target : null;
        if (node && node.closest(".dre-method-term")) event.preventDefault();  // the box stays as it was
      }, true);
    }
  }
  methodWords(0);

  function startFromAddress() {
    if (DRE.addressRead) return;
    DRE.addressRead = true;
    markLinked();
    var wanted = false;
    try { wanted = new URLSearchParams(window.location.search).get("present") === "1"; } catch (err) { wanted = false; }
    if (wanted || document.body.getAttribute("data-present") === "1") DRE.present(true);
  }

  /* ---- Forks (the app only: a view bound to the server; an offline report has none) ----
   * A token of a finished run's strip, or a retrieval card's "fork" button, opens a small menu of
   * what the server says resolve() accepts there (refused actions show their message). The
   * chosen fork is sent to the server through a hidden component (DRE.senders). Keyboard: Tab to
   * a strip, arrow keys move between tokens, Enter opens the menu, Escape closes it. */
  DRE.senders = DRE.senders || {};
  var menu = null;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /* ---- The view's own controls (the app only): colour signal, what-if θ'. Their values go to the
   * server through the view's hidden component (DRE.senders[prefix + ":view"]); the view comes back
   * drawn again, and the control that was used gets the focus back. */
  function viewControl(event, root, bound) {
    var node = event.target;
    if (!node || !node.classList) return false;
    if (node.classList.contains("dre-theta")) {
      var out = node.parentNode.querySelector("output");
      var value = parseFloat(node.value);
      if (out) out.textContent = isNaN(value) ? node.value : String(Math.round(value * 1000) / 1000);
      if (event.type === "change") {
        var ctl = node.closest(".dre-whatif-ctl");
        DRE.refocus = node.id;
        send(bound, "view", { whatif: { run: ctl.getAttribute("data-run"), theta: value } });
      }
      return true;
    }
    if (node.classList.contains("dre-signal-pick") && event.type === "change") {
      DRE.refocus = node.id;
      send(bound, "view", { signal: node.value });
      return true;
    }
    if (node.classList.contains("dre-whatif-reset") && event.type === "click") {
      var slider = node.parentNode.querySelector(".dre-theta");
      DRE.refocus = slider ? slider.id : null;
      send(bound, "view", { whatif: null });
      return true;
    }
    return false;
  }

  DRE.viewEvent = function (event, root, bound) {
    if (viewControl(event, root, bound)) return;
    if (event.type === "click") DRE.viewClick(event, root, bound);
    else if (event.type === "keydown") DRE.viewKey(event, root, bound);
  };

  /* Run follows the streaming output: the view is scrolled into sight when Run is pressed and the
   * token being written is kept in sight until the run ends (or the reader scrolls away). */
  DRE.follow = function (prefix) {
    DRE.following = prefix || "run";
    var view = document.getElementById(DRE.following + "-view");
    if (view) view.scrollIntoView({ block: "start" });
    var stop = function () { DRE.following = null; window.removeEventListener("wheel", stop); };
    window.addEventListener("wheel", stop, { passive: true });
  };

  function afterDraw(root, bound) {
    if (root.querySelector(".dre-run")) {
      if (!DRE.addressRead) setTimeout(startFromAddress, 0);
      else if (document.body.classList.contains("dre-presenting")) DRE.step(0, !!DRE.refocus);
    }
    if (DRE.refocus) {
      var again = document.getElementById(DRE.refocus);
      if (again && root.contains(again)) { again.focus(); DRE.refocus = null; }
    }
    if (DRE.following && bound && DRE.following === bound.prefix) {
      var busy = root.querySelector(".dre-root[data-busy='1']");
      var caret = root.querySelector(".dre-caret");
      if (caret) {
        var r = caret.getBoundingClientRect();
        if (r.bottom > window.innerHeight || r.top < 0) caret.scrollIntoView({ block: "center" });
      }
      if (!busy && root.querySelector(".dre-root:not([data-stale])")) DRE.following = null;
    }
  }

  DRE.prepareView = function (root, bound) {
    afterDraw(root, bound);
    if (!bound || !bound.forks || !bound.server) return;
    root.querySelectorAll(".dre-run[data-view=done] .dre-strip").forEach(function (strip) {
      if (strip.getAttribute("tabindex") !== null) return;
      strip.setAttribute("tabindex", "0");
      strip.setAttribute("aria-label", "Output tokens: arrow keys move between tokens, Enter opens the fork menu");
    });
    root.querySelectorAll(".dre-run[data-view=done] .dre-ret[data-retrieval] .dre-ret-head").forEach(function (head) {
      if (head.querySelector(".dre-fork-btn")) return;
      var b = el("button", { type: "button", "class": "dre-fork-btn", "aria-haspopup": "menu",
                             title: "Fork this run at this retrieval" }, "⋔ fork…");
      head.appendChild(b);
    });
  };

  function tokenTarget(node) {
    var tok = node.closest ? node.closest(".tok") : null;
    if (!tok) return null;
    var span = tok.closest(".dre-span"), run = tok.closest(".dre-run");
    if (!span || !run || run.getAttribute("data-view") !== "done" || span.classList.contains("group")) return null;
    var sid = parseInt(span.getAttribute("data-span"), 10), ti = parseInt(tok.getAttribute("data-i"), 10);
    if (isNaN(sid) || sid < 0 || isNaN(ti)) return null;
    return { run: run.getAttribute("data-run"), where: { span: sid, token: ti }, anchor: tok,
             label: "token " + ti + " of span " + sid + " (" + JSON.stringify(tok.textContent) + ")" };
  }

  function retrievalTarget(node) {
    var btn = node.closest ? node.closest(".dre-fork-btn") : null;
    if (!btn) return null;
    var card = btn.closest(".dre-ret"), run = btn.closest(".dre-run");
    if (!card || !run) return null;
    var rid = parseInt(card.getAttribute("data-retrieval"), 10);
    return { run: run.getAttribute("data-run"), where: { retrieval: rid }, anchor: btn, label: "retrieval " + rid };
  }

  DRE.closeForkMenu = function (refocus) {
    if (!menu) return;
    var anchor = menu.anchor;
    menu.node.remove();
    menu = null;
    if (refocus && anchor && anchor.isConnected) anchor.focus();
  };

  function send(bound, name, payload) {
    var fn = DRE.senders[bound.prefix + ":" + name];
    if (fn) fn(Object.assign({ nonce: Date.now() }, payload));
    return !!fn;
  }

  function status(text, error) {
    if (!menu) return;
    var line = menu.node.querySelector(".dre-fm-status");
    line.textContent = text || "";
    line.classList.toggle("dre-error", !!error);
  }

  function fork(bound, target, change) {
    if (send(bound, "fork", { run_id: target.run, at: target.where, change: change })) {
      DRE.closeForkMenu(false);
    } else {
      status("This page cannot fork (reload it).", true);
    }
  }

  function passageItem(p, list) {
    var li = el("li", { "data-id": p.id, "class": "dre-fm-passage" });
    li.appendChild(el("code", {}, p.id));
    li.appendChild(el("span", { "class": "dre-fm-ptitle" }, " " + (p.title || "")));
    [["↑", "move up"], ["↓", "move down"], ["✕", "remove"]].forEach(function (b) {
      var btn = el("button", { type: "button", "class": "dre-fm-small", "aria-label": b[1] + " " + p.id, title: b[1] }, b[0]);
      btn.addEventListener("click", function () {
        if (b[0] === "✕") li.remove();
        else if (b[0] === "↑" && li.previousElementSibling) list.insertBefore(li, li.previousElementSibling);
        else if (b[0] === "↓" && li.nextElementSibling) list.insertBefore(li.nextElementSibling, li);
        btn.focus();
      });
      li.appendChild(btn);
    });
    return li;
  }

  function formFor(action, bound, target) {
    var form = el("div", { "class": "dre-fm-form", "data-kind": action.kind });
    var go = el("button", { type: "button", "class": "dre-fm-go" }, "Fork");
    var collect;
    if (action.needs === "query") {
      var label = action.required ? "Query (required)" : "Query (optional: empty uses the method's own query)";
      var id = "dre-fm-q-" + Date.now();
      form.appendChild(el("label", { "for": id }, label));
      var input = el("input", { id: id, type: "text", "class": "dre-fm-query" });
      input.value = action.query || "";
      input.addEventListener("keydown", function (e) { if (e.key === "Enter") go.click(); });
      form.appendChild(input);
      if (action.message) form.appendChild(el("p", { "class": "dre-fm-why" }, action.message));
      collect = function () {
        var q = input.value.trim();
        if (action.required && !q) { status("Type a query first.", true); return null; }
        return q ? { kind: action.kind, query: q } : { kind: action.kind };
      };
    } else if (action.needs === "params") {
      var inputs = [];
      action.params.forEach(function (p) {
        var pid = "dre-fm-p-" + p.name + "-" + Date.now();
        var row = el("div", { "class": "dre-fm-param" });
        row.appendChild(el("label", { "for": pid, title: p.help || "" }, p.name));
        var box = el("input", { id: pid, type: "number", step: "any", "data-name": p.name });
        box.value = p.value;
        row.appendChild(box);
        form.appendChild(row);
        inputs.push([p, box]);
      });
      form.appendChild(el("p", { "class": "dre-fm-why" }, "Applied from this span on; the text before it is replayed."));
      collect = function () {
        var params = {};
        inputs.forEach(function (pair) {
          if (pair[1].value !== "" && Number(pair[1].value) !== Number(pair[0].value)) params[pair[0].name] = pair[1].value;
        });
        if (!Object.keys(params).length) { status("Change at least one value.", true); return null; }
        return { kind: action.kind, params: params };
      };
    } else if (action.needs === "passages") {
      var list = el("ol", { "class": "dre-fm-passages", "aria-label": "passages the model gets, in order" });
      action.passages.forEach(function (p) { list.appendChild(passageItem(p, list)); });
      form.appendChild(list);
      var sid = "dre-fm-s-" + Date.now();
      form.appendChild(el("label", { "for": sid }, "Add a passage: search the corpus (words or a passage id)"));
      var search = el("input", { id: sid, type: "search", "class": "dre-fm-search" });
      var find = el("button", { type: "button", "class": "dre-fm-find" }, "Search");
      var found = el("ul", { "class": "dre-fm-found", "aria-live": "polite" });
      var run = function () {
        found.textContent = "searching …";
        bound.server.find_passages(target.run, search.value).then(function (answer) {
          found.textContent = "";
          if (answer && answer.error) { found.textContent = answer.error; return; }
          ((answer && answer.passages) || []).forEach(function (p) {
            var li = el("li", {});
            var add = el("button", { type: "button", "class": "dre-fm-add", "data-id": p.id,
                                     "aria-label": "add passage " + p.id }, "+ add");
            add.addEventListener("click", function () {
              if (!list.querySelector('[data-id="' + CSS.escape(p.id) + '"]')) list.appendChild(passageItem(p, list));
              add.disabled = true;
            });
            li.appendChild(add);
            li.appendChild(el("code", {}, " " + p.id + " "));
            li.appendChild(el("b", {}, p.title || ""));
            li.appendChild(el("span", { "class": "dre-fm-ptext" }, " " + (p.text || "")));
            found.appendChild(li);
          });
          if (!found.children.length) found.textContent = "no passage found";
        }, function () { found.textContent = "the search failed"; });
      };
      find.addEventListener("click", run);
      search.addEventListener("keydown", function (e) { if (e.key === "Enter") { e.preventDefault(); run(); } });
      form.appendChild(search);
      form.appendChild(find);
      form.appendChild(found);
      collect = function () {
        var ids = Array.prototype.map.call(list.querySelectorAll("li[data-id]"), function (li) {
          return li.getAttribute("data-id");
        });
        return { kind: action.kind, passages: ids };
      };
    } else {
      collect = function () { return { kind: action.kind }; };
    }
    go.addEventListener("click", function () {
      var change = collect();
      if (change) fork(bound, target, change);
    });
    form.appendChild(go);
    return form;
  }

  function openMenu(bound, target) {
    DRE.closeForkMenu(false);
    var node = el("div", { "class": "dre-forkmenu", role: "dialog", "aria-label": "Fork this run" });
    node.appendChild(el("div", { "class": "dre-fm-title" }, "Fork at " + target.label));
    var items = el("div", { role: "menu", "class": "dre-fm-items" });
    node.appendChild(items);
    node.appendChild(el("div", { "class": "dre-fm-status", role: "status" }, "checking what this point allows …"));
    var close = el("button", { type: "button", "class": "dre-fm-close", "aria-label": "close the fork menu" }, "×");
    close.addEventListener("click", function () { DRE.closeForkMenu(true); });
    node.appendChild(close);
    var r = target.anchor.getBoundingClientRect();
    node.style.top = (r.bottom + window.scrollY + 4) + "px";
    document.body.appendChild(node);
    // inside the viewport on any screen: its own width, measured once it is on the page
    var room = document.documentElement.clientWidth - node.offsetWidth - 4;
    node.style.left = (window.scrollX + Math.max(4, Math.min(r.left, room))) + "px";
    menu = { node: node, anchor: target.anchor };
    node.addEventListener("keydown", function (e) {
      if (e.key === "Escape") { e.preventDefault(); DRE.closeForkMenu(true); return; }
      if ((e.key === "ArrowDown" || e.key === "ArrowUp") && e.target.getAttribute("role") === "menuitem") {
        var enabled = Array.prototype.filter.call(items.querySelectorAll("[role=menuitem]"), function (b) { return !b.disabled; });
        var i = enabled.indexOf(e.target) + (e.key === "ArrowDown" ? 1 : -1);
        if (enabled.length) enabled[(i + enabled.length) % enabled.length].focus();
        e.preventDefault();
      }
    });
    bound.server.fork_menu(target.run, target.where).then(function (answer) {
      if (!menu || menu.node !== node) return;
      if (!answer || answer.error) { status((answer && answer.error) || "no answer from the server", true); close.focus(); return; }
      status("");
      answer.actions.forEach(function (action) {
        var b = el("button", { type: "button", role: "menuitem", "data-kind": action.kind }, action.label);
        if (!action.ok) {
          b.disabled = true;
          b.setAttribute("aria-disabled", "true");
          b.title = action.message;
        }
        items.appendChild(b);
        if (!action.ok) items.appendChild(el("div", { "class": "dre-fm-why" }, action.message));
        b.addEventListener("click", function () {
          var old = node.querySelector(".dre-fm-form");
          if (old) old.remove();
          if (!action.needs) { fork(bound, target, { kind: action.kind }); return; }
          var form = formFor(action, bound, target);
          node.insertBefore(form, node.querySelector(".dre-fm-status"));
          var first = form.querySelector("input, button");
          if (first) first.focus();
        });
      });
      var firstItem = items.querySelector("[role=menuitem]:not([disabled])");
      (firstItem || close).focus();
    }, function () { status("the server did not answer", true); });
  }

  DRE.viewClick = function (event, root, bound) {
    var node = event.target;
    var fam = node.closest ? node.closest(".dre-fam-node") : null;
    if (fam) {
      send(bound, "open", { run_id: fam.getAttribute("data-open-run") });
      return;
    }
    if (!bound.forks || !bound.server) return;
    var target = retrievalTarget(node) || tokenTarget(node);
    if (target) {
      event.preventDefault();
      openMenu(bound, target);
    }
  };

  DRE.viewKey = function (event, root, bound) {
    if (!bound.forks || !bound.server) return;
    var node = event.target;
    var strip = node.closest ? node.closest(".dre-strip") : null;
    if (!strip) return;
    var toks = Array.prototype.slice.call(strip.querySelectorAll(".dre-span:not(.group) .tok"));
    if (!toks.length) return;
    var at = toks.indexOf(node);
    var next = null;
    if (event.key === "ArrowRight") next = toks[Math.min(at + 1, toks.length - 1)];
    else if (event.key === "ArrowLeft") next = toks[Math.max(at - 1, 0)];
    else if (event.key === "Home") next = toks[0];
    else if (event.key === "End") next = toks[toks.length - 1];
    else if (event.key === "Enter" || event.key === " " || event.key === "ContextMenu") {
      if (at < 0) { next = toks[0]; }
      else {
        var target = tokenTarget(node);
        if (target) { event.preventDefault(); openMenu(bound, target); }
        return;
      }
    }
    if (next) {
      event.preventDefault();
      next.setAttribute("tabindex", "-1");
      next.focus();
    }
  };

  if (!DRE.forkClicks) {
    DRE.forkClicks = true;
    document.addEventListener("click", function (event) {
      // composedPath: a button the click removed from the menu (a passage's ✕) is no longer inside it
      var inside = menu && event.composedPath && event.composedPath().indexOf(menu.node) >= 0;
      if (menu && !inside && !menu.node.contains(event.target) && event.target !== menu.anchor &&
          !(event.target.closest && (event.target.closest(".tok") || event.target.closest(".dre-fork-btn")))) {
        DRE.closeForkMenu(false);
      }
    });
  }

  DRE.render = function (root) {
    if (!window.Plotly) {
      setTimeout(function () { DRE.render(root); }, 100);
      return;
    }
    (root || document).querySelectorAll(".dre-plot:not([data-done])").forEach(function (div) {
      draw(div);
      watchSize(div);
    });
  };
})();
