-- relattn's tables: a model is a row of relattn_model and a row of
-- relattn_tensor per tensor. relattn_import runs this file (built into the
-- extension) before it writes; it can also be read, or run by hand.
-- The triggers raise relattn_model.version on any change to a model's tensors,
-- so every connection's weight cache sees the change on its next call. They
-- raise it by a random step, not by one: a change rolled back and another
-- made after it must not give the same version twice (a connection may have
-- loaded the first). They are dropped and made again each time this runs, so
-- a database made by an earlier build gets the current ones.
-- Nothing here calls a function that is not innocuous (no CHECK with
-- json_valid, for one): the database stays readable with
-- PRAGMA trusted_schema=OFF. relattn_import checks the config instead.
CREATE TABLE IF NOT EXISTS relattn_model(
  name    TEXT PRIMARY KEY,
  config  TEXT NOT NULL,
  version INTEGER NOT NULL DEFAULT 1,
  sha256  TEXT
);
CREATE TABLE IF NOT EXISTS relattn_tensor(
  model TEXT NOT NULL REFERENCES relattn_model(name)
        ON DELETE CASCADE ON UPDATE CASCADE,
  name  TEXT NOT NULL,
  dtype TEXT NOT NULL,
  shape TEXT NOT NULL,
  data  BLOB NOT NULL,
  UNIQUE (model, name)
);
DROP TRIGGER IF EXISTS relattn_tensor_insert;
CREATE TRIGGER relattn_tensor_insert
AFTER INSERT ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1 + (random() & 4294967295),
         sha256 = NULL
   WHERE name = new.model;
END;
DROP TRIGGER IF EXISTS relattn_tensor_update;
CREATE TRIGGER relattn_tensor_update
AFTER UPDATE ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1 + (random() & 4294967295),
         sha256 = NULL
   WHERE name IN (old.model, new.model);
END;
DROP TRIGGER IF EXISTS relattn_tensor_delete;
CREATE TRIGGER relattn_tensor_delete
AFTER DELETE ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1 + (random() & 4294967295),
         sha256 = NULL
   WHERE name = old.model;
END;
DROP TRIGGER IF EXISTS relattn_model_delete;
CREATE TRIGGER relattn_model_delete
AFTER DELETE ON relattn_model BEGIN
  DELETE FROM relattn_tensor WHERE model = old.name;
END;
