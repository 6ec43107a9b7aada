// The explorer page: everything it shows comes from nnlm serve's JSON API on the same origin.
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} :
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function showError(err) { $("error").textContent = err ? String(err.message || err) : ""; }

function current() { return models.find((m) => m.name === $("model").value); }

// log10 P in [-5, 0] -> red (improbable) .. green (probable)
function colour(log10) {
  const t = Math.max(0, Math.min(1, (log10 + 5) / 5));
  return `hsl(${Math.round(120 * t)}, 75%, 80%)`;
}

function fmt(p) { return p >= 0.01 ? p.toFixed(3) : p.toExponential(1); }

async function scoreText() {
  const text = $("text").value;
  const scored = $("scored");
  if (!text.trim()) { scored.replaceChildren(); $("summary").textContent = ""; await nextWords(); return; }
  try {
    const r = await api("/api/score", { model: $("model").value, text, top: 5 });
    scored.replaceChildren(...r.words.map((w) => {
      const span = document.createElement("span");
      span.className = "word" + (w.known ? "" : " unknown");
      span.textContent = w.word;
      span.style.background = colour(w.log10);
      span.dataset.log10 = w.log10.toFixed(4);
      span.dataset.top = JSON.stringify(w.top || []);
      span.addEventListener("mouseenter", showTip);
      span.addEventListener("mouseleave", () => { $("tip").hidden = true; });
      return span;
    }));
    $("summary").textContent = `${r.tokens} tokens, log10 P = ${r.log10_prob.toFixed(2)}, perplexity ${r.perplexity.toFixed(1)}`;
    showError(null);
  } catch (err) { showError(err); }
  await nextWords();
}

function showTip(event) {
  const span = event.currentTarget;
  const top = JSON.parse(span.dataset.top);
  const tip = $("tip");
  tip.replaceChildren();
  const head = document.createElement("div");
  head.textContent = `P(${span.textContent}) = ${fmt(10 ** Number(span.dataset.log10))}; the model expected:`;
  tip.appendChild(head);
  for (const [word, p] of top) {
    const line = document.createElement("div");
    line.className = "alternative";
    line.textContent = `${word}  ${fmt(p)}`;
    tip.appendChild(line);
  }
  const box = span.getBoundingClientRect();
  tip.style.left = `${box.left + window.scrollX}px`;
  tip.style.top = `${box.bottom + window.scrollY + 4}px`;
  tip.hidden = false;
}

async function nextWords() {
  const lines = $("text").value.split("\n");
  try {
    const r = await api("/api/next", { model: $("model").value, history: lines[lines.length - 1], k: 10 });
    const most = r.next.length ? r.next[0].p : 1;
    $("next").replaceChildren(...r.next.map(({ word, p }) => {
      const row = document.createElement("div");
      row.className = "bar-row";
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = word;
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = `${Math.max(1, Math.round(300 * p / most))}px`;
      bar.dataset.p = p;
      const value = document.createElement("span");
      value.textContent = fmt(p);
      row.append(label, bar, value);
      return row;
    }));
  } catch (err) { showError(err); }
}

async function showNeighbors() {
  const word = $("word").value.trim();
  if (!word) return;
  try {
    const r = await api("/api/neighbors", { model: $("model").value, word, k: 10 });
    $("neighbors").replaceChildren(...r.neighbors.map((n) => {
      const li = document.createElement("li");
      li.textContent = `${n.word} (${n.cosine.toFixed(3)})`;
      return li;
    }));
    showError(null);
  } catch (err) { showError(err); }
}

async function drawMap() {
  const canvas = $("map");
  const ctx = canvas.getContext("2d");
  const r = await api("/api/map", { model: $("model").value, top: 100 });
  const [x0, x1] = [Math.min(...r.x), Math.max(...r.x)];
  const [y0, y1] = [Math.min(...r.y), Math.max(...r.y)];
  const px = (x) => 20 + (canvas.width - 80) * (x - x0) / ((x1 - x0) || 1);
  const py = (y) => canvas.height - 20 - (canvas.height - 40) * (y - y0) / ((y1 - y0) || 1);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.font = "10px sans-serif";
  r.words.forEach((word, i) => {
    ctx.fillStyle = "steelblue";
    ctx.fillRect(px(r.x[i]) - 1.5, py(r.y[i]) - 1.5, 3, 3);
    ctx.fillStyle = "#333";
    ctx.fillText(word, px(r.x[i]) + 3, py(r.y[i]) - 3);
  });
  canvas.dataset.words = r.words.length;
}

async function chooseModel() {
  const m = current();
  $("model-info").textContent = `${m.kind}, order ${m.order}, ${m.vocabulary} words`;
  $("features-section").hidden = !m.features;
  if (m.features) { try { await drawMap(); } catch (err) { showError(err); } }
  await scoreText();
}

function debounce(fn, ms) {
  let timer;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

async function start() {
  try {
    models = (await api("/api/models")).models;
  } catch (err) { showError(err); return; }
  $("model").replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  $("model").addEventListener("change", chooseModel);
  $("text").addEventListener("input", debounce(scoreText, 200));
  $("word").addEventListener("input", debounce(showNeighbors, 200));
  await chooseModel();
  document.body.dataset.ready = "1";
}

start();
