// TensorBoard's plugin-host channel: the host broadcasts `experimental.DataReloaded` when its
// reload timer (or the reload button) fires. We bootstrap a MessagePort the way TensorBoard's
// plugin library does and answer every message so the host's promises settle.

const PROTOCOL = 'experimental';
const DATA_RELOADED = `${PROTOCOL}.DataReloaded`;
const RUNS_CHANGED = `${PROTOCOL}.RunsChanged`;

interface HostMessage {
  type: string;
  id: number;
  payload: unknown;
  error: string | null;
  isReply: boolean;
}

export function listenToHostReloads(onReload: () => void): void {
  if (window.parent === window) return;
  const channel = new MessageChannel();
  channel.port1.addEventListener('message', (event: MessageEvent) => {
    let message: HostMessage;
    try {
      message = JSON.parse(String(event.data)) as HostMessage;
    } catch {
      return;
    }
    if (message.isReply) return;
    const reply: HostMessage = {type: message.type, id: message.id, payload: null, error: null, isReply: true};
    channel.port1.postMessage(JSON.stringify(reply));
    if (message.type === DATA_RELOADED || message.type === RUNS_CHANGED) {
      document.body.dataset.hostReloads = String(Number(document.body.dataset.hostReloads ?? 0) + 1);
      onReload();
    }
  });
  channel.port1.start();
  window.parent.postMessage(`${PROTOCOL}.bootstrap`, '*', [channel.port2]);
}
