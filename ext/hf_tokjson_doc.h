/*
** hf_tokjson_doc.h: what the two halves of the tokenizer.json reader
** share. ext/hf_tokjson.c reads the file, and maps a WordPiece one itself;
** ext/hf_tokjson_unigram.c maps a Unigram one. Both read the document's
** values with the helpers of ext/hf_tokjson_doc.c.
*/
#ifndef RELATTN_HF_TOKJSON_DOC_H
#define RELATTN_HF_TOKJSON_DOC_H

#include "hf.h"

#define FN "relattn_import"
#define TJ FN ": tokenizer.json"

/* The document being read. rc holds the first SQLite error; every helper
** then returns at once (NULL, -1 or 0). */
typedef struct tj_doc {
  sqlite3 *db;
  const char *json;
  int n;
  int rc;
} tj_doc;

/* ---- ext/hf_tokjson_doc.c ---------------------------------------------- */

/* One value of the document: sqlite3_malloc'd text (NULL for JSON null or
** a missing key) and its json_type in type ("" when missing). */
char *relattn_tj_get(tj_doc *d, const char *path, char type[16]);
/* A component's name as messages give it: its type; a Sequence's members'
** types joined with '+' ("Lowercase+Nmt"); "null" when there is none. */
char *relattn_tj_name(tj_doc *d, const char *key, const char *members);
/* A template as HF writes it in Python: "[CLS]:0 $A:0 [SEP]:0". */
char *relattn_tj_template(tj_doc *d, const char *path);
/* A flag of a component: 1, 0, or -1 for null; *bad when not a bool. */
int relattn_tj_bool(tj_doc *d, const char *path, int *bad);

/* ext/hf_tokjson_unigram.c: the file of a Unigram model as out's vocab (a
** SentencePiece ModelProto carrying the pipeline), its unk and template
** specials. A component it cannot run sets *pzErr. */
int relattn_tj_unigram(tj_doc *d, relattn_hf_tokjson *out, char **pzErr);

#endif /* RELATTN_HF_TOKJSON_DOC_H */
