#!/usr/bin/env python3
"""Prints the side-by-side table from run.sh's JSON lines.

usage: summarize.py RESULTS.jsonl [BASE]    (BASE: the broker ratios are taken against, mosquitto)

For each scenario and metric: the median over rounds of each broker's value, and the median over
rounds of the per-round ratio broker / BASE (both measured in the same round, so that the
machine's noise hits them alike)."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith('{')]
base = sys.argv[2] if len(sys.argv) > 2 else 'mosquitto'


def key(r):
    p = r.get('params', {})
    params = ' '.join(f'{k}={p[k]}' for k in sorted(p) if k not in ('conc', 'hold_s', 'subscribe'))
    phase = r.get('phase', '-')
    name = f"{r['scenario']} {params}".strip()
    return name + (f' ({phase})' if phase not in ('-', 'run') else '')


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=None):
    if x is None:
        return '-'
    nd = nd if nd is not None else (2 if abs(x) < 10 else 0)
    return f'{x:,.{nd}f}'


THROUGHPUT = [('msg/s', lambda r: r.get('delivered_msgs_per_s')),
              ('broker CPU µs/delivery', lambda r: r.get('broker_cpu_us_per_delivery'))]
LATENCY = [('p50 µs', lambda r: (r.get('latency_us') or {}).get('p50')),
           ('p99 µs', lambda r: (r.get('latency_us') or {}).get('p99')),
           ('broker CPU µs/delivery', lambda r: r.get('broker_cpu_us_per_delivery'))]
IDLE = [('KiB/conn', lambda r: r.get('broker_kib_per_conn')),
        ('connects/s', lambda r: r.get('conn_per_s')),
        ('broker CPU µs/connect', lambda r: r.get('broker_cpu_us_per_connect')),
        ('connected', lambda r: r.get('connected'))]
RSS = [('RSS KiB', lambda r: r.get('broker_rss_kib'))]

by = defaultdict(lambda: defaultdict(dict))  # key -> round -> label -> row
for r in rows:
    by[key(r)][r.get('round', 0)][r['label']] = r
labels = sorted({r["label"] for r in rows} - {base, "echo"}, key=lambda b: (not b.startswith("mesgd"), b))

print(f'| scenario | metric | {base} | ' + ' | '.join(f'{b} | {b} ÷ {base}' for b in labels) + ' |')
print('|---|---|---|' + '---|---|' * len(labels))
for k in sorted(by):
    rounds = by[k].values()
    if k.startswith('echo'):
        v = median([rr['echo'].get('delivered_msgs_per_s') for rr in rounds if 'echo' in rr])
        print(f'| {k} (TCP ceiling) | msg/s | {fmt(v)} |' + ' | |' * len(labels))
        continue
    metrics = (IDLE if k.startswith('idle') else LATENCY if k.startswith('latency')
               else RSS if k.startswith('rss') else THROUGHPUT)
    if k.endswith('(after)'):
        # memory freed by the scenarios before is reused: the growth says nothing per connection
        metrics = [m for m in metrics if m[0] != 'KiB/conn']
    for name, f in metrics:
        cells = []
        for b in labels:
            ratios = [f(rr[b]) / f(rr[base]) for rr in rounds
                      if b in rr and base in rr and f(rr[b]) is not None and f(rr[base])]
            cells.append(f'{fmt(median([f(rr[b]) for rr in rounds if b in rr]))} | '
                         f'{fmt(median(ratios), 2)}{"×" if ratios else ""}')
        bv = median([f(rr[base]) for rr in rounds if base in rr])
        print(f'| {k} | {name} | {fmt(bv)} | ' + ' | '.join(cells) + ' |')
