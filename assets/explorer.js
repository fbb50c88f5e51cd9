/* Draws the charts of the explorer's views (in the app and in the offline report).
 * A chart is a <div class="dre-plot" data-fig="{plotly json}">; the JSON is data, never code.
 * Charts are drawn once their box has a width (a hidden tab has none) and follow its size. */
(function () {
  "use strict";
  var DRE = (window.DRE = window.DRE || {});
  var observer = null;

  function draw(div) {
    if (div.getAttribute("data-done") || !div.offsetWidth) return;
    var fig;
    try {
      fig = JSON.parse(div.getAttribute("data-fig"));
    } catch (err) {
      div.textContent = "chart data unreadable";
      div.setAttribute("data-done", "error");
      return;
    }
    div.setAttribute("data-done", "1");
    window.Plotly.newPlot(div, fig.data || [], fig.layout || {}, {
      displaylogo: false,
      responsive: true,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
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

  /* A panel title's "?" opens its paragraph in the app's "How to read" tab (absent in a report). */
  DRE.openHelp = function (anchor) {
    var tab = document.querySelector("#tab-help-button");
    if (!tab) return false;
    tab.click();
    var tries = 0;
    (function reveal() {
      var target = document.getElementById(anchor);
      if (target && target.offsetParent !== null) {
        target.scrollIntoView({ block: "start" });
        var item = target.closest("li, p, h4") || target;
        item.classList.add("dre-flash");
        setTimeout(function () { item.classList.remove("dre-flash"); }, 2000);
      } else if (tries++ < 40) {
        setTimeout(reveal, 50);
      }
    })();
    return true;
  };

  if (!DRE.helpLinks) {
    DRE.helpLinks = true;
    document.addEventListener("click", function (event) {
      var link = event.target && event.target.closest ? event.target.closest("a.dre-help") : null;
      if (link && DRE.openHelp(link.getAttribute("data-help"))) event.preventDefault();
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
