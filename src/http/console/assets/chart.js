// A two-series line chart in SVG (messages in and out per second) over a fixed window of
// samples, redrawn on every sample. No library: a polyline per series and a few grid lines.

const NS = 'http://www.w3.org/2000/svg';
// Drawn in CSS pixels at the chart's current width (redrawn every sample), so the labels keep
// their size on a phone and on a wide screen.
const H = 220, PAD = 40;
let W = 600;

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

export class RateChart {
  constructor(windowSize, title) {
    this.size = windowSize;
    this.samples = [];
    this.el = svg('svg', { class: 'chart', role: 'img', 'aria-label': title });
    this.draw();
  }

  push(sample) {
    this.samples.push(sample);
    if (this.samples.length > this.size) this.samples.shift();
    this.draw();
  }

  draw() {
    W = Math.max(200, Math.round(this.el.getBoundingClientRect().width) || 600);
    this.el.setAttribute('viewBox', `0 0 ${W} ${H}`);
    this.el.setAttribute('height', String(H));
    const max = Math.max(4, ...this.samples.map((s) => Math.max(s.messages_in_per_s, s.messages_out_per_s)));
    const top = niceCeil(max);
    this.el.replaceChildren();
    for (let i = 0; i <= 4; i++) {
      const y = PAD / 2 + (H - PAD) * i / 4;
      this.el.append(svg('line', { x1: PAD, x2: W - 4, y1: y, y2: y, stroke: '#e2e2e2' }));
      const label = svg('text', { x: PAD - 4, y: y + 4, 'text-anchor': 'end', 'font-size': 12, fill: '#555' });
      label.textContent = fmt(top * (4 - i) / 4);
      this.el.append(label);
    }
    const x = (i) => PAD + (W - PAD - 4) * (i + this.size - this.samples.length) / (this.size - 1);
    const y = (v) => PAD / 2 + (H - PAD) * (1 - v / top);
    // Out is dashed, so that it stays visible where it runs on top of in.
    for (const [key, colour, dash] of [['messages_in_per_s', '#0b5cad', 'none'], ['messages_out_per_s', '#b35900', '6 4']]) {
      const points = this.samples.map((s, i) => `${x(i).toFixed(1)},${y(s[key]).toFixed(1)}`).join(' ');
      this.el.append(svg('polyline', { points, fill: 'none', stroke: colour, 'stroke-width': 2, 'stroke-dasharray': dash }));
    }
    const foot = svg('text', { x: W - 4, y: H - 2, 'text-anchor': 'end', 'font-size': 12, fill: '#555' });
    foot.textContent = `last ${Math.round(this.size / 60)} minutes, 1 s per point`;
    this.el.append(foot);
    this.el.dataset.max = String(max);
    this.el.dataset.points = String(this.samples.length);
  }
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function fmt(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  return String(Math.round(v * 10) / 10);
}
