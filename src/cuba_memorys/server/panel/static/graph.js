// cuba-memorys panel: the entity graph on a 2D canvas (our own small renderer: no packaged graph
// library works under the panel's CSP at 10k nodes, docs/architecture.md). The layout comes from
// the server (/panel/graph.json, python-igraph); this script draws, labels, pans, zooms and picks,
// and fills the legend beside the canvas. Text goes in through textContent only (never as HTML).
"use strict";
(function () {
  const canvas = document.getElementById("graph");
  const status = document.getElementById("graph-status");
  const types = document.getElementById("graph-type");
  const project = document.getElementById("graph-project");
  const ctx = canvas.getContext("2d");
  const LABELS = 24;  // at most this many names at the first zoom; more fit as one zooms in
  const CANDIDATES = 400;  // the best ranked nodes tried for a label (the rest never get one)
  const LABEL_CHARS = 28;
  // the community colours are the stylesheet's (--c0 … --c8, --c-other), so the legend's swatches match
  const style = getComputedStyle(document.documentElement);
  const PALETTE = [0, 1, 2, 3, 4, 5, 6, 7, 8].map(function (i) { return style.getPropertyValue("--c" + i).trim(); });
  const OTHER = style.getPropertyValue("--c-other").trim() || "#9aa3b2";
  let data = {nodes: [], edges: []};
  let ranked = [];  // the nodes, best PageRank first: who gets a label
  let view = {scale: 1, dx: 0, dy: 0};
  let size = {w: canvas.width, h: canvas.height};
  let drag = null;
  let hovered = null;

  function fit() {
    // the canvas fills its box (the CSS gives it the page's width); its pixels follow the screen's
    const ratio = window.devicePixelRatio || 1;
    size = {w: Math.max(200, canvas.clientWidth), h: Math.max(200, canvas.clientHeight)};
    canvas.width = Math.round(size.w * ratio);
    canvas.height = Math.round(size.h * ratio);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  }
  function px(n) { return [(n.x * (size.w - 40) + 20) * view.scale + view.dx,
                           (n.y * (size.h - 40) + 20) * view.scale + view.dy]; }
  function radius(n) { return 3 + 7 * Math.sqrt(Math.max(0, n.size)); }
  function colour(n) { return n.colour >= 0 ? PALETTE[n.colour] || OTHER : OTHER; }
  function title(n) { return n.label || n.name; }
  function shorten(text) { return text.length > LABEL_CHARS ? text.slice(0, LABEL_CHARS - 1) + "…" : text; }

  function drawEdges() {
    ctx.strokeStyle = "rgba(90,100,117,0.25)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const [a, b] of data.edges) {
      const na = data.nodes[a], nb = data.nodes[b];
      if (!na || !nb) continue;
      const [x1, y1] = px(na), [x2, y2] = px(nb);
      ctx.moveTo(x1, y1); ctx.lineTo(x2, y2);
    }
    ctx.stroke();
  }

  function drawNodes() {
    for (const n of data.nodes) {
      const [x, y] = px(n);
      ctx.fillStyle = colour(n);
      ctx.beginPath(); ctx.arc(x, y, radius(n), 0, 2 * Math.PI); ctx.fill();
    }
    return data.nodes.length;
  }

  function overlaps(box, placed) {
    return placed.some(function (o) {
      return box.x < o.x + o.w && o.x < box.x + box.w && box.y < o.y + o.h && o.y < box.y + box.h;
    });
  }

  function placeLabels() {
    // greedy, best ranked first: a name is written only where it covers no name already written,
    // so the labels stay readable; zooming in spreads the nodes and lets more of them fit
    ctx.font = "600 12px system-ui, sans-serif";
    const budget = Math.round(LABELS * Math.max(1, Math.sqrt(view.scale)));
    const placed = [], dots = [];
    const order = hovered ? [hovered].concat(ranked) : ranked;
    for (let i = 0; i < Math.min(order.length, CANDIDATES) && placed.length < budget; i++) {
      const n = order[i];
      const [x, y] = px(n), r = radius(n), text = shorten(title(n));
      if (x < 0 || y < 0 || x > size.w || y > size.h) continue;
      const box = {x: x + r + 3, y: y - 8, w: ctx.measureText(text).width + 4, h: 16};
      if (box.x + box.w > size.w) box.x = x - r - 3 - box.w;  // at the right edge: the name goes left
      const dot = {x: x - r, y: y - r, w: 2 * r, h: 2 * r};
      if (overlaps(box, placed) || overlaps(box, dots)) continue;
      placed.push(Object.assign(box, {name: n.name, text: text, cx: x, cy: y, r: r}));
      dots.push(dot);  // nor over a labelled dot: the name would hide what it names
    }
    return placed;
  }

  function drawLabels(placed) {
    ctx.textBaseline = "middle";
    ctx.lineJoin = "round";
    for (const p of placed) {
      ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1.5;  // a ring marks the labelled node
      ctx.beginPath(); ctx.arc(p.cx, p.cy, p.r + 1, 0, 2 * Math.PI); ctx.stroke();
      ctx.strokeStyle = "rgba(255,255,255,0.92)"; ctx.lineWidth = 4;  // a halo keeps it readable over edges
      ctx.strokeText(p.text, p.x + 2, p.y + p.h / 2);
      ctx.fillStyle = "#1d2330";
      ctx.fillText(p.text, p.x + 2, p.y + p.h / 2);
    }
    // what the tests (and a curious reader) can check: which names are written, and where
    canvas.dataset.labels = JSON.stringify(placed.map(function (p) {
      return {name: p.name, x: Math.round(p.cx), y: Math.round(p.cy), box: [p.x, p.y, p.w, p.h].map(Math.round)};
    }));
  }

  function draw() {
    ctx.clearRect(0, 0, size.w, size.h);
    drawEdges();
    const drawn = drawNodes();
    drawLabels(placeLabels());
    status.textContent = "drawn " + drawn + (data.clustered ? " communities of " + data.entities + " entities"
      : data.sampled ? " most important of " + data.matched + " matching entities" : "");
    status.dataset.drawn = String(drawn);
  }

  function pick(ev) {
    const box = canvas.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    let best = null, bestD = Infinity;
    for (const n of data.nodes) {
      const [nx, ny] = px(n), d = (nx - x) * (nx - x) + (ny - y) * (ny - y);
      if (d < bestD) { best = n; bestD = d; }
    }
    return best && bestD <= Math.pow(radius(best) + 4, 2) ? best : null;
  }

  function open(n) {
    const where = project && project.value ? "&project=" + encodeURIComponent(project.value) : "";
    window.location.href = data.clustered ? "/panel/graph?community=" + n.community + where
                                          : "/panel/entity?name=" + encodeURIComponent(n.name);
  }

  function describe(n) {
    if (data.clustered) return n.name + " · best ranked: " + n.label + " · click to see its entities";
    return n.name + " · " + (n.type || "entity") + " · importance " + n.size + " · PageRank " + n.rank.toFixed(4)
      + " · community " + n.community + " · click to open";
  }

  canvas.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, y: ev.clientY, moved: false}; });
  canvas.addEventListener("mousemove", function (ev) {
    if (!drag) {
      const n = pick(ev);
      canvas.title = n ? describe(n) : "";
      canvas.classList.toggle("over-node", Boolean(n));
      if (n !== hovered) { hovered = n; draw(); }  // the hovered node's name is written first
      return;
    }
    view.dx += ev.clientX - drag.x; view.dy += ev.clientY - drag.y;
    drag.moved = drag.moved || Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) > 2;
    drag.x = ev.clientX; drag.y = ev.clientY; draw();
  });
  canvas.addEventListener("mouseup", function (ev) {
    const moved = drag && drag.moved; drag = null;
    if (moved) return;
    const n = pick(ev);
    if (n) open(n);
  });
  canvas.addEventListener("mouseleave", function () { drag = null; if (hovered) { hovered = null; draw(); } });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    const factor = ev.deltaY < 0 ? 1.2 : 1 / 1.2;
    const box = canvas.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    view.dx = x - (x - view.dx) * factor; view.dy = y - (y - view.dy) * factor; view.scale *= factor;
    draw();
  }, {passive: false});
  window.addEventListener("resize", function () { fit(); draw(); });

  function offerTypes(found) {
    const chosen = types.dataset.chosen || "";
    for (const t of found || []) {
      if (t === chosen) continue;
      const option = document.createElement("option");
      option.value = t; option.textContent = t;
      types.appendChild(option);
    }
  }

  function element(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fillLegend(legend) {
    const list = document.getElementById("legend-communities");
    if (!list || !legend) return;
    for (const row of legend.communities) {
      const item = element("li");
      item.appendChild(element("span", "swatch swatch-" + row.colour));
      const link = element("a", "", "community " + row.community);
      link.href = "/panel/graph?community=" + row.community
        + (project && project.value ? "&project=" + encodeURIComponent(project.value) : "");
      item.appendChild(link);
      item.appendChild(element("span", "note", " · " + row.count + " entit" + (row.count === 1 ? "y" : "ies")
        + (row.members.length ? " · " + row.members.join(", ") : "")));
      list.appendChild(item);
    }
    if (legend.other_communities) {
      const item = element("li");
      item.appendChild(element("span", "swatch swatch-other"));
      item.appendChild(element("span", "note", legend.other_communities + " other communit"
        + (legend.other_communities === 1 ? "y" : "ies") + " · " + legend.other_entities + " entities"));
      list.appendChild(item);
    }
    const caption = document.getElementById("legend-size");
    if (caption && data.clustered) caption.textContent = "Size: how many entities the community holds (1: the largest).";
  }

  function fillTop() {
    // the best ranked, as links: what the labels name, reachable without a mouse
    const list = document.getElementById("graph-top");
    if (!list) return;
    for (const n of ranked.slice(0, 12)) {
      const item = element("li");
      const link = element("a", "", title(n));
      link.href = data.clustered ? "/panel/graph?community=" + n.community : "/panel/entity?name=" + encodeURIComponent(n.name);
      item.appendChild(link);
      item.appendChild(element("span", "note", data.clustered ? " · " + n.name.replace(/^community \d+ /, "")
        : " · PageRank " + n.rank.toFixed(3)));
      list.appendChild(item);
    }
  }

  fit();
  fetch(canvas.dataset.source, {credentials: "same-origin"})
    .then(function (r) { return r.json().then(function (body) { if (!r.ok) throw new Error(body.error); return body; }); })
    .then(function (body) {
      data = body;
      ranked = data.nodes.slice().sort(function (a, b) { return (b.rank || 0) - (a.rank || 0) || b.size - a.size; });
      offerTypes(body.types); fillLegend(body.legend); fillTop(); draw();
      // the first frame is on screen once the browser paints after this draw: then the page is ready
      window.requestAnimationFrame(function () { canvas.dataset.ready = "1"; });
    })
    .catch(function (err) { status.textContent = "graph unavailable: " + err.message; canvas.dataset.ready = "error"; });
})();
