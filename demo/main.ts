// The demo page: pick a model, load it in a Web Worker, and chat with it (instruct models) or let
// it continue a text (base models), with live stats and the last draft tree. Every bit of model
// work happens in the worker; this thread only moves text and draws.
import { AbortError, type ChatMessage, type DraftTreeView, type GenerationStats } from '../src/index.js';
import { Session } from './session.js';
import { CachePanel } from './ui/cache.js';
import { byId, h } from './ui/dom.js';
import { ModelPicker } from './ui/picker.js';
import { clearProblem, showNoWebGpu, showProblem } from './ui/problem.js';
import { endProgress, showProgress, startProgress } from './ui/progress.js';
import { startSelftest } from './ui/selftest.js';
import { generateOptions, loadSettings, setDrafter } from './ui/settings.js';
import { type PageTiming, showStats } from './ui/stats.js';
import { steerSettings, steerSummary } from './ui/steer.js';
import { drawTree } from './ui/tree.js';

const loadButton = byId('load-button', HTMLButtonElement);
const cancelButton = byId('cancel-button', HTMLButtonElement);
const loaded = byId('loaded', HTMLParagraphElement);
const promptInput = byId('prompt-input', HTMLTextAreaElement);
const form = byId('prompt-form', HTMLFormElement);
const sendButton = byId('send-button', HTMLButtonElement);
const stopButton = byId('stop-button', HTMLButtonElement);
const clearButton = byId('clear-button', HTMLButtonElement);
const transcript = byId('transcript', HTMLDivElement);
const mode = byId('mode', HTMLSpanElement);
const treeView = byId('tree-view', HTMLDivElement);

const session = new Session();
const cache = new CachePanel(showProblem);
const picker = new ModelPicker(() => {
  loadButton.disabled = busy === 'load';
});
let busy: 'idle' | 'load' | 'generate' = 'idle';
let messages: ChatMessage[] = [];
let stopper: AbortController | undefined;

function setBusy(state: typeof busy): void {
  busy = state;
  loadButton.disabled = state !== 'idle';
  cancelButton.hidden = state !== 'load';
  sendButton.disabled = state !== 'idle' || !session.model;
  stopButton.disabled = state !== 'generate';
  clearButton.disabled = state === 'generate';
}

async function load(): Promise<void> {
  const picked = picker.pick();
  if (!picked.ok) {
    loaded.textContent = `Cannot load: ${picked.reason}.`;
    return;
  }
  clearProblem();
  let steer: ReturnType<typeof steerSettings>;
  try {
    steer = steerSettings();
  } catch (err) {
    showProblem(err);
    return;
  }
  setBusy('load');
  startProgress(`Starting ${picked.label}…`);
  loaded.textContent = `Loading ${picked.label}…`;
  mode.textContent = '';
  try {
    const model = await session.load(
      {
        choice: picked.choice,
        ...(picked.draft ? { draft: picked.draft } : {}),
        cache: picked.cache,
        ...loadSettings(),
        ...(steer ? { steer } : {}),
      },
      showProgress,
    );
    loaded.textContent = `Loaded: ${picked.label} (${model.chat ? 'chat' : 'text completion'}${steerSummary(steer)}).`;
    if (steer) loaded.dataset.steer = steer.mode ?? '';
    else delete loaded.dataset.steer;
    loaded.dataset.model = picked.label;
    mode.textContent = model.chat ? '· chat' : '· text completion';
    promptInput.placeholder = model.chat
      ? 'Ask something…'
      : 'Start a text and the model continues it, e.g. “In the beginning”';
    clearButton.textContent = model.chat ? 'New conversation' : 'Clear';
    if (picked.draft) setDrafter('draft');
    newConversation();
  } catch (err) {
    loaded.textContent = err instanceof AbortError ? 'Loading cancelled.' : 'Loading failed.';
    delete loaded.dataset.model;
    mode.textContent = '';
    if (!(err instanceof AbortError)) showProblem(err);
  } finally {
    endProgress();
    setBusy('idle');
    void cache.refresh().catch(showProblem);
  }
}

function newConversation(): void {
  messages = [];
  transcript.replaceChildren();
  drawTree(treeView, undefined);
}

/**
 * Adds a turn whose reply streams into the returned element, which becomes the page's `output`
 * (the latest reply). A completion shows its prompt first, in bold.
 */
function addReply(kind: 'assistant' | 'prompt', given: string): HTMLElement {
  transcript.querySelector('[data-testid="output"]')?.removeAttribute('data-testid');
  const output = h('span', { class: 'text', 'data-testid': 'output' });
  const lead = given ? [h('span', { class: 'given' }, given)] : [];
  transcript.append(h('div', { class: `turn ${kind}` }, ...lead, output));
  return output;
}

async function send(): Promise<void> {
  const model = session.model;
  const text = promptInput.value;
  if (!model || busy !== 'idle' || !text.trim()) return;
  clearProblem();
  setBusy('generate');
  const options = generateOptions();
  stopper = new AbortController();
  const timing: PageTiming = { start: performance.now(), firstToken: undefined, tokens: 0, passes: 0 };
  if (model.chat) {
    messages.push({ role: 'user', content: text });
    transcript.append(h('div', { class: 'turn user' }, text));
    promptInput.value = '';
  }
  const output = addReply(model.chat ? 'assistant' : 'prompt', model.chat ? '' : text);
  output.classList.add('streaming');
  let reply = '';
  let tree: DraftTreeView | undefined;
  let final: GenerationStats | undefined;
  let state = 'generating';
  showStats(timing);
  // Screen readers announce the reply once it is complete, not token by token.
  transcript.setAttribute('aria-busy', 'true');
  const ticker = setInterval(() => showStats(timing), 250);
  try {
    const prompt = model.chat ? await model.engine.render(messages) : text;
    for await (const chunk of model.engine.generate(prompt, { ...options, signal: stopper.signal })) {
      timing.firstToken ??= performance.now();
      timing.tokens += chunk.ids.length;
      reply += chunk.text;
      output.textContent = reply;
      if (chunk.tree) {
        timing.passes++;
        // Keep the last tree that had drafts: a final empty one says less than the one before.
        if (chunk.tree.tokens.length > 0 || !tree) {
          tree = chunk.tree;
          drawTree(treeView, tree);
        }
      }
      transcript.scrollTop = transcript.scrollHeight;
    }
    final = model.engine.lastStats;
    state = 'done';
  } catch (err) {
    if (err instanceof AbortError) state = 'stopped';
    else {
      state = 'failed';
      showProblem(err);
      if (err instanceof Error && err.name === 'DeviceLostError') {
        await session.unload();
        loaded.textContent = 'The GPU was lost: load the model again.';
      }
    }
  } finally {
    clearInterval(ticker);
    transcript.setAttribute('aria-busy', 'false');
    output.classList.remove('streaming');
    output.dataset.state = state;
    if (model.chat) messages.push({ role: 'assistant', content: reply });
    if (!tree) drawTree(treeView, undefined);
    showStats(timing, final, state);
    stopper = undefined;
    setBusy('idle');
  }
}

loadButton.addEventListener('click', () => void load());
cancelButton.addEventListener('click', () => session.cancel());
form.addEventListener('submit', (e) => {
  e.preventDefault();
  void send();
});
// Enter sends, Shift+Enter starts a new line.
promptInput.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    void send();
  }
});
stopButton.addEventListener('click', () => stopper?.abort());
clearButton.addEventListener('click', newConversation);

setBusy('idle');
drawTree(treeView, undefined);
if ('gpu' in navigator) void startSelftest();
else {
  showNoWebGpu();
  byId('gpu-status', HTMLParagraphElement).textContent = 'No WebGPU in this browser.';
  loadButton.disabled = true;
}
void picker.probe();
void cache.refresh().catch(showProblem);
