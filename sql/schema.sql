-- relattn's tables (DESIGN sec. 3). relattn_import creates them on first use;
-- this is the same text, for reading or for creating them by hand.
-- The triggers bump relattn_model.version on any change to a model's tensors,
-- so every connection's weight cache sees the change on its next call.
CREATE TABLE IF NOT EXISTS relattn_model(
  name    TEXT PRIMARY KEY,
  config  TEXT NOT NULL CHECK (json_valid(config)),
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
CREATE TRIGGER IF NOT EXISTS relattn_tensor_insert
AFTER INSERT ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1, sha256 = NULL
   WHERE name = new.model;
END;
CREATE TRIGGER IF NOT EXISTS relattn_tensor_update
AFTER UPDATE ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1, sha256 = NULL
   WHERE name IN (old.model, new.model);
END;
CREATE TRIGGER IF NOT EXISTS relattn_tensor_delete
AFTER DELETE ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1, sha256 = NULL
   WHERE name = old.model;
END;
CREATE TRIGGER IF NOT EXISTS relattn_model_delete
AFTER DELETE ON relattn_model BEGIN
  DELETE FROM relattn_tensor WHERE model = old.name;
END;
