// Cove console: local times with the UTC value on hover, copyable ids, kill confirmation.
document.addEventListener("DOMContentLoaded", () => {
  for (const t of document.querySelectorAll("time[datetime]")) {
    const d = new Date(t.dateTime);
    if (!isNaN(d)) { t.textContent = d.toLocaleString(); t.title = t.dateTime + " (UTC)"; }
  }
  const copy = (el) => navigator.clipboard && navigator.clipboard.writeText(el.textContent.trim());
  for (const c of document.querySelectorAll(".copy")) {
    c.addEventListener("click", () => copy(c));
    c.addEventListener("keydown", (e) => { if (e.key === "Enter") copy(c); });
  }
  for (const f of document.querySelectorAll("form[data-confirm]")) {
    f.addEventListener("submit", (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
  }
});
