-- unshuffle_demo.sql: a T5 encoder-decoder over a table, in the sqlite3 shell.
-- From the repository root, on a fresh database:
--
--   sqlite3 t5-demo.db < sql/unshuffle_demo.sql
--
-- Imports models/t5-unshuffle (a small T5ForConditionalGeneration saved as Hugging Face saves
-- it: config.json, model.safetensors, spiece.model, tokenizer_config.json; see models/README.md),
-- trained here to put the shuffled words of a Debian package's one-line summary back in order.
-- For each held-out summary it never saw, it scores four candidate orders of the shuffled words
-- given the shuffled text (relattn_score(model, target, source): ln p(target | source)), keeps
-- the likeliest, and measures in SQL how often that is the original.
.bail on
.load ./relattn

-- 1. The checkpoint's files as they are: the encoder, the decoder and the tied head.
SELECT 'imported ' || relattn_import('unshuffle',
         readfile('models/t5-unshuffle/model.safetensors'),
         readfile('models/t5-unshuffle/config.json'),
         readfile('models/t5-unshuffle/spiece.model'),
         readfile('models/t5-unshuffle/tokenizer_config.json')) || ' tensors';
SELECT printf('model unshuffle: %s, %d encoder and %d decoder layers, d_model %d',
              json_extract(config, '$.source.class'), json_extract(config, '$.n_layers'),
              json_extract(config, '$.decoder.n_layers'), json_extract(config, '$.d_model'))
FROM relattn_model WHERE name = 'unshuffle';

-- 2. The held-out summaries: four candidate orders each, the original among them.
CREATE TABLE candidates(id INTEGER, shuffled TEXT, candidate TEXT, is_original INTEGER);
.import --csv --skip 1 models/t5-unshuffle/heldout.csv candidates
SELECT count(DISTINCT id) AS summaries, count(*) AS candidates FROM candidates;

-- 3. Each candidate's ln p given the shuffled words, and per summary the likeliest.
CREATE TABLE scored AS
  SELECT id, shuffled, candidate, is_original,
         relattn_score('unshuffle', candidate, shuffled) AS score
  FROM candidates;
CREATE TABLE best AS
  SELECT id, shuffled, candidate, is_original, max(score) AS score FROM scored GROUP BY id;

-- 4. How often the likeliest order is the original (chance: one in four).
SELECT count(*) AS summaries, sum(is_original) AS restored,
       round(avg(is_original), 4) AS accuracy FROM best;

-- 5. A few of them: the shuffled words and the order the model chose.
.mode list
.separator ' => '
SELECT shuffled, candidate FROM best ORDER BY id LIMIT 5;

-- 6. The model writing the order itself, a table rewritten in SQL: greedy generation from each
--    shuffled summary (relattn_generate: the encoder reads the source once, the decoder goes on
--    token by token over its key/value cache). Choosing among candidates is what this small model
--    does well; writing the order out word for word it gets right far less often.
.mode list
.separator '|'
CREATE TABLE summaries AS
  SELECT id, shuffled, candidate AS original FROM candidates WHERE is_original;
CREATE TABLE rewritten AS
  SELECT id, shuffled, original,
         relattn_generate('unshuffle', shuffled, '{"max_new_tokens": 64}') AS written
  FROM summaries;
SELECT 'written ' || count(*) || ', exactly the original ' || sum(written = original)
FROM rewritten;
