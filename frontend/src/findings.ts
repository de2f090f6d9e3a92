// The findings list of one run: severity, kind, step range, message, evidence and advice.
// Clicking a finding asks the run view to zoom every chart to it. The server writes every text of
// a finding in the tab's language (its message catalogue); this module only lays it out.

import type {Finding} from './api';
import {el} from './dom';
import {evidenceBlock} from './evidence';
import {graphLink} from './graphLinks';
import {formatStep} from './format';
import {bindText, label, t} from './i18n';
import {scalarsUrl} from './tbLinks';

export function findingKey(finding: Finding): string {
  return `${finding.kind}@${finding.step}:${finding.tag}`;
}

function adviceOf(finding: Finding): string | null {
  if (typeof finding.advice === 'string') return finding.advice;
  const fromEvidence = finding.evidence?.advice;
  return typeof fromEvidence === 'string' ? fromEvidence : null;
}

function stepText(finding: Finding): string {
  if (finding.end_step !== undefined && finding.end_step !== finding.step) {
    return t('steps', {from: formatStep(finding.step), to: formatStep(finding.end_step)});
  }
  return `${t('step')} ${formatStep(finding.step)}`;
}

/** The diagnosis's cause sentence, unless the message already says it (the server's messages
 * do; this covers a finding written without it). */
function causeLine(finding: Finding): HTMLElement | null {
  const detail = finding.evidence?.cause_detail;
  if (typeof detail !== 'string' || !detail || finding.message.includes(detail)) return null;
  return el('p', {class: 'finding-cause'}, [el('strong', {text: `${t('likelyCause')}${t('colon')}`}), detail]);
}

export function renderFindings(
  container: HTMLElement,
  findings: Finding[],
  activeKey: string | null,
  onSelect: (finding: Finding) => void,
  run: string | null = null,
): void {
  const scroll = container.scrollTop;
  if (!findings.length) {
    container.replaceChildren(bindText(el('p', {class: 'empty'}), 'noFindings'));
    return;
  }
  const items = findings.map((finding) => {
    const advice = adviceOf(finding);
    const key = findingKey(finding);
    const item = el(
      'li',
      {
        class: `finding sev-${finding.severity}${key === activeKey ? ' active' : ''}`,
        data: {key, step: String(finding.step), kind: finding.kind},
        attrs: {tabindex: '0', role: 'button'},
        on: {
          click: () => onSelect(finding),
          keydown: (event) => {
            if (event.key === 'Enter' || event.key === ' ') onSelect(finding);
          },
        },
      },
      [
        el('div', {class: 'finding-head'}, [
          el('span', {class: `badge sev-${finding.severity}`, text: label('severity', finding.severity)}),
          el('span', {class: 'finding-kind', text: label('kind', finding.kind)}),
          el('span', {class: 'finding-steps', text: stepText(finding)}),
        ]),
        el('p', {class: 'finding-message', text: finding.message}),
        causeLine(finding),
        finding.tag
          ? el('div', {class: 'finding-tag'}, [
              el('span', {text: finding.tag}),
              run
                ? el('a', {
                    class: 'tb-link',
                    text: `${t('scalars')} ↗`,
                    attrs: {href: scalarsUrl(run, finding.tag), target: '_top'},
                    on: {click: (event) => event.stopPropagation()},
                  })
                : null,
              run ? graphLink(run, finding) : null,
            ])
          : null,
        finding.evidence ? evidenceBlock(finding.evidence) : null,
        advice ? el('p', {class: 'finding-advice'}, [el('strong', {text: `${t('advice')}${t('colon')}`}), advice]) : null,
      ],
    );
    return item;
  });
  container.replaceChildren(el('ol', {class: 'findings'}, items));
  container.scrollTop = scroll;
}
