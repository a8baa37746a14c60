-- score_corpus.sql: runs a model on every row of a corpus table into a
-- results table, in chunks of one transaction each, resuming where a
-- previous run stopped.
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
--   @columns  relattn_scan's columns to keep, comma-separated, from n_tokens,
--             score, perplexity, embedding, label, prob, logit, generated,
--             error                              default: by the model's head (below)
--   @generate the generated column's options, as relattn_generate's (JSON)
--                                                default: its defaults
--   @progress 1: the whole job's progress on stderr; 0: none (2, which once
--             added relattn_scan's own lines, is taken as 1)  default 1
--
-- The results table is (id INTEGER PRIMARY KEY, the columns, error): error
-- is always kept. Without @columns, the model's config chooses: a decoder
-- (head lm) n_tokens, score, perplexity; a classifier n_tokens, label, prob,
-- logit (a regression model, which has no label: n_tokens, logit); any other
-- model n_tokens, embedding. A row the model cannot take (empty, too long, a
-- token outside the vocabulary) is recorded with its error and NULL results;
-- the job goes on. Kill the job at any point (Ctrl-C, SIGKILL, power loss)
-- and run the same command again: a chunk is committed whole or not at all,
-- and the next run starts after the highest id committed, so every row ends
-- up there once.
-- Progress, on stderr: the rows and tokens done of the whole job's, tokens
-- per second and the ETA, once a second while a chunk runs (a row in flight
-- counts for the layers it has passed: relattn_progress_job) and after each
-- chunk, with this run's rate. On stdout, one line at the end.
--
-- A setting that names nothing (a typo in @source, @tokens, @id, @model or
-- @columns, or a column the model cannot give) ends the job with an error,
-- the database unchanged: the results table is made only once the scan has
-- accepted the settings and the columns; a results table made before must
-- have the job's columns.
--
-- HOW IT WORKS
-- The shell has no loop, and table names cannot be bound as parameters, so
-- each step prints the SQL of the next, and nothing is written to a file:
--   1. this script turns the settings into SQL (names quoted with %w, values
--      with %Q) that
--   2. counts the rows left, and prints
--   3. the job: the relattn_scan table temp.score_job, a query that reads its
--      columns from no row (the scan checks the model can give them), the
--      results table, a count of the rows and tokens (relattn_scan's
--      n_tokens, which runs no model), then one identical statement per
--      chunk that is left:
--        BEGIN;
--        (the job's counts so far, to relattn_progress_job)
--        INSERT INTO temp.score_chunk SELECT id, n_tokens, columns, error
--          FROM temp.score_job WHERE id > (SELECT max(id) FROM results)
--          ORDER BY id LIMIT @chunk;
--        INSERT INTO results SELECT id, columns, error FROM temp.score_chunk;
--        (the progress counts, then temp.score_chunk emptied)
--        COMMIT;
-- relattn_scan pushes the id bound and the LIMIT down, so a chunk reads only
-- its own rows; reading its error column makes a bad row a row. Step 1 looks
-- the source and its columns up first (pragma_table_xinfo): when step 2 could
-- not count them, it counts nothing and prints the job's first statements
-- alone, so the scan says what is wrong. An error of step 1's own (a misspelt
-- column) is a job that prints it on stderr and exits with status 1. Without
-- @columns, step 1 prints a job for each kind of model, and step 2 picks the
-- one of the model's config.
.bail on
.timeout 60000
.parameter init
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value) VALUES
  ('@model', 'tiny'), ('@source', 'docs'), ('@tokens', 'body'), ('@id', NULL),
  ('@chunk', 1000), ('@columns', NULL), ('@progress', 1), ('@generate', NULL);
INSERT OR IGNORE INTO temp.sqlite_parameters(key, value)
  SELECT '@results', value || '_scores' FROM temp.sqlite_parameters WHERE key = '@source';

.headers off
.mode list
WITH s(model, source, tokens, id, results, chunk, columns, progress, generate) AS (
  SELECT (SELECT value FROM temp.sqlite_parameters WHERE key = '@model'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@source'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@tokens'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@id'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@results'),
         (SELECT max(1, CAST(value AS INTEGER)) FROM temp.sqlite_parameters WHERE key = '@chunk'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@columns'),
         (SELECT min(2, max(0, CAST(value AS INTEGER))) FROM temp.sqlite_parameters WHERE key = '@progress'),
         (SELECT value FROM temp.sqlite_parameters WHERE key = '@generate')),
-- relattn_scan's columns, and the results table's type for each
scan_column(pos, name, type) AS (VALUES
  (1, 'n_tokens', 'INTEGER'), (2, 'score', 'REAL'), (3, 'perplexity', 'REAL'),
  (4, 'embedding', 'BLOB'), (5, 'label', 'TEXT'), (6, 'prob', 'REAL'), (7, 'logit', 'REAL'),
  (8, 'generated', 'TEXT'), (9, 'error', 'TEXT')),
choices(list) AS (SELECT group_concat(name, ', ') FROM (SELECT name FROM scan_column ORDER BY pos)),
-- @columns cut at its commas
cut(n, word, rest) AS (
  SELECT 0, NULL, CAST(columns AS TEXT) || ',' FROM s
  UNION ALL
  SELECT n + 1, trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)
    FROM cut WHERE rest <> ''),
asked(n, word) AS (SELECT n, word FROM cut WHERE n > 0 AND word <> ''),
-- what is wrong with @columns, if anything
complaint(text) AS (
  SELECT CASE
    WHEN columns IS NULL THEN NULL
    WHEN NOT EXISTS (SELECT 1 FROM asked)
      THEN format('score_corpus: @columns is empty: name one or more of %s', list)
    WHEN EXISTS (SELECT 1 FROM asked WHERE lower(word) NOT IN (SELECT name FROM scan_column))
      THEN format('score_corpus: @columns: relattn_scan has no column %Q (choose from %s)',
                  (SELECT word FROM asked WHERE lower(word) NOT IN (SELECT name FROM scan_column)
                    ORDER BY n LIMIT 1), list)
    WHEN EXISTS (SELECT 1 FROM asked GROUP BY lower(word) HAVING count(*) > 1)
      THEN format('score_corpus: @columns names %Q twice',
                  (SELECT lower(word) FROM asked GROUP BY lower(word) HAVING count(*) > 1
                    ORDER BY min(n) LIMIT 1))
    END
  FROM s, choices),
-- the job's columns, error last: as asked, or for each kind of model
variant(kind, pos, name) AS (
  SELECT 'asked', n, lower(word) FROM asked WHERE lower(word) <> 'error'
  UNION ALL SELECT 'asked', 1000000, 'error' FROM s WHERE columns IS NOT NULL
  UNION ALL SELECT column1, column2, column3 FROM (VALUES
    ('decoder', 1, 'n_tokens'), ('decoder', 2, 'score'), ('decoder', 3, 'perplexity'),
    ('classifier', 1, 'n_tokens'), ('classifier', 2, 'label'), ('classifier', 3, 'prob'),
    ('classifier', 4, 'logit'),
    ('regression', 1, 'n_tokens'), ('regression', 2, 'logit'),
    ('encoder', 1, 'n_tokens'), ('encoder', 2, 'embedding'),
    ('decoder', 9, 'error'), ('classifier', 9, 'error'), ('regression', 9, 'error'),
    ('encoder', 9, 'error'))
    WHERE (SELECT columns FROM s) IS NULL),
-- each variant's column lists: the results table's, and the staged chunk's
-- (n_tokens always: the progress counts it)
lists(kind, names, defs, staged) AS (
  SELECT kind,
    (SELECT group_concat(name, ', ') FROM (SELECT name FROM variant v WHERE v.kind = k.kind ORDER BY pos)),
    (SELECT group_concat(name || ' ' || type, ', ') FROM (
       SELECT v.name, c.type FROM variant v JOIN scan_column c USING (name)
        WHERE v.kind = k.kind ORDER BY v.pos)),
    (SELECT group_concat(name, ', ') FROM (SELECT 'n_tokens' AS name UNION ALL SELECT * FROM (
       SELECT name FROM variant v WHERE v.kind = k.kind AND name <> 'n_tokens' ORDER BY pos)))
  FROM (SELECT DISTINCT kind FROM variant) k),
-- can step 2 count the source's rows? (relattn_scan checks the same, and more)
ok(countable, has_results, has_models, held) AS (
  SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo(source) WHERE name = tokens COLLATE NOCASE)
         AND CASE WHEN id IS NULL
                  THEN EXISTS (SELECT 1 FROM pragma_table_list(source) WHERE type <> 'view' AND NOT wr)
                  ELSE EXISTS (SELECT 1 FROM pragma_table_xinfo(source) WHERE name = id COLLATE NOCASE) END,
         EXISTS (SELECT 1 FROM pragma_table_list(results)),
         EXISTS (SELECT 1 FROM pragma_table_list('relattn_model')),
         -- the columns of a results table made before
         (SELECT group_concat(lower(name), ', ') FROM (SELECT name FROM pragma_table_xinfo(results) ORDER BY cid))
  FROM s),
-- step 3, the job: its head, its start, one chunk, its tail
stop(text) AS (
  -- an error of this script's own: printed on stderr, exit status 1
  SELECT '.output stderr' || char(10) || 'SELECT %Q;' || char(10) || '.exit 1'),
job(kind, head, start, step, tail) AS (
  SELECT kind,
    CASE
    WHEN complaint.text IS NOT NULL THEN format(stop.text, complaint.text)
    WHEN held IS NOT NULL AND held <> 'id, ' || names THEN format(stop.text, format(
      'score_corpus: results table %Q has the columns (%s), not this job''s (id, %s): ' ||
      'set @columns to its columns, or name another @results', results, held, names))
    ELSE
    '.bail on' || char(10) || '.timeout 60000' || char(10) ||
    format('CREATE VIRTUAL TABLE temp.score_job USING relattn_scan(model=%Q, source=%Q, tokens=%Q%s%s);',
           model, source, tokens, CASE WHEN id IS NULL THEN '' ELSE format(', id=%Q', id) END,
           CASE WHEN generate IS NULL THEN '' ELSE format(', generate=%Q', generate) END) || char(10) ||
    format('SELECT %s FROM temp.score_job WHERE id > 9223372036854775807;', names) || char(10) ||
    format('CREATE TABLE IF NOT EXISTS "%w"(id INTEGER PRIMARY KEY, %s);', results, defs) || char(10) ||
    format('CREATE TEMP TABLE score_chunk(id INTEGER PRIMARY KEY, %s);', staged)
    END,
    CASE WHEN progress = 0 THEN NULL ELSE
    'CREATE TEMP TABLE score_progress(rows INTEGER, tokens INTEGER, all_rows INTEGER, all_tokens INTEGER,' ||
      ' run_rows INTEGER, run_tokens INTEGER, t0 REAL, bad INTEGER);' || char(10) ||
    -- (count(error): reading the error column makes a bad row a row)
    format('INSERT INTO temp.score_progress SELECT (SELECT count(*) FROM "%w"),' ||
           ' coalesce(sum(CASE WHEN id <= b THEN n_tokens END), 0), count(*), coalesce(sum(n_tokens), 0),' ||
           ' 0, 0, julianday(''now''), count(error)' ||
           ' FROM temp.score_job, (SELECT coalesce(max(id), -9223372036854775808) AS b FROM "%w");',
           results, results)
    END,
    'BEGIN;' || char(10) ||
    -- the scan's lines inside the chunk count the whole job (.mode off: the
    -- setting's value unprinted)
    CASE WHEN progress = 0 THEN '' ELSE
    '.mode off' || char(10) ||
    'SELECT relattn_progress_job(''score_corpus'', rows, all_rows, tokens, all_tokens)' ||
      ' FROM temp.score_progress;' || char(10) || '.mode list' || char(10) END ||
    format('INSERT INTO temp.score_chunk(id, %s) SELECT id, %s FROM temp.score_job' ||
           ' WHERE id > (SELECT coalesce(max(id), -9223372036854775808) FROM "%w") ORDER BY id LIMIT %d;',
           staged, staged, results, chunk) || char(10) ||
    format('INSERT INTO "%w"(id, %s) SELECT id, %s FROM temp.score_chunk;', results, names, names) || char(10) ||
    CASE WHEN progress = 0 THEN '' ELSE
    'UPDATE temp.score_progress SET (rows, tokens, run_rows, run_tokens) =' ||
      ' (SELECT rows + n, tokens + t, run_rows + n, run_tokens + t FROM' ||
      ' (SELECT count(*) AS n, coalesce(sum(n_tokens), 0) AS t FROM temp.score_chunk));' || char(10) END ||
    'DELETE FROM temp.score_chunk;' || char(10) ||
    'COMMIT;' ||
    CASE WHEN progress = 0 THEN '' ELSE char(10) ||
    -- rows and tokens of the whole job; the rate and ETA of this run
    '.output stderr' || char(10) ||
    'SELECT format(''score_corpus: %d/%d rows, %d/%d tokens (%.1f%%), %.0f tokens/s, ETA %d:%02d:%02d'',' ||
      ' rows, all_rows, tokens, all_tokens,' ||
      ' CASE WHEN all_tokens > 0 THEN 100.0 * tokens / all_tokens ELSE 100.0 * rows / max(all_rows, 1) END,' ||
      ' run_tokens / el, eta / 3600, eta / 60 % 60, eta % 60)' ||
      ' FROM (SELECT *, max(0, CAST(round(CASE WHEN run_tokens > 0' ||
      ' THEN (all_tokens - tokens) * el / run_tokens' ||
      ' ELSE (all_rows - rows) * el / max(run_rows, 1) END) AS INTEGER)) AS eta' ||
      ' FROM (SELECT *, max((julianday(''now'') - t0) * 86400.0, 0.001) AS el FROM temp.score_progress));' ||
    char(10) || '.output stdout' END,
    format('SELECT format(''score_corpus: done, %%d rows in "%w"'', count(*)) FROM "%w";',
           results, results)
  FROM s, ok, lists, stop, complaint),
-- step 2 picks the variant of the model's kind
pick(kind, head, start, step, tail) AS (
  SELECT
    CASE WHEN (SELECT columns FROM s) IS NOT NULL OR NOT has_models THEN
      CASE WHEN (SELECT columns FROM s) IS NOT NULL THEN '''asked''' ELSE '''decoder''' END
    ELSE format('coalesce((SELECT CASE WHEN NOT json_valid(config) THEN ''decoder''' ||
      ' WHEN json_extract(config, ''$.head'') = ''classifier'' THEN' ||
      ' CASE WHEN json_extract(config, ''$.problem_type'') = ''regression'' THEN ''regression'' ELSE ''classifier'' END' ||
      ' WHEN json_extract(config, ''$.arch'') = ''decoder'' AND coalesce(json_extract(config, ''$.head''), ''lm'') = ''lm''' ||
      ' THEN ''decoder'' ELSE ''encoder'' END FROM relattn_model WHERE name = %Q), ''decoder'')',
      (SELECT model FROM s)) END,
    'CASE kind' || group_concat(format(' WHEN %Q THEN %Q', job.kind, head), '') || ' END',
    'CASE kind' || group_concat(format(' WHEN %Q THEN %Q', job.kind, start), '') || ' END',
    'CASE kind' || group_concat(format(' WHEN %Q THEN %Q', job.kind, step), '') || ' END',
    'CASE kind' || group_concat(format(' WHEN %Q THEN %Q', job.kind, tail), '') || ' END'
  FROM job, ok)
-- step 2: the rows left, and the job's text
SELECT '.bail on' || char(10) || '.timeout 60000' || char(10) || '.headers off' || char(10) ||
  '.mode list' || char(10) ||
  format('WITH RECURSIVE model(kind) AS (SELECT %s),', pick.kind) ||
  CASE WHEN NOT countable OR complaint.text IS NOT NULL
  THEN format(' left(n) AS (SELECT 0), k(i) AS (SELECT 1 WHERE 0)')
  ELSE
  format(' left(n) AS (SELECT count(*) FROM "%w" WHERE "%w" > %s),',
         source, coalesce(id, 'rowid'),
         CASE WHEN has_results
              THEN format('(SELECT coalesce(max(id), -9223372036854775808) FROM "%w")', results)
              ELSE '-9223372036854775808' END) ||
  format(' k(i) AS (SELECT 1 WHERE (SELECT n FROM left) > 0 UNION ALL SELECT i + 1 FROM k WHERE i * %d < (SELECT n FROM left))', s.chunk)
  END ||
  -- the head; when the source cannot be counted, or @columns is wrong, alone
  format(' SELECT %s FROM model', pick.head) ||
  CASE WHEN NOT countable OR complaint.text IS NOT NULL THEN ';' ELSE
  format(' UNION ALL SELECT %s FROM model WHERE (SELECT n FROM left) > 0 AND (%s) IS NOT NULL', pick.start, pick.start) ||
  format(' UNION ALL SELECT %s FROM k, model', pick.step) ||
  format(' UNION ALL SELECT %s FROM model;', pick.tail)
  END
FROM s, ok, pick, complaint;
