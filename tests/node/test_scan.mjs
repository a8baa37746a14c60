// relattn through Node's better-sqlite3 (version 12): the extension loads,
// relattn_scan returns the rows the scalar functions give, errors carry their
// text, and a scan left early (break out of iterate()) is closed cleanly.
//
//   node tests/node/test_scan.mjs ./relattn.so corpus.db
//
// corpus.db is prepared by tests/sql/test_node_client.py: a model 'tiny',
// docs(id, body) and expected(id, score, perplexity, embedding) computed
// through Python's sqlite3. Prints one JSON object; exits 1 on a failure.
import Database from 'better-sqlite3';

const [so, path] = process.argv.slice(2);
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); };

const db = new Database(path);
db.loadExtension(so);
const version = db.prepare('SELECT relattn_version() AS v').get().v;
db.exec("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='tiny', source='docs', tokens='body')");

const expected = db.prepare('SELECT id, score, perplexity, embedding FROM expected ORDER BY id').all();
let maxScoreErr = 0, maxEmbErr = 0;
for (const threads of [1, 2]) {
  db.prepare(`SELECT relattn_threads(${threads})`).get();
  const rows = db.prepare('SELECT id, n_tokens, score, perplexity, embedding FROM temp.job').all();
  check(rows.length === expected.length, `threads ${threads}: ${rows.length} rows, want ${expected.length}`);
  rows.forEach((r, i) => {
    const e = expected[i];
    check(r.id === e.id, `row ${i}: id ${r.id}, want ${e.id}`);
    const tol = 2e-5 * (r.n_tokens + 1);
    const d = Math.abs(r.score - e.score);
    maxScoreErr = Math.max(maxScoreErr, d / (r.n_tokens + 1));
    check(d <= tol, `id ${r.id}: score ${r.score}, want ${e.score}`);
    check(Math.abs(r.perplexity - e.perplexity) <= 2e-5 * e.perplexity, `id ${r.id}: perplexity`);
    const a = new Float32Array(r.embedding.buffer, r.embedding.byteOffset, r.embedding.length / 4);
    const b = new Float32Array(e.embedding.buffer, e.embedding.byteOffset, e.embedding.length / 4);
    let num = 0, den = 0;
    for (let j = 0; j < b.length; j++) { num += (a[j] - b[j]) ** 2; den += b[j] ** 2; }
    const rel = Math.sqrt(num / den);
    maxEmbErr = Math.max(maxEmbErr, rel);
    check(a.length === b.length && rel < 1e-5, `id ${r.id}: embedding rel err ${rel}`);
  });
}

// pushed-down range, and leaving a scan early: the statement is reset, the
// workers joined, and the connection goes on
const ids = db.prepare('SELECT id FROM temp.job WHERE id > ? AND id <= ?').pluck().all(4, 8);
check(JSON.stringify(ids) === JSON.stringify([5, 6, 7, 8]), `range: ${ids}`);
let n = 0;
for (const r of db.prepare('SELECT id, score FROM temp.job').iterate()) if (++n === 2) break;
check(n === 2, 'early break');
const again = db.prepare('SELECT count(*) AS c FROM temp.job WHERE score < 0').get().c;
check(again === expected.length, `after break: ${again}`);

let message = null;
try {
  db.exec("CREATE VIRTUAL TABLE temp.bad USING relattn_scan(model='nope', source='docs', tokens='body')");
} catch (e) { message = e.message; }
check(message === "relattn_scan: no model named 'nope'", `error text: ${message}`);

db.close();
console.log(JSON.stringify({ version, rows: expected.length, maxScoreErr, maxEmbErr, failures }));
process.exit(failures.length ? 1 : 0);
