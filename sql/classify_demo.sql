-- classify_demo.sql: a Hugging Face classifier over a table, in the sqlite3 shell.
-- From the repository root (what `make hf-demo` runs, on a fresh hf-demo.db):
--
--   sqlite3 hf-demo.db < sql/classify_demo.sql
--
-- Imports models/deberta-licenses (a small DeBERTa-v3-style DebertaV2ForSequenceClassification
-- saved as Hugging Face saves it: config.json, model.safetensors, spm.model, tokenizer_config.json;
-- see models/README.md), which tells which of six software licences a paragraph comes from, then
-- labels the held-out paragraphs it never saw, one at a time and as a batch job, and measures its
-- accuracy in SQL.
.bail on
.load ./relattn

-- 1. The checkpoint's files as they are; relattn_import recognises the family from config.json.
SELECT 'imported ' || relattn_import('licenses',
         readfile('models/deberta-licenses/model.safetensors'),
         readfile('models/deberta-licenses/config.json'),
         readfile('models/deberta-licenses/spm.model'),
         readfile('models/deberta-licenses/tokenizer_config.json')) || ' tensors';
SELECT printf('model licenses: %s from %s, %d layers, %d heads, d_model %d, head %s, labels %s',
              json_extract(config, '$.source.class'), json_extract(config, '$.source.family'),
              json_extract(config, '$.n_layers'), json_extract(config, '$.n_heads'),
              json_extract(config, '$.d_model'), json_extract(config, '$.head'),
              json_extract(config, '$.labels'))
FROM relattn_model WHERE name = 'licenses';

-- 2. Two texts, each beside its best label (relattn_classify) and that label's probability;
--    then every label's logit and probability for the second one (relattn_labels).
.mode column
.headers on
CREATE TEMP TABLE example(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
INSERT INTO example(text) VALUES
  ('You may convey verbatim copies of the Program''s source code as you receive it.'),
  ('The Package may be distributed freely, with the Standard Version.');
SELECT CASE WHEN length(e.text) > 60 THEN substr(e.text, 1, 57) || '...' ELSE e.text END AS text,
       l.label, round(l.prob, 4) AS prob
FROM example e, relattn_labels('licenses', e.text) l
WHERE l.label = relattn_classify('licenses', e.text) ORDER BY e.id;
SELECT CASE WHEN length(e.text) > 60 THEN substr(e.text, 1, 57) || '...' ELSE e.text END AS text,
       l.label, round(l.logit, 3) AS logit, round(l.prob, 4) AS prob
FROM example e, relattn_labels('licenses', e.text) l WHERE e.id = 2;

-- 3. The held-out paragraphs (id, label = the licence it came from, text).
CREATE TABLE heldout(id INTEGER PRIMARY KEY, label TEXT NOT NULL, text TEXT NOT NULL);
.import --csv --skip 1 models/deberta-licenses/heldout.csv heldout
SELECT count(*) AS heldout_paragraphs, sum(length(text)) AS characters FROM heldout;

-- 4. The batch job: every row of the table through the model, on all worker threads.
CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='licenses', source='heldout', tokens='text');
CREATE TABLE predicted AS SELECT id, n_tokens, label, prob FROM temp.job;

-- 5. Accuracy, overall and per licence.
SELECT count(*) AS passages, sum(p.label = h.label) AS correct,
       round(avg(p.label = h.label), 4) AS accuracy
FROM predicted p JOIN heldout h USING (id);
SELECT h.label AS licence, count(*) AS passages, sum(p.label = h.label) AS correct,
       round(avg(p.prob), 3) AS mean_prob
FROM predicted p JOIN heldout h USING (id) GROUP BY h.label ORDER BY h.label;

-- 6. Its most confident mistakes.
SELECT h.label AS truth, p.label AS predicted, round(p.prob, 3) AS prob,
       substr(h.text, 1, 50) || '...' AS text
FROM predicted p JOIN heldout h USING (id)
WHERE p.label <> h.label ORDER BY p.prob DESC LIMIT 5;
