// The formatting of evidence values by unit (the field labels and code names are text tables,
// checked where the texts live).
import {afterEach, describe, expect, it} from 'vitest';

import {evidenceBlock, fieldLabel, formatField, formatLogRatio} from '../src/evidence';
import {setLang} from '../src/i18n';

afterEach(() => setLang('en'));

describe('formatLogRatio', () => {
  it('reads a small natural-log change as a percentage', () => {
    expect(formatLogRatio(Math.log(1.032))).toBe('+3.2%');
    expect(formatLogRatio(-0.1)).toBe('−9.52%');
    expect(formatLogRatio(0)).toBe('+0%');
    expect(formatLogRatio(0.4)).toBe('+49.2%'); // just below a factor of 1.5
  });

  it('reads a large one as a factor', () => {
    expect(formatLogRatio(Math.log(1.5))).toBe('×1.5');
    expect(formatLogRatio(Math.log(12.5))).toBe('×12.5');
    expect(formatLogRatio(Math.log(0.25))).toBe('÷4');
    expect(formatLogRatio(Math.log(1e7))).toBe('×1.00e+7');
  });
});

describe('formatField', () => {
  it('formats each value by its unit', () => {
    expect(formatField('peak_step', 1234567)).toBe('1,234,567');
    expect(formatField('change_log', Math.log(3))).toBe('×3');
    expect(formatField('zero_share', 0.12345)).toBe('12.3%');
    expect(formatField('median_step_time_ms', 12.34567)).toBe('12.35 ms');
    expect(formatField('growth_factor', 3.14159)).toBe('×3.14');
    expect(formatField('z_score', 4.5678)).toBe('4.57 σ');
    expect(formatField('points', 12345.4)).toBe('12,345');
    expect(formatField('baseline', 0.000123)).toBe('1.23e-4');
  });

  it('formats values whatever the key', () => {
    expect(formatField('not_a_field', 2.5)).toBe('2.5');
    expect(formatField('not_a_field', null)).toBe('—');
    expect(formatField('not_a_field', 'text as is')).toBe('text as is');
    expect(formatField('not_a_field', true)).toBe('yes');
    expect(formatField('not_a_field', {a: 1})).toBe('{"a":1}');
    expect(formatField('values', [1, 2, 3])).toBe('1, 2, 3');
    expect(formatField('values', [1, 2, 3, 4, 5, 6, 7, 8])).toBe('1, 2, 3, 4, 5, 6 … (8)');
    expect(formatField('parameters', ['a.weight', 0.5])).toBe('a.weight, 0.5');
  });

  it('shows an unknown code readably', () => {
    expect(formatField('schedule', 'some_new_schedule')).toBe('some new schedule');
  });

  it('answers booleans in the chosen language', () => {
    setLang('zh');
    expect(formatField('gradual', false)).toBe('否');
  });
});

describe('evidenceBlock', () => {
  it('lists the fields, formatted, and keeps the raw JSON behind a toggle', () => {
    const evidence = {peak_step: 1500, zero_share: 0.5, cause: 'bad_batch', advice: 'x', related: {a: 1}, new_field: 3};
    const block = evidenceBlock(evidence) as HTMLElement;
    const keys = [...block.querySelectorAll('dt')].map((n) => n.dataset.key);
    expect(keys).toEqual(['peak_step', 'zero_share', 'new_field']); // cause and advice are shown elsewhere
    const values = [...block.querySelectorAll('dd')].map((n) => n.textContent);
    expect(values).toEqual(['1,500', '50%', '3']);
    expect(fieldLabel('new_field')).toBe('New field');
    expect(JSON.parse(block.querySelector('pre')?.textContent ?? '')).toEqual(evidence);
  });

  it('is nothing for empty evidence', () => {
    expect(evidenceBlock({})).toBeNull();
    expect(evidenceBlock({advice: 'only advice'})).toBeNull();
    expect(evidenceBlock({related: {}})).not.toBeNull();
  });
});
