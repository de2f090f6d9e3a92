import {describe, expect, it} from 'vitest';

import {ageSeconds, formatNumber, formatStep, visibleName} from '../src/format';

describe('formatNumber', () => {
  it('keeps four significant digits in the ordinary range', () => {
    expect(formatNumber(3.14159)).toBe('3.142');
    expect(formatNumber(1234.56)).toBe('1235');
    expect(formatNumber(0.00123456)).toBe('0.001235');
    expect(formatNumber(0)).toBe('0');
    expect(formatNumber(-2.5)).toBe('-2.5');
  });

  it('switches to exponents for very large and very small magnitudes', () => {
    expect(formatNumber(1e5)).toBe('1.00e+5');
    expect(formatNumber(54321)).toBe('54320'); // four significant digits below the switch
    expect(formatNumber(0.000999)).toBe('9.99e-4');
    expect(formatNumber(-123456)).toBe('-1.23e+5');
  });

  it('shows missing and non-finite values as such', () => {
    expect(formatNumber(null)).toBe('—');
    expect(formatNumber(undefined)).toBe('—');
    expect(formatNumber(NaN)).toBe('NaN');
    expect(formatNumber(-Infinity)).toBe('-Infinity');
  });
});

describe('formatStep', () => {
  it('rounds and groups thousands', () => {
    expect(formatStep(1234567)).toBe('1,234,567');
    expect(formatStep(41.6)).toBe('42');
    expect(formatStep(null)).toBe('—');
  });
});

describe('ageSeconds', () => {
  it('is the time since an epoch, never negative', () => {
    expect(ageSeconds(100, 160_000)).toBe(60);
    expect(ageSeconds(200, 160_000)).toBe(0); // a clock ahead of ours
    expect(ageSeconds(null)).toBeNull();
  });
});

describe('visibleName', () => {
  it('shows bidirectional and control characters as visible marks', () => {
    expect(visibleName('rtl\u202egnp.exe')).toBe('rtl[U+202E]gnp.exe');
    expect(visibleName('a\tb\u0000')).toBe('a[U+0009]b[U+0000]');
    expect(visibleName('exp1/rank_0 训练')).toBe('exp1/rank_0 训练');
  });
});
