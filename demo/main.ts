// The demo page: pick a model, load it in a Web Worker, and chat with it (instruct models) or let
// it continue a text (base models), with live stats and the draft trees of the last passes; or race
// plain decoding against the chosen drafter on one prompt. Every bit of model work happens in the
// worker; this thread only moves text and draws. Conversations are kept in IndexedDB; the
// production build also keeps the page itself (demo/sw.ts) for offline use.
import { AbortError, type ChoiceLoadOptions, type GenerationStats, WeightStore } from '../src/index.js';
import { type Conversation, ConversationStore, chatMessages, newConversation } from './conversations.js';
import { race } from './race.js';
import { type LoadedModel, Session } from './session.js';
import { CachePanel } from './ui/cache.js';
import { drawConversations } from './ui/conversations.js';
import { byId } from './ui/dom.js';
import { startOfflineShell } from './ui/offline.js';
import { BUNDLED_NAMES, ModelPicker } from './ui/picker.js';
import { clearProblem, showNoWebGpu, showProblem } from './ui/problem.js';
import { endProgress, showProgress, startProgress } from './ui/progress.js';
import { endRace, finishRace, raceNeedsDrafter, raceText, startRace } from './ui/race.js';
import { startSelftest } from './ui/selftest.js';
import { generateOptions, loadSettings, setDrafter } from './ui/settings.js';
import { LiveFigures, showGpuMemory, showStats } from './ui/stats.js';
import { steerSettings, steerSummary } from './ui/steer.js';
import {
  drawTranscript,
  enableRegenerate,
  replyText,
  setStreaming,
  showReplyText,
  type TranscriptActions,
} from './ui/transcript.js';
import { TreeHistory } from './ui/tree.js';

const loadButton = byId('load-button', HTMLButtonElement);
const cancelButton = byId('cancel-button', HTMLButtonElement);
const loaded = byId('loaded', HTMLParagraphElement);
const promptInput = byId('prompt-input', HTMLTextAreaElement);
const form = byId('prompt-form', HTMLFormElement);
const sendButton = byId('send-button', HTMLButtonElement);
const stopButton = byId('stop-button', HTMLButtonElement);
const raceButton = byId('race-button', HTMLButtonElement);
const clearButton = byId('clear-button', HTMLButtonElement);
const mode = byId('mode', HTMLSpanElement);
const trees = new TreeHistory({
  box: byId('tree-view', HTMLDivElement),
  detail: byId('tree-detail', HTMLParagraphElement),
  position: byId('tree-position', HTMLSpanElement),
  earlier: byId('tree-earlier', HTMLButtonElement),
  later: byId('tree-later', HTMLButtonElement),
  zoomOut: byId('tree-zoom-out', HTMLButtonElement),
  zoomIn: byId('tree-zoom-in', HTMLButtonElement),
});

const session = new Session();
const weights = new WeightStore();
const cache = new CachePanel(weights, BUNDLED_NAMES, showProblem);
const picker = new ModelPicker(weights, () => {
  loadButton.disabled = busy === 'load';
});
const conversations = new ConversationStore();
let busy: 'idle' | 'load' | 'generate' = 'idle';
let current: Conversation = newConversation(false);
let stopper: AbortController | undefined;

function setBusy(state: typeof busy): void {
  busy = state;
  loadButton.disabled = state !== 'idle';
  cancelButton.hidden = state !== 'load';
  sendButton.disabled = state !== 'idle' || !session.model;
  raceButton.disabled = state !== 'idle' || !session.model;
  stopButton.disabled = state !== 'generate';
  clearButton.disabled = state === 'generate';
  enableRegenerate(state === 'idle' && session.model !== undefined);
  void listConversations();
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
  const options = (cache: boolean): ChoiceLoadOptions => ({
    choice: picked.choice,
    ...(picked.draft ? { draft: picked.draft } : {}),
    cache,
    ...loadSettings(),
    ...(steer ? { steer } : {}),
  });
  try {
    if (picked.bundled) await picker.forgetChanged();
    let model: LoadedModel;
    let kept = true;
    try {
      model = await session.load(options(picked.cache), showProgress);
    } catch (err) {
      // No room to keep the model: read it from the network instead, and say it is not kept.
      if (!picked.cache || !(err instanceof Error) || err.name !== 'QuotaError') throw err;
      kept = false;
      startProgress(`No room to keep ${picked.label}: reading it from the network…`);
      model = await session.load(options(false), showProgress);
    }
    await cache.notKept(kept ? undefined : picked.label);
    loaded.textContent = `Loaded: ${picked.label} (${model.chat ? 'chat' : 'text completion'}${steerSummary(steer)}).`;
    if (steer) loaded.dataset.steer = steer.mode ?? '';
    else delete loaded.dataset.steer;
    loaded.dataset.model = picked.label;
    // One copy of the weights for every tab of the site, or this tab's own (and why).
    const sharing = model.engine.sharing;
    loaded.dataset.shared = sharing?.shared ? 'yes' : 'no';
    loaded.title = sharing?.shared
      ? 'Shared by every tab of this site'
      : `This tab's own engine: ${sharing?.reason}`;
    mode.textContent = model.chat ? '· chat' : '· text completion';
    promptInput.placeholder = model.chat
      ? 'Ask something…'
      : 'Start a text and the model continues it, e.g. “In the beginning”';
    clearButton.textContent = model.chat ? 'New conversation' : 'Clear';
    if (picked.draft) setDrafter('draft');
    // A conversation of the other kind (chat / completion) cannot continue with this model.
    if (current.chat !== model.chat) startConversation(model.chat);
    trees.clear();
    showGpuMemory(undefined);
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

/** Shows `conversation` in the transcript and marks it in the list. */
function show(conversation: Conversation): void {
  current = conversation;
  drawTranscript(current, transcriptActions);
  enableRegenerate(busy === 'idle' && session.model !== undefined);
  void listConversations();
}

/** Starts an empty conversation (kept once something is sent), unless the current one is empty. */
function startConversation(chat: boolean): void {
  if (current.turns.length === 0) current.chat = chat;
  else show(newConversation(chat));
  trees.clear();
}

async function listConversations(): Promise<void> {
  try {
    drawConversations(await conversations.list(), current.id, conversationActions, busy === 'generate');
  } catch (err) {
    showProblem(err);
  }
}

async function save(conversation: Conversation): Promise<void> {
  try {
    await conversations.save(conversation);
  } catch (err) {
    showProblem(err);
  }
  await listConversations();
}

const conversationActions = {
  open: (id: string) => {
    if (busy === 'generate') return;
    void conversations.get(id).then((c) => {
      if (c) show(c);
    }, showProblem);
  },
  rename: (id: string, title: string) => {
    void (async () => {
      const c = id === current.id ? current : await conversations.get(id);
      if (!c) return;
      c.title = title;
      await save(c);
    })();
  },
  remove: (id: string) => {
    void (async () => {
      await conversations.delete(id).catch(showProblem);
      if (id === current.id) show(newConversation(session.model?.chat ?? current.chat));
      else await listConversations();
    })();
  },
};

const transcriptActions: TranscriptActions = {
  copy: async (index) => {
    const turn = current.turns[index];
    if (turn) await navigator.clipboard.writeText((turn.given ?? '') + turn.text);
  },
  regenerate: (index) => {
    if (busy === 'idle' && index === current.turns.length - 1) void generate(index);
  },
};

async function send(): Promise<void> {
  const model = session.model;
  const text = promptInput.value;
  if (!model || busy !== 'idle' || !text.trim()) return;
  if (current.chat !== model.chat) startConversation(model.chat);
  if (model.chat) {
    current.turns.push({ kind: 'user', text }, { kind: 'assistant', text: '' });
    promptInput.value = '';
  } else current.turns.push({ kind: 'prompt', given: text, text: '' });
  await generate(current.turns.length - 1);
}

/**
 * Generates the reply at `index` of the current conversation (the last turn) from the turns before
 * it (a chat), or from its own prompt (a completion), streaming it into the transcript.
 */
async function generate(index: number): Promise<void> {
  const model = session.model;
  const conversation = current;
  const reply = conversation.turns[index];
  if (!model || !reply) return;
  clearProblem();
  reply.text = '';
  delete reply.state;
  drawTranscript(conversation, transcriptActions);
  setBusy('generate');
  // The stats say "generating" before anything is awaited, so nothing reads the last request's "done".
  showStats(new LiveFigures());
  await save(conversation);
  const figures = new LiveFigures();
  const options = generateOptions();
  stopper = new AbortController();
  let final: GenerationStats | undefined;
  let state: 'generating' | 'done' | 'stopped' | 'failed' = 'generating';
  trees.clear();
  showStats(figures);
  setStreaming(true);
  const ticker = setInterval(() => showStats(figures), 250);
  try {
    const prompt = conversation.chat
      ? await model.engine.render(chatMessages(conversation, index))
      : (reply.given ?? '');
    for await (const chunk of model.engine.generate(prompt, { ...options, signal: stopper.signal })) {
      figures.add(chunk);
      reply.text += chunk.text;
      showReplyText(reply.text);
      if (chunk.tree) trees.add(chunk.tree, chunk.progress?.decodePasses ?? 0);
      showStats(figures);
    }
    final = model.engine.lastStats;
    showGpuMemory(final);
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
    setStreaming(false);
    reply.state = state === 'generating' ? 'failed' : state;
    const text = replyText();
    if (text) text.dataset.state = reply.state;
    showStats(figures, final, state);
    stopper = undefined;
    setBusy('idle');
    await save(conversation);
  }
}

/**
 * Races the prompt in the box: plain decoding, then the chosen drafter, same seed and settings, on
 * the loaded engine; the panel shows both outputs, whether they are identical, and the speed-up.
 * (A chat model gets the prompt as one user message; the conversation is left as it is.)
 */
async function runRace(): Promise<void> {
  const model = session.model;
  const text = promptInput.value;
  if (!model || busy !== 'idle' || !text.trim()) return;
  const options = generateOptions();
  if (!options.drafter || options.drafter === 'none') {
    raceNeedsDrafter();
    return;
  }
  clearProblem();
  setBusy('generate');
  stopper = new AbortController();
  startRace(text, options.drafter, options.treeBudget);
  try {
    const prompt = model.chat ? await model.engine.render([{ role: 'user', content: text }]) : text;
    finishRace(await race(model.engine, prompt, { ...options, signal: stopper.signal }, raceText));
    showGpuMemory(model.engine.lastStats);
  } catch (err) {
    const stopped = err instanceof AbortError;
    endRace(stopped ? 'stopped' : 'failed');
    if (!stopped) showProblem(err);
  } finally {
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
raceButton.addEventListener('click', () => void runRace());
// Escape stops a request or a race, wherever the focus is.
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && stopper) {
    e.preventDefault();
    stopper.abort();
  }
});
clearButton.addEventListener('click', () => startConversation(session.model?.chat ?? current.chat));

setBusy('idle');
if ('gpu' in navigator) void startSelftest();
else {
  showNoWebGpu();
  byId('gpu-status', HTMLParagraphElement).textContent = 'No WebGPU in this browser.';
  loadButton.disabled = true;
}
void startOfflineShell();
void picker.probe();
void cache.refresh().catch(showProblem);
// Back where the visitor left off: the latest conversation.
void conversations.list().then(([latest]) => {
  if (latest && current.turns.length === 0) show(latest);
  else void listConversations();
}, showProblem);
