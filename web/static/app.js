// Onceplan's only script: keeps a run page's counts live without a reload.
// It reads JSON from the same origin and writes text and SVG attributes; it
// never inserts markup.
(function () {
  "use strict";
  var STATES = ["done", "pending", "unknown", "failed", "stranded", "revoked", "not_started"];

  function fmt(n) {
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function apply(live, data) {
    var c = data.counts;
    var total = c.planned || 0;
    var x = 0;
    STATES.forEach(function (s) {
      var n = c[s] || 0;
      live.querySelectorAll('[data-count="' + s + '"]').forEach(function (el) { el.textContent = fmt(n); });
      var w = total > 0 ? (n * 100) / total : 0;
      live.querySelectorAll('[data-seg="' + s + '"]').forEach(function (el) {
        el.setAttribute("x", x.toFixed(3) + "%");
        el.setAttribute("width", w.toFixed(3) + "%");
      });
      x += w;
    });
    live.querySelectorAll('[data-count="planned"]').forEach(function (el) { el.textContent = fmt(total); });
    live.querySelectorAll("[data-headline]").forEach(function (el) {
      el.textContent = fmt(c.done || 0) + " / " + fmt(total);
    });
    var was = live.getAttribute("data-campaign-state");
    if (data.state && was && data.state !== was) {
      // The available actions changed: show them.
      window.location.reload();
    }
  }

  function poll(live) {
    var url = live.getAttribute("data-counts-url");
    var delay = 1500;
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (data) { apply(live, data); }
          var st = data && data.state;
          delay = (st === "running" || st === "paused") ? 1500 : 5000;
        })
        .catch(function () { delay = 5000; })
        .then(function () { setTimeout(tick, delay); });
    }
    setTimeout(tick, delay);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live && live.getAttribute("data-counts-url")) { poll(live); }
  });
})();
