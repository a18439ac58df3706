// cuba-memorys panel: the entity graph on a 2D canvas (our own small renderer: no packaged graph
// library works under the panel's CSP at 10k nodes, docs/architecture.md). The layout comes from
// the server (/panel/graph.json, python-igraph); this script only draws, pans, zooms and picks.
"use strict";
(function () {
  const canvas = document.getElementById("graph");
  const status = document.getElementById("graph-status");
  const types = document.getElementById("graph-type");
  const project = document.getElementById("graph-project");
  const ctx = canvas.getContext("2d");
  const COLOURS = ["#2c6bd1", "#d1552c", "#1e7b34", "#7b4bd1", "#d18a2c", "#2c9ad1", "#b3261e", "#5b6475",
                   "#8a6d1e", "#1e7b74"];
  let data = {nodes: [], edges: []};
  let view = {scale: 1, dx: 0, dy: 0};
  let drag = null;

  function px(n) { return [(n.x * (canvas.width - 40) + 20) * view.scale + view.dx,
                           (n.y * (canvas.height - 40) + 20) * view.scale + view.dy]; }
  function radius(n) { return 2 + 6 * Math.sqrt(Math.max(0, n.size)); }
  function visible(n) { return n !== undefined; }

  function draw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.strokeStyle = "rgba(90,100,117,0.25)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const [a, b] of data.edges) {
      const na = data.nodes[a], nb = data.nodes[b];
      if (!na || !nb || !visible(na) || !visible(nb)) continue;
      const [x1, y1] = px(na), [x2, y2] = px(nb);
      ctx.moveTo(x1, y1); ctx.lineTo(x2, y2);
    }
    ctx.stroke();
    let drawn = 0;
    for (const n of data.nodes) {
      if (!visible(n)) continue;
      const [x, y] = px(n);
      ctx.fillStyle = COLOURS[n.community % COLOURS.length];
      ctx.beginPath(); ctx.arc(x, y, radius(n), 0, 2 * Math.PI); ctx.fill();
      drawn += 1;
    }
    status.textContent = "drawn " + drawn + (data.clustered ? " communities of " + data.entities + " entities"
      : data.sampled ? " most important of " + data.matched + " matching entities" : "");
    status.dataset.drawn = String(drawn);
  }

  function pick(ev) {
    const box = canvas.getBoundingClientRect();
    const x = (ev.clientX - box.left) * canvas.width / box.width, y = (ev.clientY - box.top) * canvas.height / box.height;
    let best = null, bestD = Infinity;
    for (const n of data.nodes) {
      if (!visible(n)) continue;
      const [nx, ny] = px(n), d = (nx - x) * (nx - x) + (ny - y) * (ny - y);
      if (d < bestD) { best = n; bestD = d; }
    }
    return best && bestD <= Math.pow(radius(best) + 4, 2) ? best : null;
  }

  canvas.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, y: ev.clientY, moved: false}; });
  canvas.addEventListener("mousemove", function (ev) {
    if (!drag) { const n = pick(ev); canvas.title = n ? n.name : ""; return; }
    view.dx += ev.clientX - drag.x; view.dy += ev.clientY - drag.y;
    drag.moved = drag.moved || Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) > 2;
    drag.x = ev.clientX; drag.y = ev.clientY; draw();
  });
  canvas.addEventListener("mouseup", function (ev) {
    const moved = drag && drag.moved; drag = null;
    if (moved) return;
    const n = pick(ev);
    if (!n) return;
    const where = project && project.value ? "&project=" + encodeURIComponent(project.value) : "";
    window.location.href = data.clustered ? "/panel/graph?community=" + n.community + where
                                          : "/panel/entity?name=" + encodeURIComponent(n.name);
  });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    const factor = ev.deltaY < 0 ? 1.2 : 1 / 1.2;
    const box = canvas.getBoundingClientRect();
    const x = (ev.clientX - box.left) * canvas.width / box.width, y = (ev.clientY - box.top) * canvas.height / box.height;
    view.dx = x - (x - view.dx) * factor; view.dy = y - (y - view.dy) * factor; view.scale *= factor;
    draw();
  }, {passive: false});
  function offerTypes(found) {
    const chosen = types.dataset.chosen || "";
    for (const t of found || []) {
      if (t === chosen) continue;
      const option = document.createElement("option");
      option.value = t; option.textContent = t;
      types.appendChild(option);
    }
  }

  fetch(canvas.dataset.source, {credentials: "same-origin"})
    .then(function (r) { return r.json().then(function (body) { if (!r.ok) throw new Error(body.error); return body; }); })
    .then(function (body) {
      data = body; offerTypes(body.types); draw();
      // the first frame is on screen once the browser paints after this draw: then the page is ready
      window.requestAnimationFrame(function () { canvas.dataset.ready = "1"; });
    })
    .catch(function (err) { status.textContent = "graph unavailable: " + err.message; canvas.dataset.ready = "error"; });
})();
