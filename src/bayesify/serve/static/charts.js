// Number formats and inline SVG charts of the status page (inlined into status.html by the
// server: the page works offline and needs no second request). Every chart has a title, axes
// with numeric ticks and their units, and its counts; nothing here reads the server.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const missing = v => v === null || v === undefined || !Number.isFinite(Number(v));
const sig3 = new Intl.NumberFormat("en", { maximumSignificantDigits: 3 });
const whole = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });
/** A number to 3 significant figures ("–" when undefined; below 0.001 as 5.13e-8). */
function fmt(v) {
  if (missing(v)) return "–";
  const x = Number(v);
  return x !== 0 && Math.abs(x) < 1e-3 ? Number(x.toPrecision(3)).toExponential() : sig3.format(x);
}
/** A fraction as a percentage to 3 significant figures ("0.229" -> "22.9 %"). */
const pct = v => missing(v) ? "–" : sig3.format(100 * Number(v)) + " %";
/** A count with thousands separators. */
const count = v => missing(v) ? "–" : whole.format(Number(v));
const ms = v => missing(v) ? "–" : fmt(v) + " ms";
const hms = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit",
                                               second: "2-digit", hour12: false });
/** Unix seconds as the local clock time, hh:mm:ss. */
const clock = t => hms.format(new Date(t * 1000));

function el(tag, attrs = {}, text = null) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

/** About ``n`` round ticks (1, 2 or 5 times a power of ten) from a tick at or below ``lo``
 * to one at or above ``hi``; ``label`` writes a tick with the decimals its step needs. */
function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d / 2; hi += d / 2; }
  const raw = (hi - lo) / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw * (1 - 1e-9));
  const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
  const ticks = [];
  for (let i = first; i <= last; i++) ticks.push(Number((i * step).toFixed(12)));
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return { ticks, step, label: v => digits ? v.toFixed(digits) : whole.format(v) };
}

/** Clock-time ticks over [t0, t1] (unix seconds) at a round step in seconds. */
function timeTicks(t0, t1, n = 6) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400];
  const step = steps.find(s => s >= (t1 - t0) / n) || 86400;
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
  return { ticks, step, label: clock };
}

const W = 360, H = 250, M = { left: 56, right: 24, top: 62, bottom: 44 };

/** An empty chart in ``svg``: title, axes, ticks and axis labels; returns the scales. */
function frame(svg, { title, x, y, xlabel, ylabel }) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const [x0, x1] = x.domain, [y0, y1] = y.domain;
  const sx = v => M.left + (v - x0) / (x1 - x0 || 1) * (W - M.left - M.right);
  const sy = v => H - M.bottom - (v - y0) / (y1 - y0 || 1) * (H - M.top - M.bottom);
  svg.appendChild(el("text", { x: W / 2, y: 15, class: "title", "text-anchor": "middle" }, title));
  const axes = el("g", { class: "axes" });
  axes.appendChild(el("rect", { x: M.left, y: M.top, width: W - M.left - M.right,
                                height: H - M.top - M.bottom, class: "plot" }));
  x.ticks.ticks.forEach(v => {
    axes.appendChild(el("line", { x1: sx(v), x2: sx(v), y1: H - M.bottom, y2: H - M.bottom + 4,
                                  class: "tickmark" }));
    axes.appendChild(el("text", { x: sx(v), y: H - M.bottom + 15, class: "tick x",
                                  "text-anchor": "middle" }, x.ticks.label(v)));
  });
  y.ticks.ticks.forEach(v => {
    axes.appendChild(el("line", { x1: M.left, x2: W - M.right, y1: sy(v), y2: sy(v),
                                  class: "grid" }));
    axes.appendChild(el("text", { x: M.left - 5, y: sy(v) + 3.5, class: "tick y",
                                  "text-anchor": "end" }, y.ticks.label(v)));
  });
  axes.appendChild(el("text", { x: (M.left + W - M.right) / 2, y: H - 6, class: "axis-label",
                                "text-anchor": "middle" }, xlabel));
  const my = (M.top + H - M.bottom) / 2;
  axes.appendChild(el("text", { x: 13, y: my, class: "axis-label", "text-anchor": "middle",
                                transform: `rotate(-90 13 ${my})` }, ylabel));
  svg.appendChild(axes);
  return { sx, sy };
}

/** The legend under the title, wrapped to a second line when long: [[label, swatch class]]. */
function legend(svg, items) {
  let x = M.left, y = 29;
  items.forEach(([label, cls]) => {
    const width = 28 + 5.6 * label.length;
    if (x > M.left && x + width > W - M.right) { x = M.left; y += 12; }
    svg.appendChild(el("line", { x1: x, x2: x + 16, y1: y, y2: y, class: "swatch " + cls }));
    svg.appendChild(el("text", { x: x + 20, y: y + 3, class: "legend" }, label));
    x += width;
  });
}

/** Bars over equal bins of [0, 1], each shaded by its row count, which is written above the
 * plot; ``heights`` in the y axis' units (null: an empty bin, no bar). */
function binBars(svg, { sx, sy }, heights, counts, y0) {
  const k = counts.length, most = Math.max(1, ...counts), g = el("g", { class: "bars" });
  counts.forEach((c, i) => {
    const a = sx(i / k) + 1, b = sx((i + 1) / k) - 1, h = heights[i];
    if (c > 0 && !missing(h)) {
      g.appendChild(el("rect", { x: a, width: b - a, y: sy(h), height: Math.max(0, sy(y0) - sy(h)),
                                 class: "bar", "fill-opacity": (0.2 + 0.8 * c / most).toFixed(3),
                                 "data-count": c }));
    }
    svg.appendChild(el("text", { x: (a + b) / 2, y: M.top - 4, class: c ? "count" : "count zero",
                                 "text-anchor": "middle" }, count(c)));
  });
  svg.appendChild(g);
}

/** Reliability diagram: accuracy per confidence bin beside the diagonal, bins shaded and
 * labelled by their rows. ``curve``: {confidence, accuracy, counts} (10 bins). */
function reliabilityChart(svg, curve, n) {
  const unit = niceTicks(0, 1, 5);
  const s = frame(svg, { title: `Reliability: accuracy per confidence bin (${count(n)} rows)`,
                         x: { domain: [0, 1], ticks: unit }, y: { domain: [0, 1], ticks: unit },
                         xlabel: "confidence (top-class probability)",
                         ylabel: "accuracy (fraction correct)" });
  svg.appendChild(el("line", { x1: s.sx(0), y1: s.sy(0), x2: s.sx(1), y2: s.sy(1), class: "ref" }));
  if (curve) binBars(svg, s, curve.accuracy, curve.counts, 0);
  else svg.appendChild(el("text", { x: W / 2, y: H / 2, class: "empty", "text-anchor": "middle" },
                          "no rows with feedback yet"));
  legend(svg, [["accuracy, shaded by rows (counted above)", "bar"], ["calibrated", "ref"]]);
}

/** PIT histogram: rows per bin of F(y) beside the uniform count n / bins. */
function pitChart(svg, pit, n) {
  const counts = pit ? pit.counts : [], k = counts.length || 10;
  const top = Math.max(1, ...counts, n / k) * 1.1, ticks = niceTicks(0, top, 4);
  const s = frame(svg, { title: `PIT histogram: F(y) at each outcome (${count(n)} rows)`,
                         x: { domain: [0, 1], ticks: niceTicks(0, 1, 5) },
                         y: { domain: [0, ticks.ticks.at(-1)], ticks },
                         xlabel: "F(y), the served predictive CDF at the outcome",
                         ylabel: "rows per bin" });
  if (pit) {
    binBars(svg, s, counts, counts, 0);
    svg.appendChild(el("line", { x1: s.sx(0), x2: s.sx(1), y1: s.sy(n / k), y2: s.sy(n / k),
                                 class: "ref" }));
  } else {
    svg.appendChild(el("text", { x: W / 2, y: H / 2, class: "empty", "text-anchor": "middle" },
                       "no rows with feedback yet"));
  }
  legend(svg, [["rows, shaded by rows (counted above)", "bar"], [`uniform (${fmt(n / k)} per bin)`, "ref"]]);
}

/** A time series chart. ``series``: [{key, label, cls, points: [[t, v|null]], drift: [bool]}]
 * (one circle per defined point, class ``pt``, ``drift`` when flagged); ``refs``: [{label,
 * value, cls}] horizontal reference lines; ``scale``: multiplies every value (100: percent). */
function seriesChart(svg, { title, ylabel, series, refs = [], times, scale = 1, note = null,
                            floor = null }) {
  const vals = series.flatMap(s => s.points.map(p => p[1])).concat(refs.map(r => r.value))
    .filter(v => !missing(v)).map(v => v * scale);
  let lo = vals.length ? Math.min(...vals) : 0, hi = vals.length ? Math.max(...vals) : 1;
  if (floor !== null) lo = Math.min(lo, floor);
  const pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.1 || 1;
  const ticks = niceTicks(floor !== null && lo >= floor ? lo : lo - pad, hi + pad, 4);
  const t0 = times.length ? times[0] : Date.now() / 1000, t1 = times.length ? times.at(-1) : t0;
  const span = t1 > t0 ? [t0, t1] : [t0 - 30, t0 + 30];
  const s = frame(svg, { title, ylabel, xlabel: "time (clock, hh:mm:ss)",
                         x: { domain: span, ticks: timeTicks(...span) },
                         y: { domain: [ticks.ticks[0], ticks.ticks.at(-1)], ticks } });
  refs.forEach(r => {
    if (missing(r.value)) return;
    svg.appendChild(el("line", { x1: s.sx(span[0]), x2: s.sx(span[1]), y1: s.sy(r.value * scale),
                                 y2: s.sy(r.value * scale), class: r.cls || "ref" }));
  });
  const r = Math.max(0.8, Math.min(2, 150 / Math.max(1, times.length)));  // small when dense
  series.forEach(ser => {
    const g = el("g", { class: "series " + ser.cls, "data-series": ser.key });
    let d = "", pen = false;  // an undefined value breaks the line
    ser.points.forEach(([t, v]) => {
      if (missing(v)) { pen = false; return; }
      d += `${pen ? "L" : "M"}${s.sx(t).toFixed(1)},${s.sy(v * scale).toFixed(1)} `;
      pen = true;
    });
    g.appendChild(el("path", { d: d.trim() }));
    ser.points.forEach(([t, v], i) => {
      if (missing(v)) return;
      const drift = ser.drift && ser.drift[i];
      const c = el("circle", { cx: s.sx(t), cy: s.sy(v * scale), r: drift ? 1.75 * r : r,
                               class: drift ? "pt drift" : "pt", "data-series": ser.key });
      c.appendChild(el("title", {}, `${clock(t)}: ${ser.label} ${fmt(v * scale)}`));
      g.appendChild(c);
    });
    svg.appendChild(g);
  });
  if (note) svg.appendChild(el("text", { x: W / 2, y: H / 2, class: "empty",
                                         "text-anchor": "middle" }, note));
  const items = series.map(x => [x.label, x.cls]).concat(refs.filter(r => !missing(r.value))
    .map(r => [r.label, r.cls || "ref"]));
  if (series.some(x => (x.drift || []).some(Boolean))) items.push(["drift", "drift-mark"]);
  legend(svg, items);
}
