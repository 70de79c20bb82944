// lib.mjs -- what bench's summary scripts share: reading a results file
// (one JSON object per line) and the median. No dependencies.
import { readFileSync } from 'node:fs';

// readResults reads the JSON-lines file named by argv[2] and returns its
// rows and its "meta" row; without an argument it prints usage and exits 2.
export function readResults(usage) {
  const file = process.argv[2];
  if (!file) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  const rows = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { rows, meta: rows.find((r) => r.section === 'meta') || {} };
}

// med is the median of the finite numbers in xs (NaN if there are none).
export function med(xs) {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
