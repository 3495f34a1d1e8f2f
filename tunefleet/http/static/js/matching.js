// Which workers a job would run on, computed in the page with the scheduler's rules
// (docs/scheduling.md, tunefleet/actors/matching.py): target, GPU count, per-GPU VRAM,
// GPU name glob (case-insensitive) and label globs (case-sensitive), all of them.
// Globs are Python's fnmatch: * ? [seq] [!seq], matching the whole value.

const SYNTAX = /[\\^$.*+?()[\]{}|/]/g;

function escapeClassChunk(chunk) {
  return chunk.replace(/[\\\]\[^-]/g, (c) => `\\${c}`);
}

/** The body of a [...] set, ported from fnmatch.translate (ranges, '!' negation). */
function classBody(pat, i, j) {
  let stuff;
  if (!pat.slice(i, j).includes('-')) {
    stuff = pat.slice(i, j);
    const negated = stuff.startsWith('!');
    stuff = (negated ? '!' : '') + escapeClassChunk(negated ? stuff.slice(1) : stuff);
  } else {
    const chunks = [];
    let k = pat[i] === '!' ? i + 2 : i + 1;
    for (;;) {
      k = pat.indexOf('-', k);
      if (k < 0 || k >= j) break;
      chunks.push(pat.slice(i, k));
      i = k + 1;
      k += 3;
    }
    const last = pat.slice(i, j);
    if (last) chunks.push(last);
    else chunks[chunks.length - 1] += '-';
    // Drop empty ranges (z-a): invalid in a regular expression, they match nothing.
    for (let n = chunks.length - 1; n > 0; n -= 1) {
      if (chunks[n - 1][chunks[n - 1].length - 1] > chunks[n][0]) {
        chunks[n - 1] = chunks[n - 1].slice(0, -1) + chunks[n].slice(1);
        chunks.splice(n, 1);
      }
    }
    const negated = chunks[0].startsWith('!');
    if (negated) chunks[0] = chunks[0].slice(1);
    stuff = (negated ? '!' : '') + chunks.map(escapeClassChunk).join('-');
  }
  if (!stuff) return '(?!)';
  if (stuff === '!') return '.';
  if (stuff[0] === '!') return `[^${stuff.slice(1)}]`;
  return `[${stuff}]`;
}

const cache = new Map();

/** fnmatch.fnmatchcase(value, pattern) */
export function globMatch(value, pattern) {
  let re = cache.get(pattern);
  if (!re) {
    let out = '';
    let i = 0;
    const n = pattern.length;
    while (i < n) {
      const c = pattern[i];
      i += 1;
      if (c === '*') {
        if (!out.endsWith('.*')) out += '.*';
      } else if (c === '?') {
        out += '.';
      } else if (c === '[') {
        let j = i;
        if (j < n && pattern[j] === '!') j += 1;
        if (j < n && pattern[j] === ']') j += 1;
        while (j < n && pattern[j] !== ']') j += 1;
        if (j >= n) {
          out += '\\[';
        } else {
          out += classBody(pattern, i, j);
          i = j + 1;
        }
      } else {
        out += c.replace(SYNTAX, '\\$&');
      }
    }
    re = new RegExp(`^(?:${out})$`, 'su');
    if (cache.size > 500) cache.clear();
    cache.set(pattern, re);
  }
  return re.test(value);
}

const gpus = (n) => (n === 1 ? '1 GPU' : `${n} GPUs`);
const gbText = (v) => `${Number(v)} GB`;

/**
 * The first requirement `worker` fails, as a short phrase, or null if it qualifies.
 * req: {target, labels, gpu_count, min_vram_gb, gpu_name}; worker: an API worker.
 */
export function unmet(req, worker) {
  const gpuCount = worker.gpu_count ?? 0;
  if (req.target === 'worker' && worker.is_local) {
    return "is the orchestrator's local runner; target worker needs a remote worker";
  }
  if (req.target === 'local' && !worker.is_local) {
    return 'is a remote worker; target local runs only on the orchestrator';
  }
  if (gpuCount < req.gpu_count) return `has ${gpus(gpuCount)}, needs ${req.gpu_count}`;
  if (req.min_vram_gb) {
    if (worker.gpu_vram_gb === null || worker.gpu_vram_gb === undefined) {
      return `does not report its VRAM, needs ${gbText(req.min_vram_gb)}`;
    }
    if (worker.gpu_vram_gb < req.min_vram_gb) {
      return `has ${gbText(worker.gpu_vram_gb)} VRAM per GPU, needs ${gbText(req.min_vram_gb)}`;
    }
  }
  if (req.gpu_name) {
    const name = worker.gpu_name;
    if (!name) return `does not report a GPU name, needs '${req.gpu_name}'`;
    if (!globMatch(name.toLowerCase(), req.gpu_name.toLowerCase())) {
      return `has GPU '${name}', which does not match '${req.gpu_name}'`;
    }
  }
  const labels = worker.labels || {};
  for (const [key, pattern] of Object.entries(req.labels || {})) {
    if (!(key in labels)) return `has no label ${key}`;
    if (!globMatch(String(labels[key]), pattern)) return `label ${key}=${labels[key]} does not match ${pattern}`;
  }
  return null;
}

/** Best fit first, as the scheduler picks: remote before local (auto), fewest GPUs,
 *  least VRAM (unknown counts as none), then worker id. */
export function fitOrder(a, b) {
  return (
    (a.is_local ? 1 : 0) - (b.is_local ? 1 : 0)
    || (a.gpu_count ?? 0) - (b.gpu_count ?? 0)
    || (a.gpu_vram_gb ?? 0) - (b.gpu_vram_gb ?? 0)
    || (a.worker_id < b.worker_id ? -1 : a.worker_id > b.worker_id ? 1 : 0)
  );
}

/**
 * Split connected workers into those that qualify (best fit first) and those that do
 * not (with the reason), and name the idle worker a submit now would go to.
 */
export function qualify(req, connectedWorkers) {
  const yes = [];
  const no = [];
  for (const worker of connectedWorkers) {
    const reason = unmet(req, worker);
    if (reason === null) yes.push(worker);
    else no.push({ worker, reason });
  }
  yes.sort(fitOrder);
  const idle = yes.filter((w) => w.status === 'idle');
  // auto: a remote worker whenever one is idle and qualifies; the local runner otherwise.
  const next = idle.find((w) => !w.is_local) ?? idle[0] ?? null;
  return { yes, no, next };
}
