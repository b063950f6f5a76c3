/* neuronsim report: constants, formatting, colours and the timeline data's decoding.
 * Inlined with timeline.js and page.js into one strict-mode function (html.py). */

const LABEL_W = 250, ROW_H = 20, LANE_H = 15, COUNTER_H = 30, GROUP_H = 22, AXIS_H = 30;
const MAX_CANVAS_H = 30000;
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
  "#9c755f", "#86bcb6", "#d37295", "#8cd17d", "#b6992d", "#499894", "#f1ce63", "#a0cbe8", "#ffbe7d",
  "#79706e", "#d4a6c8", "#6a9f58"];
const FIXED = { tensor: "#d62728", vector: "#1f77b4", scalar: "#2ca02c", gpsimd: "#9467bd", sync: "#8c564b",
  dma: "#ff7f0e", kernel: "#17becf", fallback: "#e377c2", transfer: "#bcbd22", collective: "#7f3c8d",
  aggregated: "#9aa3ad", host_op: "#a5adb8", cpu_op: "#a5adb8", python_function: "#c9ced6" };
const SERIES_COLOURS = ["#2457c5", "#e07b00", "#2ca02c", "#9467bd"];

// ---------------------------------------------------------------- formatting
const UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
function unitFor(ns) {
  const a = Math.abs(ns);
  for (const [scale, name] of UNITS) if (a >= scale) return [scale, name];
  return [1, "ns"];
}
function fmtTime(ns) {
  const [scale, name] = unitFor(ns);
  const v = ns / scale;
  const digits = Math.abs(v) >= 100 ? 1 : Math.abs(v) >= 10 ? 2 : 3;
  return (+v.toFixed(digits)).toString() + " " + name;
}
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(2) : n.toFixed(0)) + " " + units[i];
}
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}
function hashColour(key) {
  let h = 2166136261;
  for (let i = 0; i < key.length; i++) { h ^= key.charCodeAt(i); h = Math.imul(h, 16777619); }
  return PALETTE[(h >>> 0) % PALETTE.length];
}
function colourOf(key) { return FIXED[key] || hashColour(String(key)); }

// ---------------------------------------------------------------- model decoding
function decodeLane(lane) {
  const n = lane.t.length, start = new Float64Array(n), end = new Float64Array(n);
  let t = 0;
  for (let i = 0; i < n; i++) { t += lane.t[i]; start[i] = t; end[i] = t + lane.d[i]; }
  return { start, end, name: Int32Array.from(lane.n), det: Int32Array.from(lane.a),
    op: lane.o ? Int32Array.from(lane.o) : null, n };
}
function subLane(lane, idx) {
  const n = idx.length, out = { start: new Float64Array(n), end: new Float64Array(n),
    name: new Int32Array(n), det: new Int32Array(n), n };
  let k = 0;
  for (let i = 0; i < n; i++) {
    k += idx[i];
    out.start[i] = lane.start[k]; out.end[i] = lane.end[k]; out.name[i] = lane.name[k]; out.det[i] = lane.det[k];
  }
  return out;
}
function decode(model) {
  const rows = model.rows.map((r, i) => {
    const row = { index: i, name: r.name, kind: r.kind, group: r.group, parent: r.parent, open: !!r.open };
    if (r.lanes) row.lanes = r.lanes.map(decodeLane);
    if (r.t) {
      const n = r.t.length, t = new Float64Array(n);
      let acc = 0;
      for (let k = 0; k < n; k++) { acc += r.t[k]; t[k] = acc; }
      row.t = t;
      row.series = Object.keys(r.series).map((s) => {
        const v = Float64Array.from(r.series[s]);
        let max = 0;
        for (let k = 0; k < v.length; k++) if (v[k] > max) max = v[k];
        return { name: s, v, max };
      });
    }
    return row;
  });
  for (const row of rows) {
    if (row.parent !== undefined && row.parent !== null) {
      row.lanes = [subLane(rows[row.parent].lanes[0], model.rows[row.index].idx)];
      rows[row.parent].children = (rows[row.parent].children || 0) + 1;
      if (row.open) rows[row.parent].open = true; // the model opens per-op rows where no engine rows are
    }
  }
  for (const row of rows) {
    if (!row.lanes) continue;
    let lo = Infinity, hi = -Infinity;
    for (const l of row.lanes) if (l.n) { lo = Math.min(lo, l.start[0]); for (let i = 0; i < l.n; i++) hi = Math.max(hi, l.end[i]); }
    row.extent = lo <= hi ? [lo, hi] : null;
  }
  return rows;
}
// first index whose end >= t (a lane's slices do not overlap, so ends ascend)
function firstEndingAfter(end, n, t) {
  let lo = 0, hi = n;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (end[mid] < t) lo = mid + 1; else hi = mid; }
  return lo;
}
function lastStartingBefore(arr, n, t) {
  let lo = 0, hi = n;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] <= t) lo = mid + 1; else hi = mid; }
  return lo - 1;
}
