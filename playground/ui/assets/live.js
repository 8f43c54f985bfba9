// The live screen: the token stream and the current step's panels, drawn in the browser from the
// small values the server streams (see playground/app/frames.py). Runs as the gr.HTML component's
// js_on_load: `element`, `props`, `watch`, `trigger` and `server` come from Gradio.
//
// The component's value is the newest frame, not the run: a run's first frame holds it whole (its `head`,
// every path entry), each later one only what is new (`from`, `path`) and the run's latest state. `st.v`
// is the screen's own copy of the run, folded from the frames (`absorb`); a page that lost a frame asks
// for the whole value again (server.live_state) and adds what it lacks. Only new tokens are added to the
// page, one element each; the panels redraw for the step on screen. Clicking a token, or ← / → on a focused
// token, selects its step: every panel moves there, and the server is told (so the deeper views follow).
// Steps are counted from 1 on screen; data-step counts from 0. Numbers the stream does not carry (another
// layer's attention) are asked for with server.attention_row and cached.

const STRINGS = props.strings || {};
const EMPTY = { run: null, path: [], status: {} };
// v: the run on screen; spans: its generated tokens' elements (data-step i at spans[i]); late: the newest
// frame that came while a whole value was on its way
const st = { run: null, v: EMPTY, spans: [], selected: null, att: {}, pending: {}, view: null, lang: "en",
  repairing: false, late: null, drawnLang: null };
const $ = (sel) => element.querySelector(sel);
const SPARK_POINTS = 160;  // the KV sparkline draws at most this many points, however long the run

function lang() { return st.v.lang || st.lang || "en"; }
function tr(key, vals) {
  let s = (STRINGS[lang()] || STRINGS.en || {})[key] || (STRINGS.en || {})[key] || key;
  for (const k in vals || {}) s = s.split("{" + k + "}").join(String(vals[k]));
  return s;
}
function trn(key, n, vals) {  // "1 token", "2 tokens": a key_one form where the language has one
  const one = n === 1 && ((STRINGS[lang()] || {})[key + "_one"] !== undefined);
  return tr(one ? key + "_one" : key, Object.assign({ n: n }, vals || {}));
}
function esc(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function shown(text) {  // a token as a person can see it: spaces and newlines made visible
  if (text === "") return "∅";
  return esc(text).replace(/\n/g, "↵\n");
}
function plain(text) {  // a token in a label or a chip: one line
  if (text === "") return "∅";
  return text.replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥");
}
function label(text) { return esc(plain(text)); }  // the same, as markup
function pct(p) {  // a probability as a person reads it: a tiny one is "<0.5%", never "0%" (only 0 is 0%)
  if (p > 0 && p < 0.005) return "<0.5%";
  return (100 * p).toFixed(p >= 0.995 || p === 0 ? 0 : 1) + "%";
}
function idClass(text, id) {  // a model without a tokenizer shows each token as its id: keep them apart
  return text === String(id) ? " id" : (isBytes(text) ? " bytes" : "");
}
function isBytes(text) {  // (part of) a character the tokenizer has no piece for, as its UTF-8 bytes ("<0xE5>")
  return /<0x[0-9A-F]{2}>/.test(text);
}
function bytesNote(text) { return isBytes(text) ? " · " + tr("live_byte_token") : ""; }
function idsOnly(v) {  // the run's prompt is all ids shown as themselves: a model without a tokenizer
  const prompt = v.prompt || [];
  return prompt.length > 0 && prompt.every(([text, id]) => text === String(id));
}
function probColour(p) {  // light → strong blue, as the legend shows
  p = Math.max(0, Math.min(1, p));
  const lo = [239, 243, 255], hi = [8, 81, 156];
  const c = lo.map((l, i) => Math.round(l + (hi[i] - l) * p));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}
function bytes(n) {
  if (n == null) return "–";
  const units = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [u, s] of units) if (n >= s) return (n / s).toFixed(n / s >= 100 ? 0 : 1) + " " + u;
  return n + " B";
}

// ---------------------------------------------------------------- the stream

function resetRun(v, keep) {
  // a fork opens at the step that was on screen (the server says which); any other run follows its newest
  // token; the same run again (a language switch, a lost frame) keeps the step, the view and the rows asked for
  if (!keep) {
    st.selected = Number.isInteger(v.selected) ? v.selected : null; st.att = {}; st.pending = {}; st.view = null;
  }
  st.run = v.run; st.spans = []; st.marked = null;
  const stream = $("#token-stream");
  const parts = [];
  const who = v.kind === "seq2seq" ? tr("source_label") : tr("prompt_label");
  parts.push(`<span class="pg-part">${esc(who)}</span>`);
  (v.prompt || []).forEach(([text, id], i) => {  // the chat template's opening is marked: a switch hides it
    const sys = i < (v.opening || 0) ? " sys" : "";
    parts.push(`<span class="tok prompt${sys}${idClass(text, id)}" title="${esc(tr("prompt_label") + " · id " + id + bytesNote(text))}">${shown(text)}</span>`);
  });
  for (const [text, id, p] of v.inherited || []) {
    parts.push(`<span class="tok inherited${idClass(text, id)}" title="id ${id} · p = ${p.toFixed(3)}${esc(bytesNote(text))}" style="background:${probColour(p)};color:${p > 0.6 ? "#fff" : "#111"}">${shown(text)}</span>`);
  }
  if (v.kind === "seq2seq") parts.push(`<span class="pg-arrow">→</span>`);
  for (const [text, id] of v.forced_tokens || []) {
    parts.push(`<span class="tok forced" title="${esc(tr("forced_token") + " · id " + id)}">${shown(text)}</span>`);
  }
  stream.innerHTML = parts.join("");
}

// The step a person reads for path index `i`: the server's numbering (Run.step_number), step 1 for a run's
// first new token; a branch continues its parent's count (first_step). data-step stays the 0-based index.
function stepNo(v, i) {
  return (v.first_step ?? 1) + i;
}

function tokenSpan(v, step, entry) {
  const [text, id, p] = entry;
  const span = document.createElement("span");
  span.className = "tok gen" + idClass(text, id) + (entry[5] ? " spec-" + entry[5] : "");
  span.dataset.step = String(step);
  if (entry[5]) span.dataset.spec = entry[5];  // speculative decoding: a kept draft, a replaced one, a bonus token
  span.dataset.prob = String(p);
  span.tabIndex = 0;
  span.title = `step ${stepNo(v, step)} · id ${id} · p = ${p.toFixed(3)}${bytesNote(text)}`;  // counted as the step bar
  span.style.background = probColour(p);
  span.style.color = p > 0.6 ? "#fff" : "#111";
  span.textContent = text === "" ? "∅" : text.replace(/\n/g, "↵\n");  // as shown() writes it, without markup
  return span;
}

// The stream holds the prompt's tokens, then one element per generated token: `from` drops the elements
// from that step on (beam search rewrote them; they are the stream's last children), then the new ones go after.
function updateStream(v, from, added) {
  const stream = $("#token-stream");
  while (st.spans.length > from) st.spans.pop().remove();
  if (!added.length) return;
  const frag = document.createDocumentFragment();
  added.forEach((entry, i) => {
    const span = tokenSpan(v, from + i, entry);
    st.spans.push(span);
    frag.appendChild(span);
  });
  stream.appendChild(frag);
}

// Following the newest token reads the layout: once per frame the browser draws, after every write (a read
// between two writes would have it lay the page out twice). The stream scrolls towards its end, but never past the
// answer's first line (with the line before it): a long run, such as a base model going on after its answer,
// keeps the answer in view and grows below it. The attention chips scroll to the newest token's; a selected step
// keeps both where the visitor left them.
function follow() {
  if (st.following) return;
  st.following = true;
  requestAnimationFrame(() => {
    st.following = false;
    if (st.selected !== null) return;
    const stream = $("#token-stream"), chips = $(".pg-achips"), query = chips && chips.querySelector(".query");
    const below = query ? query.getBoundingClientRect().bottom - chips.getBoundingClientRect().bottom : 0;
    const first = st.spans[0];
    let top = stream.scrollHeight;
    if (first) {
      const r = first.getBoundingClientRect();
      top = Math.max(0, r.top - stream.getBoundingClientRect().top + stream.scrollTop - r.height - 4);
    }
    stream.scrollTop = Math.min(stream.scrollHeight, top);
    if (below > 0) chips.scrollTop += below + 4;
  });
}

function currentStep(v) {
  const n = (v.path || []).length;
  if (!n) return null;
  return st.selected === null ? n - 1 : Math.min(st.selected, n - 1);
}

function markSelected() {
  const step = currentStep(st.v);
  const old = st.marked;
  const el = step === null ? null : st.spans[step];
  if (old === el) return;
  if (old) old.classList.remove("selected");
  if (el) el.classList.add("selected");
  st.marked = el;
}

function select(step, focus) {
  const v = st.v;
  const n = (v.path || []).length;
  if (!n) return;
  step = Math.max(0, Math.min(n - 1, step));
  st.selected = step;
  markSelected();
  drawPanels(v);
  if (focus) {
    const el = st.spans[step];
    if (el) { el.focus({ preventScroll: true }); el.scrollIntoView({ block: "nearest", inline: "nearest" }); }
  }
  // The server's session learns the step first (a direct call, never dropped), then the deep views
  // redraw for whatever step is newest when their turn comes (rapid arrow presses collapse into one).
  // Quick presses are requests that may arrive in either order: each carries its count, the newest wins.
  const run = v.run;
  st.order = (st.order || 0) + 1;
  // Every press that acts at the step on screen awaits this call first (layout.AFTER_STEP_TOLD_JS): `__pgStepTold`.
  const told = server.select_step([run, step, st.order]).catch(() => {});
  window.__pgStepTold = told;
  told.then(() => trigger("select", { step: step, run: run }));
}

// ---------------------------------------------------------------- status and step bar

function drawStatus(v) {
  const s = v.status || {};
  let text;
  if (s.state === "error") text = tr("status_error", { message: s.error || "" });
  else if (!v.run) text = tr("status_ready");
  else if (s.state === "waiting") text = tr(s.wait_s == null ? "status_waiting" : "status_waiting_for", { position: s.position, s: s.wait_s });
  else if (s.state === "running") text = s.n ? trn("status_running", s.n) : tr("status_starting");
  else if (s.state === "stopped") text = trn("status_stopped", s.n);
  else text = trn("status_done", s.n, { why: tr("reason_" + (s.reason || "length")) });
  if (v.run && s.seed != null && v.mode === "sample") text += " " + tr("status_seed", { seed: s.seed });
  const status = $("#gen-status");
  status.textContent = text;
  status.dataset.state = v.run || s.state === "error" ? s.state : "ready";
  const rate = $(".pg-rate");
  rate.textContent = s.tokens_per_s ? tr("rate", { tps: (+s.tokens_per_s).toFixed(1), prefill: (+s.prefill_ms).toFixed(1), decode: (+s.decode_ms || 0).toFixed(1) }) : "";
}

function drawLegend() {
  const hidden = document.body.classList.contains("pg-hide-system") ? " checked" : "";
  $(".pg-legend").innerHTML = `<span>${esc(tr("legend"))}:</span> <span class="pg-scale">${esc(tr("legend_low"))}</span>`
    + `<span class="pg-ramp"></span><span class="pg-scale">${esc(tr("legend_high"))}</span> <span class="pg-hint">· ${esc(tr("legend_hint"))}</span>`
    // one switch folds the chat template's opening (system message, role markers) in the stream and side by side
    + ` <label class="pg-sys-switch"><input type="checkbox" id="hide-system"${hidden}> ${esc(tr("hide_system"))}</label>`;
  $("#hide-system").addEventListener("change", (e) => document.body.classList.toggle("pg-hide-system", e.target.checked));
}

function drawStepBar(v, step) {
  const bar = $(".pg-stepbar");
  const n = (v.path || []).length;
  if (step === null) { bar.innerHTML = `<span class="pg-muted">${esc(tr("no_tokens"))}</span>`; return; }
  const [text, , p] = v.path[step];
  const follow = st.selected === null
    ? `<span class="pg-muted">· ${esc(tr("following"))}</span>`
    : `<button class="pg-btn pg-follow" type="button">${esc(tr("back_to_live"))}</button>`;
  bar.innerHTML = `<button class="pg-btn pg-prev" type="button" aria-label="previous step">◀</button>`
    + `<span class="pg-stepno">${esc(tr("step_of", { step: stepNo(v, step), n: stepNo(v, n - 1) }))}</span>`
    + `<button class="pg-btn pg-next" type="button" aria-label="next step">▶</button>`
    + `<span class="pg-chose">${esc(tr("chose", { token: "“" + text.replace(/\n/g, "↵") + "”", p: p.toFixed(3) }))}</span> ${follow}`;
}

// ---------------------------------------------------------------- candidates

function drawCandidates(v, step) {
  const box = $(".pg-cands");
  let html = `<h4>${esc(tr("cand_title"))}</h4><p class="pg-hint">${esc(tr("cand_hint"))}</p>`;
  if (step === null) { box.innerHTML = html; return; }
  const cands = v.path[step][3] || [];
  if (!cands.length) { box.innerHTML = html + `<p class="pg-muted">${esc(tr("cand_none"))}</p>`; return; }
  const stages = v.stages || ["raw"];
  html += `<table class="pg-ctable"><thead><tr><th>${esc(tr("cand_token"))}</th>`
    + stages.map((s) => `<th>${esc(tr("stage_" + s))}</th>`).join("") + `<th></th></tr></thead><tbody>`;
  for (const [text, id, probs, removed, chosen] of cands) {
    const cls = (chosen ? "chosen" : "") + (removed >= 0 ? " removed" : "");
    const why = removed >= 0 ? tr("removed_by", { stage: tr("stage_" + stages[removed]) }) : "";
    html += `<tr class="${cls}" title="id ${id}${why ? " · " + esc(why) : ""}${esc(bytesNote(text))}"><td class="pg-ctok">${chosen ? "✓ " : ""}${label(text)}</td>`;
    probs.forEach((p, i) => {
      const gone = removed >= 0 && i >= removed;
      html += `<td class="pg-bar${gone ? " gone" : ""}"><span style="width:${Math.max(0, Math.min(100, 100 * p)).toFixed(1)}%"></span><em>${gone ? "–" : pct(p)}</em></td>`;
    });
    const branch = chosen || v.status.state === "running" ? "" :
      `<button class="pg-branch" type="button" data-id="${id}" title="${esc(tr("branch_here", { step: stepNo(v, step), token: "“" + text + "”" }))}">↪</button>`;
    html += `<td>${branch}</td></tr>`;
  }
  html += `</tbody></table>`;
  if (v.status.state !== "running") {
    html += `<div class="pg-typed"><input type="text" class="pg-typed-text" placeholder="${esc(tr("type_token"))}">`
      + `<button class="pg-btn pg-typed-go" type="button">${esc(tr("continue"))}</button></div>`;
  }
  box.innerHTML = html;
}

// ---------------------------------------------------------------- attention on the text

function viewOf(v) {
  if (!st.view) {  // the session's view (the server keeps it across runs, languages and reloads)
    const m = v.model || {}, sv = v.view || {};
    const kinds = v.kind === "seq2seq" ? ["cross", "self"] : ["self"];
    const layer = sv.layer >= 0 && sv.layer < (m.layers || 1) ? sv.layer : (m.layers || 1) - 1;
    const head = (m.head_choices || ["mean"]).includes(sv.head) ? sv.head : "mean";
    st.view = { kind: kinds.includes(sv.kind) ? sv.kind : kinds[0], layer: layer, head: head, scale: "linear", sink: false };
  }
  return st.view;
}

function keyLabels(v, step, kind) {
  if (kind === "cross") return (v.prompt || []).map((t) => t[0]);
  const path = (v.path || []).slice(0, step).map((t) => t[0]);
  if (v.kind === "seq2seq") return (v.decoder_start || []).map((t) => t[0]).concat((v.forced_tokens || []).map((t) => t[0]), path);
  return (v.prompt || []).map((t) => t[0]).concat((v.inherited || []).map((t) => t[0]), (v.forced_tokens || []).map((t) => t[0]), path);
}

function attentionRow(v, step) {
  const view = viewOf(v);
  const key = [step, view.kind, view.layer, view.head].join("|");
  if (v.att && v.att.step === step && v.att.kind === view.kind && v.att.layer === view.layer && v.att.head === view.head) {
    return v.att.row;
  }
  if (key in st.att) return st.att[key];
  if (!st.pending[key] && v.run && server && server.attention_row) {
    st.pending[key] = true;
    const run = v.run;
    server.attention_row([run, step, view.kind, view.layer, view.head]).then((r) => {
      if (st.run !== run) return;
      st.att[key] = r && r.row ? r.row : (r && r.error ? { error: r.error } : null);
      drawAttention(st.v, currentStep(st.v));
    }).catch(() => { st.att[key] = null; });
  }
  return undefined;
}

// The panel's title and controls are drawn when the run, the language or the view changes, never per frame (a
// layer list left open while the tokens stream stays open); its chips are updated in place: one per key the token
// looked at, each frame recolouring them and adding the new ones.
function drawAttention(v, step) {
  const box = $(".pg-att");
  const view = viewOf(v);
  const frame = JSON.stringify([lang(), v.run, v.kind, (v.model || {}).layers, view]);
  if (st.attFrame !== frame) {
    box.innerHTML = `<h4>${esc(tr("att_title"))}</h4><p class="pg-hint">${esc(tr("att_hint"))}</p>`
      + `<div class="pg-acontrols">${attentionControls(v, view)}</div><div class="pg-achips"></div>`;
    st.attFrame = frame;
    st.chips = [];
  }
  const chips = box.querySelector(".pg-achips");
  const row = step === null ? null : attentionRow(v, step);
  let message = "";
  if (step === null) message = "";
  else if (row === undefined) message = tr("att_loading");
  else if (row === null) message = tr("att_off");
  else if (row.error) message = row.error;
  else { drawChips(chips, v, step, row, view); return; }
  chips.innerHTML = message ? `<p class="pg-muted">${esc(message)}</p>` : "";
  st.chips = [];
}

function attentionControls(v, view) {
  const m = v.model || {};
  let controls = "";
  if (v.kind === "seq2seq") {
    controls += `<select class="pg-akind">${["cross", "self"].map((k) => `<option value="${k}"${view.kind === k ? " selected" : ""}>${esc(tr("att_" + k))}</option>`).join("")}</select>`;
  }
  const layers = [];
  for (let i = 0; i < (m.layers || 1); i++) layers.push(`<option value="${i}"${view.layer === i ? " selected" : ""}>${esc(tr("att_layer"))} ${i}</option>`);
  controls += `<select class="pg-alayer" aria-label="${esc(tr("att_layer"))}">${layers.join("")}</select>`;
  const heads = (m.head_choices || ["mean"]).map((h) => {
    const name = h === "mean" ? tr("att_mean") : h === "max" ? tr("att_max") : h.startsWith("group:") ? tr("att_group", { g: h.slice(6) }) : tr("att_head") + " " + h;
    return `<option value="${h}"${view.head === h ? " selected" : ""}>${esc(name)}</option>`;
  });
  controls += `<select class="pg-ahead" aria-label="${esc(tr("att_head"))}">${heads.join("")}</select>`;
  controls += `<select class="pg-ascale" aria-label="${esc(tr("att_scale"))}">${["linear", "log"].map((s) => `<option value="${s}"${view.scale === s ? " selected" : ""}>${esc(tr("att_" + s))}</option>`).join("")}</select>`;
  controls += `<label class="pg-asink"><input type="checkbox" class="pg-asinkbox"${view.sink ? " checked" : ""}> ${esc(tr("att_sink"))}</label>`;
  return controls;
}

function drawChips(chips, v, step, row, view) {
  const labels = keyLabels(v, step, view.kind);
  const ids = idsOnly(v);
  const n = Math.min(labels.length, row.length);
  const from = view.sink && n > 1 ? 1 : 0;
  let top = 0, low = Infinity;
  for (let i = from; i < n; i++) { top = Math.max(top, row[i]); if (row[i] > 0) low = Math.min(low, row[i]); }
  const logLo = Math.log10(Math.max(low === Infinity ? 1e-6 : low, top * 1e-4, 1e-9)), logHi = Math.log10(Math.max(top, 1e-9));
  if (!st.chips.length) chips.textContent = "";  // a message stood there
  const els = st.chips;
  while (els.length > n) els.pop().remove();
  const frag = document.createDocumentFragment();
  for (let i = 0; i < n; i++) {
    const w = row[i];
    let a = 0;
    if (i >= from && top > 0) {
      a = view.scale === "log" ? (w > 0 ? (Math.log10(w) - logLo) / Math.max(logHi - logLo, 1e-9) : 0) : w / top;
    }
    a = Math.max(0, Math.min(1, a));
    let el = els[i];
    if (!el) { el = els[i] = document.createElement("span"); el.drawn = {}; frag.appendChild(el); }
    // only what changed is written: most chips keep their class and colour from one frame to the next
    const d = el.drawn;
    const cls = "achip" + (ids ? " id" : "") + (i < from ? " sink" : "") + (view.kind !== "cross" && i === n - 1 ? " query" : "");
    const shade = (0.08 + 0.92 * a).toFixed(3);
    if (d.key !== labels[i]) { d.key = labels[i]; el.textContent = plain(labels[i]); }
    if (d.cls !== cls) { d.cls = cls; el.className = cls; }
    if (d.shade !== shade) {
      d.shade = shade;
      el.style.background = `rgba(230,85,13,${shade})`;
      el.style.color = a > 0.55 ? "#fff" : "#111";
    }
    el.title = "#" + i + " " + labels[i] + " · " + w.toFixed(4);
  }
  chips.appendChild(frag);
}

// ---------------------------------------------------------------- KV cache

function drawCache(v, step) {
  const box = $(".pg-kv");
  const c = v.cache || {};
  let html = `<h4>${esc(tr("kv_title"))}</h4><p class="pg-hint">${esc(tr("kv_hint"))}</p>`;
  if (step === null || !c.layers) { box.innerHTML = html; return; }
  const [tokens, used] = v.path[step][4];
  if (c.enabled === false) {
    box.innerHTML = html + `<p>${esc(tr("kv_off"))}</p>`;
    return;
  }
  const formula = `2 · N<sub>layers</sub> · B · h<sub>kv</sub> · T · d<sub>head</sub> · s = 2 · ${c.layers} · ${c.batch} · ${c.kv_heads} · <b>${tokens}</b> · ${c.head_dim} · ${c.element_size} = <b>${used.toLocaleString()}</b> B`;
  const mha = c.kv_heads ? Math.round(used * c.query_heads / c.kv_heads) : used;
  html += `<p class="pg-formula">${formula}</p><p class="pg-symbols">${esc(tr("kv_symbols"))}</p>`;
  html += sparkline(v, step, c);
  html += `<p>${esc(tr("kv_at_step", { step: stepNo(v, step), tokens: tokens, bytes: bytes(used) }))} · ${esc(tr("kv_used", { used: bytes(used), allocated: bytes(c.allocated_bytes) }))}`;
  if (c.query_heads !== c.kv_heads) html += ` · ${esc(tr("kv_mha", { mha: bytes(mha) }))}`;
  html += `</p>`;
  if (c.cross) html += `<p>${esc(tr("kv_cross", { bytes: bytes(c.cross.bytes), tokens: c.cross.tokens }))}</p>`;
  box.innerHTML = html;
}

function sparkline(v, step, c) {
  const path = v.path || [];
  if (!path.length) return "";
  const stride = Math.ceil(path.length / SPARK_POINTS);  // the line's shape, in a bounded number of points
  const pts = [];
  for (let i = 0; i < path.length; i += stride) pts.push(path[i][4]);
  if ((path.length - 1) % stride) pts.push(path[path.length - 1][4]);
  const W = 300, H = 56, maxT = Math.max(c.max_tokens || 1, ...pts.map((p) => p[0]));
  const perToken = c.bytes_per_token || 1, top = Math.max(perToken * maxT * (c.query_heads || 1) / (c.kv_heads || 1), 1);
  const x = (t) => (4 + (W - 8) * t / maxT).toFixed(1), y = (b) => (H - 4 - (H - 8) * b / top).toFixed(1);
  const used = pts.map((p, i) => `${i ? "L" : "M"}${x(p[0])},${y(p[1])}`).join("");
  const mhaLine = c.query_heads !== c.kv_heads ? `<path d="M${x(0)},${y(0)}L${x(maxT)},${y(perToken * maxT * c.query_heads / c.kv_heads)}" class="mha"/>` : "";
  const alloc = `<path d="M${x(0)},${y(perToken * maxT)}L${x(maxT)},${y(perToken * maxT)}" class="alloc"/>`;
  const [t, b] = path[step][4];
  return `<svg class="pg-spark" viewBox="0 0 ${W} ${H}" role="img" aria-label="KV cache bytes by tokens">${alloc}${mhaLine}<path d="${used}" class="used"/><circle cx="${x(t)}" cy="${y(b)}" r="3.5"/></svg>`;
}

// ---------------------------------------------------------------- beams and branches

function drawBeams(v) {
  const box = $(".pg-beams");
  if (!v.beams || !v.beams.length) { box.innerHTML = ""; box.hidden = true; return; }
  box.hidden = false;
  box.innerHTML = `<h4>${esc(tr("beams_title"))}</h4><ol>` + v.beams.map(([text, score, done]) =>
    `<li class="${done ? "done" : ""}"><code>${score.toFixed(3)}</code> ${done ? `<span class="pg-badge">${esc(tr("beam_finished"))}</span>` : ""} <span class="pg-btext">${esc(text).replace(/\n/g, "↵")}</span></li>`).join("") + `</ol>`;
}

function drawBranches(v) {
  const box = $(".pg-branches");
  const list = v.branches || [];
  if (list.length < 2) { box.innerHTML = ""; box.hidden = true; return; }
  box.hidden = false;
  box.innerHTML = `<h4>${esc(tr("branches_title"))}</h4>` + list.map((b) =>
    `<div class="pg-branchrow${b.current ? " current" : ""}"><span class="pg-muted">${esc(b.parent ? tr("branch_label", { n: b.number, parent: b.parent, step: b.step }) : tr("run_label", { n: b.number }))}${b.edit ? ` · <span class="pg-edit">${esc(b.edit)}</span>` : ""}</span>`
    + `<div class="pg-btext"><span class="pg-shared">${esc(b.shared)}</span><mark>${esc(b.diverges)}</mark><span class="pg-rest">${esc(b.rest)}</span></div></div>`).join("");
}

// ---------------------------------------------------------------- everything

function drawPanels(v) {
  const step = currentStep(v);
  drawStepBar(v, step);
  drawCandidates(v, step);
  drawAttention(v, step);
  drawCache(v, step);
}

function entries(text) { return typeof text === "string" ? JSON.parse(text) : (text || []); }
function attention(text) { return typeof text === "string" ? JSON.parse(text) : (text || null); }
function settled(v) { return !!v.status && !["running", "waiting"].includes(v.status.state); }

// Fold one frame into the screen's copy of the run and draw what changed. A frame that does not follow what the
// page holds (one was lost, or the run's first) waits for the run's whole value, asked for once (`repair`).
function absorb(f) {
  if (!f.run) {  // no run: an empty screen (a model switch, a start that failed)
    st.v = Object.assign({}, EMPTY, f); st.run = null; st.spans = []; st.marked = null;
    $("#token-stream").innerHTML = "";
    drawStatus(st.v); drawLegend(); drawPanels(st.v); drawBeams(st.v); drawBranches(st.v);
    return;
  }
  let from = f.from || 0;
  if (!f.head && (f.run !== st.run || from > st.v.path.length)) { repair(f); return; }
  let added = entries(f.path);
  const before = st.v;
  if (f.head) {  // the run whole: a new run, or the same one again (a language switch, a repair)
    const fresh = f.run !== st.run, lang = f.lang || st.lang;
    const keep = !fresh && lang === before.lang;  // the same run in the same words (a lost frame's repair)
    st.v = Object.assign({}, f.head, { path: keep ? before.path : [], lang });  // its words in the frame's language
    if (!keep) resetRun(Object.assign({}, f.head, f), !fresh);
    if (fresh && st.reveal) requestAnimationFrame(reveal);
  }
  const v = st.v;
  // entries the page already holds (a repair's whole value, or a frame sent before it) stay; the rest is added
  const same = samePrefix(v.path.slice(from), added);
  from += same;
  added = added.slice(same);
  for (const k in f) if (!["head", "path", "from", "att"].includes(k)) v[k] = f[k];
  v.att = attention(f.att);
  st.lang = v.lang || st.lang;
  v.path.length = Math.min(v.path.length, from);
  for (const entry of added) v.path.push(entry);
  updateStream(v, from, added);
  if (!("branches" in f)) growBranches(v, added);
  // the panels follow the newest step; a selected one's redraw when the run ends (its branch buttons appear)
  const all = st.selected === null || f.head || settled(v) !== settled(before) || v.lang !== st.drawnLang;
  drawStatus(v);
  if (v.lang !== st.drawnLang) { drawLegend(); st.drawnLang = v.lang; }
  if (all) drawPanels(v); else drawStepBar(v, currentStep(v));
  markSelected();
  if (v.beams || before.beams) drawBeams(v);
  if ("branches" in f) drawBranches(v);
  follow();
}

// How many entries `held` and `whole` share from the start (the steps the page need not draw again).
function samePrefix(held, whole) {
  let n = 0;
  while (n < held.length && n < whole.length && JSON.stringify(held[n]) === JSON.stringify(whole[n])) n++;
  return n;
}

// A lost frame: the run's whole value, asked once; the newest frame that arrives meanwhile is kept, and applied
// after it only when it ends the run (any other is older than the whole value, or followed by a newer frame).
function repair(f) {
  st.late = f;
  if (st.repairing || !server.live_state) return;
  st.repairing = true;
  server.live_state([f.run]).then((whole) => {
    st.repairing = false;
    const late = st.late;
    st.late = null;
    if (whole && whole.run === f.run) absorb(whole);
    if (late && late.run === st.run && settled(late) && !settled(st.v)) absorb(late);
  }).catch(() => { st.repairing = false; });
}

function render() {
  const f = props.value || {};
  // A language switch's copy of the screen, computed before a run that has reached the page since (Generate pressed
  // right after the switch): the run stays; once it has ended it is asked for again, in the new language.
  if (f.relabel && f.run !== st.run) {
    if (st.run && settled(st.v)) repair({ run: st.run });
    return;
  }
  // A model switch empties the screen; a run of that model already on it (Generate pressed during the load) stays.
  if (f.left_for && st.run && (st.v.model || {}).name === f.left_for) return;
  if (st.repairing && f.run) { st.late = f; return; }
  absorb(f);
}

// ---------------------------------------------------------------- the lineage panel while a run streams

// The current run's row grows with its new tokens (the server sends the panel again when the run ends): a run
// that left its parent extends its own part, any other its shared part. Only the row's text nodes change.
function growBranches(v, added) {
  const row = (v.branches || []).find((b) => b.current);
  if (!row || !added.length) return;
  const text = added.map((e) => e[0]).join("");
  const part = row.diverges === "" ? "shared" : "rest";
  row[part] += text;
  const el = $(`.pg-branchrow.current .pg-btext .pg-${part}`);
  if (el) el.appendChild(document.createTextNode(text));
}

// ---------------------------------------------------------------- events

element.addEventListener("click", (e) => {
  const v = st.v;
  const tok = e.target.closest(".tok.gen[data-step]");
  if (tok) { select(+tok.dataset.step, true); return; }
  if (e.target.closest(".pg-prev")) { select((currentStep(v) ?? 1) - 1, true); return; }
  if (e.target.closest(".pg-next")) { select((currentStep(v) ?? -1) + 1, true); return; }
  if (e.target.closest(".pg-follow")) { st.selected = null; markSelected(); drawPanels(v); return; }
  const branch = e.target.closest(".pg-branch");
  if (branch) { trigger("submit", { run: v.run, step: currentStep(v), token_id: +branch.dataset.id }); return; }
  if (e.target.closest(".pg-typed-go")) {
    const text = element.querySelector(".pg-typed-text").value;
    if (text) trigger("submit", { run: v.run, step: currentStep(v), text: text });
  }
});

element.addEventListener("keydown", (e) => {
  const tok = e.target.closest && e.target.closest(".tok.gen[data-step]");
  if (tok && (e.key === "ArrowLeft" || e.key === "ArrowRight")) {
    e.preventDefault();
    select(+tok.dataset.step + (e.key === "ArrowRight" ? 1 : -1), true);
  } else if (tok && (e.key === "Enter" || e.key === " ")) {
    e.preventDefault();
    select(+tok.dataset.step, true);
  } else if (e.target.classList && e.target.classList.contains("pg-typed-text") && e.key === "Enter") {
    e.preventDefault();
    element.querySelector(".pg-typed-go").click();
  }
});

element.addEventListener("change", (e) => {
  const v = st.v;
  const view = viewOf(v);
  if (e.target.classList.contains("pg-akind")) view.kind = e.target.value;
  else if (e.target.classList.contains("pg-alayer")) view.layer = +e.target.value;
  else if (e.target.classList.contains("pg-ahead")) view.head = e.target.value;
  else if (e.target.classList.contains("pg-ascale")) view.scale = e.target.value;
  else if (e.target.classList.contains("pg-asinkbox")) view.sink = e.target.checked;
  else return;
  if (server && server.set_view && v.run) server.set_view([v.run, view.kind, view.layer, view.head]).catch(() => {});
  drawAttention(v, currentStep(v));
});

// While the run waits in Gradio's queue, its status tracker (around this component) reads
// "queue: 2/5 | …": say it in the status line, in the page's language, until the first frame.
// Writes only on a change: the status line is inside the observed block, so an unconditional
// write would wake the observer again, forever.
function watchQueue() {
  const block = element.closest(".block") || element.parentElement;
  if (!block || typeof MutationObserver === "undefined") return;
  let waiting = false;
  const observer = new MutationObserver(() => {
    const tracker = Array.from(block.querySelectorAll(".progress-text")).map((e) => e.textContent).join(" ");
    const m = /queue:\s*(\d+)\s*\/\s*(\d+)/.exec(tracker);
    const status = $("#gen-status");
    if (m) {
      const text = tr("queued_at", { pos: m[1], size: m[2] });
      if (status.textContent !== text) status.textContent = text;
      if (status.dataset.state !== "queued") status.dataset.state = "queued";
      waiting = true;
    } else if (waiting) {
      waiting = false;
      drawStatus(st.v);
    }
  });
  observer.observe(block, { childList: true, subtree: true, characterData: true });
}

// Stop, as pressed: the run ends at the tokens on screen (the engine runs a frame and more ahead of the page). Sent
// as the click reaches the page, beside the button's own event; one listener for the page, whichever copy of this
// script registered it last.
if (window.__pgStopListener) document.removeEventListener("click", window.__pgStopListener, true);
window.__pgStopListener = (e) => {
  if (!e.target.closest || !e.target.closest("#stop-btn") || !st.v.run || settled(st.v) || !server.stop_at) return;
  server.stop_at([st.v.run, st.v.path.length]).catch(() => {});
};
document.addEventListener("click", window.__pgStopListener, true);

// Generate pressed on a phone: the settings sit above the live screen, so the new run's tokens would stream below
// the fold; the run's first frame brings the token stream into view (only after that button, never a replay).
if (window.__pgGenerateListener) document.removeEventListener("click", window.__pgGenerateListener, true);
window.__pgGenerateListener = (e) => {
  if (e.target.closest && e.target.closest("#generate-btn")) st.reveal = true;
};
document.addEventListener("click", window.__pgGenerateListener, true);

function reveal() {
  st.reveal = false;
  const stream = $("#token-stream");
  if (!stream || window.innerWidth > 700) return;
  const box = stream.getBoundingClientRect();
  if (box.top < 0 || box.top > window.innerHeight * 0.6) {
    const status = $(".pg-head") || stream;
    status.scrollIntoView({ block: "start" });
  }
}

watch("value", render);
render();
watchQueue();
