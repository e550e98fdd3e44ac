// Onceplan's only script: keeps a run page live without a reload. It reads
// the counts as JSON from the same origin and writes text and SVG
// attributes; when they change, it fetches the page's live parts — its
// notes and its page of the target table, for the page's own filter and
// cursor — as HTML this server rendered (templ escapes every value in it)
// and puts them in place of the page's, by id. It inserts no other markup.
//
// When the server stops answering (the connection refused, no answer
// within ANSWER_MS, or a proxy's 502, 503 or 504), the page says since
// when in the banner the server rendered for it, and disables the page's
// buttons: counts and states frozen at that time must not look live, nor
// invite a press that cannot be carried out. It keeps asking, and when the
// server answers again it takes the banner away, enables the buttons it
// disabled and brings the counts and the live parts up to date.
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
  // A request not answered within ANSWER_MS counts as no answer; while
  // the server does not answer, it is asked every STALE_POLL_MS.
  var ANSWER_MS = 10000;
  var STALE_POLL_MS = 2000;
  // NOT_ANSWERED marks a request the server did not answer (as opposed
  // to one it answered with something this script cannot use).
  var NOT_ANSWERED = { notAnswered: true };

  // ask fetches url, rejecting with NOT_ANSWERED when the server does not
  // answer: no connection, no answer in time, or a gateway's 502/503/504.
  function ask(url, accept) {
    var ctrl = typeof AbortController === "function" ? new AbortController() : null;
    var timer = ctrl ? setTimeout(function () { ctrl.abort(); }, ANSWER_MS) : null;
    return fetch(url, { credentials: "same-origin", headers: { Accept: accept }, signal: ctrl ? ctrl.signal : undefined })
      .then(function (r) {
        clearTimeout(timer);
        if (r.status === 502 || r.status === 503 || r.status === 504) { throw NOT_ANSWERED; }
        return r;
      }, function () {
        clearTimeout(timer);
        throw NOT_ANSWERED;
      });
  }

  // stamp words a time as the pages do: "2026-01-02 15:04:05 UTC".
  function stamp(ms) {
    return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  // Staleness is the page's: since when the server has not answered,
  // the banner that says so, and the buttons it disabled.
  var lastAnswer = Date.now(); // the page itself is an answer
  var stale = false;

  function markStale() {
    if (stale) { return; }
    stale = true;
    var banner = document.getElementById("stale-banner");
    if (banner) {
      banner.textContent = "The server has not answered since " + stamp(lastAnswer) +
        ": what this page shows may be out of date, and its buttons are disabled until the server answers again.";
      banner.hidden = false;
    }
    document.querySelectorAll('main form[method="post"] button, main form[method="post"] input[type="submit"]').forEach(function (el) {
      if (!el.disabled) {
        el.disabled = true;
        el.setAttribute("data-stale-disabled", "");
      }
    });
  }

  // answered notes an answer; it reports whether the page was stale.
  function answered() {
    lastAnswer = Date.now();
    if (!stale) { return false; }
    stale = false;
    var banner = document.getElementById("stale-banner");
    if (banner) {
      banner.hidden = true;
      banner.textContent = "";
    }
    document.querySelectorAll("[data-stale-disabled]").forEach(function (el) {
      el.disabled = false;
      el.removeAttribute("data-stale-disabled");
    });
    return true;
  }

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
    return ask(url + window.location.search, "text/html")
      .then(function (r) { answered(); return r.ok ? r.text() : null; })
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
    function parts(data, now) {
      var key = JSON.stringify(data.counts);
      var age = Date.now() - fetchedAt;
      var active = data.state === "running" || data.state === "paused";
      if (!partsURL || !(now || (key !== shown && age >= PARTS_MIN_MS) || (active && age >= PARTS_MAX_MS))) {
        return null;
      }
      shown = key;
      fetchedAt = Date.now();
      return refreshParts(partsURL);
    }
    function tick() {
      var recovered = false;
      ask(url, "application/json")
        .then(function (r) {
          recovered = answered();
          return r.ok ? r.json() : null;
        })
        .then(function (data) {
          var st = data && data.state;
          delay = (st === "running" || st === "paused") ? 1500 : 5000;
          // Back from a silence: the live parts are brought up to date
          // at once, whatever the counts.
          if (data && apply(live, data)) { return parts(data, recovered); }
          return null;
        })
        .catch(function (err) {
          if (err === NOT_ANSWERED) {
            markStale();
            delay = STALE_POLL_MS;
          } else {
            delay = 5000;
          }
        })
        .then(function () { setTimeout(tick, delay); });
    }
    setTimeout(tick, delay);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live && live.getAttribute("data-counts-url")) { poll(live); }
  });
})();
