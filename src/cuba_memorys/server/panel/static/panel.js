// cuba-memorys panel: the live strip. Asks /panel/ticket (with the page's CSRF token) for a
// single-use /events ticket and opens the server's event stream with it; a new ticket at each
// reconnect (a used ticket opens nothing). No eval, no inline code: the CSP allows neither.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("panel-data").textContent);
  const status = document.getElementById("live-status");
  const list = document.getElementById("live-events");
  const KEEP = 5;
  let source = null;

  function show(kind, item) {
    const li = document.createElement("li");
    const payload = item.payload || {};
    const what = [payload.tool, payload.action, payload.client, payload.project_id].filter(Boolean).join(" ");
    li.textContent = (item.at || "") + " " + kind + (what ? " · " + what : "");
    list.appendChild(li);
    while (list.children.length > KEEP) list.removeChild(list.firstChild);
  }

  function connect() {
    fetch("/panel/ticket", {method: "POST", headers: {"X-CSRF-Token": data.csrf}, credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error("ticket refused (" + r.status + ")"); return r.json(); })
      .then(function (body) {
        source = new EventSource("/events?ticket=" + encodeURIComponent(body.ticket));
        source.onopen = function () { status.textContent = "live: connected"; };
        source.onerror = function () {
          status.textContent = "live: reconnecting…";
          source.close();
          setTimeout(connect, 3000);
        };
        ["memory.write", "memory.delete", "rem.cycle", "sync.fetch", "peer.notice", "artifact.write", "lagged"]
          .forEach(function (kind) {
            source.addEventListener(kind, function (e) { show(kind, JSON.parse(e.data)); });
          });
      })
      .catch(function (err) { status.textContent = "live: off (" + err.message + ")"; });
  }
  if (status && list) connect();
})();
