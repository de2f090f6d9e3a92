// English and Chinese strings. The language follows the browser unless the user picked one
// with the switch; the choice is remembered in localStorage.

export type Lang = 'en' | 'zh';
const STORAGE_KEY = 'tb-health.lang';

const EN = {
  title: 'Training health',
  overview: 'Overview',
  run: 'Run',
  compare: 'Compare',
  report: 'Report',
  reportTitle: 'Download a self-contained health report (HTML) of the runs shown',
  refreshing: 'Refreshing…',
  updated: 'Updated {age}',
  loading: 'Loading…',
  loadFailed: 'Could not load: {error}',
  storageProblem: 'Cannot read the logs: {error}. Retrying in {seconds} s; what was read before is still shown.',
  workerRestarting: 'The analysis worker stopped (exit code {code}) and is being restarted; the last results are still shown.',
  workerRestarted: 'The analysis worker stopped and was restarted ({count}×, last exit code {code}); results are current again once re-analysed.',
  analysing: 'analysing: {done} of {total} runs up to date',
  noRuns: 'No runs found in the log directory.',
  noMatch: 'No run matches the filters.',
  filterName: 'Filter runs by name',
  allStatuses: 'All statuses',
  allKinds: 'All kinds',
  colRun: 'Run',
  colStatus: 'Status',
  colCounts: 'Findings',
  colWorst: 'Worst finding',
  colLastStep: 'Last step',
  colUpdated: 'Last update',
  colSignals: 'Series',
  compareSelected: 'Compare selected ({n})',
  selectForCompare: 'Select for comparison',
  job: 'Job {name}',
  ranks: '{n} ranks',
  triageNote: '{full} analysed in full, {online} trusted from their online verdict',
  analysedInFull: 'Analysed in full',
  onlineVerdict: 'online verdict',
  onlineVerdictTip: "Trusted from this rank's own online analysis (it covered the last step and found nothing); not analysed in full here",
  findings: 'Findings',
  noFindings: 'No findings: this run looks healthy.',
  noData: 'No data logged yet.',
  step: 'Step',
  steps: 'Steps {from}–{to}',
  evidence: 'Evidence',
  advice: 'Advice',
  likelyCause: 'Likely cause',
  colon: ': ',
  details: 'details',
  openTimeSeries: 'Open this run and tag in the Time Series tab',
  scalars: 'Scalars',
  graphLink: 'Graph',
  openGraph: 'Show {name} in the Graphs tab',
  downloadCsv: 'CSV',
  downloadJson: 'JSON',
  downloadHint: 'Download these findings',
  refresh: 'Refresh',
  convertHint: '{n} run(s) read from MindSpore summary files: TensorBoard\'s Scalars and Time Series tabs cannot show them. Convert them for those tabs with:',
  copy: 'Copy',
  copied: 'Copied',
  yes: 'yes',
  no: 'no',
  resetZoom: 'Reset zoom',
  chartLoss: 'Loss',
  chartLr: 'Learning rate',
  chartGradNorm: 'Global gradient norm',
  chartLossScale: 'Loss scale',
  chartThroughput: 'Throughput (samples/s)',
  chartStepTime: 'Step time (ms)',
  chartStepTimeS: 'Step time (s)',
  chartEvalLoss: 'Evaluation loss',
  chartHeatmap: 'Per-layer gradient norm (log colour)',
  notLogged: 'Not logged in this run.',
  notOnLogScale: '{n} values at or below 0 are not drawn on this log scale.',
  layers: '{n} layers',
  mean: 'mean',
  min: 'min',
  max: 'max',
  windowMax: 'window max',
  smoothed: 'smoothed',
  xRelative: 'Relative',
  xWall: 'Wall time',
  scaleAuto: 'Auto',
  scaleLog: 'Log',
  scaleLinear: 'Linear',
  settingYScale: 'Y axis',
  settingSmoothing: 'Smoothing',
  settingOutliers: 'Ignore outliers in chart scaling',
  settingXAxis: 'X axis',
  nonfinite: 'non-finite',
  pickRun: 'Choose a run in the overview.',
  pickRuns: 'Select two or more runs in the overview (tick the boxes), then open Compare.',
  finalLoss: 'Final loss',
  bestLoss: 'Best loss',
  best: 'best',
  bestHint: 'Best: lowest final loss among runs without critical findings.',
  open: 'Open',
  secondsAgo: '{n} s ago',
  minutesAgo: '{n} min ago',
  hoursAgo: '{n} h ago',
  daysAgo: '{n} d ago',
  'status.healthy': 'healthy',
  'status.warning': 'warning',
  'status.critical': 'critical',
  'status.no_data': 'no data',
  'severity.info': 'info',
  'severity.warning': 'warning',
  'severity.critical': 'critical',
  'signal.loss': 'loss',
  'signal.lr': 'learning rate',
  'signal.grad_norm': 'gradient norm',
  'signal.loss_scale': 'loss scale',
  'signal.overflow': 'overflow',
  'signal.step_time_ms': 'step time',
  'signal.step_time_s': 'step time',
  'signal.throughput': 'throughput',
  'signal.eval_loss': 'eval loss',
  'signal.loss_max': 'loss max',
  'signal.loss_min': 'loss min',
  'signal.grad_norm_max': 'grad norm max',
  'signal.nonfinite_count': 'non-finite count',
  'signal.overflow_count': 'overflow count',
  'signal.host_time_ms': 'host time',
  'signal.param_grad_norm': 'per-layer grad norm',
};

type Key = keyof typeof EN;

const ZH: Record<Key, string> = {
  title: '训练健康',
  overview: '总览',
  run: '运行',
  compare: '对比',
  report: '报告',
  reportTitle: '下载所显示运行的健康报告（独立 HTML 文件）',
  refreshing: '刷新中…',
  updated: '更新于 {age}',
  loading: '加载中…',
  loadFailed: '加载失败：{error}',
  storageProblem: '无法读取日志：{error}。{seconds} 秒后重试；仍显示此前读到的数据。',
  workerRestarting: '分析进程已停止（退出码 {code}），正在重启；仍显示上次的结果。',
  workerRestarted: '分析进程曾停止并已重启（{count} 次，最近退出码 {code}）；重新分析后结果即为最新。',
  analysing: '分析中：{total} 个运行中 {done} 个已是最新',
  noRuns: '日志目录中没有运行。',
  noMatch: '没有符合筛选条件的运行。',
  filterName: '按名称筛选运行',
  allStatuses: '全部状态',
  allKinds: '全部类型',
  colRun: '运行',
  colStatus: '状态',
  colCounts: '发现',
  colWorst: '最严重的问题',
  colLastStep: '最后一步',
  colUpdated: '最后更新',
  colSignals: '序列',
  compareSelected: '对比所选（{n}）',
  selectForCompare: '选中以对比',
  job: '作业 {name}',
  ranks: '{n} 个进程',
  triageNote: '{full} 个完整分析，{online} 个采信其在线结论',
  analysedInFull: '完整分析',
  onlineVerdict: '在线结论',
  onlineVerdictTip: '采信此进程自身的在线分析（已覆盖最后一步且未发现问题）；此处未做完整分析',
  findings: '发现的问题',
  noFindings: '没有发现问题：此运行看起来健康。',
  noData: '尚无数据。',
  step: '步',
  steps: '第 {from}–{to} 步',
  evidence: '证据',
  advice: '建议',
  likelyCause: '可能原因',
  colon: '：',
  details: '详细数据',
  openTimeSeries: '在时间序列（Time Series）面板中打开此运行和标签',
  scalars: '标量',
  graphLink: '计算图',
  openGraph: '在计算图（Graphs）面板中显示 {name}',
  downloadCsv: 'CSV',
  downloadJson: 'JSON',
  downloadHint: '下载这些发现',
  refresh: '刷新',
  convertHint: '有 {n} 个运行来自 MindSpore summary 文件，TensorBoard 自带的标量（Scalars）和时间序列（Time Series）面板无法显示。可用以下命令转换：',
  copy: '复制',
  copied: '已复制',
  yes: '是',
  no: '否',
  resetZoom: '重置缩放',
  chartLoss: '损失',
  chartLr: '学习率',
  chartGradNorm: '全局梯度范数',
  chartLossScale: '损失缩放',
  chartThroughput: '吞吐量（样本/秒）',
  chartStepTime: '单步耗时（毫秒）',
  chartStepTimeS: '单步耗时（秒）',
  chartEvalLoss: '验证损失',
  chartHeatmap: '逐层梯度范数（对数色标）',
  notLogged: '此运行未记录。',
  notOnLogScale: '{n} 个不大于 0 的值无法在对数坐标上绘制。',
  layers: '{n} 层',
  mean: '均值',
  min: '最小',
  max: '最大',
  windowMax: '窗口最大值',
  smoothed: '平滑',
  xRelative: '相对时间',
  xWall: '挂钟时间',
  scaleAuto: '自动',
  scaleLog: '对数',
  scaleLinear: '线性',
  settingYScale: 'Y 轴',
  settingSmoothing: '平滑',
  settingOutliers: '缩放时忽略离群值',
  settingXAxis: 'X 轴',
  nonfinite: '非有限值',
  pickRun: '请在总览中选择一个运行。',
  pickRuns: '请在总览中勾选两个或更多运行，然后打开对比。',
  finalLoss: '最终损失',
  bestLoss: '最低损失',
  best: '最优',
  bestHint: '最优：无严重问题的运行中最终损失最低者。',
  open: '打开',
  secondsAgo: '{n} 秒前',
  minutesAgo: '{n} 分钟前',
  hoursAgo: '{n} 小时前',
  daysAgo: '{n} 天前',
  'status.healthy': '健康',
  'status.warning': '警告',
  'status.critical': '严重',
  'status.no_data': '无数据',
  'severity.info': '提示',
  'severity.warning': '警告',
  'severity.critical': '严重',
  'signal.loss': '损失',
  'signal.lr': '学习率',
  'signal.grad_norm': '梯度范数',
  'signal.loss_scale': '损失缩放',
  'signal.overflow': '溢出',
  'signal.step_time_ms': '单步耗时',
  'signal.step_time_s': '单步耗时',
  'signal.throughput': '吞吐量',
  'signal.eval_loss': '验证损失',
  'signal.loss_max': '损失最大值',
  'signal.loss_min': '损失最小值',
  'signal.grad_norm_max': '梯度范数最大值',
  'signal.nonfinite_count': '非有限值计数',
  'signal.overflow_count': '溢出步数',
  'signal.host_time_ms': '主机耗时',
  'signal.param_grad_norm': '逐层梯度范数',
};

const TABLES: Record<Lang, Record<string, string>> = {en: EN, zh: ZH};

function browserLang(): Lang {
  const languages = navigator.languages?.length ? navigator.languages : [navigator.language];
  return languages.some((l) => l?.toLowerCase().startsWith('zh')) ? 'zh' : 'en';
}

function storedLang(): Lang | null {
  try {
    const value = localStorage.getItem(STORAGE_KEY);
    return value === 'en' || value === 'zh' ? value : null;
  } catch {
    return null; // storage can be blocked; the browser language still applies
  }
}

let current: Lang = storedLang() ?? browserLang();

export function lang(): Lang {
  return current;
}

export function setLang(next: Lang): void {
  current = next;
  try {
    localStorage.setItem(STORAGE_KEY, next);
  } catch {
    // not persisted; the switch still works for this page
  }
  document.documentElement.lang = next === 'zh' ? 'zh-CN' : 'en';
}

/** The string for `key` in the current language, `{name}` placeholders filled from `params`. */
export function t(key: Key | string, params: Record<string, string | number> = {}): string {
  const template = TABLES[current][key] ?? EN[key as Key] ?? key;
  return template.replace(/\{(\w+)\}/g, (_, name: string) => String(params[name] ?? ''));
}

/** Names of the finding kinds in the current language, as the server's message catalogue
 * writes them (`/runs` sends them with the runs): the tab keeps no list of kinds of its own. */
let kindNames: Record<string, string> = {};
let kindNamesLang: string | null = null;

/** Sets the kinds' names, written in `language`; true when they changed (the views showing
 * kinds relabel then). */
export function setKindNames(names: Record<string, string> | undefined, language: string | null = null): boolean {
  if (!names) return false;
  const changed = language !== kindNamesLang || JSON.stringify(names) !== JSON.stringify(kindNames);
  kindNames = names;
  kindNamesLang = language;
  return changed;
}

/** The language the kinds' names are written in (null before the server sent them). */
export function kindNamesLanguage(): string | null {
  return kindNamesLang;
}

/** A translated label for a finding kind, status, severity or signal, falling back to the raw id. */
export function label(group: 'kind' | 'status' | 'severity' | 'signal', id: string): string {
  if (group === 'kind') return kindNames[id] ?? id.replace(/_/g, ' ');
  const key = `${group}.${id}`;
  return TABLES[current][key] ?? EN[key as Key] ?? id.replace(/_/g, ' ');
}

export function relativeAge(seconds: number | null): string {
  if (seconds === null) return '—';
  if (seconds < 90) return t('secondsAgo', {n: Math.round(seconds)});
  if (seconds < 5400) return t('minutesAgo', {n: Math.round(seconds / 60)});
  if (seconds < 172800) return t('hoursAgo', {n: Math.round(seconds / 3600)});
  return t('daysAgo', {n: Math.round(seconds / 86400)});
}

/** Sets a node's text from a translation key and remembers the key so `relabel` can redo it. */
export function bindText<T extends HTMLElement>(node: T, key: Key | string, params: Record<string, string | number> = {}): T {
  node.dataset.i18n = key;
  node.dataset.i18nParams = JSON.stringify(params);
  node.textContent = t(key, params);
  return node;
}

/** Re-translates every node under `root` that was labelled with `bindText`. */
export function relabel(root: ParentNode): void {
  for (const node of root.querySelectorAll<HTMLElement>('[data-i18n]')) {
    const params = JSON.parse(node.dataset.i18nParams ?? '{}') as Record<string, string | number>;
    node.textContent = t(node.dataset.i18n as string, params);
  }
}
