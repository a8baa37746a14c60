-- score_corpus.sql: scores every row of a corpus table into a results table,
-- in chunks of one transaction each, resuming where a previous run stopped.
--
--   sqlite3 corpus.db -cmd '.load ./relattn' < sql/score_corpus.sql
--   sqlite3 corpus.db -cmd '.load ./relattn' -cmd '.parameter set @model tiny' \
--     -cmd '.parameter set @source notes' -cmd '.parameter set @tokens txt' \
--     -cmd '.parameter set @chunk 500' < sql/score_corpus.sql
--
-- Settings (.parameter set @name value, before the script runs):
--   @model    the model                          default 'tiny'
--   @source   the corpus table or view            default 'docs'
--   @tokens   its token column (BLOB or TEXT)     default 'body'
--   @id       its INTEGER id column               default: the rowid
--   @results  the results table                   default @source || '_scores'
--   @chunk    rows per transaction                default 1000
--
-- The results table is (id INTEGER PRIMARY KEY, n_tokens, score, perplexity).
-- Kill the job at any point (Ctrl-C, SIGKILL, power loss) and run the same
-- command again: a chunk is committed whole or not at all, and the next run
-- starts after the highest id committed, so every row ends up there once.
-- Progress: relattn_scan's own line per chunk on stderr (when stderr is a
-- terminal, or -cmd 'SELECT relattn_progress(1)'), a total per chunk on stdout.
--
-- HOW IT WORKS
-- The shell has no loop, and table names cannot be bound as parameters, so
-- the script writes the statements it needs into a file and reads it back:
-- the set-up (results table, the relattn_scan table temp.score_job) and then
-- one identical statement per chunk that is left:
--   BEGIN;
--   INSERT INTO results SELECT id, n_tokens, score, perplexity
--     FROM temp.score_job WHERE id > (SELECT max(id) FROM results)
--     ORDER BY id LIMIT @chunk;
--   COMMIT;
-- relattn_scan pushes the id bound and the LIMIT down, so a chunk reads only
-- its own rows. The files are /tmp/relattn_score_corpus.*.sql: run one job
-- at a time per machine.
.bail on
.parameter init
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value) VALUES
  ('@model', 'tiny'), ('@source', 'docs'), ('@tokens', 'body'), ('@id', NULL),
  ('@chunk', 1000);
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value)
  SELECT '@results', value || '_scores' FROM temp.sqlite_parameters WHERE key = '@source';

.headers off
.mode list
.output /tmp/relattn_score_corpus.1.sql
WITH s(model, source, tokens, id, results, chunk) AS (
  SELECT (SELECT value FROM temp.sqlite_parameters WHERE key = '@model'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@source'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@tokens'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@id'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@results'),
         (SELECT CAST(value AS INTEGER) FROM temp.sqlite_parameters WHERE key = '@chunk'))
SELECT format(
  'CREATE TABLE IF NOT EXISTS "%w"(id INTEGER PRIMARY KEY, n_tokens INTEGER, score REAL, perplexity REAL);' || char(10) ||
  'DROP TABLE IF EXISTS temp.score_job;' || char(10) ||
  'CREATE VIRTUAL TABLE temp.score_job USING relattn_scan(model=%Q, source=%Q, tokens=%Q%s);' || char(10) ||
  '.output /tmp/relattn_score_corpus.2.sql' || char(10) ||
  -- one chunk statement per chunk left
  'WITH RECURSIVE left(n) AS (SELECT count(*) FROM temp.score_job WHERE id > (SELECT coalesce(max(id), -9223372036854775808) FROM "%w")),' ||
  ' k(i) AS (SELECT 1 WHERE (SELECT n FROM left) > 0 UNION ALL SELECT i + 1 FROM k WHERE i * %d < (SELECT n FROM left))' ||
  ' SELECT %Q FROM k;' || char(10) ||
  '.output stdout' || char(10) ||
  '.read /tmp/relattn_score_corpus.2.sql' || char(10) ||
  'SELECT format(''score_corpus: done, %%d rows in "%w"'', count(*)) FROM "%w";',
  results, model, source, tokens,
  CASE WHEN id IS NULL THEN '' ELSE format(', id=%Q', id) END,
  results, chunk,
  format(
    'BEGIN;' || char(10) ||
    'INSERT INTO "%w"(id, n_tokens, score, perplexity) SELECT id, n_tokens, score, perplexity FROM temp.score_job' ||
    ' WHERE id > (SELECT coalesce(max(id), -9223372036854775808) FROM "%w") ORDER BY id LIMIT %d;' || char(10) ||
    'COMMIT;' || char(10) ||
    'SELECT format(''score_corpus: %%d rows in "%w"'', count(*)) FROM "%w";',
    results, results, chunk, results, results),
  results, results)
FROM s;
.output stdout
.read /tmp/relattn_score_corpus.1.sql
