// One floating tooltip styled like TensorBoard's (Material: dark grey, white text, small radius)
// for every element with `data-tip`, instead of the browser's plain `title` box. It follows focus
// too, so keyboard users read it, and it never covers the element it explains.

let tip: HTMLElement | null = null;
let owner: HTMLElement | null = null;

function element(): HTMLElement {
  if (!tip) {
    tip = document.createElement('div');
    tip.className = 'tb-tooltip';
    tip.setAttribute('role', 'tooltip');
    tip.hidden = true;
    document.body.append(tip);
  }
  return tip;
}

/** Shows (or moves) the tooltip for `target` now, e.g. after its text changed under the pointer. */
export function showTip(target: HTMLElement): void {
  show(target);
}

function show(target: HTMLElement): void {
  const text = target.dataset.tip;
  if (!text) return;
  owner = target;
  const node = element();
  node.textContent = text;
  node.lang = target.dataset.tipLang ?? '';
  node.hidden = false;
  const box = target.getBoundingClientRect();
  const width = node.offsetWidth;
  const height = node.offsetHeight;
  const left = Math.max(4, Math.min(window.innerWidth - width - 4, box.left + box.width / 2 - width / 2));
  const below = box.bottom + 6;
  const top = below + height > window.innerHeight - 4 ? Math.max(4, box.top - height - 6) : below;
  node.style.left = `${left}px`;
  node.style.top = `${top}px`;
}

function hide(): void {
  owner = null;
  if (tip) tip.hidden = true;
}

function tipTarget(event: Event): HTMLElement | null {
  return event.target instanceof Element ? (event.target.closest('[data-tip]') as HTMLElement | null) : null;
}

/** Installs the document-wide listeners once. */
export function installTooltips(): void {
  document.addEventListener('mouseover', (event) => {
    const target = tipTarget(event);
    if (target && target !== owner) show(target);
    else if (!target && owner) hide();
  });
  document.addEventListener('focusin', (event) => {
    const target = tipTarget(event);
    if (target) show(target);
  });
  document.addEventListener('focusout', hide);
  document.addEventListener('scroll', hide, true);
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') hide();
  });
}

/** Sets (or clears) an element's tooltip text. */
export function setTip(node: HTMLElement, text: string | null | undefined, lang?: string): HTMLElement {
  if (text) node.dataset.tip = text;
  else delete node.dataset.tip;
  if (lang) node.dataset.tipLang = lang;
  node.removeAttribute('title');
  return node;
}
