// Chinese for the findings: the server writes each finding's message in English, with its
// numbers in the evidence. In Chinese the list shows what the kind means, the likely cause
// (from the evidence's cause code) and what to do, and keeps the English message as the detail.

/** What a finding of this kind means. */
const MEANING: Record<string, string> = {
  nonfinite: '损失、梯度范数或其他监控量中出现了 NaN 或 Inf。',
  divergence: '损失暴涨或持续上升而不下降（包括以 NaN 结束、或最终远高于初始损失的训练）。',
  loss_spike: '损失突然短暂跳升，超出了本次训练自身的噪声水平。',
  exploding_gradients: '梯度范数增长了数个数量级，或长期远高于自身基线。',
  vanishing_gradients: '梯度范数（或前几层相对后几层的梯度）塌缩到接近零。',
  stalled_convergence: '学习率仍然较高，但损失已不再下降（按计划退火导致的变平不算停滞）。',
  lr_schedule: '记录到的学习率出现了调度不应有的行为：重置、跳变、过早降到零或下限、调度走得过快。',
  loss_scale: '混合精度的损失缩放值塌缩、只降不升，或溢出（跳过）的步数过多。',
  throughput: '训练中步时或吞吐量退化，或某个进程（卡）明显慢于其他进程。',
  overfitting: '训练损失仍在下降，评估损失却在上升。',
  weight_updates: '部分权重不再变化，或更新量相对权重本身过大。',
  weight_distribution: '权重范数漂移了一个数量级，或数值堆积在取值范围的边缘。',
  check_error: '这项检查在这次训练上运行失败，其余检查不受影响。',
};

/** What to do about a finding of this kind. */
const TODO: Record<string, string> = {
  nonfinite: '从该步之前的检查点重启；降低学习率、启用梯度裁剪，检查损失缩放和该步的数据。',
  divergence: '从最后健康的步重启，降低峰值学习率、延长预热或收紧梯度裁剪。',
  loss_spike: '检查这些步的批次数据（损坏或标注错误）；若梯度也同时尖峰，裁剪梯度或降低学习率。',
  exploding_gradients: '裁剪全局梯度范数、降低学习率、加入归一化。',
  vanishing_gradients: '用 ReLU/GELU 代替 sigmoid/tanh，加入残差连接和归一化，改进初始化。',
  stalled_convergence: '若学习率过小则调大；确认梯度能传到权重；检查数据管道。',
  lr_schedule: '检查调度器的步长单位（按微批还是按步）、断点续训逻辑和总步数。',
  loss_scale: '找出 fp16 下溢出的算子并保持 fp32，降低学习率，或改用 bf16。',
  throughput: '检查该进程的主机、数据加载和网络链路；检查重编译和下沉模式。',
  overfitting: '在评估最好的步停止训练，增加正则化或数据。',
  weight_updates: '确认这些参数已交给优化器并能收到梯度；检查各参数组的学习率。',
  weight_distribution: '加入权重衰减或归一化；排查饱和的激活函数和过高的学习率。',
  check_error: '请带上该错误信息反馈问题。',
};

/** The likely cause, by the evidence's `cause` code (analysis/diagnosis.py). */
const CAUSE: Record<string, string> = {
  mixed_precision_overflow: '梯度范数尖峰与损失缩放下降同时发生：混合精度溢出。',
  lr_change: '同一时间学习率上升了。',
  unstable_update: '梯度范数随损失一起尖峰：这一步的更新对当前损失曲面来说过大。',
  bad_batch: '损失和梯度范数只在一步内一起跳升、随后立即恢复：很可能是某个批次（损坏、标注错误或分布外样本）造成的，而非权重漂移。',
  data: '梯度保持正常，因此该步的批次数据最可疑（损坏、标注错误或分布外样本）。',
  backward_overflow: '非有限值先出现在梯度中、之后才出现在损失中：反向传播溢出。',
  forward_nonfinite: '非有限值先出现在损失中（此前梯度没有暴涨）：前向计算或损失函数产生了它们。',
  lr_peak: '学习率达到峰值时梯度暴涨。',
  lr_at_floor: '这些步的学习率为零或处于下限。',
  dead_gradients: '梯度恰好为零：ReLU 死亡，或计算图与损失断开。',
  vanishing_gradients: '损失停止改善之前梯度已经消失。',
  exploding_gradients: '梯度范数在这些步或更早时已经爆炸。',
};

export interface FindingTextZh {
  meaning: string;
  cause: string | null;
  todo: string;
}

/** `info` findings are context, not alarms: what they describe is in the English message. */
const INFO_MEANING: Record<string, string> = {
  lr_schedule: '识别出的学习率调度，仅供参考。',
  multiple_writers: '多个进程同时写入了这个运行目录：各自的数据都已保留，后来的写入者的标签带有 “(writer N)” 后缀。',
  damaged_records: '日志中有损坏的记录，读取时已跳过，其余数据照常读取。',
};

export function findingTextZh(kind: string, severity: string, cause: unknown): FindingTextZh {
  if (severity === 'info') {
    return {meaning: INFO_MEANING[kind] ?? '仅供参考，不是告警。', cause: null, todo: ''};
  }
  return {
    meaning: MEANING[kind] ?? '',
    cause: typeof cause === 'string' ? (CAUSE[cause] ?? null) : null,
    todo: TODO[kind] ?? '',
  };
}
