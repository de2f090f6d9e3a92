// A finding's evidence as a reader wants it: each field labelled in the chosen language, with its
// unit and a formatted value; log-scale quantities as factors or percentages; the raw JSON (with
// `related`, the diagnosis's cross-signal figures) behind a "details" toggle.

import {el} from './dom';
import {formatNumber, formatStep} from './format';
import {bindText, lang, t} from './i18n';

/** How a value reads: a step, a natural-log ratio, a share, a duration, a plain number... */
type Unit = 'step' | 'logratio' | 'share' | 'ms' | 'factor' | 'count' | 'number' | 'ids' | 'code' | 'bool' | 'sigma' | 'names';

interface Field {
  en: string;
  zh: string;
  unit: Unit;
}

const F = (en: string, zh: string, unit: Unit = 'number'): Field => ({en, zh, unit});

/** Every evidence field the detectors write (analysis/detectors, analysis/checks, diagnosis). */
export const FIELDS: Record<string, Field> = {
  allowed_change_log: F('Change allowed as noise', '允许的噪声变化', 'logratio'),
  baseline: F('Baseline', '基线'),
  baseline_norm: F('Baseline norm', '基线范数'),
  best_eval_loss: F('Best eval loss', '最佳验证损失'),
  best_eval_step: F('Best eval step', '最佳验证步', 'step'),
  best_loss: F('Best loss', '最低损失'),
  blow_up_step: F('Blew up into NaN/Inf at step', '溢出为 NaN/Inf 的步', 'step'),
  change_log: F('Loss change over the tail', '尾段损失变化', 'logratio'),
  change_stderr_log: F('Standard error of that change', '该变化的标准误', 'logratio'),
  collapse_factor: F('Collapse factor', '塌缩倍数', 'factor'),
  detected_at_step: F('Detected at step', '检测到的步', 'step'),
  earlier_improvement_per_doubling_log: F('Earlier improvement per doubling of steps', '此前每翻倍步数的改善', 'logratio'),
  early_layer_ids: F('Early layers (index)', '前几层（序号）', 'ids'),
  early_layers: F('Early layers', '前几层数量', 'count'),
  early_to_late_ratio: F('Early / late layer norm', '前层/后层范数比', 'factor'),
  end_loss: F('Final loss', '最终损失'),
  end_points: F('Points in the final level', '最终水平的点数', 'count'),
  end_share: F('Final loss, share of the starting loss', '最终损失占起始损失的比例', 'share'),
  eval_noise_sigma_log: F('Eval loss noise', '验证损失噪声', 'logratio'),
  evals: F('Evaluations', '评估次数', 'count'),
  excess_log: F('Excess over the trend', '超出趋势', 'logratio'),
  excess_z: F('Excess (z-score)', '超出量（z 分数）', 'sigma'),
  factor: F('Factor', '倍数', 'factor'),
  first_finite_grad_norm: F('First finite gradient norm', '首个有限梯度范数'),
  first_finite_grad_norm_step: F('Step of that gradient norm', '该梯度范数所在步', 'step'),
  first_loss: F('First logged loss', '首个记录的损失'),
  first_rise_step: F('First rise at step', '首次上升步', 'step'),
  first_step: F('First step', '起始步', 'step'),
  floor: F('Floor', '下限'),
  floor_lr: F('Lowest learning rate', '最低学习率'),
  gradual: F('Gradual', '渐进', 'bool'),
  growth_factor: F('Growth factor', '增长倍数', 'factor'),
  in_converged_regime: F('In the converged regime (peak at most 1% of the start)', '处于已收敛区间（峰值不超过起始损失的 1%）', 'bool'),
  in_warmup: F('During warm-up', '处于预热期', 'bool'),
  last_eval_loss: F('Last eval loss', '最后验证损失'),
  last_healthy_step: F('Last healthy step', '最后健康步', 'step'),
  late_layer_ids: F('Late layers (index)', '后几层（序号）', 'ids'),
  late_layers: F('Late layers', '后几层数量', 'count'),
  layers: F('Layers', '层数', 'count'),
  loss_drop_factor: F('Loss drop factor', '损失下降倍数', 'factor'),
  lr_share_of_peak: F('Learning rate, share of its peak', '学习率占峰值比例', 'share'),
  margin_log: F('Margin', '判定余量', 'logratio'),
  median_after: F('Median after', '之后的中位数'),
  median_before: F('Median before', '之前的中位数'),
  median_norm: F('Median norm', '范数中位数'),
  median_relative_deviation: F('Median relative deviation', '相对偏差中位数', 'share'),
  median_step_time_ms: F("This rank's median step time", '该进程的单步耗时中位数', 'ms'),
  monitored: F('Parameters monitored', '监控的参数数', 'count'),
  noise_sigma_log: F('Noise level', '噪声水平', 'logratio'),
  noise_tail_nu: F('Noise tail (Student-t ν)', '噪声尾部（Student-t ν）'),
  nonfinite_from_step: F('Non-finite from step', '非有限值起始步', 'step'),
  nonfinite_points: F('Non-finite points', '非有限值点数', 'count'),
  nonfinite_to_end_from_step: F('Non-finite to the end from step', '直到结束都为非有限值的起始步', 'step'),
  norm_after: F('Norm after', '之后的范数'),
  norm_before: F('Norm before', '之前的范数'),
  others_median_ms: F("Other ranks' median step time", '其他进程的单步耗时中位数', 'ms'),
  overflowed: F('Overflowed steps', '溢出步数', 'count'),
  p_value: F('p-value', 'p 值'),
  parameter_count: F('Parameters affected', '受影响的参数数', 'count'),
  parameters: F('Parameters', '参数', 'names'),
  peak_loss: F('Peak loss', '峰值损失'),
  peak_lr: F('Peak learning rate', '峰值学习率'),
  peak_norm: F('Peak norm', '峰值范数'),
  peak_step: F('Peak step', '峰值步', 'step'),
  peak_value: F('Peak value', '峰值'),
  persists_to_end: F('Lasts to the end', '持续到结束', 'bool'),
  plateau_loss: F('Plateau loss', '平台期损失'),
  points: F('Points', '点数', 'count'),
  ranks: F('Ranks compared', '比较的进程数', 'count'),
  ratio_end_to_start: F('Final / starting loss', '最终/起始损失比', 'factor'),
  ratio_to_best: F('Ratio to the best', '相对最佳的比值', 'factor'),
  ratio_to_trend: F('Ratio to the local trend', '相对局部趋势的比值', 'factor'),
  rise_onset_step: F('Rise began at step', '开始上升的步', 'step'),
  rise_z: F('Rise (z-score)', '上升量（z 分数）', 'sigma'),
  schedule: F('Schedule', '调度类型', 'code'),
  slowdown: F('Slowdown', '变慢倍数', 'factor'),
  start_loss: F('Starting loss', '起始损失'),
  start_step: F('Starting loss at step', '起始损失所在步', 'step'),
  stopped_points: F('Points without change', '未变化的点数', 'count'),
  stuck_from_start: F('Stuck from the start', '从一开始就停滞', 'bool'),
  surprise_log_p: F('Surprise (−log p)', '意外程度（−log p）'),
  surprise_threshold: F('Surprise threshold', '意外程度阈值'),
  tail_points: F('Points in the tail', '尾段点数', 'count'),
  threshold_log: F('Threshold', '阈值', 'logratio'),
  total_count: F('Total', '总数', 'count'),
  train_drop_log: F('Training loss drop', '训练损失下降', 'logratio'),
  update_ratio_before: F('Update / weight ratio before', '此前的更新/权重比'),
  values: F('Values', '取值', 'ids'),
  warmup_end_step: F('Warm-up ends at step', '预热结束步', 'step'),
  what: F('What', '类型', 'code'),
  width_points: F('Width (points)', '宽度（点数）', 'count'),
  windows: F('Windows', '窗口数', 'count'),
  z_score: F('z-score', 'z 分数', 'sigma'),
  zero_share: F('Share of zeros', '零值比例', 'share'),
};

/** Short names of the codes some fields hold (schedule, what). The likely cause is not listed:
 * the server's message says it in the chosen language. */
const CODES: Record<string, [string, string]> = {
  cosine: ['cosine', '余弦'],
  linear: ['linear', '线性'],
  constant: ['constant', '恒定'],
  step: ['step decay', '阶梯衰减'],
  exponential: ['exponential', '指数'],
  regression: ['slowed down during the run', '训练中变慢'],
  slow_rank: ['one rank slower than the others', '某个进程慢于其他进程'],
  rank_loss: ['one rank\'s loss departs from the others', '某个进程的损失偏离其他进程'],
};

/** Shown elsewhere on the finding (advice, the cause in the message) or only in the raw details. */
const NOT_LISTED = new Set(['advice', 'cause', 'cause_advice', 'cause_detail', 'related']);

function humanize(key: string): string {
  return key.replace(/_/g, ' ').replace(/^\w/, (c) => c.toUpperCase());
}

export function fieldLabel(key: string): string {
  const field = FIELDS[key];
  if (!field) return humanize(key);
  return lang() === 'zh' ? field.zh : field.en;
}

function codeText(value: string): string {
  const known = CODES[value];
  if (known) return lang() === 'zh' ? known[1] : known[0];
  return value.replace(/_/g, ' ');
}

/** A natural-log ratio as the change it means: "+3.2%" when small, "×12.5" or "÷4" when large. */
export function formatLogRatio(value: number): string {
  const factor = Math.exp(value);
  if (Math.abs(value) < Math.log(1.5)) {
    const percent = (factor - 1) * 100;
    return `${percent >= 0 ? '+' : '−'}${formatNumber(Math.abs(Number(percent.toPrecision(3))))}%`;
  }
  return factor >= 1 ? `×${formatNumber(Number(factor.toPrecision(3)))}` : `÷${formatNumber(Number((1 / factor).toPrecision(3)))}`;
}

export function formatField(key: string, value: unknown): string {
  const unit = FIELDS[key]?.unit ?? 'number';
  if (value === null || value === undefined) return '—';
  if (typeof value === 'boolean') return t(value ? 'yes' : 'no');
  if (Array.isArray(value)) {
    const shown = value.slice(0, 6).map((v) => (typeof v === 'number' ? formatNumber(v) : String(v)));
    return value.length > 6 ? `${shown.join(', ')} … (${value.length})` : shown.join(', ');
  }
  if (typeof value === 'string') return unit === 'code' ? codeText(value) : value;
  if (typeof value !== 'number') return JSON.stringify(value);
  switch (unit) {
    case 'step':
      return formatStep(value);
    case 'logratio':
      return formatLogRatio(value);
    case 'share':
      return `${formatNumber(Number((value * 100).toPrecision(3)))}%`;
    case 'ms':
      return `${formatNumber(Number(value.toPrecision(4)))} ms`;
    case 'factor':
      return `×${formatNumber(Number(value.toPrecision(3)))}`;
    case 'sigma':
      return `${formatNumber(Number(value.toPrecision(3)))} σ`;
    case 'count':
      return Math.round(value).toLocaleString('en-US');
    default:
      return formatNumber(value);
  }
}

/** The labelled list, plus the raw evidence behind a details toggle. */
export function evidenceBlock(evidence: Record<string, unknown>): HTMLElement | null {
  const entries = Object.entries(evidence).filter(([key]) => !NOT_LISTED.has(key));
  if (!entries.length && !('related' in evidence)) return null;
  const list = el(
    'dl',
    {class: 'evidence'},
    entries.flatMap(([key, value]) => [
      el('dt', {text: fieldLabel(key), data: {key}}),
      el('dd', {text: formatField(key, value), data: {key}}),
    ]),
  );
  const raw = el('details', {class: 'evidence-raw', on: {click: (event) => event.stopPropagation()}}, [
    bindText(el('summary'), 'details'),
    el('pre', {text: JSON.stringify(evidence, null, 2), attrs: {lang: 'en'}}),
  ]);
  return el('div', {class: 'evidence-block'}, [list, raw]);
}
