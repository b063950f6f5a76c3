/* neuronsim report: the zoomable, pannable timeline of one part (device or host) of a profile.
 * One canvas of rows, HTML labels, a time axis with units; state() says what was drawn. */
// ---------------------------------------------------------------- the timeline
class Timeline {
  constructor(root, model) {
    this.root = root;
    this.model = model;
    this.rows = decode(model);
    this.names = model.names;
    this.details = model.details;
    this.focus = model.focus_ns;
    this.view = { start: model.focus_ns[0], end: model.focus_ns[1] };
    this.collapsed = new Set();
    this.hasInstructions = this.rows.some((r) => r.kind === "instruction");
    this.colourBy = this.hasInstructions ? "engine" : "name";
    this.search = "";
    this.matches = null;
    this.matchList = [];
    this.matchAt = -1;
    this.selected = null;
    this.linked = [];
    this.drawnRows = [];
    this.frames = 0;
    this.build();
    this.relayout();
    this.emitView();
  }

  // -- DOM
  build() {
    const r = this.root;
    r.classList.add("timeline");
    r.innerHTML = "";
    const title = r.dataset.title;
    if (title) r.insertAdjacentHTML("beforeend", `<div class="tl-title">${esc(title)}</div>`);
    r.insertAdjacentHTML("beforeend", `
      <div class="tl-toolbar">
        <button data-act="out" title="Zoom out (S)">−</button><button data-act="in" title="Zoom in (W)">+</button>
        <button data-act="all" title="Show everything (F or 0)">Fit</button>
        <input type="search" placeholder="find op, kernel, instruction…" aria-label="find">
        <button data-act="prev" title="Previous match">◀</button><button data-act="next" title="Next match (Enter)">▶</button>
        <span class="tl-matches"></span>
        <label>colour <select aria-label="colour by">
          <option value="engine">engine / kind</option><option value="op">op / kernel</option><option value="name">name</option>
        </select></label>
        <span class="tl-range"></span>
      </div>
      <div class="tl-help">Ctrl+wheel (or wheel over the time axis, or W/S) zooms at the pointer; drag, Shift+wheel or A/D pans;
        drag on the time axis to zoom into a range; double-click a slice to zoom to it; click a row name to zoom to that row
        (▸ opens its per-op rows); click a slice for its details.</div>
      <div class="tl-axis-row"><div class="tl-axis-label" style="width:${LABEL_W}px"></div><canvas class="tl-axis"></canvas></div>
      <div class="tl-scroll"><div class="tl-inner"><div class="tl-labels" style="width:${LABEL_W}px"></div><canvas class="tl-canvas" tabindex="0"></canvas></div></div>
      <div class="tl-details"><span class="note">Click a slice to pin its details here.</span></div>`);
    this.axis = r.querySelector(".tl-axis");
    this.axisLabel = r.querySelector(".tl-axis-label");
    this.canvas = r.querySelector(".tl-canvas");
    this.labels = r.querySelector(".tl-labels");
    this.scroller = r.querySelector(".tl-scroll");
    this.rangeEl = r.querySelector(".tl-range");
    this.detailsEl = r.querySelector(".tl-details");
    this.matchesEl = r.querySelector(".tl-matches");
    this.searchEl = r.querySelector("input[type=search]");
    this.colourEl = r.querySelector("select");
    this.colourEl.value = this.colourBy;
    this.tooltip = document.createElement("div");
    this.tooltip.className = "tl-tooltip";
    document.body.appendChild(this.tooltip);

    r.querySelectorAll(".tl-toolbar button").forEach((b) => b.addEventListener("click", () => this.act(b.dataset.act)));
    this.searchEl.addEventListener("input", () => this.setSearch(this.searchEl.value));
    this.searchEl.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); this.act(e.shiftKey ? "prev" : "next"); } });
    this.colourEl.addEventListener("change", () => { this.colourBy = this.colourEl.value; this.colourCache = null; this.render(); });
    this.scroller.addEventListener("scroll", () => this.render());
    this.bindPointer();
    new ResizeObserver(() => this.relayout()).observe(this.root);
  }

  act(what) {
    const mid = (this.view.start + this.view.end) / 2;
    if (what === "in") this.zoom(0.5, mid);
    else if (what === "out") this.zoom(2, mid);
    else if (what === "all") this.setView(0, this.model.span_ns);
    else if (what === "next" || what === "prev") this.jumpMatch(what === "next" ? 1 : -1);
  }

  // -- layout: which rows show, at what y
  rowVisible(row) {
    if (this.collapsed.has(row.group)) return false;
    if (row.parent !== undefined && row.parent !== null) return this.rows[row.parent].open;
    return true;
  }
  rowHeight(row) {
    if (row.kind === "counter") return COUNTER_H;
    return Math.max(ROW_H, 4 + LANE_H * (row.lanes ? row.lanes.length : 1) + 1);
  }
  relayout() {
    const items = [];
    let y = 0;
    this.model.groups.forEach((g, gi) => {
      items.push({ type: "group", group: gi, label: g.name, y, h: GROUP_H });
      y += GROUP_H;
      for (const row of this.rows) {
        if (row.group !== gi || !this.rowVisible(row)) continue;
        const h = this.rowHeight(row);
        items.push({ type: "row", row, label: row.name, y, h });
        y += h;
      }
    });
    this.items = items;
    this.height = Math.min(y, MAX_CANVAS_H);
    const width = Math.max(200, this.root.clientWidth - LABEL_W - 2);
    this.width = width;
    const dpr = window.devicePixelRatio || 1;
    for (const [c, h] of [[this.canvas, this.height], [this.axis, AXIS_H]]) {
      c.width = Math.round(width * dpr); c.height = Math.round(h * dpr);
      c.style.width = width + "px"; c.style.height = h + "px";
    }
    this.dpr = dpr;
    this.labels.style.height = this.height + "px";
    this.labels.innerHTML = items.map((it, k) => {
      const cls = it.type === "row" ? (it.row.kind === "counter" ? "counter" : it.row.parent != null ? "child" : "") : it.type;
      let mark = "";
      if (it.type === "group") mark = this.collapsed.has(it.group) ? "▸ " : "▾ ";
      else if (it.type === "row" && it.row.children) mark = it.row.open ? "▾ " : "▸ ";
      return `<div class="tl-label ${cls}" data-item="${k}" style="height:${it.h}px;line-height:${it.h}px" title="${esc(it.label)}">${mark}${esc(it.label)}</div>`;
    }).join("");
    this.labels.querySelectorAll(".tl-label").forEach((el) => el.addEventListener("click", (e) => this.clickLabel(this.items[+el.dataset.item], e)));
    if (!this.rows.length) this.labels.innerHTML = `<div class="tl-empty">The trace has no slices.</div>`;
    this.render();
  }
  clickLabel(it, e) {
    if (!it) return;
    if (it.type === "group") {
      if (this.collapsed.has(it.group)) this.collapsed.delete(it.group); else this.collapsed.add(it.group);
      this.relayout();
    } else if (it.type === "row") {
      const row = it.row;
      const onMark = e.offsetX < 22 + (row.parent != null ? 16 : 0);
      if (row.children && (onMark || e.altKey)) { row.open = !row.open; this.relayout(); return; }
      if (row.children && !row.open) { row.open = true; this.relayout(); }
      if (row.extent) this.zoomTo(row.extent[0], row.extent[1]);
    }
  }

  // -- view
  setView(start, end, fromLink) {
    const minSpan = 10; // ns
    if (!(end - start >= minSpan)) { const mid = (start + end) / 2; start = mid - minSpan / 2; end = mid + minSpan / 2; }
    const pad = (this.model.span_ns) * 0.05 + minSpan;
    const span = end - start;
    if (start < -pad) { start = -pad; end = start + span; }
    if (end > this.model.span_ns + pad) { end = this.model.span_ns + pad; start = Math.max(-pad, end - span); }
    this.view = { start, end };
    this.emitView();
    this.render();
    if (!fromLink) for (const other of this.linked) {
      const off = other.focus[0] - this.focus[0];
      other.setView(start + off, end + off, true);
    }
  }
  zoom(factor, at) {
    const s = at - (at - this.view.start) * factor, e = at + (this.view.end - at) * factor;
    this.setView(s, e);
  }
  zoomTo(s, e) {
    const m = Math.max((e - s) * 0.08, 5);
    this.setView(s - m, e + m);
  }
  pan(dxPx) {
    const dt = dxPx / this.width * (this.view.end - this.view.start);
    this.setView(this.view.start + dt, this.view.end + dt);
  }
  emitView() {
    const { start, end } = this.view;
    this.rangeEl.textContent = `${fmtTime(start)} – ${fmtTime(end)} (span ${fmtTime(end - start)})`;
    this.rangeEl.dataset.startNs = String(start);
    this.rangeEl.dataset.endNs = String(end);
  }
  xOf(t) { return (t - this.view.start) * this.width / (this.view.end - this.view.start); }
  tOf(x) { return this.view.start + x * (this.view.end - this.view.start) / this.width; }

  // -- colours
  sliceColour(lane, i) {
    const det = lane.det[i];
    const d = det >= 0 ? this.details[det] : null;
    let key;
    if (this.colourBy === "engine") key = d ? (d.engine || d.cat || this.names[lane.name[i]]) : this.names[lane.name[i]];
    else if (this.colourBy === "op") key = lane.op && lane.op[i] >= 0 ? this.names[lane.op[i]] : this.names[lane.name[i]];
    else key = this.names[lane.name[i]];
    if (d && d.cat === "aggregated") key = "aggregated";
    return this.colourBy === "name" ? hashColour(String(key)) : colourOf(key);
  }

  // -- drawing
  render() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }
  draw() {
    const began = performance.now();
    this.frames++;
    this.drawAxis();
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    const top = this.scroller.scrollTop, bottom = top + this.scroller.clientHeight;
    ctx.clearRect(0, top - 2, this.width, bottom - top + 4);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    this.drawnRows = [];
    this.drawGrid(ctx, top, bottom);
    for (const it of this.items) {
      if (it.y + it.h < top || it.y > bottom) continue;
      if (it.type !== "row") {
        ctx.fillStyle = "#eef1f5";
        ctx.fillRect(0, it.y, this.width, it.h);
        continue;
      }
      this.drawnRows.push(it.row.name);
      if (it.row.kind === "counter") this.drawCounter(ctx, it);
      else this.drawSlices(ctx, it);
      ctx.fillStyle = "#eef0f3";
      ctx.fillRect(0, it.y + it.h - 1, this.width, 1);
    }
    this.drawMs = performance.now() - began;
  }
  ticks() {
    const span = this.view.end - this.view.start;
    const step = niceStep(span / Math.max(2, this.width / 120));
    const first = Math.ceil(this.view.start / step) * step;
    const out = [];
    for (let t = first; t <= this.view.end; t += step) out.push(t);
    return { step, out };
  }
  drawGrid(ctx, top, bottom) {
    ctx.fillStyle = "#f1f3f6";
    for (const t of this.ticks().out) ctx.fillRect(Math.round(this.xOf(t)), top, 1, bottom - top);
  }
  drawAxis() {
    const ctx = this.axis.getContext("2d");
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, AXIS_H);
    ctx.fillStyle = "#fafbfc";
    ctx.fillRect(0, 0, this.width, AXIS_H);
    const { step, out } = this.ticks();
    const [scale, unit] = unitFor(step);
    const decimals = Math.max(0, Math.ceil(-Math.log10(step / scale) + 1e-9));
    ctx.fillStyle = "#1d2330";
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "top";
    for (const t of out) {
      const x = Math.round(this.xOf(t));
      ctx.fillRect(x, AXIS_H - 8, 1, 8);
      ctx.fillText((t / scale).toFixed(decimals) + " " + unit, x + 3, 5);
    }
    if (this.sel) {
      ctx.fillStyle = "rgba(36,87,197,0.25)";
      ctx.fillRect(Math.min(this.sel.x0, this.sel.x1), 0, Math.abs(this.sel.x1 - this.sel.x0), AXIS_H);
    }
    this.axisLabel.textContent = `${this.model.clock === "simulated" ? "simulated device time" : "wall-clock time"} (${unit})`;
    this.axis.dataset.unit = unit;
  }
  drawSlices(ctx, it) {
    const row = it.row, vs = this.view.start, ve = this.view.end;
    const k = this.width / (ve - vs);
    const searching = this.matches !== null;
    row.lanes.forEach((lane, li) => {
      const y = it.y + 2 + li * LANE_H, h = LANE_H - 2;
      let i = firstEndingAfter(lane.end, lane.n, vs);
      let lastX = -1;
      for (; i < lane.n && lane.start[i] <= ve; i++) {
        const x0 = (lane.start[i] - vs) * k, x1 = (lane.end[i] - vs) * k;
        if (x1 < lastX + 1 && x1 - x0 < 1) continue; // this pixel column is painted already
        const left = Math.max(x0, lastX, 0), right = Math.min(Math.max(x1, left + 1), this.width);
        const hit = searching && this.isMatch(lane, i);
        ctx.globalAlpha = searching && !hit ? 0.22 : 1;
        ctx.fillStyle = this.sliceColour(lane, i);
        ctx.fillRect(left, y, right - left, h);
        if (hit) { ctx.strokeStyle = "#111"; ctx.lineWidth = 1; ctx.strokeRect(left + 0.5, y + 0.5, right - left - 1, h - 1); }
        lastX = right;
        if (right - left > 40) {
          ctx.fillStyle = "#fff";
          ctx.save();
          ctx.beginPath(); ctx.rect(left, y, right - left, h); ctx.clip();
          ctx.fillText(this.names[lane.name[i]], left + 3, y + h / 2 + 0.5);
          ctx.restore();
        }
      }
      ctx.globalAlpha = 1;
      if (this.selected && this.selected.row === row && this.selected.lane === li) {
        const s = this.selected.i, x0 = (lane.start[s] - vs) * k, x1 = (lane.end[s] - vs) * k;
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
        ctx.strokeRect(x0 - 1, y - 1, Math.max(2, x1 - x0) + 2, h + 2);
      }
    });
  }
  drawCounter(ctx, it) {
    const row = it.row, vs = this.view.start, ve = this.view.end, k = this.width / (ve - vs);
    const base = it.y + it.h - 3, height = it.h - 6;
    row.series.forEach((s, si) => {
      if (!s.max) return;
      ctx.fillStyle = SERIES_COLOURS[si % SERIES_COLOURS.length];
      ctx.globalAlpha = si ? 0.45 : 0.6;
      let i = Math.max(0, lastStartingBefore(row.t, row.t.length, vs));
      let col = -1, colMax = 0;
      const flush = () => { if (col >= 0 && colMax > 0) { const hh = colMax / s.max * height; ctx.fillRect(col, base - hh, 1, hh); } };
      for (; i < row.t.length && row.t[i] <= ve; i++) {
        const x0 = Math.max(0, Math.floor((row.t[i] - vs) * k));
        const next = i + 1 < row.t.length ? row.t[i + 1] : row.t[i];
        const x1 = Math.min(this.width, Math.floor((next - vs) * k));
        const v = s.v[i];
        if (x0 === col) { colMax = Math.max(colMax, v); if (x1 === x0) continue; }
        flush();
        if (x1 > x0 + 1 && v > 0) { const hh = v / s.max * height; ctx.fillRect(x0 + 1, base - hh, x1 - x0 - 1, hh); }
        col = Math.max(x1, x0); colMax = v;
      }
      flush();
    });
    ctx.globalAlpha = 1;
  }

  // -- hit testing and details
  itemAt(y) {
    for (const it of this.items) if (y >= it.y && y < it.y + it.h) return it;
    return null;
  }
  sliceAt(x, y) {
    const it = this.itemAt(y);
    if (!it || it.type !== "row" || it.row.kind === "counter") return null;
    const li = Math.floor((y - it.y - 2) / LANE_H);
    const lane = it.row.lanes[li];
    if (!lane) return null;
    const t = this.tOf(x), slack = 3 * (this.view.end - this.view.start) / this.width;
    let i = firstEndingAfter(lane.end, lane.n, t - slack);
    let best = -1, bestDist = Infinity;
    for (; i < lane.n && lane.start[i] <= t + slack; i++) {
      const d = t < lane.start[i] ? lane.start[i] - t : t > lane.end[i] ? t - lane.end[i] : 0;
      if (d < bestDist) { best = i; bestDist = d; }
    }
    return best < 0 ? null : { row: it.row, lane: li, i: best };
  }
  counterAt(x, y) {
    const it = this.itemAt(y);
    if (!it || it.type !== "row" || it.row.kind !== "counter") return null;
    const i = lastStartingBefore(it.row.t, it.row.t.length, this.tOf(x));
    return i < 0 ? null : { row: it.row, i };
  }
  describe(hit) {
    const lane = hit.row.lanes[hit.lane], i = hit.i;
    const det = lane.det[i] >= 0 ? this.details[lane.det[i]] : {};
    const lines = [`<b>${esc(this.names[lane.name[i]])}</b>`];
    if (lane.op && lane.op[i] >= 0) lines.push(`<span class="k">op</span> ${esc(this.names[lane.op[i]])}`);
    lines.push(`<span class="k">row</span> ${esc(hit.row.name)}`,
      `<span class="k">start</span> ${fmtTime(lane.start[i])} · <span class="k">duration</span> ${fmtTime(lane.end[i] - lane.start[i])}`);
    const order = ["kernel", "opcode", "engine", "queue", "bytes", "nki_source_location", "operands", "flops", "kind",
      "native", "launch_ns", "dma_engines", "core", "instructions", "aggregated_slices", "busy_ns", "first"];
    const keys = order.filter((k) => k in det).concat(Object.keys(det).filter((k) => !order.includes(k) && k !== "cat"));
    for (const k of keys) {
      let v = det[k];
      if (k === "bytes") v = `${fmtBytes(v)} (${v})`;
      else if (k.endsWith("_ns") && typeof v === "number") v = fmtTime(v);
      else if (Array.isArray(v)) v = v.join("<br>&nbsp;&nbsp;");
      else if (typeof v === "object") v = JSON.stringify(v);
      const label = k === "opcode" ? "instruction" : k === "nki_source_location" ? "kernel line" : k;
      lines.push(`<span class="k">${esc(label)}</span> ${Array.isArray(det[k]) ? v : esc(v)}`);
    }
    return lines.join("<br>");
  }
  describeCounter(hit) {
    const r = hit.row;
    return [`<b>${esc(r.name)}</b>`, `<span class="k">at</span> ${fmtTime(r.t[hit.i])}`]
      .concat(r.series.map((s) => `<span class="k">${esc(s.name)}</span> ${+s.v[hit.i].toPrecision(4)}`)).join("<br>");
  }

  // -- pointer and keys
  bindPointer() {
    const c = this.canvas, ax = this.axis;
    let drag = null;
    const local = (e, el) => { const b = el.getBoundingClientRect(); return [e.clientX - b.left, e.clientY - b.top]; };
    const onWheel = (e, axis) => {
      const [x] = local(e, e.currentTarget);
      if (axis || e.ctrlKey || e.metaKey || e.altKey) {
        e.preventDefault();
        this.zoom(Math.exp(Math.max(-3, Math.min(3, e.deltaY * (e.deltaMode ? 0.05 : 0.0025)))), this.tOf(x));
      } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        e.preventDefault();
        this.pan(e.shiftKey && !e.deltaX ? e.deltaY : e.deltaX);
      }
    };
    c.addEventListener("wheel", (e) => onWheel(e, false), { passive: false });
    ax.addEventListener("wheel", (e) => onWheel(e, true), { passive: false });
    c.addEventListener("mousedown", (e) => { drag = { x: e.clientX, moved: false }; c.classList.add("dragging"); c.focus(); });
    window.addEventListener("mousemove", (e) => {
      if (drag) {
        const dx = e.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        if (drag.moved) { this.pan(-dx); drag.x = e.clientX; }
      }
      if (this.sel) { this.sel.x1 = local(e, ax)[0]; this.drawAxis(); }
    });
    window.addEventListener("mouseup", (e) => {
      if (drag) {
        c.classList.remove("dragging");
        if (!drag.moved) { const [x, y] = local(e, c); this.select(this.sliceAt(x, y)); }
        drag = null;
      }
      if (this.sel) {
        const a = this.tOf(Math.min(this.sel.x0, this.sel.x1)), b = this.tOf(Math.max(this.sel.x0, this.sel.x1));
        this.sel = null;
        if (b - a > 0 && Math.abs(b - a) * this.width / (this.view.end - this.view.start) > 3) this.setView(a, b); else this.drawAxis();
      }
    });
    ax.addEventListener("mousedown", (e) => { const [x] = local(e, ax); this.sel = { x0: x, x1: x }; e.preventDefault(); });
    c.addEventListener("dblclick", (e) => {
      const [x, y] = local(e, c), hit = this.sliceAt(x, y);
      if (hit) { const l = hit.row.lanes[hit.lane]; this.zoomTo(l.start[hit.i], l.end[hit.i]); } else this.zoom(2, this.tOf(x));
    });
    c.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, c);
      const hit = this.sliceAt(x, y), ch = hit ? null : this.counterAt(x, y);
      if (!hit && !ch) { this.tooltip.style.display = "none"; return; }
      this.tooltip.innerHTML = hit ? this.describe(hit) : this.describeCounter(ch);
      this.tooltip.style.display = "block";
      const w = this.tooltip.offsetWidth, h = this.tooltip.offsetHeight;
      this.tooltip.style.left = Math.min(e.clientX + 14, window.innerWidth - w - 8) + "px";
      this.tooltip.style.top = (e.clientY + 16 + h > window.innerHeight ? e.clientY - h - 10 : e.clientY + 16) + "px";
    });
    c.addEventListener("mouseleave", () => { this.tooltip.style.display = "none"; });
    c.addEventListener("keydown", (e) => {
      const mid = (this.view.start + this.view.end) / 2, step = (this.view.end - this.view.start) * 0.2;
      const keys = { w: () => this.zoom(0.7, mid), s: () => this.zoom(1 / 0.7, mid), a: () => this.setView(this.view.start - step, this.view.end - step),
        d: () => this.setView(this.view.start + step, this.view.end + step), f: () => this.act("all"), 0: () => this.act("all") };
      const f = keys[e.key.toLowerCase()];
      if (f) { e.preventDefault(); f(); }
    });
  }
  select(hit) {
    this.selected = hit;
    this.detailsEl.innerHTML = hit ? this.describe(hit) : `<span class="note">Click a slice to pin its details here.</span>`;
    this.render();
  }

  // -- search: highlight slices whose name, op, kernel or instruction matches
  isMatch(lane, i) {
    return this.hitName.has(lane.name[i]) || this.hitDet.has(lane.det[i]) || (lane.op !== null && this.hitName.has(lane.op[i]));
  }
  setSearch(text) {
    this.search = text.trim().toLowerCase();
    this.matchAt = -1;
    if (!this.search) { this.matches = null; this.matchList = []; this.matchesEl.textContent = ""; this.render(); return; }
    const exact = this.exact;
    this.exact = false;
    const hitName = new Set();
    this.names.forEach((n, i) => { const l = n.toLowerCase(); if (exact ? l === this.search : l.includes(this.search)) hitName.add(i); });
    const hitDet = new Set();
    this.details.forEach((d, i) => {
      const k = String(d.kernel || "").toLowerCase();
      if (exact ? k === this.search : k.includes(this.search)) hitDet.add(i);
    });
    this.hitName = hitName;
    this.hitDet = hitDet;
    this.matches = true;
    // the slices to step through: by name or kernel (an op's instructions are highlighted, not listed)
    const list = [];
    for (const row of this.rows) {
      if (!row.lanes || row.parent != null) continue;
      row.lanes.forEach((lane, li) => {
        for (let i = 0; i < lane.n; i++) {
          if (hitName.has(lane.name[i]) || hitDet.has(lane.det[i])) list.push({ row, lane: li, i, t: lane.start[i] });
        }
      });
    }
    list.sort((a, b) => a.t - b.t);
    this.matchList = list;
    this.matchesEl.textContent = `${list.length} match${list.length === 1 ? "" : "es"}`;
    this.render();
  }
  jumpMatch(dir) {
    if (!this.matchList.length) return;
    this.matchAt = (this.matchAt + dir + this.matchList.length) % this.matchList.length;
    const m = this.matchList[this.matchAt], lane = m.row.lanes[m.lane];
    this.matchesEl.textContent = `${this.matchAt + 1} / ${this.matchList.length}`;
    this.zoomTo(lane.start[m.i], lane.end[m.i]);
    this.select(m);
  }
  // highlight the op; the primary timeline also zooms to its first call (linked ones follow)
  findOp(name, primary = true) {
    this.searchEl.value = name;
    this.exact = true;
    this.setSearch(name);
    if (!primary) return;
    this.jumpMatch(1);
    this.root.scrollIntoView({ behavior: "auto", block: "start" });
  }

  // -- what the browser tests read
  state() {
    return { start: this.view.start, end: this.view.end, rows: this.drawnRows.slice(), frames: this.frames, drawMs: this.drawMs,
      visibleRows: this.items.filter((i) => i.type === "row").map((i) => i.row.name), unit: this.axis.dataset.unit };
  }
}
