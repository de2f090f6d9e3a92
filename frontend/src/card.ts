// The frame around one chart: a title, the tag it shows, a body, and a state attribute
// (loading, ready, empty, error) that tests and the load benchmark wait on.

import {el} from './dom';
import {bindText} from './i18n';

export type CardState = 'loading' | 'ready' | 'empty' | 'error';

export interface Card {
  root: HTMLElement;
  body: HTMLElement;
  note: HTMLElement;
  setState(state: CardState, noteKey?: string, params?: Record<string, string | number>): void;
}

export function chartCard(id: string, titleKey: string, tag: string, wide = false): Card {
  const title = bindText(el('span', {class: 'card-title'}), titleKey);
  const tagLabel = el('span', {class: 'card-tag', text: tag, title: tag});
  const note = el('div', {class: 'card-note'});
  const body = el('div', {class: 'card-body'});
  const root = el('section', {class: wide ? 'card wide' : 'card', data: {chart: id, state: 'loading'}}, [
    el('header', {class: 'card-header'}, [title, tagLabel]),
    note,
    body,
  ]);
  return {
    root,
    body,
    note,
    setState(state, noteKey, params) {
      root.dataset.state = state;
      if (noteKey) bindText(note, noteKey, params);
      else {
        delete note.dataset.i18n;
        note.textContent = '';
      }
    },
  };
}
