-- The demo corpus (sql/demo.sql ranks it). Written by models/train.py: held-out verses of the
-- King James Bible (never seen in training), modern English sentences, the same texts with their
-- characters shuffled (fixed seed), text in other languages, and random bytes.
CREATE TABLE IF NOT EXISTS corpus(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, label TEXT NOT NULL, body TEXT NOT NULL);
DELETE FROM corpus;
INSERT INTO corpus(kind, label, body) VALUES
  ('held-out verse', '1Jn 3:14', 'We know that we have passed from death unto life, because we love the brethren. He that loveth not his brother abideth in death.'),
  ('held-out verse', 'Mat 25:25', 'And I was afraid, and went and hid thy talent in the earth: lo, there thou hast that is thine.'),
  ('held-out verse', 'Mat 3:2', 'And saying, Repent ye: for the kingdom of heaven is at hand.'),
  ('held-out verse', 'Psa 63:4', 'Thus will I bless thee while I live: I will lift up my hands in thy name.'),
  ('modern English', 'sentence 1', 'The train was late again, so we shared a taxi from the station to the office.'),
  ('modern English', 'sentence 2', 'Please remember to water the tomatoes while I am away next week.'),
  ('modern English', 'sentence 3', 'She opened her laptop, read the error message twice, and then laughed.'),
  ('modern English', 'sentence 4', 'Our neighbours painted their front door a bright shade of yellow.'),
  ('shuffled characters', '1Jn 3:14', 'i  tdoowdtlemhiahawehafe.ptc  tehe esh a.eeotbon ub tnahe   rrseilw btdio r e h aW,rvneeoo sfhhevd ktt e  t vanhntlebashe tteHur'),
  ('shuffled characters', 'Mat 25:25', 'th hed  yhsen  ,tt ard.oae hiIatt nisatlt tAwudnh ait laeh einaa , trshndaihn  orhfenwt  t de:'),
  ('shuffled characters', 'sentence 1', 'r e h Ta tarhftgfoiissot ised. a iwesfaoearnhtl ,xnmat ian wec tot ea to eh a'),
  ('shuffled characters', 'sentence 2', 'o ekwx PlreweeaoabIm hemaeetthoyrsnle wrewtsteatm.a m ate  ei   '),
  ('shuffled characters', 'sentence 3', 'lcm rte  sonnhtao, t e,h deesgSde egleadrrtupep ewprai doe nh ehe.hraa'),
  ('shuffled characters', 'sentence 4', 'tfbrigholeubhiftnt .wda  hr te  doOoiygiranosous erohlern  eprda '),
  ('other language', 'French', 'Le petit chat dort au soleil pendant que la pluie tombe sur la ville.'),
  ('other language', 'German', 'Morgen fahren wir mit dem Zug an den See und essen dort zu Mittag.'),
  ('other language', 'Spanish', 'Mi hermana prepara el desayuno mientras escuchamos la radio.'),
  ('random bytes', 'random 1', CAST(x'f34bb81ac4260d8935c1edb5cbd5b1d9780ae335f5e74a82275f8320608f1dee76f4b68aaabeaf7628d9b1422b371e8c59bc23994c0fb9314968034510bb1608a97fe15c07c6' AS TEXT)),
  ('random bytes', 'random 2', CAST(x'9d670ab4c9b87044a09899bb9551643b4dddbe63d5945b59447601e00fea7bfd1b8fd8d338aed46a40697c7ea8a90c134e8bedd648ac4fc0bdabdc78d42da624e5c864dbf896' AS TEXT));
