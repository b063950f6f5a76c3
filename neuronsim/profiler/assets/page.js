/* neuronsim report: sortable tables, op links into the timelines, and the page start.
 * window.neuronsimReport exposes the timelines (the browser tests drive them). */
// ---------------------------------------------------------------- sortable tables
function sortable(table) {
  const heads = table.querySelectorAll("thead th");
  heads.forEach((th, col) => th.addEventListener("click", () => {
    const asc = th.getAttribute("aria-sort") !== "ascending";
    heads.forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const key = (r) => { const c = r.cells[col]; return c.dataset.v !== undefined ? +c.dataset.v : c.textContent.toLowerCase(); };
    rows.sort((a, b) => { const x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
    rows.forEach((r) => body.appendChild(r));
  }));
}

// ---------------------------------------------------------------- page start
function start() {
  const timelines = [];
  document.querySelectorAll("[data-timeline]").forEach((el) => {
    const data = document.getElementById(el.dataset.timeline);
    timelines.push(new Timeline(el, JSON.parse(data.textContent)));
  });
  document.querySelectorAll("[data-link-timelines]").forEach((box) => {
    const link = () => {
      for (const t of timelines) t.linked = box.checked ? timelines.filter((o) => o !== t) : [];
      if (box.checked && timelines.length) timelines[0].setView(timelines[0].view.start, timelines[0].view.end);
    };
    box.addEventListener("change", link);
    link();
  });
  document.querySelectorAll("table.sortable").forEach(sortable);
  document.addEventListener("click", (e) => {
    const el = e.target.closest("[data-op]");
    if (!el) return;
    const index = el.dataset.timelineIndex || "0";
    const which = index === "all" ? timelines.filter((t) => t.model.clock === "simulated") : [timelines[+index]];
    which.forEach((t, k) => t && t.findOp(el.dataset.op, k === 0));
  });
  window.neuronsimReport = { timelines, fmtTime };
  document.documentElement.dataset.ready = "1";
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
