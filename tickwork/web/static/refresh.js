// tickwork dashboard: keep the page live without a reload.
// Every few seconds, fetch this same URL and swap in the fresh <main id="live">, keeping
// open tracebacks open. It waits while the tab is hidden, while you type in a field of
// the page, once you have changed a form marked data-hold (the edit form: what you typed
// is kept until you save or leave), or when you switch "live" off (remembered in this
// browser).
(function () {
  "use strict";
  var region = document.getElementById("live");
  var toggle = document.getElementById("auto-refresh");
  var stamp = document.getElementById("refreshed");
  var seconds = region ? Number(region.getAttribute("data-refresh")) : 0;
  if (!region || !(seconds > 0)) {
    return;
  }
  var KEY = "tickwork.live";
  if (toggle) {
    toggle.checked = window.localStorage.getItem(KEY) !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem(KEY, toggle.checked ? "on" : "off");
    });
  }
  var busy = false;
  var held = false;
  region.addEventListener("input", function (event) {
    var form = event.target && event.target.form;
    if (form && form.hasAttribute("data-hold")) {
      held = true;
    }
  });

  function typing() {
    var active = document.activeElement;
    return !!active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
  }

  function refresh() {
    if (busy || held || document.hidden || (toggle && !toggle.checked) || typing()) {
      return;
    }
    busy = true;
    var open = Array.prototype.map.call(region.querySelectorAll("details[open][id]"), function (d) {
      return d.id;
    });
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", redirect: "manual" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("status " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) {
          return;
        }
        region.replaceChildren.apply(region, Array.prototype.slice.call(fresh.childNodes));
        open.forEach(function (id) {
          var details = document.getElementById(id);
          if (details) {
            details.open = true;
          }
        });
        if (stamp) {
          stamp.textContent = "Updated " + new Date().toISOString().slice(11, 19) + " UTC.";
        }
      })
      .catch(function () {
        if (stamp) {
          stamp.textContent = "Not updated: the server did not answer.";
        }
      })
      .then(function () {
        busy = false;
      });
  }

  window.setInterval(refresh, seconds * 1000);
})();
