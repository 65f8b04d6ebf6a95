// lastword dashboard: runs as a tree, live from /v1/stream and the selected run's own stream.
//
// Plain JavaScript, no build step and no dependency: the service serves this file from its
// package. Everything comes from the public API:
//   GET /v1/runs?include=result   pages of runs (newest first) with each latest turn's stop reason
//   GET /v1/stream                every run's lifecycle events (resumed by SSE id: nothing lost)
//   GET /v1/runs/{id}/stream?include=chunks&after=0
//                                 the selected run's streamed text, replayed then live
//   GET /v1/runs/{id}/result, /tool-result, /messages (when the server has it)
// Every value shown is set as text (never as HTML), and the page's Content-Security-Policy
// allows no inline script, so nothing a producer sends can run here.
'use strict';

(() => {
  const PAGE_SIZE = 100;
  const TOKEN_KEY = 'lastword.readToken';
  const RETRY_MS = [500, 1000, 2000, 4000];

  // Stop icons are inline SVG, not text: a symbol glyph (U+29D7 for a time-out) shows as an empty
  // box on a system whose fonts lack it. Each is a 16x16 drawing in the badge's colour.
  const STROKE = { fill: 'none', stroke: 'currentColor', 'stroke-width': '2' };
  const ICONS = {
    check: [['path', { d: 'M2.5 8.5l3.5 3.5 7.5-7.5', ...STROKE }]],
    triangle: [['path', { d: 'M8 2l6.5 12h-13z' }]],
    square: [['rect', { x: '3', y: '3', width: '10', height: '10' }]],
    hourglass: [['path', { d: 'M3.5 1.5h9v2.5l-3.5 4 3.5 4v2.5h-9v-2.5l3.5-4-3.5-4z' }]],
    cross: [['path', { d: 'M3.5 3.5l9 9m0-9l-9 9', ...STROKE }]],
    forbidden: [['circle', { cx: '8', cy: '8', r: '5.5', ...STROKE }], ['path', { d: 'M4.1 11.9l7.8-7.8', ...STROKE }]],
    unknown: [['circle', { cx: '8', cy: '8', r: '5.5', ...STROKE }]],
  };
  const STOPS = {
    completed: { cls: 'stop-ok', icon: 'check', label: 'Completed', what: 'the turn completed' },
    max_tokens: { cls: 'stop-trunc', icon: 'triangle', label: 'Truncated', what: 'cut off at its output-token limit' },
    max_turns: { cls: 'stop-trunc', icon: 'triangle', label: 'Truncated', what: 'cut off at its turn limit' },
    cancelled: { cls: 'stop-cancel', icon: 'square', label: 'Cancelled', what: 'cancelled before it finished' },
    timeout: { cls: 'stop-timeout', icon: 'hourglass', label: 'Timed out', what: 'stopped reporting; its lease ran out' },
    error: { cls: 'stop-fail', icon: 'cross', label: 'Failed', what: 'failed' },
    refusal: { cls: 'stop-fail', icon: 'forbidden', label: 'Refused', what: 'refused to answer' },
  };

  function icon(name) {
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    for (const [key, value] of Object.entries({ class: 'icon', viewBox: '0 0 16 16', fill: 'currentColor', 'aria-hidden': 'true' })) {
      svg.setAttribute(key, value);
    }
    for (const [tag, attributes] of ICONS[name]) {
      const part = document.createElementNS('http://www.w3.org/2000/svg', tag);
      for (const [key, value] of Object.entries(attributes)) part.setAttribute(key, value);
      svg.append(part);
    }
    return svg;
  }

  const $ = (id) => document.getElementById(id);
  const el = (tag, props, ...children) => {
    const node = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (value === undefined || value === null || value === false) continue;
        if (key === 'class') node.className = value;
        else if (key === 'text') node.textContent = value;
        else if (key in node && !key.startsWith('aria') && !key.startsWith('data')) node[key] = value;
        else node.setAttribute(key, value === true ? '' : String(value));
      }
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  };

  // ---- state ------------------------------------------------------------------------------

  const state = {
    runs: new Map(),        // runId -> entry {run, result, ver, row, dirty}
    cursor: null,           // next page of GET /v1/runs
    hasMore: false,
    loading: null,
    filters: { status: '', stopReason: '', agent: '', q: '' },
    selected: null,
    collapsed: new Set(),
    order: [],              // visible run ids, in display order
    token: sessionStorage.getItem(TOKEN_KEY),
    agents: new Set(),
    fetching: new Set(),
  };
  const stats = { firstRenderMs: null, renders: 0, slowestRenderMs: 0 };
  window.lastwordDashboard = { stats, state, get feed() { return feed; } };

  // ---- talking to the API ---------------------------------------------------------------------

  let tokenPrompt = null;

  let tokenDeclined = false;

  function askToken(refused) {
    if (tokenPrompt) return tokenPrompt;
    // Cancelled once: do not ask again on every retry; a reload asks again.
    if (tokenDeclined) return Promise.resolve(null);
    const dialog = $('token-dialog');
    $('token-why').textContent = refused
      ? 'That token was refused. Enter the read token (it is kept for this tab only).'
      : 'This lastword asks for a token to read runs. It is kept for this tab only (sessionStorage).';
    $('token-input').value = '';
    tokenPrompt = new Promise((resolve) => {
      const done = (token) => {
        dialog.removeEventListener('close', onClose);
        tokenPrompt = null;
        resolve(token);
      };
      const onClose = () => {
        const token = dialog.returnValue === 'ok' ? $('token-input').value.trim() : '';
        if (!token) {
          tokenDeclined = true;
          showNotice('This lastword needs a read token to show runs. Reload the page to enter one.');
        }
        done(token || null);
      };
      dialog.addEventListener('close', onClose);
      $('token-cancel').onclick = () => dialog.close('cancel');
      setConnection('offline', 'Needs a read token');
      dialog.returnValue = '';
      dialog.showModal();
      $('token-input').focus();
    });
    return tokenPrompt;
  }

  function setToken(token) {
    state.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  }

  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
      this.status = status;
      this.problem = problem;
    }
  }

  // GET a JSON document; a 401 asks for the read token once and tries again with it.
  async function api(path, { allow = [] } = {}) {
    for (let attempt = 0; attempt < 4; attempt += 1) {
      const headers = { Accept: 'application/json' };
      if (state.token) headers.Authorization = `Bearer ${state.token}`;
      const response = await fetch(path, { headers, cache: 'no-store' });
      if (response.status === 401) {
        const token = await askToken(Boolean(state.token));
        if (!token) throw new ApiError(401, { detail: 'this lastword needs a read token; reload the page to enter one' });
        setToken(token);
        reopenStreams();
        continue;
      }
      const body = await response.json().catch(() => null);
      if (response.ok || allow.includes(response.status)) return { status: response.status, body };
      throw new ApiError(response.status, body);
    }
    throw new ApiError(401, { detail: 'the token was refused' });
  }

  function streamUrl(path, params) {
    const query = new URLSearchParams(params);
    // EventSource cannot send headers: reads take the read token as ?access_token=.
    if (state.token) query.set('access_token', state.token);
    const text = query.toString();
    return text ? `${path}?${text}` : path;
  }

  // ---- runs: merging what the list, the firehose and the run streams say --------------------

  // A run only moves forward: turn by turn, and within a turn from running to ended to closed.
  // Whatever arrives late (a page fetched before an event, a replayed event) cannot undo it.
  function version(turn, phase) { return turn * 4 + phase; }
  function runPhase(run) {
    if (run.status === 'running') return 0;
    if (run.status === 'ended' && run.mode === 'continuable') return 2;
    return 1;
  }

  function upsertRun(run) {
    const entry = state.runs.get(run.runId);
    const ver = version(run.turn, runPhase(run));
    if (entry && entry.ver > ver) {
      // Older than what we know; keep ours but learn what only the run view tells.
      entry.run = { ...run, status: entry.run.status, turn: entry.run.turn };
      entry.complete = true;
      markDirty(entry);
      return entry;
    }
    const next = entry || { row: null };
    next.run = run;
    next.ver = ver;
    next.complete = true;
    if (run.result) next.result = run.result;
    else if (!entry || entry.result?.turn !== run.turn) next.result = null;
    delete next.run.result;
    state.runs.set(run.runId, next);
    if (run.agent) noteAgent(run.agent);
    markDirty(next);
    return next;
  }

  function applyLifecycle(type, data) {
    let entry = state.runs.get(data.runId);
    if (!entry) {
      if (type !== 'subagent/start' && type !== 'subagent/end') return;
      // First heard of here: a stub now, the full run view shortly.
      entry = {
        run: {
          runId: data.runId, parentRunId: data.parentRunId, agent: data.agent, mode: 'oneshot',
          status: 'running', turn: data.turn, createdAt: data.startedAt || data.endedAt,
        },
        result: null, ver: -1, row: null, complete: false,
      };
      state.runs.set(data.runId, entry);
      if (data.agent) noteAgent(data.agent);
      fetchRun(data.runId);
    }
    const run = entry.run;
    if (type === 'subagent/start') {
      const ver = version(data.turn, 0);
      if (ver < entry.ver) return;
      entry.ver = ver;
      run.status = 'running';
      run.turn = data.turn;
      entry.result = { turn: data.turn, status: 'running', startedAt: data.startedAt };
    } else if (type === 'subagent/end') {
      const ver = version(data.turn, 1);
      if (ver < entry.ver) return;
      entry.ver = ver;
      run.status = run.mode === 'continuable' ? 'idle' : 'ended';
      run.turn = data.turn;
      entry.result = {
        turn: data.turn, status: 'ended', stopReason: data.stopReason, isError: data.isError,
        usage: data.usage, error: data.error, endedAt: data.endedAt,
        startedAt: entry.result?.turn === data.turn ? entry.result.startedAt : undefined,
      };
    } else if (type === 'run/closed') {
      const ver = version(run.turn, 2);
      if (ver < entry.ver) return;
      entry.ver = ver;
      run.status = 'ended';
    }
    markDirty(entry);
    if (state.selected === data.runId) detailChanged(type);
  }

  const runQueue = [];
  let runFetchers = 0;
  function fetchRun(runId) {
    if (state.fetching.has(runId)) return;
    state.fetching.add(runId);
    runQueue.push(runId);
    pumpRunQueue();
  }
  function pumpRunQueue() {
    while (runFetchers < 3 && runQueue.length) {
      const runId = runQueue.shift();
      runFetchers += 1;
      api(`/v1/runs/${encodeURIComponent(runId)}`, { allow: [404, 410] })
        .then(({ status, body }) => { if (status === 200) upsertRun(body); })
        .catch(() => {})
        .finally(() => { runFetchers -= 1; state.fetching.delete(runId); pumpRunQueue(); });
    }
  }

  function noteAgent(agent) {
    if (state.agents.has(agent)) return;
    state.agents.add(agent);
    $('agents').append(el('option', { value: agent }));
  }

  // ---- pages of runs ------------------------------------------------------------------------

  function listQuery(cursor) {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE), include: 'result' });
    const f = state.filters;
    if (f.status) query.set('status', f.status);
    if (f.stopReason) query.set('stopReason', f.stopReason);
    if (f.agent) query.set('agent', f.agent);
    if (cursor) query.set('cursor', cursor);
    return `/v1/runs?${query}`;
  }

  async function loadPage(first) {
    if (state.loading) return state.loading;
    const cursor = first ? null : state.cursor;
    if (!first && !cursor) return null;
    state.loading = (async () => {
      try {
        const { body } = await api(listQuery(cursor));
        for (const run of body.runs) upsertRun(run);
        // Paging on from the first page again (a refresh) must not lose the deeper cursor.
        if (!first || !state.cursor) state.cursor = body.nextCursor || null;
        state.hasMore = Boolean(state.cursor);
        hideNotice();
      } catch (error) {
        showNotice(`Could not load runs: ${error.message}`);
      } finally {
        state.loading = null;
        scheduleRender();
      }
    })();
    return state.loading;
  }

  // ---- the firehose -------------------------------------------------------------------------

  const feed = { source: null, lastId: null, retries: 0, timer: null, opened: null };

  function openFeed() {
    clearTimeout(feed.timer);
    if (feed.source) feed.source.close();
    const params = feed.lastId === null ? {} : { after: feed.lastId };
    const source = new EventSource(streamUrl('/v1/stream', params));
    feed.source = source;
    let resolveOpen;
    feed.opened = new Promise((resolve) => { resolveOpen = resolve; });
    source.onopen = () => {
      const resumed = feed.retries > 0;
      feed.retries = 0;
      setConnection('live', 'Live');
      resolveOpen(true);
      // Without an id to resume from, what happened while away is read from the list instead.
      if (resumed && feed.lastId === null) loadPage(true);
    };
    for (const type of ['subagent/start', 'subagent/end', 'run/closed']) {
      source.addEventListener(type, (event) => {
        feed.lastId = event.lastEventId || feed.lastId;
        applyLifecycle(type, JSON.parse(event.data));
      });
    }
    source.addEventListener('server/reconnect', () => setConnection('reconnecting', 'Reconnecting…'));
    source.onerror = () => {
      resolveOpen(false);
      if (source.readyState === EventSource.CONNECTING) {
        // The browser reconnects by itself, sending Last-Event-ID.
        feed.retries += 1;
        setConnection('reconnecting', 'Reconnecting…');
        return;
      }
      // Closed for good (the server answered with an error): reconnect ourselves with ?after=.
      source.close();
      feed.retries += 1;
      setConnection(feed.retries > 3 ? 'offline' : 'reconnecting',
        feed.retries > 3 ? 'Offline — retrying' : 'Reconnecting…');
      const delay = RETRY_MS[Math.min(feed.retries - 1, RETRY_MS.length - 1)];
      feed.timer = setTimeout(async () => {
        // A refused token shows only on a plain request: ask there, then reconnect.
        try { await api('/v1/runs?limit=1'); } catch (error) { /* still down: try again later */ }
        openFeed();
      }, delay);
    };
  }

  function setConnection(kind, text) {
    const node = $('connection');
    if (node.dataset.state === kind && node.textContent === text) return;
    node.dataset.state = kind;
    node.textContent = text;
    node.title = kind === 'reconnecting' ? 'The page resumes from the last event it received: nothing is lost.' : '';
  }

  // ---- the selected run ---------------------------------------------------------------------

  const detail = {
    runId: null, source: null, lastId: 0, pieces: [], pending: '', ended: false,
    retries: 0, timer: null, loadedTurn: null, generation: 0,
  };

  function closeRunStream() {
    clearTimeout(detail.timer);
    if (detail.source) detail.source.close();
    detail.source = null;
  }

  function openRunStream() {
    closeRunStream();
    const runId = detail.runId;
    // after=0 replays the run's lifecycle and chunk events from the log, then goes live: the
    // whole text of the open turn, whenever the page joins. Resumes use the last id seen.
    const source = new EventSource(streamUrl(`/v1/runs/${encodeURIComponent(runId)}/stream`,
      { include: 'chunks', after: detail.lastId }));
    detail.source = source;
    const seen = (event) => {
      const id = Number(event.lastEventId);
      if (Number.isFinite(id) && id > detail.lastId) detail.lastId = id;
    };
    source.addEventListener('subagent/start', (event) => {
      seen(event);
      const data = JSON.parse(event.data);
      detail.pieces = [];
      detail.pending = '';
      $('d-live').textContent = '';
      applyLifecycle('subagent/start', data);
    });
    source.addEventListener('assistant/chunk', (event) => {
      seen(event);
      const data = JSON.parse(event.data);
      const delta = data.delta || {};
      if (delta.type === 'text' && typeof delta.text === 'string') {
        detail.pending += delta.text;
        scheduleLive();
      }
    });
    source.addEventListener('subagent/end', (event) => {
      seen(event);
      const data = JSON.parse(event.data);
      applyLifecycle('subagent/end', data);
      const entry = state.runs.get(runId);
      if (!entry || entry.run.mode !== 'continuable') closeRunStream();  // a oneshot stream ends here
    });
    source.addEventListener('run/closed', (event) => {
      seen(event);
      applyLifecycle('run/closed', JSON.parse(event.data));
      closeRunStream();
    });
    source.onopen = () => { detail.retries = 0; $('d-live-state').textContent = ''; };
    source.onerror = () => {
      if (source.readyState === EventSource.CONNECTING) {
        $('d-live-state').textContent = ' reconnecting…';
        return;
      }
      source.close();
      detail.retries += 1;
      $('d-live-state').textContent = ' reconnecting…';
      const delay = RETRY_MS[Math.min(detail.retries - 1, RETRY_MS.length - 1)];
      detail.timer = setTimeout(async () => {
        if (detail.runId !== runId) return;
        // Refused for good (the run was deleted) or only unreachable for now? A plain request tells.
        try {
          const { status } = await api(`/v1/runs/${encodeURIComponent(runId)}`, { allow: [404, 410] });
          if (status !== 200) {
            $('d-live-state').textContent = ' (the run is gone)';
            return;
          }
        } catch (error) { /* still unreachable: try the stream again */ }
        if (detail.runId === runId) openRunStream();
      }, delay);
    };
  }

  let liveFrame = 0;
  function scheduleLive() {
    if (liveFrame) return;
    liveFrame = requestAnimationFrame(() => {
      liveFrame = 0;
      if (!detail.pending) return;
      const pre = $('d-live');
      const stick = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
      const text = pre.firstChild;
      // appendData adds to the one text node: no copy of what is already shown.
      if (text && text.nodeType === Node.TEXT_NODE) text.appendData(detail.pending);
      else pre.textContent = detail.pending;
      const first = detail.pieces.length === 0;
      detail.pieces.push(detail.pending);
      if (first) renderDetailHead();  // "no text yet" becomes "streaming…"
      detail.pending = '';
      if (stick) pre.scrollTop = pre.scrollHeight;
    });
  }

  function reopenStreams() {
    if (feed.source) openFeed();
    if (detail.source) openRunStream();
  }

  async function select(runId, { focusDetail = false, updateHash = true } = {}) {
    if (!runId) {
      state.selected = null;
      detail.runId = null;
      closeRunStream();
      $('run-detail').hidden = true;
      $('detail-empty').hidden = false;
      markAllSelection();
      return;
    }
    const changed = state.selected !== runId;
    state.selected = runId;
    if (updateHash) writeHash();
    markAllSelection();
    if (changed || detail.runId !== runId) {
      detail.generation += 1;
      detail.runId = runId;
      detail.lastId = 0;
      detail.pieces = [];
      detail.pending = '';
      detail.loadedTurn = null;
      closeRunStream();
      $('d-live').textContent = '';
      for (const id of ['d-output-sec', 'd-tool-sec', 'd-transcript-sec', 'd-live-sec', 'd-children-sec']) $(id).hidden = true;
    }
    let entry = state.runs.get(runId);
    if (!entry || !entry.complete) {
      try {
        const { status, body } = await api(`/v1/runs/${encodeURIComponent(runId)}`, { allow: [404, 410] });
        if (status !== 200) {
          showNotice(status === 410 ? `Run ${runId} was deleted by retention.` : `No run with id ${runId}.`);
          if (!entry) { select(null, { updateHash: false }); return; }
        } else {
          entry = upsertRun(body);
          scheduleRender();
        }
      } catch (error) {
        showNotice(`Could not load run ${runId}: ${error.message}`);
        return;
      }
    }
    if (state.selected !== runId) return;
    $('detail-empty').hidden = true;
    $('run-detail').hidden = false;
    renderDetailHead();
    syncDetailBody();
    if (focusDetail) $('detail').focus();
  }

  // What the detail shows follows the run: a running turn streams, an ended one is read once.
  function syncDetailBody() {
    const entry = state.runs.get(detail.runId);
    if (!entry) return;
    const run = entry.run;
    $('d-live-sec').dataset.live = String(run.status === 'running');
    if (run.status === 'running') {
      $('d-live-sec').hidden = false;
      // A continuable run's new turn: the last turn's output no longer says what it is doing.
      for (const id of ['d-output-sec', 'd-tool-sec', 'd-transcript-sec']) $(id).hidden = true;
      detail.loadedTurn = null;
      if (!detail.source) openRunStream();
    } else if (detail.loadedTurn !== `${run.turn}:${run.status}`) {
      detail.loadedTurn = `${run.turn}:${run.status}`;
      loadEnded(detail.runId, detail.generation);
    }
    loadChildren(detail.runId, detail.generation);
  }

  function detailChanged() {
    renderDetailHead();
    syncDetailBody();
  }

  async function loadEnded(runId, generation) {
    const id = encodeURIComponent(runId);
    const [result, tool, transcript] = await Promise.all([
      api(`/v1/runs/${id}/result`, { allow: [404, 410] }).catch(() => null),
      api(`/v1/runs/${id}/tool-result`, { allow: [202, 404, 410] }).catch(() => null),
      // The transcript endpoint is newer than this page may be served by: shown when present.
      api(`/v1/runs/${id}/messages?format=anthropic`, { allow: [404, 405, 410, 422] }).catch(() => null),
    ]);
    if (detail.generation !== generation) return;
    if (result && result.status === 200) {
      const entry = state.runs.get(runId);
      if (entry && result.body.turn === entry.run.turn && result.body.status === 'ended') {
        entry.result = { ...result.body };
        delete entry.result.output;
        markDirty(entry);
      }
      renderOutput(result.body);
      renderDetailHead();
      if (detail.pieces.length === 0) $('d-live-sec').hidden = true;
    }
    if (tool && tool.status === 200) renderToolResult(tool.body);
    renderOrigin(runId, generation);
    if (transcript && transcript.status === 200 && transcript.body && Array.isArray(transcript.body.messages)) {
      renderTranscript(transcript.body);
    } else {
      $('d-transcript-sec').hidden = true;
    }
  }

  // Where a subagent's output came from (SPEC §19): a child made from a CLI's stdout alone
  // holds only the parent's tool result (which the CLI may have cut); a child whose own
  // transcript is in holds the subagent's own messages.
  async function renderOrigin(runId, generation) {
    const note = $('d-output-origin');
    note.hidden = true;
    const entry = state.runs.get(runId);
    if (!entry || !entry.run.parentRunId) return;
    const page = await api(`/v1/runs/${encodeURIComponent(runId)}/events?limit=1000`, { allow: [404, 410] }).catch(() => null);
    if (detail.generation !== generation || !page || page.status !== 200) return;
    const messages = page.body.events.map((item) => item.event).filter((event) => event.type === 'assistant/message');
    const formats = new Set(messages.map((event) => (event.source && event.source.format) || ''));
    const handedBack = messages.length > 0 && messages.every((event) => /:output$/.test(event.eventId || '')
      && event.source && Array.isArray(event.source.events) && event.source.events.length === 0);
    if (handedBack) {
      note.textContent = "From the parent's tool result only: the subagent's own messages are not in "
        + '(its transcript was not sent), and the CLI may have cut what it handed back.';
    } else if (formats.has('claude-code-transcript')) {
      note.textContent = "From the subagent's own messages (its transcript).";
    } else {
      return;
    }
    note.hidden = false;
  }

  async function loadChildren(runId, generation) {
    try {
      const { body } = await api(`/v1/runs?${new URLSearchParams({ parentRunId: runId, limit: '50', include: 'result' })}`);
      if (detail.generation !== generation) return;
      for (const run of body.runs) upsertRun(run);
      scheduleRender();
      const list = $('d-children');
      list.replaceChildren(...body.runs.map((child) => el('li', null,
        el('a', { href: `#run=${encodeURIComponent(child.runId)}`, text: child.runId }), ' ',
        stopBadge(child.result), ' ', el('span', { class: 'muted', text: child.agent || '' }))));
      $('d-children-sec').hidden = body.runs.length === 0;
    } catch (error) { /* the list shows the children too */ }
  }

  // ---- rendering ----------------------------------------------------------------------------

  function statusBadge(run) {
    const badge = el('span', { class: `badge status-${run.status}` });
    if (run.status === 'running') badge.append(el('span', { class: 'live-dot', 'aria-hidden': 'true' }));
    badge.append(run.status);
    return badge;
  }

  // A turn without a stop reason: the list does not follow each run's text, so a row only says
  // it has not ended; the selected run's pane, which does, says whether its text is flowing.
  function stopBadge(result, streamed) {
    const reason = result && result.stopReason;
    if (!reason) {
      const running = result && result.status === 'running';
      if (!running || streamed === undefined) {
        return el('span', { class: 'badge stop-none', text: '—', title: running ? 'not ended yet' : undefined });
      }
      return el('span', { class: 'badge stop-none', text: streamed ? 'streaming…' : 'no text yet' });
    }
    const stop = STOPS[reason] || { cls: 'stop-fail', icon: 'unknown', label: reason };
    const badge = el('span', { class: `badge ${stop.cls}`, title: `stop reason: ${reason}` }, icon(stop.icon), stop.label);
    if (stop.label.toLowerCase() !== reason) badge.append(el('small', { text: reason.replace('_', ' ') }));
    return badge;
  }

  function compact(n) {
    if (n === undefined || n === null) return '–';
    if (n < 1000) return String(n);
    if (n < 1e6) return `${(n / 1000).toFixed(n < 10000 ? 1 : 0)}k`;
    return `${(n / 1e6).toFixed(1)}M`;
  }

  function usageText(usage) {
    if (!usage) return '';
    return `${compact(usage.inputTokens)} in · ${compact(usage.outputTokens)} out`;
  }
  function usageTitle(usage) {
    if (!usage) return 'usage: reported when the turn ends';
    let text = `input ${usage.inputTokens}, output ${usage.outputTokens}`;
    if (usage.cacheReadTokens) text += `, cache read ${usage.cacheReadTokens}`;
    if (usage.cacheWriteTokens) text += `, cache write ${usage.cacheWriteTokens}`;
    return `tokens: ${text}`;
  }

  function age(iso) {
    if (!iso) return '';
    const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (seconds < 60) return `${Math.floor(seconds)}s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
    return `${Math.floor(seconds / 86400)}d`;
  }

  function matches(entry) {
    const f = state.filters;
    const run = entry.run;
    if (f.status && run.status !== f.status) return false;
    if (f.stopReason && (!entry.result || entry.result.stopReason !== f.stopReason)) return false;
    if (f.agent && run.agent !== f.agent) return false;
    if (f.q && !run.runId.toLowerCase().includes(f.q.toLowerCase())) return false;
    return true;
  }

  function newestFirst(a, b) {
    const ta = a.run.createdAt || '';
    const tb = b.run.createdAt || '';
    if (ta !== tb) return ta < tb ? 1 : -1;
    return a.run.runId < b.run.runId ? 1 : -1;
  }

  // The visible tree, flattened in display order: [{entry, depth, hasChildren, orphanOf}].
  function layout() {
    const shown = [];
    for (const entry of state.runs.values()) if (matches(entry)) shown.push(entry);
    const byParent = new Map();
    const roots = [];
    const shownIds = new Set(shown.map((entry) => entry.run.runId));
    for (const entry of shown) {
      const parent = entry.run.parentRunId;
      if (parent && shownIds.has(parent) && parent !== entry.run.runId) {
        if (!byParent.has(parent)) byParent.set(parent, []);
        byParent.get(parent).push(entry);
      } else {
        roots.push(entry);
      }
    }
    roots.sort(newestFirst);
    const out = [];
    const visit = (entry, depth, setSize, position, seen) => {
      const id = entry.run.runId;
      if (seen.has(id)) return;  // a parent cycle made up by hand: show each run once
      seen.add(id);
      const kids = byParent.get(id) || [];
      out.push({ entry, depth, setSize, position, hasChildren: kids.length > 0, childCount: kids.length });
      if (kids.length && !state.collapsed.has(id)) {
        kids.sort(newestFirst);
        kids.forEach((kid, index) => visit(kid, depth + 1, kids.length, index + 1, seen));
      }
    };
    const seen = new Set();
    roots.forEach((entry, index) => visit(entry, 1, roots.length, index + 1, seen));
    return out;
  }

  function markDirty(entry) {
    entry.dirty = true;
    entry.changes = (entry.changes || 0) + 1;
    scheduleRender();
  }

  let frame = 0;
  function scheduleRender() {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function renderRow(item) {
    const { entry } = item;
    const run = entry.run;
    const result = entry.result;
    let row = entry.row;
    if (!row) {
      row = el('li', { class: 'row', role: 'treeitem', tabindex: '-1' });
      row.dataset.runId = run.runId;
      entry.row = row;
      entry.dirty = true;
    }
    // Where the row sits changes often (a sibling arrives): attributes only, no rebuild.
    if (row.getAttribute('aria-setsize') !== String(item.setSize)) row.setAttribute('aria-setsize', String(item.setSize));
    if (row.getAttribute('aria-posinset') !== String(item.position)) row.setAttribute('aria-posinset', String(item.position));
    const shape = `${item.depth}|${item.hasChildren}|${item.childCount}|${state.collapsed.has(run.runId)}`;
    if (!entry.dirty && row.dataset.shape === shape) return row;
    entry.dirty = false;
    row.dataset.shape = shape;
    row.dataset.status = run.status;
    row.dataset.stopReason = (result && result.stopReason) || '';
    row.setAttribute('aria-level', String(item.depth));
    if (item.hasChildren) row.setAttribute('aria-expanded', String(!state.collapsed.has(run.runId)));
    else row.removeAttribute('aria-expanded');
    row.setAttribute('aria-selected', String(state.selected === run.runId));

    const name = el('span', { class: 'name' });
    name.style.paddingLeft = `${(item.depth - 1) * 1.25}rem`;
    name.append(el('span', {
      class: 'twist', 'aria-hidden': 'true',
      text: item.hasChildren ? (state.collapsed.has(run.runId) ? '▸' : '▾') : (item.depth > 1 ? '└' : ''),
    }));
    name.append(el('span', { class: 'agent', text: run.agent || '(no agent)', title: run.agent || undefined }));
    name.append(el('span', { class: 'rid', text: run.runId, title: run.runId }));
    if (item.hasChildren) name.append(el('span', { class: 'orphan', text: `${item.childCount} child${item.childCount === 1 ? '' : 'ren'}` }));
    else if (run.parentRunId && item.depth === 1) name.append(el('span', { class: 'orphan', text: `↳ of ${run.parentRunId}`, title: `child of ${run.parentRunId}` }));

    const created = run.createdAt;
    row.replaceChildren(
      name,
      el('span', null, statusBadge(run)),
      el('span', null, stopBadge(result)),
      el('span', { class: 'num', text: String(run.turn), title: `turn ${run.turn}` }),
      el('span', { class: 'num usage', text: usageText(result && result.usage), title: usageTitle(result && result.usage) }),
      el('time', { class: 'num age', datetime: created || '', title: created || '', text: age(created) }),
    );
    // A screen reader hears the row as one sentence rather than six cells.
    const stop = result && result.stopReason ? (STOPS[result.stopReason]?.label || result.stopReason) : '';
    row.setAttribute('aria-label', [run.agent || 'no agent', run.runId, run.status, stop, `turn ${run.turn}`,
      result && result.usage ? usageText(result.usage) : ''].filter(Boolean).join(', '));
    return row;
  }

  function render() {
    const began = performance.now();
    const items = layout();
    const tree = $('tree');
    const rows = items.map(renderRow);
    const ids = items.map((item) => item.entry.run.runId);
    const sameOrder = ids.length === state.order.length && ids.every((id, index) => id === state.order[index]);
    if (!sameOrder) {
      const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest('.row');
      // Move only what moved: a new run is one insertion, not a rebuild of the whole list.
      let cursor = tree.firstChild;
      for (const row of rows) {
        if (row === cursor) { cursor = cursor.nextSibling; continue; }
        tree.insertBefore(row, cursor);
      }
      while (cursor) { const next = cursor.nextSibling; cursor.remove(); cursor = next; }
      state.order = ids;
      if (focused && focused.isConnected && document.activeElement !== focused) focused.focus({ preventScroll: true });
    }
    ensureTabStop(rows);
    $('empty').hidden = rows.length > 0 || Boolean(state.loading);
    $('empty').textContent = state.runs.size ? 'No runs match these filters.' : 'No runs yet. They appear here as soon as one is created.';
    const more = $('more');
    more.hidden = !state.hasMore;
    more.disabled = Boolean(state.loading);
    $('count').textContent = `${rows.length} shown${state.hasMore ? ', more to load' : ''}`;
    stats.renders += 1;
    stats.slowestRenderMs = Math.max(stats.slowestRenderMs, performance.now() - began);
    if (stats.firstRenderMs === null && rows.length > 0) {
      stats.firstRenderMs = performance.now();
      performance.mark('lastword:first-render');
    }
    const selected = state.selected && state.runs.get(state.selected);
    if (selected && detail.runId === state.selected && selected.headShown !== selected.changes) {
      renderDetailHead();
    }
  }

  function ensureTabStop(rows) {
    // Roving tabindex: exactly one row takes Tab (the selected one, else the first).
    const current = rows.find((row) => row.tabIndex === 0);
    const wanted = rows.find((row) => row.dataset.runId === state.selected) || current || rows[0];
    for (const row of rows) if (row !== wanted && row.tabIndex === 0) row.tabIndex = -1;
    if (wanted) wanted.tabIndex = 0;
  }

  function markAllSelection() {
    for (const entry of state.runs.values()) {
      if (entry.row) entry.row.setAttribute('aria-selected', String(state.selected === entry.run.runId));
    }
    ensureTabStop([...$('tree').children]);
  }

  function renderDetailHead() {
    const entry = state.runs.get(detail.runId);
    if (!entry) return;
    entry.headShown = entry.changes;
    const { run, result } = entry;
    const title = $('d-title');
    title.replaceChildren(run.agent || '(no agent)', ' ', el('span', { class: 'rid', text: run.runId }));
    $('d-badges').replaceChildren(statusBadge(run), stopBadge(result, detail.pieces.length > 0 || detail.pending !== ''),
      el('span', { class: 'badge status-ended', text: `turn ${run.turn}` }));
    const verdict = $('d-verdict');
    const stop = result && result.stopReason && STOPS[result.stopReason];
    if (stop && result.stopReason !== 'completed') {
      verdict.hidden = false;
      verdict.className = `verdict ${stop.cls}`;
      let text = ` ${stop.label}: ${stop.what} (stopReason ${result.stopReason}).`;
      const message = result.error && (typeof result.error === 'string' ? result.error : result.error.message);
      if (message) text += ` Error: ${message}`;
      text += ' Below is what it said before it stopped.';
      verdict.replaceChildren(icon(stop.icon), text);
    } else {
      verdict.hidden = true;
    }
    const link = new URL(window.location.href);
    link.hash = `run=${encodeURIComponent(run.runId)}`;
    $('d-link').href = link.toString();
    const facts = [
      ['status', run.status], ['mode', run.mode], ['turn', String(run.turn)],
      ['parent', run.parentRunId ? el('a', { href: `#run=${encodeURIComponent(run.parentRunId)}`, text: run.parentRunId }) : '—'],
      ['created', run.createdAt
        ? el('span', null, `${run.createdAt} (`, el('time', { class: 'age', datetime: run.createdAt, text: age(run.createdAt) }), ' ago)')
        : '—'],
    ];
    if (result && result.endedAt) facts.push(['ended', result.endedAt]);
    if (result && result.usage) facts.push(['usage', usageTitle(result.usage).replace('tokens: ', '') + ' tokens']);
    if (run.metadata && Object.keys(run.metadata).length) facts.push(['metadata', el('code', { text: JSON.stringify(run.metadata) })]);
    $('d-facts').replaceChildren(...facts.flatMap(([key, value]) => [el('dt', { text: key }), el('dd', null, value)]));
  }

  function renderBlock(block) {
    const kind = block.type || 'block';
    if (kind === 'text') return el('pre', { class: 'text', tabindex: '0', text: block.text });
    if (kind === 'reasoning' || kind === 'thinking') {
      return el('details', null, el('summary', { text: 'reasoning' }),
        el('pre', { class: 'text', text: block.text || block.thinking || '(signed, no text)' }));
    }
    if (kind === 'tool_call' || kind === 'tool_use') {
      return el('div', null, el('div', { class: 'kind', text: `tool call: ${block.name}` }),
        el('pre', { class: 'text', text: JSON.stringify(block.input, null, 2) }));
    }
    if (kind === 'tool_result') {
      const content = typeof block.content === 'string' ? block.content : JSON.stringify(block.content, null, 2);
      return el('div', null, el('div', { class: 'kind', text: `tool result${block.is_error || block.isError ? ' (error)' : ''}` }),
        el('pre', { class: `text${block.is_error || block.isError ? ' error' : ''}`, text: content }));
    }
    return el('div', null, el('div', { class: 'kind', text: kind }),
      el('pre', { class: 'text', text: JSON.stringify(block, null, 2) }));
  }

  function renderOutput(result) {
    const box = $('d-output');
    if (!result.output || result.output.length === 0) {
      box.replaceChildren(el('p', { class: 'empty-output', text: 'No output: the turn said nothing the rule could select.' }));
    } else {
      box.replaceChildren(...result.output.map(renderBlock));
    }
    $('d-output-sec').hidden = false;
  }

  function renderToolResult(tool) {
    const text = (tool.content || []).map((part) => part.text).join('\n\n');
    const pre = $('d-tool');
    pre.textContent = text;
    pre.classList.toggle('error', Boolean(tool.isError));
    $('d-tool-flag').replaceChildren(tool.isError
      ? el('span', { class: 'badge stop-fail', text: 'isError: true' })
      : el('span', { class: 'badge stop-ok', text: 'isError: false' }));
    $('d-tool-sec').hidden = false;
  }

  function renderTranscript(body) {
    const list = $('d-transcript');
    list.replaceChildren(...body.messages.map((message) => {
      const content = typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : (message.content || []);
      return el('li', null, el('div', { class: 'role', text: message.role }), ...content.map(renderBlock));
    }));
    $('d-transcript-count').textContent = `(${body.messages.length} messages)`;
    // Nothing disappears silently: name what the transcript left out, and why.
    const omitted = (body.omitted || []).map((item) =>
      `event ${item.seq}${item.block !== undefined ? ` block ${item.block}` : ''}: ${item.reason}`);
    $('d-transcript-omitted').textContent = omitted.length ? `Left out: ${omitted.join('; ')}.` : '';
    $('d-transcript-sec').hidden = false;
  }

  function showNotice(text) {
    const notice = $('notice');
    notice.textContent = text;
    notice.hidden = false;
  }
  function hideNotice() { $('notice').hidden = true; }

  // ---- the URL: a link to a run, and the filters ----------------------------------------------

  function readHash() {
    const params = new URLSearchParams(window.location.hash.slice(1));
    return {
      run: params.get('run'),
      status: params.get('status') || '', stopReason: params.get('stopReason') || '', agent: params.get('agent') || '',
    };
  }

  function writeHash() {
    const params = new URLSearchParams();
    if (state.selected) params.set('run', state.selected);
    const f = state.filters;
    if (f.status) params.set('status', f.status);
    if (f.stopReason) params.set('stopReason', f.stopReason);
    if (f.agent) params.set('agent', f.agent);
    const hash = params.toString();
    if (window.location.hash.slice(1) !== hash) history.replaceState(null, '', hash ? `#${hash}` : window.location.pathname);
  }

  function applyHash() {
    const wanted = readHash();
    const f = state.filters;
    // A link to a run alone (the parent, a child) keeps the filters in force.
    const namesFilters = /(^|&)(status|stopReason|agent)=/.test(window.location.hash.slice(1));
    if (namesFilters && (wanted.status !== f.status || wanted.stopReason !== f.stopReason || wanted.agent !== f.agent)) {
      $('f-status').value = wanted.status;
      $('f-stop').value = wanted.stopReason;
      $('f-agent').value = wanted.agent;
      setServerFilters(wanted.status, wanted.stopReason, wanted.agent);
    }
    if (wanted.run !== state.selected) select(wanted.run, { updateHash: false });
  }

  function setServerFilters(status, stopReason, agent) {
    const f = state.filters;
    if (f.status === status && f.stopReason === stopReason && f.agent === agent) return;
    Object.assign(f, { status, stopReason, agent });
    // The store filters on the server: start again from the first page of what matches.
    for (const [id, entry] of state.runs) if (id !== state.selected) { state.runs.delete(id); entry.row = null; }
    state.cursor = null;
    state.hasMore = false;
    state.order = [];
    $('tree').replaceChildren();
    writeHash();
    loadPage(true);
  }

  // ---- keyboard -----------------------------------------------------------------------------

  function rowsNow() { return [...$('tree').children]; }

  function focusRow(row) {
    if (!row) return;
    for (const other of rowsNow()) if (other !== row && other.tabIndex === 0) other.tabIndex = -1;
    row.tabIndex = 0;
    row.focus();
  }

  function onTreeKey(event) {
    const row = event.target.closest('.row');
    if (!row) return;
    const rows = rowsNow();
    const index = rows.indexOf(row);
    const runId = row.dataset.runId;
    const expanded = row.getAttribute('aria-expanded');
    let handled = true;
    switch (event.key) {
      case 'ArrowDown': focusRow(rows[index + 1]); break;
      case 'ArrowUp': focusRow(rows[index - 1]); break;
      case 'Home': focusRow(rows[0]); break;
      case 'End': focusRow(rows[rows.length - 1]); if (state.hasMore) loadPage(false); break;
      case 'PageDown': focusRow(rows[Math.min(rows.length - 1, index + 10)]); break;
      case 'PageUp': focusRow(rows[Math.max(0, index - 10)]); break;
      case 'ArrowRight':
        if (expanded === 'false') toggle(runId);
        else if (expanded === 'true') focusRow(rows[index + 1]);
        break;
      case 'ArrowLeft': {
        if (expanded === 'true') { toggle(runId); break; }
        const level = Number(row.getAttribute('aria-level'));
        for (let i = index - 1; i >= 0; i -= 1) {
          if (Number(rows[i].getAttribute('aria-level')) < level) { focusRow(rows[i]); break; }
        }
        break;
      }
      case 'Enter': case ' ': select(runId, { focusDetail: event.key === 'Enter' && event.shiftKey }); break;
      default: handled = false;
    }
    if (handled) event.preventDefault();
  }

  function toggle(runId) {
    if (state.collapsed.has(runId)) state.collapsed.delete(runId);
    else state.collapsed.add(runId);
    const entry = state.runs.get(runId);
    if (entry) entry.dirty = true;
    render();
  }

  // ---- wiring -------------------------------------------------------------------------------

  function wire() {
    const tree = $('tree');
    tree.addEventListener('click', (event) => {
      const row = event.target.closest('.row');
      if (!row) return;
      if (event.target.closest('.twist') && row.hasAttribute('aria-expanded')) { toggle(row.dataset.runId); return; }
      focusRow(row);
      select(row.dataset.runId);
    });
    tree.addEventListener('keydown', onTreeKey);
    $('more').addEventListener('click', () => loadPage(false));
    // Near the bottom of the list, the next page loads by itself.
    new IntersectionObserver((seen) => {
      if (seen.some((item) => item.isIntersecting) && state.hasMore) loadPage(false);
    }, { root: document.querySelector('.runs'), rootMargin: '200px' }).observe($('more'));

    const search = $('search');
    search.addEventListener('input', () => { state.filters.q = search.value.trim(); render(); });
    search.addEventListener('keydown', (event) => {
      if (event.key !== 'Enter') return;
      event.preventDefault();
      const id = search.value.trim();
      if (id) select(id, { focusDetail: false });
    });
    $('filters').addEventListener('submit', (event) => event.preventDefault());
    const onFilter = () => setServerFilters($('f-status').value, $('f-stop').value, $('f-agent').value.trim());
    $('f-status').addEventListener('change', onFilter);
    $('f-stop').addEventListener('change', onFilter);
    $('f-agent').addEventListener('change', onFilter);
    $('filters').addEventListener('reset', () => {
      // The form clears its fields after this event: read them once it has.
      setTimeout(() => { state.filters.q = search.value.trim(); onFilter(); render(); }, 0);
    });
    $('d-copy').addEventListener('click', async () => {
      const href = $('d-link').href;
      try {
        await navigator.clipboard.writeText(href);
        $('d-copied').textContent = 'Copied.';
      } catch (error) {
        $('d-copied').textContent = href;
      }
      setTimeout(() => { $('d-copied').textContent = ''; }, 3000);
    });
    document.addEventListener('keydown', (event) => {
      if (event.key === '/' && !event.target.closest('input, select, textarea, dialog')) {
        event.preventDefault();
        search.focus();
      } else if (event.key === 'Escape' && event.target === search) {
        search.value = '';
        state.filters.q = '';
        render();
      }
    });
    window.addEventListener('hashchange', applyHash);
    // Ages move on by themselves.
    setInterval(() => {
      for (const node of document.querySelectorAll('time.age')) node.textContent = age(node.getAttribute('datetime'));
    }, 5000);
  }

  async function start() {
    wire();
    const wanted = readHash();
    $('f-status').value = wanted.status;
    $('f-stop').value = wanted.stopReason;
    $('f-agent').value = wanted.agent;
    Object.assign(state.filters, { status: wanted.status, stopReason: wanted.stopReason, agent: wanted.agent });
    // Subscribe first, then read the list: whatever happens in between arrives on the stream.
    // When a token is needed the stream fails at once, the list's request asks for the token,
    // and the stream, reopened with it, reads the list again once it is open (see openFeed).
    openFeed();
    await Promise.race([feed.opened, new Promise((resolve) => setTimeout(resolve, 3000))]);
    await loadPage(true);
    if (wanted.run) select(wanted.run, { updateHash: false });
  }

  start();
})();
