-- score_corpus.sql: scores every row of a corpus table into a results table,
-- in chunks of one transaction each, resuming where a previous run stopped.
--
--   sqlite3 corpus.db < sql/score_corpus.sql | sqlite3 corpus.db | sqlite3 corpus.db -cmd '.load ./relattn'
--   sqlite3 corpus.db -cmd '.parameter set @source notes' -cmd '.parameter set @tokens txt' \
--     -cmd '.parameter set @chunk 500' < sql/score_corpus.sql | sqlite3 corpus.db | sqlite3 corpus.db -cmd '.load ./relattn'
--
-- Settings (.parameter set @name value, on the first sqlite3):
--   @model    the model                          default 'tiny'
--   @source   the corpus table or view            default 'docs'
--   @tokens   its token column (BLOB or TEXT)     default 'body'
--   @id       its INTEGER id column               default: the rowid
--   @results  the results table                   default @source || '_scores'
--   @chunk    rows per transaction                default 1000
--
-- The results table is (id INTEGER PRIMARY KEY, n_tokens, score, perplexity,
-- error). A row the model cannot take (empty, too long, a token outside the
-- vocabulary) is recorded with its error and NULL results; the job goes on.
-- Kill the job at any point (Ctrl-C, SIGKILL, power loss) and run the same
-- command again: a chunk is committed whole or not at all, and the next run
-- starts after the highest id committed, so every row ends up there once.
-- Progress: relattn_scan's own line per chunk on stderr (when stderr is a
-- terminal, or -cmd 'SELECT relattn_progress(1)' on the last sqlite3), a total
-- per chunk on stdout.
--
-- A setting that names nothing (a typo in @source, @tokens, @id or @model)
-- ends the job with relattn_scan's error, the database unchanged: the results
-- table is made only once the scan has accepted the settings.
--
-- HOW IT WORKS
-- The shell has no loop, and table names cannot be bound as parameters, so
-- each step prints the SQL of the next, and nothing is written to a file:
--   1. this script turns the settings into SQL (names quoted with %w, values
--      with %Q) that
--   2. counts the rows left, and prints
--   3. the job: the relattn_scan table temp.score_job, the results table,
--      then one identical statement per chunk that is left:
--        BEGIN;
--        INSERT INTO results SELECT id, n_tokens, score, perplexity, error
--          FROM temp.score_job WHERE id > (SELECT max(id) FROM results)
--          ORDER BY id LIMIT @chunk;
--        COMMIT;
-- relattn_scan pushes the id bound and the LIMIT down, so a chunk reads only
-- its own rows; reading its error column makes a bad row a row. Step 1 looks
-- the source and its columns up first (pragma_table_xinfo): when step 2 could
-- not count them, it counts nothing and prints the job's first statements
-- alone, so the scan says what is wrong.
.bail on
.parameter init
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value) VALUES
  ('@model', 'tiny'), ('@source', 'docs'), ('@tokens', 'body'), ('@id', NULL),
  ('@chunk', 1000);
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value)
  SELECT '@results', value || '_scores' FROM temp.sqlite_parameters WHERE key = '@source';

.headers off
.mode list
WITH s(model, source, tokens, id, results, chunk) AS (
  SELECT (SELECT value FROM temp.sqlite_parameters WHERE key = '@model'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@source'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@tokens'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@id'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@results'),
         (SELECT max(1, CAST(value AS INTEGER)) FROM temp.sqlite_parameters WHERE key = '@chunk')),
-- can step 2 count the source's rows? (relattn_scan checks the same, and more)
ok(countable, has_results) AS (
  SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo(source) WHERE name = tokens COLLATE NOCASE)
         AND CASE WHEN id IS NULL
                  THEN EXISTS (SELECT 1 FROM pragma_table_list(source) WHERE type <> 'view' AND NOT wr)
                  ELSE EXISTS (SELECT 1 FROM pragma_table_xinfo(source) WHERE name = id COLLATE NOCASE) END,
         EXISTS (SELECT 1 FROM pragma_table_list(results))
  FROM s),
-- step 3, the job: its head, one chunk, its tail
job(head, step, tail) AS (
  SELECT
    '.bail on' || char(10) || '.timeout 60000' || char(10) ||
    format('CREATE VIRTUAL TABLE temp.score_job USING relattn_scan(model=%Q, source=%Q, tokens=%Q%s);',
           model, source, tokens, CASE WHEN id IS NULL THEN '' ELSE format(', id=%Q', id) END) || char(10) ||
    format('CREATE TABLE IF NOT EXISTS "%w"(id INTEGER PRIMARY KEY, n_tokens INTEGER, score REAL, perplexity REAL, error TEXT);', results),
    format('BEGIN;' || char(10) ||
           'INSERT INTO "%w"(id, n_tokens, score, perplexity, error)' ||
           ' SELECT id, n_tokens, score, perplexity, error FROM temp.score_job' ||
           ' WHERE id > (SELECT coalesce(max(id), -9223372036854775808) FROM "%w") ORDER BY id LIMIT %d;' || char(10) ||
           'COMMIT;' || char(10) ||
           'SELECT format(''score_corpus: %%d rows in "%w"'', count(*)) FROM "%w";',
           results, results, chunk, results, results),
    format('SELECT format(''score_corpus: done, %%d rows in "%w"'', count(*)) FROM "%w";',
           results, results)
  FROM s)
-- step 2: the rows left, and the job's text
SELECT '.bail on' || char(10) || '.headers off' || char(10) || '.mode list' || char(10) ||
  CASE WHEN NOT countable THEN format('SELECT %Q;', head)
  ELSE
  format('WITH RECURSIVE left(n) AS (SELECT count(*) FROM "%w" WHERE "%w" > %s),',
         source, coalesce(id, 'rowid'),
         CASE WHEN has_results
              THEN format('(SELECT coalesce(max(id), -9223372036854775808) FROM "%w")', results)
              ELSE '-9223372036854775808' END) ||
  format(' k(i) AS (SELECT 1 WHERE (SELECT n FROM left) > 0 UNION ALL SELECT i + 1 FROM k WHERE i * %d < (SELECT n FROM left))', s.chunk) ||
  format(' SELECT %Q UNION ALL SELECT %Q FROM k UNION ALL SELECT %Q;', head, step, tail)
  END
FROM s, ok, job;
