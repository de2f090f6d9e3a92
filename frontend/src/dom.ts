// Tiny DOM builder. Data (run names, tags, messages) only ever goes through textContent or
// attributes, never through innerHTML, so a run named `<img onerror=...>` stays text.

type Child = Node | string | null | undefined | false;

export interface Props {
  class?: string;
  title?: string;
  text?: string;
  attrs?: Record<string, string>;
  data?: Record<string, string>;
  on?: Partial<{[K in keyof HTMLElementEventMap]: (event: HTMLElementEventMap[K]) => void}>;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  children: Child[] = [],
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props.class) node.className = props.class;
  if (props.title) node.title = props.title;
  if (props.text !== undefined) node.textContent = props.text;
  for (const [name, value] of Object.entries(props.attrs ?? {})) node.setAttribute(name, value);
  for (const [name, value] of Object.entries(props.data ?? {})) node.dataset[name] = value;
  for (const [name, handler] of Object.entries(props.on ?? {})) {
    node.addEventListener(name, handler as EventListener);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

export function clear(node: Element): void {
  node.replaceChildren();
}
