// persona-memory web UI: small enhancements. Every form works without this file; with it, an
// action's result shows in place (fetch + partial update) instead of reloading the whole page.
"use strict";

(function () {
  const status = document.getElementById("status");

  function say(message, bad) {
    if (!status) return;
    status.hidden = false;
    status.classList.toggle("bad", Boolean(bad));
    status.textContent = message;
  }

  function clearErrors(form) {
    form.querySelectorAll("[data-error-for]").forEach((el) => { el.textContent = ""; });
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
  }

  function showError(form, field, message) {
    const slot = form.querySelector(`[data-error-for="${field}"]`) || form.querySelector("[data-error-for]");
    const control = field ? form.querySelector(`[name="${field}"]`) : null;
    if (control) {
      control.setAttribute("aria-invalid", "true");
      control.focus();
    }
    if (slot) slot.textContent = message;
    else say(message, true);
  }

  function setCount(delta) {
    document.querySelectorAll("[data-count], [data-waiting]").forEach((el) => {
      const now = parseInt(el.textContent, 10);
      if (!Number.isNaN(now)) el.textContent = String(Math.max(0, now + delta));
    });
  }

  // Move focus somewhere sensible before a row disappears (keyboard users keep their place).
  function focusAfter(row) {
    const next = row.nextElementSibling || row.previousElementSibling;
    const target = next && next.querySelector("input, button, summary, a");
    if (target) target.focus();
    else document.getElementById("main").focus();
  }

  function removeRow(row) {
    if (!row) return;
    const list = row.parentElement;
    if (row.contains(document.activeElement)) focusAfter(row);
    row.remove();
    if (list && !list.children.length) {
      const group = list.closest("[data-group]");
      if (group) group.remove();
      if (!document.querySelector("[data-row-id]")) {
        if (document.getElementById("bulk")) {
          // the page is done: the next items (if any) come from the server
          window.location.assign(window.location.pathname + window.location.search.replace(/([?&])cursor=[^&]*&?/, "$1"));
          return;
        }
        document.querySelectorAll("[data-empty]").forEach((el) => { el.hidden = false; });
        document.querySelectorAll("[data-delete-all]").forEach((el) => { el.hidden = true; });
      }
    }
  }

  function selected() {
    return Array.from(document.querySelectorAll('input[type="checkbox"][form="bulk"]'));
  }

  function updateSelection() {
    const label = document.querySelector("[data-selected-count]");
    const boxes = selected();
    const ticked = boxes.filter((b) => b.checked).length;
    if (label) label.textContent = ticked ? `${ticked} selected` : "Select items to act on many at once.";
    const all = document.querySelector("[data-select-all]");
    if (all) all.textContent = boxes.length && ticked === boxes.length ? "Select none" : "Select all";
  }

  async function submit(form, submitter) {
    const kind = form.dataset.enhance;
    const body = new FormData(form, submitter);
    if (form.dataset.busy) return; // one request per form at a time
    form.dataset.busy = "1";
    form.setAttribute("aria-busy", "true");
    clearErrors(form);
    let answer = null;
    let ok = false;
    try {
      const response = await fetch(form.getAttribute("action"), {
        method: "POST",
        body: body,
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      ok = response.ok;
      answer = await response.json().catch(() => null);
      if (response.status === 401) {
        window.location.assign("/ui/signed-out?expired=1");
        return;
      }
    } catch (err) {
      answer = { error: "The server could not be reached. Check your connection and try again." };
    } finally {
      delete form.dataset.busy;
      form.removeAttribute("aria-busy");
    }
    if (!ok || !answer) {
      showError(form, answer && answer.field, (answer && answer.error) || "That did not work. Reload the page and try again.");
      return;
    }
    const row = form.closest("[data-row-id]");
    if (kind === "decide") {
      removeRow(row);
      setCount(-1);
    } else if (kind === "bulk") {
      (answer.done || []).forEach((id) => removeRow(document.querySelector(`[data-row-id="${id}"]`)));
      setCount(-(answer.done || []).length);
      updateSelection();
      if (answer.failed && answer.failed.length) {
        showError(form, "bulk", answer.message);
        return;
      }
    } else if (kind === "edit" && row) {
      const value = row.querySelector("[data-value]");
      if (value) value.textContent = answer.value;
      const badge = row.querySelector(".badge.pending");
      if (badge) badge.remove();
      const details = form.closest("details");
      if (details) {
        details.open = false;
        details.querySelector("summary").focus();
      }
    } else if (kind === "remove") {
      removeRow(row);
    } else if (kind === "settings" && answer.inherit) {
      Object.entries(answer.inherit).forEach(([name, effect]) => {
        const el = document.getElementById(`${name}-inherit`);
        if (!el) return;
        el.querySelector("strong").textContent = effect.value;
        el.querySelector("span").textContent = effect.source;
      });
    }
    say(answer.message || "Done.");
  }

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.enhance || !window.fetch) return;
    event.preventDefault();
    submit(form, event.submitter);
  });

  document.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.form && event.target.form.id === "bulk") updateSelection();
  });

  const all = document.querySelector("[data-select-all]");
  if (all) {
    all.hidden = false;
    all.addEventListener("click", () => {
      const boxes = selected();
      const every = boxes.every((b) => b.checked);
      boxes.forEach((b) => { b.checked = !every; });
      updateSelection();
    });
  }
})();
