// Onceplan's only script: keeps a run page live without a reload. It reads
// the counts as JSON from the same origin and writes text and SVG
// attributes; when they change, it fetches the page's live parts — its
// notes and its page of the target table, for the page's own filter and
// cursor — as HTML this server rendered (templ escapes every value in it)
// and puts them in place of the page's, by id. It inserts no other markup.
(function () {
  "use strict";
  var STATES = ["done", "pending", "unknown", "failed", "stranded", "revoked", "not_started"];
  // The parts of the run page the live fragment replaces.
  var PARTS = ["run-notes", "run-targets"];
  // The live parts are fetched at most this often while the counts move,
  // and at least this often while the campaign runs or is paused (a note
  // may say what happens next even when no count moves).
  var PARTS_MIN_MS = 3000;
  var PARTS_MAX_MS = 15000;

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
      return false;
    }
    return true;
  }

  // refreshParts puts the server's current live parts in place of the
  // page's; the URL carries the page's query (filter and cursor).
  function refreshParts(url) {
    return fetch(url + window.location.search, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        PARTS.forEach(function (id) {
          var now = document.getElementById(id);
          var next = doc.getElementById(id);
          if (now && next) { now.replaceWith(document.adoptNode(next)); }
        });
      });
  }

  function poll(live) {
    var url = live.getAttribute("data-counts-url");
    var partsURL = live.getAttribute("data-live-url");
    var delay = 1500;
    var shown = ""; // the counts the live parts were last fetched for
    var fetchedAt = Date.now();
    function parts(data) {
      var key = JSON.stringify(data.counts);
      var age = Date.now() - fetchedAt;
      var active = data.state === "running" || data.state === "paused";
      if (!partsURL || !((key !== shown && age >= PARTS_MIN_MS) || (active && age >= PARTS_MAX_MS))) {
        return null;
      }
      shown = key;
      fetchedAt = Date.now();
      return refreshParts(partsURL);
    }
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          var st = data && data.state;
          delay = (st === "running" || st === "paused") ? 1500 : 5000;
          if (data && apply(live, data)) { return parts(data); }
          return null;
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
