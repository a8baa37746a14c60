// The ONNX Runtime peer of tests/bench/bench_deberta.py: runs an exported model on batches the
// bench has written, and times itself, so the clock holds the runs and nothing else.
//
//   node tests/bench/ort_run.mjs model.onnx        (started by bench_deberta.py)
//
// onnxruntime-node comes from tests/bench/node's lockfile (make deps-bench). Prints its version, then
// reads one JSON command a line on stdin, {"threads": t, "batches": path, "out": path}, and
// answers each with one line, {"wall": seconds, "cpu": seconds}: the wall time of running every batch and the CPU time of
// this process over it (process.cpuUsage, every thread of ONNX Runtime's pools). A batches file
// is read before the clock starts: int32 count, then per batch int32 b, int32 n and the ids and
// the attention mask, b * n int64 each (little-endian). The outputs, b rows of float32 a batch,
// are written to out after the clock stops. One session per thread count: the CPU provider,
// every graph optimisation, intra-op threads = t, inter-op 1.
import fs from 'node:fs';
import readline from 'node:readline';
import { createRequire } from 'node:module';

const require = createRequire(new URL('./node/package.json', import.meta.url));
const ort = require('onnxruntime-node');

const model = process.argv[2];
const sessions = new Map();   // threads -> InferenceSession
const inputs = new Map();     // path -> [{ids, mask}] as ort.Tensor

function readBatches(path) {
  const buf = fs.readFileSync(path);
  const count = buf.readInt32LE(0);
  const out = [];
  let off = 4;
  for (let i = 0; i < count; i++) {
    const b = buf.readInt32LE(off), n = buf.readInt32LE(off + 4);
    off += 8;
    const take = () => {
      // a copy: the Buffer's own offset need not be 8-aligned for a BigInt64Array
      const t = new BigInt64Array(buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + off + 8 * b * n));
      off += 8 * b * n;
      return new ort.Tensor('int64', t, [b, n]);
    };
    const ids = take(), mask = take();
    out.push({ ids, mask });
  }
  return out;
}

async function session(threads, warm) {
  if (!sessions.has(threads)) {
    const s = await ort.InferenceSession.create(model, {
      executionProviders: ['cpu'], graphOptimizationLevel: 'all', executionMode: 'sequential',
      intraOpNumThreads: threads, interOpNumThreads: 1,
    });
    await s.run(warm);   // first-run allocations kept off the clock
    sessions.set(threads, s);
  }
  return sessions.get(threads);
}

async function command(cmd) {
  if (!inputs.has(cmd.batches)) inputs.set(cmd.batches, readBatches(cmd.batches));
  const batches = inputs.get(cmd.batches);
  const s = await session(cmd.threads, batches[0]);
  const results = [];
  const c0 = process.cpuUsage(), t0 = process.hrtime.bigint();
  for (const feeds of batches) {
    const r = await s.run(feeds);
    results.push(r[s.outputNames[0]].data);
  }
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  if (cmd.out) {
    fs.writeFileSync(cmd.out, Buffer.concat(results.map((d) => Buffer.from(d.buffer, d.byteOffset, d.byteLength))));
  }
  return { wall, cpu: (c.user + c.system) / 1e6 };
}

process.stdout.write(JSON.stringify({ ort: ort.env.versions.node }) + '\n');
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = await command(JSON.parse(line));
  } catch (e) {
    reply = { error: String(e && e.message || e) };
  }
  process.stdout.write(JSON.stringify(reply) + '\n');
}
