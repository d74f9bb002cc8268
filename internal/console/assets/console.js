// Cove console: local times with the UTC value on hover, ages, copyable ids, kill
// confirmation, and the live sandbox list (Server-Sent Events from /dashboard/live).
"use strict";
function localize(root) {
  for (const t of root.querySelectorAll("time[datetime]")) {
    const d = new Date(t.dateTime);
    if (!isNaN(d)) { t.textContent = d.toLocaleString(); t.title = t.dateTime + " (UTC)"; }
  }
  ages(root);
}
function ages(root) {
  const now = Date.now();
  for (const a of root.querySelectorAll("[data-since]")) {
    let s = Math.max(0, Math.round((now - new Date(a.dataset.since)) / 1000));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); s %= 60;
    a.textContent = (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
  }
}
document.addEventListener("DOMContentLoaded", () => {
  localize(document);
  setInterval(() => ages(document), 1000);
  const copy = (el) => navigator.clipboard && navigator.clipboard.writeText(el.textContent.trim());
  document.addEventListener("click", (e) => { if (e.target.classList.contains("copy")) copy(e.target); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && e.target.classList && e.target.classList.contains("copy")) copy(e.target);
  });
  for (const f of document.querySelectorAll("form[data-confirm]")) {
    f.addEventListener("submit", (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
  }
  const table = document.querySelector("table[data-live]");
  if (table && window.EventSource) {
    const src = new EventSource(table.dataset.live);
    src.addEventListener("rows", (e) => {
      const nl = e.data.indexOf("\n");
      document.getElementById("total").textContent = e.data.slice(0, nl);
      const body = table.tBodies[0];
      body.innerHTML = e.data.slice(nl + 1);
      localize(body);
    });
    src.addEventListener("failure", (e) => {
      src.close();
      const p = document.createElement("p");
      p.className = "error"; p.setAttribute("role", "alert"); p.textContent = "Live updates stopped: " + e.data;
      table.before(p);
    });
  }
});
