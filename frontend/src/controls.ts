// The chart settings bar of the run and compare views: y scale, smoothing, "ignore outliers in
// chart scaling" and the x axis, as in TensorBoard's Scalars tab. One shared set of settings.

import {el} from './dom';
import {bindText, t} from './i18n';
import {onSettings, settings, updateSettings, type XAxis, type YScale} from './settings';

function options(select: HTMLSelectElement, entries: [string, string][], value: string): void {
  select.replaceChildren(...entries.map(([v, key]) => el('option', {text: t(key), attrs: {value: v}})));
  select.value = value;
}

export class SettingsBar {
  readonly root: HTMLElement;
  private readonly yScale = el('select', {class: 'input', data: {setting: 'yScale'}});
  private readonly xAxis = el('select', {class: 'input', data: {setting: 'xAxis'}});
  private readonly smoothing = el('input', {
    class: 'smoothing',
    data: {setting: 'smoothing'},
    attrs: {type: 'range', min: '0', max: '0.99', step: '0.01'},
  });
  private readonly smoothingValue = el('span', {class: 'smoothing-value'});
  private readonly outliers = el('input', {data: {setting: 'ignoreOutliers'}, attrs: {type: 'checkbox'}});
  private readonly labels: [HTMLElement, string][] = [];

  constructor() {
    const labelled = (key: string, control: HTMLElement) => {
      const text = el('span', {class: 'setting-label'});
      this.labels.push([text, key]);
      return el('label', {class: 'setting'}, [text, control]);
    };
    this.yScale.addEventListener('change', () => updateSettings({yScale: this.yScale.value as YScale}));
    this.xAxis.addEventListener('change', () => updateSettings({xAxis: this.xAxis.value as XAxis}));
    this.smoothing.addEventListener('input', () => {
      this.smoothingValue.textContent = Number(this.smoothing.value).toFixed(2);
    });
    this.smoothing.addEventListener('change', () => updateSettings({smoothing: Number(this.smoothing.value)}));
    this.outliers.addEventListener('change', () => updateSettings({ignoreOutliers: this.outliers.checked}));
    this.root = el('div', {class: 'settings-bar'}, [
      labelled('settingYScale', this.yScale),
      labelled('settingSmoothing', el('span', {class: 'smoothing-box'}, [this.smoothing, this.smoothingValue])),
      el('label', {class: 'setting'}, [this.outliers, bindText(el('span', {class: 'setting-label'}), 'settingOutliers')]),
      labelled('settingXAxis', this.xAxis),
    ]);
    onSettings(() => this.render());
    this.render();
  }

  render(): void {
    for (const [node, key] of this.labels) node.textContent = t(key);
    options(this.yScale, [['auto', 'scaleAuto'], ['log', 'scaleLog'], ['linear', 'scaleLinear']], settings.yScale);
    options(this.xAxis, [['step', 'step'], ['relative', 'xRelative'], ['wall', 'xWall']], settings.xAxis);
    this.smoothing.value = String(settings.smoothing);
    this.smoothingValue.textContent = settings.smoothing.toFixed(2);
    this.outliers.checked = settings.ignoreOutliers;
  }
}
