// The ids Hugging Face's fast tokenizer (the Rust `tokenizers`, through its
// Node binding) gives each text, special tokens added as its post-processor
// says: the reference of tests/sql/test_tokenizer_json.py.
//
//   node hf_tokenize.mjs tokenizer.json texts.json > ids.json
//
// texts.json: a JSON array of strings; the output: a JSON array of id arrays,
// one per text, in order. With a fourth argument "decode", the input is a
// JSON array of id arrays and the output the text of each,
// tokenizer.decode(ids, skipSpecialTokens = true). With "offsets", the output
// is each text's offsets, [start, end] a token, as the binding gives them.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

const [, , tokPath, textsPath, mode] = process.argv;
const tok = Tokenizer.fromFile(tokPath);
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = [];
for (let i = 0; i < texts.length; i += 256) {
  if (mode === "decode") {
    out.push(...await tok.decodeBatch(texts.slice(i, i + 256), true));
    continue;
  }
  const batch = await tok.encodeBatch(texts.slice(i, i + 256),
                                      { addSpecialTokens: true });
  for (const e of batch)
    out.push(mode === "offsets" ? e.getOffsets() : Array.from(e.getIds()));
}
process.stdout.write(JSON.stringify(out));
