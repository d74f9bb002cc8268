// Cove console: local times with the UTC value on hover, ages, copyable ids, kill
// confirmation, and the live sandbox list (Server-Sent Events from /dashboard/live).
"use strict";
// The theme follows the system unless the viewer picked one (kept in this browser).
const themes = ["system", "light", "dark"];
function applyTheme(t) {
  if (t === "system") delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  const b = document.getElementById("theme");
  if (b) b.textContent = "Theme: " + t;
}
applyTheme(localStorage.getItem("cove-theme") || "system");
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
  const announce = (text) => { const a = document.getElementById("announce"); if (a) a.textContent = text; };
  const copy = (text) => {
    if (!navigator.clipboard) { announce("Copying needs a secure page (HTTPS or localhost)"); return; }
    navigator.clipboard.writeText(text).then(() => announce("Copied " + text), () => announce("Could not copy"));
  };
  const copyOf = (el) => el.dataset && el.dataset.copy !== undefined ? el.dataset.copy : el.textContent.trim();
  const copyable = (el) => el.classList && (el.classList.contains("copy") || el.classList.contains("copybtn"));
  document.addEventListener("click", (e) => { if (copyable(e.target)) copy(copyOf(e.target)); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && copyable(e.target) && e.target.tagName !== "BUTTON") copy(copyOf(e.target));
    // "/" jumps to the page's first search box, as on most consoles.
    const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName);
    if (e.key === "/" && !typing && !e.ctrlKey && !e.metaKey) {
      const box = document.querySelector("main form.filters input:not([type=hidden]), main input[name=id]");
      if (box) { e.preventDefault(); box.focus(); box.select(); }
    }
  });
  applyTheme(localStorage.getItem("cove-theme") || "system");
  const themeButton = document.getElementById("theme");
  if (themeButton) themeButton.addEventListener("click", () => {
    const next = themes[(themes.indexOf(localStorage.getItem("cove-theme") || "system") + 1) % themes.length];
    localStorage.setItem("cove-theme", next);
    applyTheme(next);
  });
  for (const a of document.querySelectorAll("nav a")) {
    if (a.pathname === location.pathname) a.setAttribute("aria-current", "page");
  }
  for (const f of document.querySelectorAll("form[data-confirm]")) {
    f.addEventListener("submit", (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
  }
  for (const tz of document.querySelectorAll("input[data-tz]")) tz.value = new Date().getTimezoneOffset();
  const logs = document.querySelector("table[data-tail]");
  if (logs && window.EventSource) {
    const state = document.getElementById("tail-state");
    const src = new EventSource(logs.dataset.tail);
    src.addEventListener("open", () => { state.textContent = "live"; });
    src.addEventListener("error", () => { if (src.readyState === EventSource.CONNECTING) state.textContent = "reconnecting…"; });
    src.addEventListener("lines", (e) => {
      const body = logs.tBodies[0];
      const empty = body.querySelector("tr.empty");
      if (empty) empty.remove();
      const t = document.createElement("template");
      t.innerHTML = e.data;
      localize(t.content);
      body.prepend(t.content);
    });
    src.addEventListener("failure", (e) => { src.close(); state.textContent = "live tail stopped: " + e.data; state.className = "error"; });
    src.addEventListener("done", () => { src.close(); location.reload(); });
  }
  const table = document.querySelector("table[data-live]");
  if (table && window.EventSource) {
    const src = new EventSource(table.dataset.live);
    const state = document.getElementById("list-state");
    src.addEventListener("open", () => { state.textContent = "live"; });
    src.addEventListener("error", () => { if (src.readyState === EventSource.CONNECTING) state.textContent = "reconnecting…"; });
    src.addEventListener("rows", (e) => {
      const nl = e.data.indexOf("\n");
      document.getElementById("total").textContent = e.data.slice(0, nl);
      const body = table.tBodies[0];
      body.innerHTML = e.data.slice(nl + 1);
      localize(body);
    });
    src.addEventListener("failure", (e) => {
      src.close();
      state.textContent = "";
      const p = document.createElement("p");
      p.className = "error"; p.setAttribute("role", "alert"); p.textContent = "Live updates stopped: " + e.data;
      table.before(p);
    });
  }
});
