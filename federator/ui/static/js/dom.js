// Building DOM without innerHTML: every text goes in as a text node, so nothing from the API is ever
// parsed as markup.

/**
 * h("tag.class1.class2", {attributes, on: {click: fn}, dataset}, ...children)
 * Children may be strings, numbers, nodes, arrays, null/undefined/false (skipped).
 */
export function h(spec, props, ...children) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (props && (typeof props !== "object" || props instanceof Node || Array.isArray(props))) {
    children.unshift(props);
    props = null;
  }
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "class") {
      el.className = [el.className, value].filter(Boolean).join(" ");
    } else if (key === "text") {
      el.textContent = String(value);
    } else if (key in el && !key.includes("-") && key !== "list" && key !== "form") {
      el[key] = value;
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** Replace el's children with the given ones. */
export function fill(el, ...children) {
  clear(el);
  return append(el, children);
}

/** The state boxes every page uses: loading, empty, error. */
export function loading(what) {
  return h("p.state.loading", { role: "status", "aria-busy": "true" }, `Loading ${what}…`);
}

export function empty(title, ...hint) {
  return h("div.state.empty", { role: "status" }, h("p.state-title", title), hint.length ? h("p", ...hint) : null);
}

export function failure(title, error, retry) {
  return h("div.state.error", { role: "alert" },
    h("p.state-title", title),
    h("p", error && error.message ? error.message : String(error || "")),
    retry ? h("button", { type: "button", on: { click: retry } }, "Try again") : null);
}

/** A confirmation dialog (a native <dialog>: focus is trapped and Escape cancels). Resolves true/false. */
export function confirmDialog({ title, body, confirm, danger = true }) {
  return new Promise((resolve) => {
    const yes = h(`button${danger ? ".danger" : ""}`, { type: "submit", value: "yes" }, confirm);
    const no = h("button", { type: "submit", value: "no" }, "Cancel");
    const titleId = `dialog-title-${Math.random().toString(36).slice(2)}`;
    const dialog = h("dialog.confirm", { "aria-labelledby": titleId },
      h("form", { method: "dialog" },
        h("h2", { id: titleId }, title),
        h("p", body),
        h("div.buttons", no, yes)));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.append(dialog);
    dialog.showModal();
    no.focus();
  });
}

let toastBox = null;

/** A short message in the live region (screen readers announce it), gone after a few seconds. */
export function toast(text, kind = "info") {
  toastBox = toastBox || document.getElementById("toasts");
  if (!toastBox) return;
  const item = h(`div.toast.${kind}`, text);
  toastBox.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}
