-- demo.sql: the bundled model on the bundled corpus, in the sqlite3 shell.
-- From the repository root (what `make demo` runs, on a fresh demo.db):
--
--   sqlite3 demo.db < sql/demo.sql
--
-- Imports models/tiny.safetensors (a 1.3M-parameter byte-level decoder trained on the King James
-- Bible and SQLite's documentation, see models/README.md), loads sql/demo_corpus.sql, ranks every
-- text by the model's perplexity, and shows, byte by byte, where the model is surprised.
.bail on
.load ./relattn

-- 1. The model: one row in relattn_model, its tensors in relattn_tensor.
SELECT 'imported ' || relattn_import('tiny', readfile('models/tiny.safetensors')) || ' tensors';
SELECT printf('model tiny: %s, %d layers, %d heads, d_model %d, Shaw relative attention (clip %d), '
              || '%d parameters stored as %s',
              json_extract(config, '$.arch'), json_extract(config, '$.n_layers'),
              json_extract(config, '$.n_heads'), json_extract(config, '$.d_model'),
              json_extract(config, '$.position.clip'),
              (SELECT sum(length(data)) / 2 FROM relattn_tensor WHERE model = 'tiny'),
              (SELECT group_concat(DISTINCT dtype) FROM relattn_tensor WHERE model = 'tiny'))
FROM relattn_model WHERE name = 'tiny';

-- 2. The corpus: held-out verses, modern English, the same texts shuffled, other languages, random bytes.
.read sql/demo_corpus.sql

-- 3. Score every text once. Perplexity is per byte: exp(-ln p(text) / bytes).
CREATE TABLE scored AS
SELECT id, kind, label, body,
       relattn_perplexity('tiny', body) AS perplexity,
       length(CAST(body AS BLOB)) AS n_bytes
FROM corpus;

.print
.print Every text, ranked by the model's perplexity (bits per byte = log2 of it):
.print
.mode column
.headers on
.width 4 19 10 10 5 52
SELECT row_number() OVER (ORDER BY perplexity) AS rank,
       kind,
       label,
       printf('%.2f', perplexity) AS perplexity,
       printf('%.2f', log2(perplexity)) AS bits,
       CASE WHEN kind = 'random bytes' THEN 'x''' || lower(hex(substr(CAST(body AS BLOB), 1, 20))) || '...'''
            WHEN length(body) > 50 THEN substr(body, 1, 49) || '~'
            ELSE body END AS text
FROM scored ORDER BY rank;

.print
.print Each kind on average: real text well below its corrupted versions.
.print
.width 19 5 10 10
SELECT kind, count(*) AS texts,
       printf('%.2f', avg(log2(perplexity))) AS mean_bits,
       printf('%.2f', max(log2(perplexity))) AS max_bits
FROM scored GROUP BY kind ORDER BY avg(perplexity);

-- 4. Where the model is surprised. relattn_logprobs gives one row per byte: its log-probability
--    and the byte the model expected most. Under each text, one mark per byte:
--    ' ' under 1 bit, '.' 1-3 bits, '-' 3-6, '=' 6-9, '#' 9 or more.
CREATE TEMP TABLE shown AS
SELECT id, kind, label, body FROM scored
WHERE id IN (SELECT min(id) FROM scored WHERE kind IN ('held-out verse', 'modern English', 'other language')
             GROUP BY kind
             UNION ALL
             SELECT min(id) FROM scored WHERE kind = 'shuffled characters');

CREATE TEMP TABLE surprise AS
SELECT s.id, lp.pos, lp.token, lp.logprob / -ln(2) AS bits, lp.top_token,
       CASE WHEN lp.token BETWEEN 32 AND 126 THEN char(lp.token) ELSE '?' END AS ch,
       CASE WHEN lp.logprob / -ln(2) < 1 THEN ' ' WHEN lp.logprob / -ln(2) < 3 THEN '.'
            WHEN lp.logprob / -ln(2) < 6 THEN '-' WHEN lp.logprob / -ln(2) < 9 THEN '='
            ELSE '#' END AS mark
FROM shown AS s, relattn_logprobs('tiny', s.body) AS lp;

.print
.print "Where the model is surprised: under each byte, ' ' under 1 bit, '.' 1-3, '-' 3-6, '=' 6-9, '#' 9 or more."
.mode list
.headers off
.separator ""
WITH lines AS (  -- 64 bytes to a line: the text, then its marks
  SELECT id, pos / 64 AS line,
         group_concat(ch, '') AS text, group_concat(mark, '') AS marks
  FROM (SELECT * FROM surprise ORDER BY id, pos)
  GROUP BY id, pos / 64
)
SELECT CASE WHEN l.line = 0 THEN char(10) || s.kind || ' (' || s.label || ')' || char(10) ELSE '' END
       || '  ' || l.text || char(10) || '  ' || l.marks
FROM lines AS l JOIN shown AS s USING (id) ORDER BY s.id, l.line;

.print
.print The most surprising bytes of each of these texts, in context, and what the model expected:
.print
.mode column
.headers on
.separator " "
.width 19 -4 -7 -28 8
SELECT kind, pos,
       printf('%.1f', bits) AS bits,
       coalesce((SELECT group_concat(ch, '') FROM (SELECT ch FROM surprise AS c
         WHERE c.id = r.id AND c.pos BETWEEN r.pos - 20 AND r.pos - 1 ORDER BY c.pos)), '')
         || '[' || ch || ']' AS context,
       CASE WHEN top_token BETWEEN 33 AND 126 THEN char(top_token)
            WHEN top_token = 32 THEN 'space' ELSE 'byte ' || top_token END AS expected
FROM (SELECT s.*, row_number() OVER (PARTITION BY s.id ORDER BY s.bits DESC) AS k
      FROM surprise AS s) AS r
JOIN shown USING (id)
WHERE k <= 3
ORDER BY id, k;

-- 6. Pictures, as SVG: one head's attention map (a local head and a broad one), every head's mean
--    weight by distance over the whole corpus, and two texts shaded by surprise. Open them in a browser.
CREATE TEMP TABLE pictures(file TEXT, svg TEXT);
INSERT INTO pictures VALUES
  ('docs/img/attention_layer0_head0.svg',
   relattn_svg_attention('tiny', 'And God said, Let there be light: and there was light.', 0, 0)),
  ('docs/img/attention_layer2_head2.svg',
   relattn_svg_attention('tiny', 'And God said, Let there be light: and there was light.', 2, 2));
INSERT INTO pictures
SELECT 'docs/img/distance_profile.svg',
       relattn_svg_profile(w.distance, w.weight, 'layer ' || w.layer || ', head ' || w.head,
                           (SELECT json_extract(config, '$.position.clip') FROM relattn_model
                             WHERE name = 'tiny'))
FROM corpus, relattn_attention_weights('tiny', corpus.body) AS w;
INSERT INTO pictures
SELECT 'docs/img/surprise_' || CASE kind WHEN 'held-out verse' THEN 'verse' ELSE 'french' END || '.svg',
       relattn_svg_surprise('tiny', body)
FROM corpus WHERE (kind, label) IN (VALUES ('held-out verse', '1Jn 3:14'), ('other language', 'French'));

.print
.print Pictures (SVG), written with the shell's writefile:
.print
.mode list
.headers off
SELECT '  ' || file FROM pictures WHERE writefile(file, svg) > 0 ORDER BY file;

-- 7. Generation: the model continues the start of a verse (relattn_generate, over a key/value
--    cache): the most likely byte each time, four beams (no 4-gram twice), and a sample.
.print
.print The model continues a verse (relattn_generate, 48 new bytes):
.print
WITH v(how, options) AS (VALUES
  ('greedy:', '{"max_new_tokens": 48}'),
  ('4 beams:', '{"max_new_tokens": 48, "num_beams": 4, "no_repeat_ngram_size": 4}'),
  ('sampled:', '{"max_new_tokens": 48, "do_sample": true, "seed": 7, "temperature": 0.7, "top_p": 0.9}'))
SELECT printf('  %-8s %s%s', how, body, relattn_generate('tiny', body, options))
FROM v, (SELECT 'And God said, Let there be' AS body);
